/*
 * sched: the compute thread and the request scheduler.
 *
 * srv_sched_new() starts one compute thread that loads the model and its
 * tokenizer (so the compute pool's first participant, pinned by the pool, is
 * that thread), reports the result to the loop, then runs jobs: a bounded
 * FIFO of waiting jobs, running ones taking up to `parallel` rows in all (a
 * row and a session per choice of a job), all advanced together, one
 * batched eng_gen_step per step. Generated
 * text (after detokenization and stop strings) and the end of each job reach
 * the loop thread through a uv_async and a locked list; the compute thread
 * never touches a socket.
 *
 * Threads: the srv_sched_* functions below run on the loop thread (the one
 * that owns LOOP), except where noted. The thread rules in full are stated at
 * the top of sched.c.
 */
#ifndef QWEN3D_SERVER_SCHED_H
#define QWEN3D_SERVER_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "engine/grammar.h"
#include "engine/prefix.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "server/metrics.h"

typedef struct srv_sched srv_sched;
typedef struct srv_job srv_job;

typedef struct srv_sched_opts {
    const char *model_dir;
    eng_model_opts engine; /* threads (0 = one per physical core), KV mode, ... */
    int parallel;         /* sessions generating at once (>= 1) */
    int queue;            /* jobs that may wait for a session (>= 0) */
    int64_t ctx;          /* longest sequence (prompt + generated); 0 = the model's context length */
    int64_t prefill_chunk; /* prompt tokens per step at most; 0 = no limit */
    /*
     * While streams decode, a step's prompt tokens are held to what keeps the
     * step within this many seconds (from the measured step times); 0 = four
     * times the decode step's own time, at least 200 ms.
     */
    double step_target;
    /*
     * The prompt-prefix cache (engine/prefix.h): its byte budget (0: a
     * quarter of kv_budget, or 1 GiB without one), counted inside
     * kv_budget, and the shortest prompt it keeps; off with no_prefix_cache.
     */
    uint64_t prefix_bytes;
    int64_t prefix_min;
    /* Idle sessions' KV pages kept for new ones (eng_model_set_kv_pool_budget), also inside kv_budget:
     * 0 = a quarter of kv_budget, or 1 GiB without one; < 0 = none. */
    int64_t kv_pool_bytes;
    bool no_prefix_cache;
    uint64_t kv_budget;   /* KV bytes the running sessions may reserve together; 0 = no budget */
    double stall_cap;     /* seconds: no step may run longer and count as well (see srv_sched_beat); 0 = 15 */
} srv_sched_opts;

/* What the compute thread found when loading; passed to srv_sched_loaded_fn. */
typedef struct srv_model_info {
    int64_t ctx;             /* effective context (opts.ctx or the model's) */
    int64_t vocab;           /* logits row width */
    uint64_t weight_bytes;   /* resident prepared weight bytes */
    uint64_t in_place_bytes; /* weight bytes read in place from the mapped files (eng_plan_in_place_bytes) */
    uint64_t readahead_bytes; /* of those, asked to be read ahead at load: 0 with --no-readahead */
    double load_seconds;
    int threads;
    uint64_t kv_bytes_full;  /* KV bytes a session of the whole context reserves */
    const eng_genai_config *config; /* the model's genai_config.json; lives as long as the scheduler */
    eng_geometry geometry;   /* layers, widths, heads (the status page shows them) */
} srv_model_info;

/* On the loop thread once loading ends: STATUS 0 with INFO, or -1 with MESSAGE. */
typedef void (*srv_sched_loaded_fn)(void *user, int status, const srv_model_info *info, const char *message);

/*
 * Starts the compute thread. Returns 0 and *out, or a negative SRV_E* code;
 * when *out is set despite a failure, stop and free it as usual.
 */
int srv_sched_new(uv_loop_t *loop, const srv_sched_opts *opts, srv_metrics *metrics, srv_sched_loaded_fn loaded,
                  void *user, srv_sched **out);
/*
 * Stops the compute thread (jobs still running end with SRV_FINISH_SHUTDOWN,
 * their updates delivered), joins it and closes the async handle. The
 * struct stays valid until srv_sched_free(), which must come after the loop
 * has run the handle's close (uv_run until it returns).
 */
void srv_sched_stop(srv_sched *s);
void srv_sched_free(srv_sched *s);

/* The tokenizer, once loaded (NULL before). Threads encode with it through
 * encoders of their own (eng_tok_encode_with, as the routes do). */
eng_tok *srv_sched_tokenizer(srv_sched *s);

/* New submissions fail with SRV_ESHUTDOWN from now on. */
void srv_sched_close_queue(srv_sched *s);
/* Ends every job, waiting or running, with SRV_FINISH_SHUTDOWN, and closes
 * the queue. */
void srv_sched_cancel_all(srv_sched *s);

/* Jobs waiting and running now. */
void srv_sched_counts(srv_sched *s, int *waiting, int *running);

/* The prefix cache's figures (all zero without one). Any thread. */
void srv_sched_prefix_stats(srv_sched *s, eng_prefix_stats *out);
/* Whether a job submitted now would be refused with SRV_EFULL. */
bool srv_sched_full(srv_sched *s);

/*
 * The compute thread's heartbeat, for the watchdog and /health/live: it is
 * stuck when its current step has run longer than a bound derived from the
 * time of its recent steps, at most opts.stall_cap (the rule is explained
 * in sched.c). The first check that finds it stuck, and the first after,
 * log it.
 */
typedef struct srv_sched_beat {
    bool stuck;
    double step_s;   /* how long the current step has run; 0 when there is none */
    double bound_s;  /* the current step's bound */
} srv_sched_beat;
void srv_sched_heartbeat(srv_sched *s, srv_sched_beat *b);

/*
 * The KV budget: a job is admitted to a session only while the sessions
 * running and its own fit in opts.kv_budget bytes (reserved, so memory
 * committed as they grow never passes it); until then it waits in the
 * queue, first come first served. srv_sched_submit() refuses a job that
 * could not fit even alone. srv_sched_kv_bytes() is what a job of TOKENS
 * tokens (prompt and max_tokens, at most the context) reserves; 0 before
 * the model is loaded.
 */
uint64_t srv_sched_kv_bytes(srv_sched *s, int64_t tokens);
uint64_t srv_sched_kv_budget(const srv_sched *s);
/* Sets the budget once the model is loaded, before the first job is submitted (0 = none). */
void srv_sched_set_kv_budget(srv_sched *s, uint64_t bytes);

/* ---- jobs ---------------------------------------------------------------- */

typedef enum srv_finish {
    SRV_FINISH_NONE = 0,
    SRV_FINISH_STOP,      /* EOS or a stop string */
    SRV_FINISH_LENGTH,    /* max_tokens or the session's capacity */
    SRV_FINISH_CANCELLED, /* the client went away */
    SRV_FINISH_DEADLINE,  /* the request's deadline passed */
    SRV_FINISH_SHUTDOWN,  /* the server is stopping */
    SRV_FINISH_ERROR,     /* the engine failed; see message */
} srv_finish;

const char *srv_finish_name(srv_finish f);

typedef struct srv_job_params {
    const int64_t *prompt;   /* copied */
    size_t n_prompt;         /* >= 1 */
    int64_t max_tokens;      /* >= 1 (>= 0 with echo_logprobs) */
    eng_sampling sampling;   /* validated */
    const char *const *stop; /* copied; validated */
    size_t n_stop;
    double deadline;         /* srv_now() seconds; 0 = none */
    double t_received;       /* srv_now() when the request had fully arrived; TTFT counts from it (0: submission) */
    const char *id;          /* for logs; copied */
    const char *scope;       /* whose cached prefixes it may reuse (the API key's name; NULL = ""); copied */
    const char *key_name;    /* the API key's name, which its token counts are kept under (NULL: no keys); copied */
    eng_grammar *grammar;    /* constrained decoding, or NULL; the job takes it (freed with the job) */
    /* logprobs of each generated token with TOP_LOGPROBS top ids (eng_gen_params); with
     * echo_logprobs, of the prompt's tokens too, and max_tokens may be 0 */
    bool logprobs;
    int top_logprobs;
    bool echo_logprobs;
    const int32_t *bias_ids; /* logit_bias, checked against the vocabulary; copied */
    const float *bias;
    size_t n_bias;
    /*
     * Choices of one prompt (n, or best_of's candidates; 0 = 1, at most
     * SRV_MAX_CHOICES): the prompt is prefilled once (a prefix-cache hit
     * included), then each further choice forks the first one's session
     * (one copy of the prompt's KV) and decodes beside it in the same
     * steps, with a session, a sampler and a grammar matcher of its own.
     * Choice i samples with seed sampling.seed + i, so it generates what the
     * same job with that seed generates alone. The job takes one row of the
     * batch per choice and reserves KV for all of them.
     */
    int n_choices;
    bool rank;               /* keep each choice's cumulative log-probability (best_of ranks by it) */
} srv_job_params;

#define SRV_MAX_CHOICES 16

/* Called on the loop thread when JOB has new text or has ended. */
typedef void (*srv_job_fn)(srv_job *job, void *user);

/* A job holding one reference for the caller. NULL on out-of-memory. */
srv_job *srv_job_new(const srv_job_params *p, srv_job_fn fn, void *user);
/* Drops the caller's reference (any thread). NULL is fine. */
void srv_job_release(srv_job *j);

/* Queues JOB. Returns 0, SRV_EFULL, SRV_ESHUTDOWN, SRV_ELOADING, SRV_EKVBUDGET or SRV_ECHOICES (more
 * choices than the --parallel rows of a step). A job counts once against the queue, whatever its choices. */
int srv_sched_submit(srv_sched *s, srv_job *job);

/* The client is gone: no more callbacks; a waiting job leaves the queue, a
 * running one is stopped and its session freed within one step. */
void srv_job_cancel(srv_job *j);

/* One choice's part of an update. */
typedef struct srv_choice_update {
    char *text;             /* new text (malloc'd; NULL when none) */
    size_t len;
    /* with logprobs: the tokens generated since the last take (an ending
     * end-of-sequence id left out, as from the text); malloc'd */
    eng_token_lp *lps;
    size_t n_lps;
    int64_t n_generated;
    srv_finish finish;      /* SRV_FINISH_NONE while the choice runs */
    double cum_logprob;     /* with srv_job_params.rank: the sum of its ids' log-probabilities */
} srv_choice_update;

/* What happened since the last take. */
typedef struct srv_job_update {
    int n_choices;
    srv_choice_update choices[SRV_MAX_CHOICES];
    int64_t n_prompt, n_generated; /* n_generated: every choice's ids */
    int64_t n_cached;       /* prompt tokens reused from the prefix cache */
    bool done;
    srv_finish finish;
    char message[160];      /* SRV_FINISH_ERROR: what failed */
    /* queue_ms: submission to admission; prompt_ms: admission to the first
     * token (prefill); ttft_ms: the request's arrival to the first token;
     * tpot_ms: the first token to the last over the tokens after the first
     * (of the longest choice: the choices decode in the same steps; 0 with
     * fewer than 2). */
    double queue_ms, prompt_ms, ttft_ms, decode_tokens_per_s, tpot_ms;
    bool started;           /* it got a slot, so it may have computed */
    /* with echo_logprobs, once, the prompt's (n_prompt entries); malloc'd */
    eng_token_lp *prompt_lps;
} srv_job_update;

/* Takes the job's new output and its state (loop thread); srv_job_update_clear() frees the texts and
 * logprobs (the counts and finish reasons stay). */
void srv_job_take(srv_job *j, srv_job_update *u);
void srv_job_update_clear(srv_job_update *u);

/* --parallel: the rows of a step, and so the most choices a job may have. */
int srv_sched_parallel(const srv_sched *s);

#endif
