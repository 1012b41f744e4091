/*
 * routes: what each endpoint of the HTTP API does (design.md section 3).
 *
 * The HTTP layer hands complete requests to srv_routes_on_request(); the
 * routes check method, auth and body size, let api/ parse and render, turn
 * prompts into token ids (tokenizer and chat template), submit jobs to the
 * scheduler, and relay the jobs' text to the client as one JSON body or as
 * SSE chunks. Every request ends in srv_routes_on_done(), which records its
 * metrics and log line and cancels a generation whose client went away.
 *
 * Threads: loop thread only; prompts are tokenized on libuv's work pool.
 */
#ifndef QWEN3D_SERVER_ROUTES_H
#define QWEN3D_SERVER_ROUTES_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "server/http.h"
#include "server/keys.h"
#include "server/metrics.h"
#include "server/sched.h"
#include "server/webui.h"

typedef struct srv_routes srv_routes;

typedef struct srv_routes_opts {
    const char *model_name;   /* the id clients name in "model" */
    srv_keys *keys;           /* the API keys (taken over by the routes); NULL = no authentication */
    const char *cors_origins; /* --cors-origin: comma-separated origins, "*" = any; NULL = none */
    bool log_prompts;
    double request_timeout;   /* seconds from arrival to the end of generation */
    int64_t max_tokens;       /* largest max_tokens accepted, and the cap of the default; 0 = the context */
    bool openai_sampling;     /* sampling fields a request leaves out take OpenAI's defaults, not the model's */
    srv_webui *webui;         /* the pages and /status.json; NULL = off (--no-webui) */
} srv_routes_opts;

/* NULL on out-of-memory. LOOP runs the tokenizations' work; it, SCHED and
 * METRICS must outlive the routes. */
srv_routes *srv_routes_new(const srv_routes_opts *opts, uv_loop_t *loop, srv_sched *sched, srv_metrics *metrics);
void srv_routes_free(srv_routes *rt);

/*
 * The model is loaded: /health answers 200 and generation is accepted, with
 * the sampling defaults of the model's genai_config.json or OpenAI's (see
 * srv_routes_opts), which are logged, and responses carry FINGERPRINT as
 * system_fingerprint (server/fingerprint.h). Returns 0, or -1 with ERR filled and
 * nothing changed when the model's defaults are outside the sampler's ranges.
 */
int srv_routes_set_loaded(srv_routes *rt, const srv_model_info *info, const char *fingerprint, char *err,
                          size_t errlen);
/* SIGTERM: /health and /health/ready answer 503 from now on; requests are
 * still served until srv_routes_set_draining(). */
void srv_routes_set_stopping(srv_routes *rt);
/* Draining: new generations and /health get 503; the scheduler's queue is
 * closed once the prompts being tokenized have been submitted. */
void srv_routes_set_draining(srv_routes *rt);

/*
 * SIGHUP: what may change while serving. KEYS (taken over; NULL keeps the
 * current ones) applies to requests that arrive from now on; requests
 * already authorized run on. The options apply to requests parsed from now
 * on. Returns 0, or -1 (out of memory) with nothing changed.
 */
typedef struct srv_routes_reload_opts {
    srv_keys *keys;
    const char *cors_origins;
    bool log_prompts;
    double request_timeout;
    int64_t max_tokens;
} srv_routes_reload_opts;
int srv_routes_reload(srv_routes *rt, const srv_routes_reload_opts *o);

/* srv_http_handlers callbacks; USER is the srv_routes. */
void srv_routes_on_request(void *user, srv_req *r);
void srv_routes_on_done(void *user, srv_req *r, bool completed);

#endif
