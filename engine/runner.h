/*
 * runner: a loaded model (graph, genai_config.json, geometry, plan, compute
 * pool) and the sessions that generate with it.
 *
 * eng_model is loaded once and shared read-only by every session. An
 * eng_session owns the KV state of one sequence and its executor; feeding it
 * ids runs the graph once with the graph's own contract: input_ids,
 * attention_mask, past_key_values.N.* in, logits and present.N.* out.
 *
 * Threads: a model may be used by several threads; one session is driven by
 * one thread at a time (the compute pool is shared, so sessions of one model
 * must not run at the same moment; the server's scheduler serializes them).
 */
#ifndef QWEN3D_ENGINE_RUNNER_H
#define QWEN3D_ENGINE_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/diag.h"
#include "engine/genai_config.h"
#include "engine/geometry.h"
#include "engine/plan.h"
#include "kvcache/kv.h"

typedef struct eng_model eng_model;
typedef struct eng_session eng_session;

/*
 * How sessions hold their KV state:
 *   persistent: a session-owned cache (kvcache/) bound to every attention
 *     node; each step appends only the new tokens' rows (the default);
 *   tensor: the graph's own contract, past in and present out as tensors,
 *     which copies the whole past every step (the reference).
 */
typedef enum eng_kv_mode { ENG_KV_PERSISTENT = 0, ENG_KV_TENSOR = 1 } eng_kv_mode;

typedef struct eng_model_opts {
    int threads;           /* compute participants; 0 = one per physical core */
    bool matmul_fp32;      /* fp32 activations in MatMulNBits (accuracy_level 0 numerics) */
    bool no_fusion;        /* run the graph's steps unfused (the reference for fused plans) */
    bool no_readahead;     /* do not read the in-place weights into the page cache at load (eng_plan_opts) */
    eng_kv_mode kv_mode;
    kv_type kv_type;       /* persistent mode only */
    /* Idle KV memory kept for new sessions (persistent mode; kv.h's kv_pool):
     * 0 = ENG_KV_POOL_DEFAULT, < 0 = none. */
    int64_t kv_pool_bytes;
    /* The prepared-weights cache's folder; NULL or "off": none (eng_plan_opts). */
    const char *prepared_cache;
    /* Told, on the opening thread, what that cache did once the plan is built (NULL: nothing);
     * with prepared_cache_background, told again, on the writing thread, once the file is written. */
    void (*prepared)(void *ctx, const eng_prep_info *info);
    void *prepared_ctx;
    /* Write a new cache file in the background (eng_plan_opts.store_in_background): the model is
     * ready without waiting for the disk, and freeing it waits for the write. */
    bool prepared_cache_background;
    /* Told, on the opening thread, the bytes of weights repacked as the
     * model loads (eng_plan_opts.progress); NULL for nothing. */
    eng_progress_fn progress;
    void *progress_ctx;
} eng_model_opts;

#define ENG_KV_POOL_DEFAULT ((uint64_t)1 << 30)

const char *eng_kv_mode_name(eng_kv_mode m);
int eng_kv_mode_parse(const char *s, eng_kv_mode *out);

/* Runs on the kernels krn_init() chose: call that first, once, before any thread (else the reference kernels run). */
int eng_model_open(const char *dir, const eng_model_opts *opts, eng_model **out, eng_diag *diag);
void eng_model_free(eng_model *m);

const eng_graph *eng_model_graph(const eng_model *m);
const eng_plan *eng_model_plan(const eng_model *m);
const eng_geometry *eng_model_geometry(const eng_model *m);
const eng_genai_config *eng_model_config(const eng_model *m);
eng_pool *eng_model_pool(eng_model *m);
/* Maximum sequence length: context_length from genai_config.json, else the rotary cache rows; at most INT32_MAX. */
int64_t eng_model_max_context(const eng_model *m);
/* True if ID is one of the end-of-sequence ids. */
bool eng_model_is_eos(const eng_model *m, int64_t id);

/*
 * The bytes a session of CAPACITY tokens reserves for its KV state: what
 * eng_session_kv_bytes_reserved() reports for it, known before it exists
 * (the server's KV budget); UINT64_MAX when the size overflows (more than
 * any budget; eng_model_open() refuses a model whose whole context does).
 * Any thread.
 */
uint64_t eng_model_kv_bytes(const eng_model *m, int64_t capacity);

/*
 * The pool of idle KV caches (persistent mode): a freed session's committed
 * pages stay resident, up to the pool's budget, and the next session writes
 * into them without page faults. Set the budget (shrinking the pool to
 * it), read its bytes, or free idle caches down to BYTES (returns the bytes
 * freed). Any thread.
 */
void eng_model_set_kv_pool_budget(eng_model *m, uint64_t bytes);
uint64_t eng_model_kv_pool_budget(const eng_model *m);
uint64_t eng_model_kv_pool_bytes(const eng_model *m);
uint64_t eng_model_kv_pool_shrink(eng_model *m, uint64_t bytes);

/* A session for up to max_ctx tokens (<= eng_model_max_context). */
eng_session *eng_session_new(eng_model *m, int64_t max_ctx, eng_diag *diag);
void eng_session_free(eng_session *s);
/* Forgets the sequence; storage is kept for reuse. */
void eng_session_reset(eng_session *s);

/*
 * Makes the empty session DST hold the first TOKENS tokens of SRC (one
 * contiguous copy per kv head and layer), as if it had been fed them.
 * Persistent KV mode only; both sessions of one model.
 */
int eng_session_copy_prefix(eng_session *dst, const eng_session *src, int64_t tokens, eng_diag *diag);

/* Keeps the first KEEP tokens and returns the memory committed past them. */
void eng_session_trim(eng_session *s, int64_t keep);
/* Keeps the rows of the first KEEP tokens, like eng_session_trim, but the
 * committed pages past them stay for the rows written next (their first
 * touch, a page fault each, is already paid). */
void eng_session_truncate(eng_session *s, int64_t keep);
/* Raises (or lowers, not below its length) the tokens S may hold, within the
 * address range its KV cache reserved (persistent mode): 0, or -1 unchanged. */
int eng_session_set_capacity(eng_session *s, int64_t capacity);
int64_t eng_session_length(const eng_session *s);
int64_t eng_session_capacity(const eng_session *s);

/*
 * Appends N ids (one graph run). On success *logits points at the vocabulary
 * row of the last position, valid until the model's next run. A run that
 * would pass the session's capacity fails without changing the session.
 */
int eng_session_feed(eng_session *s, const int64_t *ids, size_t n, const float **logits, eng_diag *diag);
/*
 * eng_session_feed() for ids of the prompt: their attention takes the
 * prompt's arithmetic whatever N is, so feeding a prompt in chunks gives
 * the bits of feeding it at once (a one-id eng_session_feed() is a decode
 * step, whose arithmetic differs).
 */
int eng_session_feed_prompt(eng_session *s, const int64_t *ids, size_t n, const float **logits, eng_diag *diag);

/*
 * One feed of a batched run: N new ids of session S. eng_model_feed() runs
 * several sessions' feeds in one pass of the model (persistent KV mode; the
 * tensor mode runs them one after the other): each projection is one
 * matrix product over all their rows, attention stays per session in its
 * own cache. A feed's rows compute the same bits whatever else is in the
 * run (batch invariance): the kernels' arithmetic per row does not depend
 * on the other rows.
 */
typedef struct eng_feed {
    eng_session *s;          /* distinct sessions of one model */
    const int64_t *ids;
    size_t n;
    bool prompt;             /* prompt ids (see eng_session_feed_prompt) */
    bool logits;             /* its last id's logits row is wanted */
    bool all_rows;           /* every id's logits row is wanted (echoed prompts' log-probabilities) */
    /* results */
    const float *row;        /* that row (vocab floats), valid until the model's next run; NULL if not wanted */
    const float *rows;       /* all_rows: n rows of vocab floats, row i after id i; else NULL */
    int32_t argmax;          /* eng_argmax(row) from the LM head for greedy sessions, else -1 */
    char error[160];         /* why this feed did not run ("" when it did) */
} eng_feed;

/*
 * Runs the N feeds. A feed that cannot run (an id outside the vocabulary,
 * a session without room) is left out with its error set and its session
 * unchanged; the others run. Returns how many were left out, or -1 when the
 * run itself failed (the sessions are then unchanged).
 */
int eng_model_feed(eng_model *m, eng_feed *feeds, size_t n, eng_diag *diag);

/* Runs of the model so far: a logits row from run R is valid while this is R. */
uint64_t eng_model_runs(const eng_model *m);

/*
 * Greedy decoding: with ON, later feeds also compute the argmax of the
 * returned logits row inside the LM head's own pass (where the plan allows
 * it), which eng_session_argmax() then returns: eng_argmax() of that row, or
 * -1 when the last feed did not compute it. The logits are still written.
 */
void eng_session_set_greedy(eng_session *s, bool on);
int32_t eng_session_argmax(const eng_session *s);

/* The executor the session's feeds run on (profiling, arena figures): in
 * persistent mode the model's, shared by its sessions. */
eng_exec *eng_session_exec(eng_session *s);

/*
 * Benchmarks only: makes the session hold LENGTH tokens of deterministic
 * pseudo-random keys and values without running the model, so decode speed
 * can be measured at long contexts without a long prefill first.
 */
int eng_session_fill_synthetic(eng_session *s, int64_t length, eng_diag *diag);

/* Bytes the KV path wrote or moved since the session was created. */
uint64_t eng_session_kv_bytes_moved(const eng_session *s);
/* Address space reserved and memory committed for the session's KV state. */
uint64_t eng_session_kv_bytes_reserved(const eng_session *s);
uint64_t eng_session_kv_bytes_committed(const eng_session *s);

#endif
