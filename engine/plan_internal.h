/*
 * plan_internal: what the plan's files share, private to engine/.
 *
 * The plan is built by plan.c (node binding, the registry of supported ops),
 * rewritten by fuse.c (fusions), its MatMulNBits weights repacked by pack.c,
 * and run by exec.c (arena layout, shape and execution passes). Each op
 * family has its adapter file (op_shape.c, op_math.c, op_norm.c,
 * op_matmul.c, op_attention.c) holding its prepare(), infer() and run()
 * functions and its registry rows. Nothing outside engine/ includes this.
 *
 * Threads: plan building and the driver of an eng_exec run on one thread;
 * kernels are fanned out through plan_run_par().
 */
#ifndef QWEN3D_ENGINE_PLAN_INTERNAL_H
#define QWEN3D_ENGINE_PLAN_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "engine/op_registry.h"
#include "engine/plan.h"
#include "kernels/checked.h"
#include "kernels/krn.h"

#define MAX_IO 16

#define ALIGN 64

typedef struct step step;

typedef struct plan_builder plan_builder;

typedef struct plan_prep plan_prep;

/*
 * A weight-only INT4 matrix as standard ONNX writes it (lower.c): UINT4
 * codes q(n, k) and block scales s(n, b) and zero points z(n, b), b = k / 32,
 * anywhere in their tensors, so that W[n][k] = (q(n, k) - z(n, b)) * s(n, b).
 * DequantizeLinear axis 0 on a [K, N] initializer has q_sn = 1, q_sk = N;
 * axis 1 on a [V, D] one (the tied embedding) q_sn = D, q_sk = 1.
 */
typedef struct q4_src {
    const uint8_t *q;     /* 4-bit, element i in nibble i (low first) */
    uint64_t q_sn, q_sk;
    const void *s;        /* FLOAT or BFLOAT16 */
    int32_t s_dtype;
    uint64_t s_sn, s_sb;
    const uint8_t *z;     /* 4-bit */
    uint64_t z_sn, z_sb;
    size_t n, k;
    bool zp_all_8;        /* every zero point is 8: the packed form applies */
    const struct eng_tensor *tensors[3]; /* codes, scales, zero points: released once repacked */
} q4_src;

#define MMNB_MAX_PARTS 4
#define MMNB_MAX_SIBS 3   /* earlier MatMulNBits run with one (fuse_mmnb_siblings) */
#define MMNB_MAX_RUN_PARTS 8 /* output tensors of one such pass */

typedef struct mmnb_params {
    krn_q4_weights w;
    const struct eng_tensor *pack_b, *pack_scales, *pack_zp; /* sources of w.packed until pack_all() */
    const q4_src *qdq;    /* lowered DequantizeLinear weights: repacked or copied by pack_all() */
    bool int8;
    bool qa_from_norm;    /* its input's producer also quantizes it (fuse_norm_quant) */
    int n_parts;          /* > 0: the columns go to n_parts outputs in order, a Split fused (fuse_mmnb_split) */
    size_t part_cols[MMNB_MAX_PARTS];
    /* > 0: the earlier steps sibs[] (same A) run in this step's pass over the pool (fuse_mmnb_siblings) */
    int n_sibs;
    int sibs[MMNB_MAX_SIBS];
} mmnb_params;

/* MatMul with a constant FLOAT or BFLOAT16 weight read in place (krn mm_f). */
typedef struct mmf_params {
    const void *w;
    size_t w_ld, n, k;
    bool bf16, nk;        /* nk: the weight is [N, K] (a transposed tied embedding) */
} mmf_params;

typedef struct gqa_params {
    int index;            /* ordinal among the plan's attention nodes */
    int64_t heads, kv_heads;
    int64_t width_heads;  /* heads in the query's width: heads, + 2 * kv_heads when packed */
    float scale;          /* 0: 1/sqrt(head size) at run time */
    bool rotary;
    bool packed;          /* key/value absent: query holds Q, K and V */
    /*
     * Lowered from standard Attention (lower.c): no seqlens_k; input 6 is
     * the INT64 length of the attention mask, T, and the past is T - S,
     * which a past tensor must hold exactly (Attention concatenates it).
     */
    bool lowered;
} gqa_params;

struct step {
    const eng_node *node;
    const op_def *op;
    char kernel[160];
    bool lowered;         /* lower.c bound it (prepare() is not called) */
    const char *origin;   /* what the lowering made it from, for the kernel name; NULL */
    /* SiLU(gate) * up: the Sigmoid and the first Mul are folded into the
     * second Mul, which then reads gate (silu_gate) and up (silu_up). */
    int silu_head;        /* on Sigmoid and the first Mul: index of the fused step, else -1 */
    int silu_gate, silu_up;   /* on the fused Mul: values, -1 when not fused */
    int silu_steps[2];    /* on the fused Mul: the Sigmoid and first Mul it replaces */
    int sib_head;         /* on a MatMulNBits run by a later one (mmnb.sibs): that step's index, else -1 */
    int n_in, n_out;
    int in[MAX_IO];       /* value index, -1 absent */
    int out[MAX_IO];
    union {
        struct { int64_t axis; bool use_krn; } gather;
        struct { int64_t start, end; } shape;
        struct { bool keepdims, noop_empty; } reduce;
        struct { int32_t to; } cast;
        struct { bool allowzero; } reshape;
        struct { int64_t axis, num_outputs; } split;
        /* qa_block > 0: also quantize the output for int8 MatMulNBits readers (fuse_norm_quant) */
        struct { int64_t axis; float eps; size_t qa_block, qa_k; } norm;
        struct { char op; } binary;   /* '+', '-', '*' */
        mmnb_params mmnb;
        mmf_params mmf;
        gqa_params gqa;
        struct { const step *head; } gq4;  /* embedding rows dequantized from the LM head's INT4 weights */
        struct { int bits; int64_t block, gather_axis, quantize_axis; } gbq; /* GatherBlockQuantized */
    } p;
};

typedef enum { PV_CONST, PV_INPUT, PV_NODE } pv_kind;

typedef struct val_plan {
    pv_kind kind;
    int def;              /* step index defining it; -1 for const/input */
    int last;             /* last step reading it (n_steps for graph outputs) */
    bool graph_output;
    eng_view cval;        /* PV_CONST: the constant */
} val_plan;

struct eng_plan {
    const eng_graph *g;
    char contract[64];    /* which graph contract the graph follows (lower.c) */
    eng_tensor *inits;    /* the graph's initializers, data realigned where needed */
    bool *repacked;       /* per initializer: the kernels read a repacked or copied form, not its bytes */
    bool *read_at_run;    /* per initializer: some op reads its bytes at run time, repacked or not */
    uint64_t readahead_bytes; /* in-place bytes the load asked the kernel to read ahead (plan_prefetch_in_place) */
    int n_gqa;
    eng_plan_opts opts;
    krn_table krn;
    size_t n_steps;
    step *steps;          /* one per node, topological order */
    val_plan *vals;       /* per graph value */
    void **owned;
    size_t n_owned, cap_owned;
    uint64_t prepared_bytes;
    uint8_t *pack_base;   /* the packed matrices' arena (pack.c), NULL: none */
    uint64_t pack_total;
    plan_prep *prep;      /* the prepared-weights cache (prepcache.c) */
};

struct plan_builder {
    eng_plan *p;
    eng_diag *diag;
    uint64_t pack_total;  /* bytes of all packed matrices (size_packs) */
    bool *scales_bf16;    /* per node: its packed copy keeps bfloat16 scales (size_packs) */
    bool *zp_records;     /* per node: its packed copy holds zero points, some not 8 (size_packs) */
    bool pack_sized;
};

typedef struct bound_buf {
    void *buf;
    uint64_t cap;
} bound_buf;

typedef struct rt_val {
    eng_view v;
    uint64_t nbytes;
} rt_val;

struct eng_exec {
    const eng_plan *p;
    eng_pool *pool;
    rt_val *vals;
    bool *input_set;
    bound_buf *bound;
    /* arena */
    uint8_t *arena;
    uint64_t arena_bytes;
    uint64_t *slot_off, *slot_cap;
    uint64_t *need;       /* bytes each value needs this run */
    /* per-run scratch: quantized activations, rotated queries, positions */
    uint8_t *scratch;
    uint64_t scratch_cap, scratch_need;
    /*
     * Activations quantized by a norm step for the int8 MatMulNBits that read
     * its output (fuse_norm_quant): valid for the value, data and row count
     * recorded here, until another norm replaces them (width and block size
     * are the readers', fixed by the plan).
     */
    uint8_t *norm_qa;
    uint64_t norm_qa_cap, norm_qa_need;
    int norm_qa_value;    /* -1: none */
    const void *norm_qa_data;
    uint64_t norm_qa_rows;
    /* bump allocator for integer values during the shape pass */
    uint8_t *shape_buf;
    uint64_t shape_cap, shape_used;
    bool shape_pass;
    uint64_t kv_bytes_moved;
    eng_kv_binding *kv;   /* per attention node; k == NULL when unbound */
    bool profiling;
    uint64_t prof_ns[64], prof_calls[64]; /* per plan_ops entry, then per plan_internal_ops entry */
    bool *fused_now;      /* per step: its SiLU fusion applies to this run's shapes */
    bool *last_row;       /* per step: compute its output for the selected input rows only */
    int argmax_step;      /* step whose output rows also get their argmax, -1: none */
    _Atomic uint64_t *argmax_keys; /* [argmax_cap] eng_argmax_key per row, merged over the workers */
    size_t argmax_cap, argmax_rows; /* argmax_rows: rows the last run computed (0: none) */
    /* batched runs (eng_exec_set_batch): the sequences, and the rows selected for last_row steps */
    eng_batch_seq *batch;
    size_t n_batch, batch_cap;
    int64_t *sel;         /* [n_sel] selected rows (the last row of each sequence with logits, or all its rows) */
    size_t n_sel, sel_rows_cap;
    float *sel_buf;       /* the selected rows of a last_row step's input, gathered */
    uint64_t sel_cap;
    bool prompt_rows;     /* the runs' new rows are prompt tokens (eng_exec_set_prompt_rows) */
    eng_diag *diag;       /* of the current run */
};

/* ---- helpers shared by the plan builder, the executor and the ops ---- */

static inline uint64_t dims_numel(const int64_t *d, int r)
{
    uint64_t n = 1;
    for (int i = 0; i < r; i++)
        n *= (uint64_t)d[i];
    return n;
}

static inline const char *node_label(const eng_node *n)
{
    return *n->name ? n->name : n->op_type;
}

#define STEP_FAIL(x, s, ...)                                                      \
    do {                                                                          \
        char msg_[512];                                                           \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                 \
        eng_diag_add((x)->diag, "node '%s' (%s): %s", node_label((s)->node),      \
                     (s)->node->op_type, msg_);                                   \
        return -1;                                                                \
    } while (0)

#define PREP_FAIL(b, s, ...)                                                      \
    do {                                                                          \
        char msg_[512];                                                           \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                 \
        eng_diag_add((b)->diag, "%s: node '%s' (%s): %s", (b)->p->g->dir,         \
                     node_label((s)->node), (s)->node->op_type, msg_);            \
        return -1;                                                                \
    } while (0)

static inline rt_val *IN(eng_exec *x, const step *s, int i)
{
    return i < s->n_in && s->in[i] >= 0 ? &x->vals[s->in[i]] : NULL;
}

static inline rt_val *OUT(eng_exec *x, const step *s, int i)
{
    return i < s->n_out && s->out[i] >= 0 ? &x->vals[s->out[i]] : NULL;
}

/* Gives V a shape, or returns -1 when the shape is too large (eng_shape_size). */
static inline int set_shape(rt_val *o, int32_t dtype, int rank, const int64_t *dims)
{
    if (eng_shape_size(dims, rank, eng_dtype_size(dtype), NULL, &o->nbytes) != 0)
        return -1;
    o->v.dtype = dtype;
    o->v.rank = rank;
    for (int i = 0; i < rank; i++)
        o->v.dims[i] = dims[i];
    return 0;
}

/* Sets the shape of output I of S; a shape too large fails naming the output. */
static inline int set_out(eng_exec *x, const step *s, int i, int32_t dtype, int rank, const int64_t *dims)
{
    if (set_shape(OUT(x, s, i), dtype, rank, dims) != 0) {
        char shape[200];
        STEP_FAIL(x, s, "output '%s' would have shape %s of %s, more than the largest tensor (%llu bytes)",
                  x->p->g->values[s->out[i]].name, eng_shape_str(dims, rank, shape, sizeof shape),
                  eng_dtype_name(dtype), (unsigned long long)ENG_MAX_TENSOR_BYTES);
    }
    return 0;
}

/*
 * What a MatMulNBits node's attributes K, N and block_size imply for its
 * inputs, computed without overflow: blocks per row of B, bytes of B,
 * elements of scales, bytes of packed 4-bit zero points. False when a size
 * passes the largest tensor (no input could match it then); the attributes
 * themselves must already be positive, and block_size a power of two.
 */
typedef struct mmnb_sizes {
    uint64_t kb, b_bytes, n_scales, zp_bytes;
} mmnb_sizes;

/* Byte sizes of a MatMulNBits node's B and zero points at BITS = 4 or 8 (blocks of bs * bits / 8 bytes). */
static inline bool mmnb_sizes_of(int64_t K, int64_t N, int64_t bs, int bits, mmnb_sizes *z)
{
    uint64_t k = (uint64_t)K, b = (uint64_t)bs;
    z->kb = k / b + (k % b != 0);
    uint64_t zp_row = bits == 8 ? z->kb : (z->kb + 1) / 2;
    return ck_mul_u64((uint64_t)N, z->kb, &z->n_scales) &&
           ck_mul_u64(z->n_scales, b * (uint64_t)bits / 8, &z->b_bytes) &&
           ck_mul_u64((uint64_t)N, zp_row, &z->zp_bytes) && z->b_bytes <= ENG_MAX_TENSOR_BYTES &&
           z->n_scales <= ENG_MAX_TENSOR_BYTES;
}

/* Reads element i of an integer tensor as int64. */
static inline int64_t int_at(const eng_view *v, uint64_t i)
{
    switch (v->dtype) {
    case ENG_DT_INT64: return ((const int64_t *)v->data)[i];
    case ENG_DT_INT32: return ((const int32_t *)v->data)[i];
    case ENG_DT_UINT8: return ((const uint8_t *)v->data)[i];
    case ENG_DT_INT8: return ((const int8_t *)v->data)[i];
    case ENG_DT_INT16: return ((const int16_t *)v->data)[i];
    case ENG_DT_UINT16: return ((const uint16_t *)v->data)[i];
    case ENG_DT_UINT32: return ((const uint32_t *)v->data)[i];
    case ENG_DT_UINT64: return (int64_t)((const uint64_t *)v->data)[i];
    case ENG_DT_BOOL: return ((const uint8_t *)v->data)[i] != 0;
    default: return 0;
    }
}

static inline bool is_int_dtype(int32_t dt)
{
    switch (dt) {
    case ENG_DT_INT64: case ENG_DT_INT32: case ENG_DT_UINT8: case ENG_DT_INT8: case ENG_DT_INT16:
    case ENG_DT_UINT16: case ENG_DT_UINT32: case ENG_DT_UINT64: case ENG_DT_BOOL:
        return true;
    default:
        return false;
    }
}

/* Integer shape data must be known when shapes are inferred. */
static inline int need_data(eng_exec *x, const step *s, const rt_val *v, const char *what)
{
    if (!v || !v->v.data) {
        if (v && eng_view_numel(&v->v) == 0)
            return 0;
        STEP_FAIL(x, s, "%s is not known before execution (computed from float data)", what);
    }
    return 0;
}

/* Input i of s when it is an initializer, with its (possibly realigned) data. */
static inline const eng_tensor *const_input(const plan_builder *b, const step *s, int i)
{
    if (i >= s->n_in || s->in[i] < 0)
        return NULL;
    const eng_value *v = &b->p->g->values[s->in[i]];
    return v->kind == ENG_VALUE_INITIALIZER ? &b->p->inits[v->index] : NULL;
}

/* ---- registry (plan.c) ---- */

/* The supported ops, one row each, in the files of their families. */
extern const op_def op_constant, op_shape, op_gather, op_reduce_sum, op_sub, op_add, op_mul, op_cast, op_sigmoid,
    op_reshape, op_split, op_sln, op_skip_sln, op_matmulnbits, op_gqa, op_gather_block_quantized;
/* Standard ops the lowering reads as parts of patterns (lower.c), and the generic ones among them. */
extern const op_def op_dequantize, op_matmul, op_transpose, op_rmsnorm, op_rotary, op_attention, op_reduce_mean,
    op_pow, op_sqrt, op_div, op_slice, op_neg, op_concat, op_softmax, op_unsqueeze, op_range, op_constant_of_shape,
    op_trilu;
/* Steps the lowering makes that no ONNX op names: folded away, a MatMul with a constant float weight,
 * the embedding rows of the tied INT4 weight. */
extern const op_def op_folded, op_matmul_f, op_gather_q4;
extern const op_def *const plan_internal_ops[];
extern const size_t plan_n_internal_ops;
extern const op_def *const plan_ops[];
extern const size_t plan_n_ops;
/* Position of OP in plan_ops, then plan_internal_ops (profiling slots). */
size_t plan_op_index(const op_def *op);

/* Keeps BUF (malloc'd) until the plan is freed; false (BUF freed) when out of memory. */
bool plan_own(eng_plan *p, void *buf);

/* ---- lowering (lower.c) ---- */

/*
 * Recognizes the standard contracts' patterns (DequantizeLinear weights,
 * RMSNormalization, RotaryEmbedding + Attention and their decompositions,
 * the FLOAT <-> BFLOAT16 Casts) and binds their anchor steps to the
 * internal steps; names the contract. Problems go to the builder's diag,
 * one line per node.
 */
void plan_lower(plan_builder *b);
/* Folds every step no live step or graph output reads (the patterns' leftovers). */
void plan_drop_unread(eng_plan *p);
/* FLOAT copies of the BFLOAT16 constants live steps read (norm weights, scalars). */
bool plan_widen_constants(eng_plan *p);

/* ---- executor (exec.c) ---- */

/* Runs FN over [0, n) on the executor's pool, GRAIN items at least per share. */
void plan_run_par(eng_exec *x, size_t n, size_t grain, void (*fn)(const void *, size_t, size_t), const void *args);

/* ---- weight packing (pack.c) ---- */

bool plan_size_packs(plan_builder *b);
void *plan_packed_slot(plan_builder *b, const step *s, size_t bytes, uint64_t *counted);
/* Fills every packed or copied weight; false when out of memory. */
bool plan_pack_all(eng_plan *p);
/* Whether every scale of a lowered weight is a bfloat16 value (the packed copy keeps 16 bits). */
bool plan_q4_scales_bf16(const q4_src *src);
/* Whether MatMulNBits' packed 4-bit zero points (ZP, BYTES bytes) are all 8: the weights then pack without them. */
bool plan_q4_zp_all_8(const uint8_t *zp, uint64_t bytes, uint64_t n, uint64_t k_blocks);
/* Whether every one of the BYTES 8-bit zero points at ZP is 128, the 8-bit default. */
bool plan_q8_zp_all_128(const uint8_t *zp, uint64_t bytes);
/*
 * Drops a mapped tensor's pages from the resident set. Packing releases each
 * matrix's sources as soon as it is packed (pack_one, and prepcache.c's
 * adopt loop), not in one pass over the repacked marks below at the end, so
 * the load never holds all the originals at once.
 */
void plan_release_mapped(const eng_tensor *t);
/* Marks initializer T (of the plan's inits) as read at run time only through its repacked or copied form. */
void plan_mark_repacked(eng_plan *p, const eng_tensor *t);
/*
 * Marks the initializer behind value V (directly, or through view ops, the
 * registry's places_outputs: Reshape, Split) as read at run time by an op:
 * the tied embedding's GatherBlockQuantized reads rows of the codes the LM
 * head also repacks.
 */
void plan_mark_read_at_run(eng_plan *p, int v);
/* Initializer i is read at run time from its file's mapping: mapped, not copied to realign it, and not repacked
 * or read by an op anyway. */
bool plan_read_in_place(const eng_plan *p, size_t i);
/* Asks the kernel to read every byte the plan reads in place into the page cache (pack.c); records how many. */
void plan_prefetch_in_place(eng_plan *p);
/* Memory for packed weights: huge-page aligned when large (a hint), freed with free(). */
void *plan_alloc_weights(size_t bytes);

/* ---- the prepared-weights cache (prepcache.c) ---- */

/* Finds the plan's cache file and checks its header (once; the state says what it found). */
void plan_prep_open(eng_plan *p);
/* Whether a checked cache file is mapped. */
bool plan_prep_mapped(const eng_plan *p);
/* The scale form the cache recorded for node NODE's packed matrix: 1 bf16, 0 fp32, -1 not in the cache. */
int plan_prep_bf16(const eng_plan *p, size_t node);
/* The mapped arena when its size is TOTAL, else NULL (the cache is dropped). */
void *plan_prep_arena(eng_plan *p, uint64_t total);
/* Stops using the mapped cache (WHY in the state's note); a new one is stored after packing. */
void plan_prep_drop(eng_plan *p, const char *why);
/*
 * After every node is prepared: when the arena is the mapped cache, checks
 * its table against the plan and every matrix's checksum; then nothing is
 * left to pack. Otherwise moves the arena to memory of the plan's own and
 * leaves the packing to plan_pack_all(). False when out of memory.
 */
bool plan_prep_adopt(eng_plan *p);
/* After plan_pack_all(): stores the arena when the plan was built without a usable cache. */
void plan_prep_store(eng_plan *p);
/* Waits for a background store (eng_plan_opts.store_in_background) to end; before the plan is freed. */
void plan_prep_wait(eng_plan *p);
void plan_prep_free(plan_prep *c);

/* ---- fusions (fuse.c) ---- */

int plan_producer_step(const eng_plan *p, int v);
void plan_fuse_norm_quant(eng_plan *p);
void plan_fuse_skip_norm(eng_plan *p);
void plan_fuse_silu(eng_plan *p);
void plan_fuse_mmnb_split(eng_plan *p);
void plan_fuse_mmnb_siblings(eng_plan *p);

/* The packed or ONNX-layout copy of a lowered DequantizeLinear weight (pack.c). */
void plan_q4_fill(const q4_src *src, size_t n0, size_t n1, uint8_t *b, float *scales, uint8_t *zp);

/* ---- MatMulNBits (op_matmul.c) ---- */

/* What the kernel name adds for the weights' packed form. */
const char *plan_pack_note(const krn_q4_weights *w);
/* Binds step s (a lowered MatMul) to the int8 or fp32 MatMulNBits kernels over SRC; -1 named in diag. */
int plan_prep_q4(plan_builder *b, step *s, const q4_src *src, const char *what);
/* Binds step s to the dense kernel over a constant weight; -1 named in diag. */
int plan_prep_matmul_f(plan_builder *b, step *s, const struct eng_tensor *w, bool nk);

/* ---- attention (op_attention.c) ---- */

/* Binds step s (a lowered Attention: inputs q, k, v, past key, past value, -, T, cos, sin). */
int plan_prep_lowered_attention(plan_builder *b, step *s, int64_t heads, int64_t kv_heads, float scale,
                                const char *what);

#endif
