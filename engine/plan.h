/*
 * plan: the execution plan of a loaded graph and the executor that runs it.
 *
 * eng_plan_new() walks the graph once: every node is bound to a kernel from
 * the registry keyed by (domain, op, dtypes, attributes), its attributes are
 * checked (an unsupported variant is rejected naming node and attribute), and
 * Constant values are folded. The plan is immutable and shared by every
 * eng_exec (one per session).
 *
 * An eng_exec holds the runtime tensors of one run: graph inputs bound by the
 * caller (never copied), optional caller buffers for outputs (e.g. KV caches),
 * and one arena for everything else, laid out from tensor lifetimes so values
 * that are never alive together share memory. Each run first infers every
 * shape (running only the small integer shape ops), grows the arena if this
 * run needs more than any before, then executes the steps in order; a step
 * does no allocation, locking or I/O. Reshape is always a view; Split is a
 * view when only one row is split, a copy otherwise.
 *
 * Threads: a plan may be read from any thread. An eng_exec is driven by one
 * thread at a time; its kernels fan out over the eng_pool it was given.
 */
#ifndef QWEN3D_ENGINE_PLAN_H
#define QWEN3D_ENGINE_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/diag.h"
#include "engine/model.h"
#include "engine/pool.h"
#include "kernels/krn.h"

typedef struct eng_plan eng_plan;
typedef struct eng_exec eng_exec;

/* Progress of long work: DONE of TOTAL bytes, on the thread that started the work. */
typedef void (*eng_progress_fn)(void *ctx, uint64_t done, uint64_t total);

struct eng_prep_info; /* below */

typedef struct eng_plan_opts {
    /* Compute MatMulNBits with fp32 activations even where accuracy_level
     * asks for int8 (the accuracy_level 0 numerics). */
    bool matmul_fp32;
    /* Keep the graph's steps as they are (the reference the fused plan is
     * tested against). */
    bool no_fusion;
    /* Describe only (`inspect`): skip repacking the weights, which a plan
     * that runs needs; eng_exec_new() refuses such a plan. */
    bool describe_only;
    /* The prepared-weights cache's folder (prepcache.c); NULL or "off": none. */
    const char *prepared_cache;
    /* Threads that repack the weights; 0: one per online CPU, up to 8. */
    int pack_threads;
    /* Told the packed bytes as the weights are repacked (NULL: nothing). */
    eng_progress_fn progress;
    void *progress_ctx;
    /* Write a new prepared-cache file on a thread of its own, so the plan is
     * ready before the file is (a daemon's first start); eng_plan_free()
     * waits for it. stored, when not NULL, is told the final state on that
     * thread. Without it the file is written before eng_plan_new() returns. */
    bool store_in_background;
    void (*stored)(void *ctx, const struct eng_prep_info *info);
    void *stored_ctx;
    /* Do not read the bytes the plan reads in place (eng_plan_in_place_bytes)
     * into the page cache at load: for a machine whose page cache cannot
     * spare them, at the cost of disk reads in the first steps. */
    bool no_readahead;
} eng_plan_opts;

int eng_plan_new(const eng_graph *g, const eng_plan_opts *opts, eng_plan **out, eng_diag *diag);
void eng_plan_free(eng_plan *p);

const eng_graph *eng_plan_graph(const eng_plan *p);
/*
 * The graph contract the plan recognized, e.g. "qwen3-ort-int4" or
 * "qwen3-int4-qdq (opset 23 ops)" (design.md section 1).
 */
const char *eng_plan_contract(const eng_plan *p);
/* Name of what executes node i (topological index), e.g. "mmnb_i8.avx2". */
const char *eng_plan_kernel(const eng_plan *p, size_t node);
/* Weight bytes the plan keeps resident beyond the mapped file (repacked
 * copies); weights used in place from the mapping count as their file bytes. */
uint64_t eng_plan_prepared_bytes(const eng_plan *p);
/*
 * Bytes of the mapped model files the plan reads in place at run time (the
 * embedding, rotary caches, weights not repacked). A plan that runs asks the
 * kernel to read them into the page cache when it is built, so that the
 * first requests after a cold start do not wait on a disk read per new token.
 */
uint64_t eng_plan_in_place_bytes(const eng_plan *p);
/* Of those, the bytes this plan's load asked the kernel to read ahead: all
 * of them, or 0 when built with no_readahead (or only described). */
uint64_t eng_plan_readahead_bytes(const eng_plan *p);

/*
 * What the prepared-weights cache did for a plan: X(id, name, meaning).
 * A plan that runs ends in off, none, hit, written, rebuilt or unstored
 * (writing until then, with store_in_background); a describe_only plan
 * (inspect) only looks: present, absent or stale.
 */
#define ENG_PREP_STATES(X)                                                                 \
    X(ENG_PREP_NONE, "none", "nothing to prepare (no packed weights)")                     \
    X(ENG_PREP_OFF, "off", "the cache is turned off")                                     \
    X(ENG_PREP_HIT, "hit", "the packed weights are mapped from the cache file")           \
    X(ENG_PREP_WRITTEN, "written", "packed, and stored in a new cache file")              \
    X(ENG_PREP_REBUILT, "rebuilt", "the cache file was unusable: packed, and replaced")   \
    X(ENG_PREP_UNSTORED, "unstored", "packed, but no cache file could be written")        \
    X(ENG_PREP_WRITING, "writing", "packed; the cache file is being written in the background") \
    X(ENG_PREP_PRESENT, "present", "a cache file whose header suits the model is there")  \
    X(ENG_PREP_ABSENT, "absent", "there is no cache file")                                \
    X(ENG_PREP_STALE, "stale", "the cache file there is unusable")

typedef enum eng_prep_state {
#define X(id, name, what) id,
    ENG_PREP_STATES(X)
#undef X
} eng_prep_state;

typedef struct eng_prep_info {
    eng_prep_state state;
    const char *path;      /* the cache file ("" when none was named) */
    const char *note;      /* why it is stale, rebuilt or unstored ("" when nothing to say) */
} eng_prep_info;

/* The cache's state for P; the strings live as long as P. */
void eng_plan_prepared_cache(const eng_plan *p, eng_prep_info *out);
const char *eng_prep_state_name(eng_prep_state s);

/*
 * How files kept for a model folder are named: the last component of DIR's
 * real path (into REAL, REAL_CAP bytes; DIR itself when realpath fails, and
 * then false), every byte but [A-Za-z0-9._-] turned into '_', in BASE.
 */
bool eng_folder_label(const char *dir, char *real, size_t real_cap, char *base, size_t base_cap);

/* A runtime tensor: contiguous, row-major. */
typedef struct eng_view {
    int32_t dtype;
    int rank;
    int64_t dims[ENG_MAX_RANK];
    void *data;
} eng_view;

/* An executor for runs of P; NULL out of memory or for a describe_only plan. */
eng_exec *eng_exec_new(const eng_plan *p, eng_pool *pool);
void eng_exec_free(eng_exec *x);

/* Binds graph input NAME to caller memory for the following runs. */
int eng_exec_set_input(eng_exec *x, const char *name, int32_t dtype, int rank, const int64_t *dims,
                       const void *data, eng_diag *diag);
/*
 * Makes graph output NAME be written into caller memory of CAP bytes instead
 * of the arena (NULL unbinds). A run whose output would not fit fails. An
 * output bound to the same memory as an input of the node producing it is
 * updated in place (GroupQueryAttention's shared past/present buffer).
 */
int eng_exec_bind_output(eng_exec *x, const char *name, void *buf, uint64_t cap, eng_diag *diag);

/*
 * A session-owned KV cache for one GroupQueryAttention node. When bound, the
 * node appends the new tokens' rotated keys and values to it and attends in
 * place; its past inputs must then be empty ([1, kv_heads, 0, head]) and its
 * present outputs are empty too. Element (t, h, d) of keys or values is at
 * base + h * head_stride + t * krn_kv_row_elems(type, head_dim) + d (kvcache/kv.h).
 */
typedef struct eng_kv_binding {
    void *k, *v;
    krn_kv_type type;      /* fp32, fp16 or q8 rows (kernels/krn.h) */
    int64_t capacity;      /* tokens the storage holds */
    int64_t head_stride;   /* elements between two kv heads' first rows, >= capacity rows */
} eng_kv_binding;

/* Binds (or with b == NULL unbinds) the cache of the GroupQueryAttention
 * node whose past_key input is the graph input PAST_KEY_INPUT. */
int eng_exec_bind_kv(eng_exec *x, const char *past_key_input, const eng_kv_binding *b, eng_diag *diag);

/*
 * A batched run: the new rows of several sequences, each with its own KV
 * cache, in one pass of the plan. Row-wise steps (projections, norms,
 * elementwise) see one [1, N, ...] tensor of all rows; each attention node
 * stores and attends every sequence's rows in that sequence's cache. The
 * run's input_ids are the sequences' ids one after the other (N in all),
 * the attention mask N ones, the past inputs empty.
 */
typedef struct eng_batch_seq {
    const eng_kv_binding *kv; /* [eng_plan_attention_count()] its cache at each attention node */
    int64_t past;             /* tokens already in that cache */
    int64_t n;                /* its new rows (>= 1) */
    bool prompt;              /* the rows are prompt tokens (eng_exec_set_prompt_rows) */
    bool logits;              /* the steps of eng_exec_last_row_only compute its last row */
    bool all_rows;            /* ... or every one of its rows (a prompt's own log-probabilities) */
} eng_batch_seq;

/* Attention nodes of the plan, and the index of the one whose past key input is PAST_KEY_INPUT (-1: none). */
size_t eng_plan_attention_count(const eng_plan *p);
int eng_plan_attention_index(const eng_plan *p, const char *past_key_input);

/*
 * Makes the following runs batched over the N sequences (copied; the
 * bindings they point to must outlive the runs); N == 0 returns to
 * unbatched runs. While batched, the outputs of eng_exec_last_row_only
 * hold one row per sequence whose `logits` is set, or all `n` rows of one
 * whose `all_rows` is set, in sequence order, and eng_exec_argmax_row()
 * gives each row's argmax.
 */
int eng_exec_set_batch(eng_exec *x, const eng_batch_seq *seqs, size_t n, eng_diag *diag);

/*
 * Computes graph output NAME for the last row (position) of its input only,
 * e.g. the logits of a prefill whose other positions nobody reads. Only for
 * an output produced by a row-wise op (MatMulNBits); its shape then has 1 in
 * every leading dimension.
 */
int eng_exec_last_row_only(eng_exec *x, const char *name, bool on, eng_diag *diag);

/*
 * Greedy decoding: with ON, runs that compute NAME (a graph output made by
 * MatMulNBits, the logits) also find the argmax of its last row inside the
 * matmul's own pass (`--no-fusion` plans never do). Off by default.
 */
int eng_exec_set_argmax(eng_exec *x, const char *name, bool on, eng_diag *diag);
/* eng_argmax() of that row after the last run, or -1 when the run did not compute it. */
int32_t eng_exec_argmax(const eng_exec *x);
/* The same for row I of that output (a batched run computes several); -1 when not computed. */
int32_t eng_exec_argmax_row(const eng_exec *x, size_t i);

/*
 * Whether the new rows of the following runs are prompt tokens. Attention
 * then takes the prompt's arithmetic whatever the row count, so a prompt
 * cut into chunks (one token each, even) gives the bits of the whole prompt
 * fed at once. Off by default: a one-row run takes the decode path.
 */
void eng_exec_set_prompt_rows(eng_exec *x, bool on);

/* Runs the graph once. On failure the diag names the node. */
int eng_exec_run(eng_exec *x, eng_diag *diag);

/* The value NAME after the last run (pointer valid until the next run). */
int eng_exec_value(const eng_exec *x, const char *name, eng_view *out);

uint64_t eng_exec_arena_bytes(const eng_exec *x);
/* Bytes GroupQueryAttention nodes wrote or moved in KV caches, since creation. */
uint64_t eng_exec_kv_bytes_moved(const eng_exec *x);

/* Per-op-kind time of the runs made while profiling was on. */
typedef struct eng_prof_entry {
    const char *op;        /* op_type */
    uint64_t ns;
    uint64_t calls;
} eng_prof_entry;

void eng_exec_set_profiling(eng_exec *x, bool on);
/* Fills up to cap entries (op kinds with calls > 0); returns how many. */
size_t eng_exec_profile(const eng_exec *x, eng_prof_entry *out, size_t cap);

/* Element count of a view. */
uint64_t eng_view_numel(const eng_view *v);

#endif
