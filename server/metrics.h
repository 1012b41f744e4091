/*
 * metrics: the daemon's Prometheus metrics (design.md section 3) and their
 * text exposition (format 0.0.4).
 *
 * Counters, gauges and histograms live behind one mutex: the loop thread
 * records requests, the compute thread records tokens, latencies and
 * session gauges, and a scrape renders one consistent snapshot.
 *
 * Any thread.
 */
#ifndef QWEN3D_SERVER_METRICS_H
#define QWEN3D_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "engine/prefix.h"

/*
 * The endpoints: each one's path, which is also its metric label. routes.c
 * routes by this table, so a path is written once.
 */
#define SRV_ENDPOINTS(X)                          \
    X(COMPLETIONS, "/v1/completions")             \
    X(CHAT, "/v1/chat/completions")               \
    X(MODELS, "/v1/models")                       \
    X(HEALTH, "/health")                          \
    X(HEALTH_LIVE, "/health/live")                \
    X(HEALTH_READY, "/health/ready")              \
    X(METRICS, "/metrics")                        \
    X(TOKENIZE, "/tokenize")                      \
    X(DETOKENIZE, "/detokenize")

typedef enum srv_endpoint {
#define SRV_EP_ENUM(name, path) SRV_EP_##name,
    SRV_ENDPOINTS(SRV_EP_ENUM)
#undef SRV_EP_ENUM
    SRV_EP_OTHER, /* every other path: label "other" */
    SRV_EP_COUNT
} srv_endpoint;

/* The path and label of EP ("/v1/completions", ..., "other"). */
const char *srv_endpoint_name(srv_endpoint ep);

typedef struct srv_metrics srv_metrics;

/* VERSION goes in qwen3d_build_info. NULL on out-of-memory. */
srv_metrics *srv_metrics_new(const char *version);
void srv_metrics_free(srv_metrics *m);

/* A finished HTTP request: requests_total{endpoint,code}; generation
 * endpoints also observe request_duration_seconds (SECONDS from the arrival
 * of the request's last byte to the end of its response) under the API key
 * named KEY (NULL: none given or no keys). */
void srv_metrics_request(srv_metrics *m, srv_endpoint ep, int status, double seconds, const char *key);
/* The row that counts the API key named KEY (NULL without keys), made on
 * first use. Rows never move, so a job looks its row up once, not per token. */
size_t srv_metrics_key_row(srv_metrics *m, const char *key);
/* Tokens prefilled and generated for a request counted under key row ROW. */
void srv_metrics_prompt_tokens(srv_metrics *m, uint64_t n, size_t row);
void srv_metrics_generation_tokens(srv_metrics *m, uint64_t n, size_t row);
/* Latencies are timed from the moment the request had fully arrived: TTFT
 * is the time spent parsing and tokenizing, then queue_wait, then prefill
 * (admission to the first token). Each counts under key row ROW. */
void srv_metrics_ttft(srv_metrics *m, double seconds, size_t row);
void srv_metrics_prefill(srv_metrics *m, double seconds, size_t row);
void srv_metrics_inter_token(srv_metrics *m, double seconds, size_t row);
void srv_metrics_queue_wait(srv_metrics *m, double seconds, size_t row);
/* One step of the model, SECONDS long: ROWS sessions decoded a token, PROMPT_TOKENS prompt ids were fed. */
void srv_metrics_step(srv_metrics *m, uint64_t rows, uint64_t prompt_tokens, double seconds);
void srv_metrics_set_sessions(srv_metrics *m, int64_t active, uint64_t kv_bytes);
void srv_metrics_set_waiting(srv_metrics *m, int64_t waiting);
/* The prompt-prefix cache's counters and bytes now (all zero without a cache). */
void srv_metrics_set_prefix(srv_metrics *m, const eng_prefix_stats *st);
void srv_metrics_set_model(srv_metrics *m, uint64_t weight_bytes, double load_seconds);

/* The model_name label of the request-level metrics below (the served id, --model-name). */
void srv_metrics_set_model_name(srv_metrics *m, const char *name);
/* The KV budget: kv_cache_usage_ratio is kv_cache_bytes over it (0 = no budget: no ratio). */
void srv_metrics_set_kv_budget(srv_metrics *m, uint64_t bytes);

/* The finished_reason values of request_finished_total. */
#define SRV_FINISHED_REASONS(X) X(stop) X(length) X(tool_calls) X(cancelled) X(error)

/*
 * A generation request ended: request_finished_total{finished_reason,
 * key_name}. REASON is one of SRV_FINISHED_REASONS (any other counts as
 * "error"); KEY is the API key's name, or NULL without keys. The first 64
 * key names get series of their own, later ones count under "other".
 */
void srv_metrics_finished(srv_metrics *m, const char *reason, const char *key);
/*
 * A job that had a session ended (compute thread): the request_prompt_tokens
 * and request_generation_tokens histograms, and request_decode_seconds
 * (first token to last; DECODE_S < 0 when no token came), under key row ROW.
 */
void srv_metrics_job_done(srv_metrics *m, int64_t n_prompt, int64_t n_generated, double decode_s, size_t row);

/* The exposition text, malloc'd and NUL-terminated (*len bytes); NULL on out-of-memory. */
char *srv_metrics_render(srv_metrics *m, size_t *len);

#endif
