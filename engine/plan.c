/*
 * plan: kernel binding, arena layout and execution of a graph (see plan.h).
 *
 * Every supported op has an op_def: prepare() checks the node's attributes
 * and constant inputs once at plan time and names the kernel; infer() derives
 * output shapes at run time (reading only integer shape tensors); run()
 * executes. Ops marked shape_op (Shape, Gather/Cast/Sub/ReduceSum on
 * integers, ...) also run during the shape pass, so everything a later shape
 * depends on is known before the arena is laid out.
 *
 * Threads: plan building and the driver of an eng_exec run on one thread;
 * kernels are fanned out through eng_pool_run().
 */
#include "engine/plan.h"
#include "engine/sampler.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/checked.h"
#include "kernels/krn.h"

#define MAX_IO 16
#define ALIGN 64

typedef struct step step;
typedef struct plan_builder plan_builder;

typedef struct op_def {
    const char *domain;
    const char *op;
    int (*prepare)(plan_builder *b, step *s);
    int (*infer)(eng_exec *x, const step *s);
    int (*run)(eng_exec *x, const step *s);
    bool shape_op;        /* integer op run in the shape pass too */
    bool places_outputs;  /* the op sets its outputs' storage itself (views) */
} op_def;

typedef struct mmnb_params {
    krn_q4_weights w;
    const struct eng_tensor *pack_b, *pack_scales; /* sources of w.packed until pack_all() */
    bool int8;
    bool qa_from_norm;    /* its input's producer also quantizes it (fuse_norm_quant) */
} mmnb_params;

typedef struct gqa_params {
    int index;            /* ordinal among the plan's attention nodes */
    int64_t heads, kv_heads;
    int64_t width_heads;  /* heads in the query's width: heads, + 2 * kv_heads when packed */
    float scale;          /* 0: 1/sqrt(head size) at run time */
    bool rotary;
    bool packed;          /* key/value absent: query holds Q, K and V */
} gqa_params;

struct step {
    const eng_node *node;
    const op_def *op;
    char kernel[80];
    /* SiLU(gate) * up: the Sigmoid and the first Mul are folded into the
     * second Mul, which then reads gate (silu_gate) and up (silu_up). */
    int silu_head;        /* on Sigmoid and the first Mul: index of the fused step, else -1 */
    int silu_gate, silu_up;   /* on the fused Mul: values, -1 when not fused */
    int silu_steps[2];    /* on the fused Mul: the Sigmoid and first Mul it replaces */
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
        gqa_params gqa;
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
    eng_tensor *inits;    /* the graph's initializers, data realigned where needed */
    int n_gqa;
    eng_plan_opts opts;
    krn_table krn;
    size_t n_steps;
    step *steps;          /* one per node, topological order */
    val_plan *vals;       /* per graph value */
    void **owned;
    size_t n_owned;
    uint64_t prepared_bytes;
};

struct plan_builder {
    eng_plan *p;
    eng_diag *diag;
    uint64_t pack_total;  /* bytes of all packed matrices (size_packs) */
    bool *scales_bf16;    /* per node: its packed copy keeps bfloat16 scales (size_packs) */
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
    uint64_t prof_ns[32], prof_calls[32]; /* per op_defs entry */
    bool *fused_now;      /* per step: its SiLU fusion applies to this run's shapes */
    bool *last_row;       /* per step: compute its output for the last input row only */
    int argmax_step;      /* step whose last output row also gets its argmax, -1: none */
    _Atomic uint64_t argmax_key; /* eng_argmax_key of that row, merged over the workers */
    bool argmax_valid;    /* set by the last run */
    eng_diag *diag;       /* of the current run */
};

/* ---- small helpers --------------------------------------------------------- */

uint64_t eng_view_numel(const eng_view *v)
{
    uint64_t n = 1;
    for (int i = 0; i < v->rank; i++)
        n *= (uint64_t)v->dims[i];
    return n;
}

static uint64_t dims_numel(const int64_t *d, int r)
{
    uint64_t n = 1;
    for (int i = 0; i < r; i++)
        n *= (uint64_t)d[i];
    return n;
}

static const char *node_label(const eng_node *n)
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

static rt_val *IN(eng_exec *x, const step *s, int i)
{
    return i < s->n_in && s->in[i] >= 0 ? &x->vals[s->in[i]] : NULL;
}

static rt_val *OUT(eng_exec *x, const step *s, int i)
{
    return i < s->n_out && s->out[i] >= 0 ? &x->vals[s->out[i]] : NULL;
}

/* Gives V a shape, or returns -1 when the shape is too large (eng_shape_size). */
static int set_shape(rt_val *o, int32_t dtype, int rank, const int64_t *dims)
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
static int set_out(eng_exec *x, const step *s, int i, int32_t dtype, int rank, const int64_t *dims)
{
    if (set_shape(OUT(x, s, i), dtype, rank, dims) != 0) {
        char shape[200];
        STEP_FAIL(x, s, "output '%s' would have shape %s of %s, more than the largest tensor (%llu bytes)",
                  x->p->g->values[s->out[i]].name, eng_shape_str(dims, rank, shape, sizeof shape),
                  eng_dtype_name(dtype), (unsigned long long)ENG_MAX_TENSOR_BYTES);
    }
    return 0;
}

/* Reads element i of an integer tensor as int64. */
static int64_t int_at(const eng_view *v, uint64_t i)
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

static bool is_int_dtype(int32_t dt)
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
static int need_data(eng_exec *x, const step *s, const rt_val *v, const char *what)
{
    if (!v || !v->v.data) {
        if (v && eng_view_numel(&v->v) == 0)
            return 0;
        STEP_FAIL(x, s, "%s is not known before execution (computed from float data)", what);
    }
    return 0;
}

/* Input i of s when it is an initializer, with its (possibly realigned) data. */
static const eng_tensor *const_input(const plan_builder *b, const step *s, int i)
{
    if (i >= s->n_in || s->in[i] < 0)
        return NULL;
    const eng_value *v = &b->p->g->values[s->in[i]];
    return v->kind == ENG_VALUE_INITIALIZER ? &b->p->inits[v->index] : NULL;
}

/* ---- parallel helpers ------------------------------------------------------ */

typedef struct par_ctx {
    const void *args;
    void (*fn)(const void *args, size_t b, size_t e);
} par_ctx;

static void par_trampoline(void *ctx, size_t b, size_t e)
{
    const par_ctx *c = ctx;
    c->fn(c->args, b, e);
}

static void run_par(eng_exec *x, size_t n, size_t grain, void (*fn)(const void *, size_t, size_t), const void *args)
{
    par_ctx c = {args, fn};
    eng_pool_run(x->pool, n, grain, par_trampoline, &c);
}

typedef struct mmnb_call { const krn_table *t; krn_mmnb_args a; bool int8; } mmnb_call;
typedef struct quant_call { const krn_table *t; krn_quant_args a; } quant_call;
typedef struct norm_call { const krn_table *t; krn_norm_args a; bool skip; } norm_call;
typedef struct rot_call { const krn_table *t; krn_rotary_args a; } rot_call;
typedef struct gqa_call { const krn_table *t; krn_gqa_args a; } gqa_call;
typedef struct rows_call { const krn_table *t; krn_rows_args a; } rows_call;
typedef struct ew_call { const krn_table *t; krn_ew_args a; krn_ew_fn fn; } ew_call;

static void do_mmnb(const void *c, size_t b, size_t e)
{
    const mmnb_call *m = c;
    (m->int8 ? m->t->mmnb_i8.fn : m->t->mmnb_f32.fn)(&m->a, b, e);
}

/*
 * The LM head with greedy sampling: each worker also finds the largest logit
 * of the columns it just wrote, while they are in its cache, and merges it
 * into one key (eng_argmax_key), so nobody reads the whole row again.
 */
typedef struct mmnb_argmax_call { mmnb_call mm; _Atomic uint64_t *key; } mmnb_argmax_call;

static void do_mmnb_argmax(const void *c, size_t b, size_t e)
{
    const mmnb_argmax_call *m = c;
    do_mmnb(&m->mm, b, e);
    const float *row = m->mm.a.y + (m->mm.a.m - 1) * m->mm.a.y_ld;
    uint64_t k = eng_argmax_key(row, b, e), cur = atomic_load_explicit(m->key, memory_order_relaxed);
    while (k > cur && !atomic_compare_exchange_weak(m->key, &cur, k))
        ;
}
static void do_quant(const void *c, size_t b, size_t e)
{
    const quant_call *q = c;
    q->t->quant_a8.fn(&q->a, b, e);
}
static void do_norm(const void *c, size_t b, size_t e)
{
    const norm_call *n = c;
    (n->skip ? n->t->skip_rmsnorm.fn : n->t->rmsnorm.fn)(&n->a, b, e);
}
static void do_rot(const void *c, size_t b, size_t e)
{
    const rot_call *r = c;
    r->t->rotary.fn(&r->a, b, e);
}
static void do_gqa(const void *c, size_t b, size_t e)
{
    const gqa_call *g = c;
    g->t->gqa.fn(&g->a, b, e);
}

/*
 * A decode step's attention with its new row (one token, items = query
 * heads, ranges of whole kv groups): each participant stores the values,
 * rotates (or stores) the keys of its own kv heads and rotates its query
 * heads, then attends. Attention for a kv head reads only that head's cache
 * rows, this one included, so nothing waits for the other participants, and
 * the row work (with the page faults of a new cache page) is split instead
 * of running on one thread while the others wait.
 */
typedef struct gqa_decode_call {
    gqa_call ga;
    krn_rows_args vals, keys;    /* keys: used when there is no rotary */
    krn_rotary_args rot_k, rot_q;
    bool rotary;
    const float *q;              /* no rotary: query heads copied from here to ga.a.q */
} gqa_decode_call;

static void do_gqa_decode(const void *c, size_t b, size_t e)
{
    const gqa_decode_call *d = c;
    const krn_table *t = d->ga.t;
    size_t group = d->ga.a.n_heads / d->ga.a.n_kv_heads, hd = d->ga.a.head_dim;
    size_t g0 = b / group, g1 = (e + group - 1) / group;
    t->kv_store.fn(&d->vals, g0, g1);
    if (d->rotary) {
        t->rotary.fn(&d->rot_k, g0, g1);
        t->rotary.fn(&d->rot_q, b, e);
    } else {
        t->kv_store.fn(&d->keys, g0, g1);
        memcpy((float *)d->ga.a.q + b * hd, d->q + b * hd, (e - b) * hd * sizeof(float));
    }
    t->gqa.fn(&d->ga.a, b, e);
}

static void do_rows(const void *c, size_t b, size_t e)
{
    const rows_call *r = c;
    r->t->kv_store.fn(&r->a, b, e);
}
static void do_ew(const void *c, size_t b, size_t e)
{
    const ew_call *w = c;
    w->fn(&w->a, b, e);
}

/* ---- Constant ---------------------------------------------------------------- */

static int prep_constant(plan_builder *b, step *s)
{
    const eng_node *n = s->node;
    eng_plan *p = b->p;
    val_plan *vp = &p->vals[s->out[0]];
    vp->kind = PV_CONST;
    eng_view *cv = &vp->cval;
    const eng_attr *a = &n->attrs[0];
    if (!strcmp(a->name, "value")) {
        if (!a->t)
            PREP_FAIL(b, s, "attribute 'value' holds no tensor");
        cv->dtype = a->t->dtype;
        cv->rank = a->t->rank;
        memcpy(cv->dims, a->t->dims, sizeof cv->dims);
        cv->data = (void *)a->t->data;
    } else if (!strcmp(a->name, "value_float") || !strcmp(a->name, "value_int")) {
        bool f = a->name[6] == 'f';
        void *buf = calloc(1, 8);
        p->owned[p->n_owned++] = buf;
        if (f)
            *(float *)buf = a->f;
        else
            *(int64_t *)buf = a->i;
        cv->dtype = f ? ENG_DT_FLOAT : ENG_DT_INT64;
        cv->rank = 0;
        cv->data = buf;
    } else { /* value_floats / value_ints */
        bool f = a->name[6] == 'f';
        size_t cnt = f ? a->n_floats : a->n_ints;
        void *buf = calloc(cnt + 1, 8);
        p->owned[p->n_owned++] = buf;
        if (cnt && f) /* an empty list may have no array at all */
            memcpy(buf, a->floats, cnt * sizeof(float));
        else if (cnt)
            memcpy(buf, a->ints, cnt * sizeof(int64_t));
        cv->dtype = f ? ENG_DT_FLOAT : ENG_DT_INT64;
        cv->rank = 1;
        cv->dims[0] = (int64_t)cnt;
        cv->data = buf;
    }
    snprintf(s->kernel, sizeof s->kernel, "constant (folded at plan time)");
    return 0;
}

/* ---- Shape ----------------------------------------------------------------- */

static int prep_shape(plan_builder *b, step *s)
{
    (void)b;
    s->p.shape.start = eng_node_attr_int(s->node, "start", 0);
    s->p.shape.end = eng_node_attr_int(s->node, "end", INT64_MAX);
    snprintf(s->kernel, sizeof s->kernel, "shape (shape pass)");
    return 0;
}

static void shape_range(const step *s, int rank, int64_t *b, int64_t *e)
{
    int64_t st = s->p.shape.start, en = s->p.shape.end;
    if (st < 0) st += rank;
    if (en < 0) en += rank;
    if (st < 0) st = 0;
    if (st > rank) st = rank;
    if (en > rank) en = rank;
    if (en < st) en = st;
    *b = st;
    *e = en;
}

static int infer_shape(eng_exec *x, const step *s)
{
    int64_t b, e;
    shape_range(s, IN(x, s, 0)->v.rank, &b, &e);
    int64_t d = e - b;
    return set_out(x, s, 0, ENG_DT_INT64, 1, &d);
}

static int run_shape(eng_exec *x, const step *s)
{
    const rt_val *in = IN(x, s, 0);
    int64_t b, e;
    shape_range(s, in->v.rank, &b, &e);
    int64_t *o = OUT(x, s, 0)->v.data;
    for (int64_t i = b; i < e; i++)
        o[i - b] = in->v.dims[i];
    return 0;
}

/* ---- Gather ---------------------------------------------------------------- */

static int prep_gather(plan_builder *b, step *s)
{
    s->p.gather.axis = eng_node_attr_int(s->node, "axis", 0);
    const eng_tensor *table = const_input(b, s, 0);
    s->p.gather.use_krn = table && table->dtype == ENG_DT_FLOAT && table->rank == 2 &&
                          (s->p.gather.axis == 0 || s->p.gather.axis == -2);
    if (s->p.gather.use_krn)
        snprintf(s->kernel, sizeof s->kernel, "%s", b->p->krn.gather.name);
    else
        snprintf(s->kernel, sizeof s->kernel, "gather.generic");
    return 0;
}

static int infer_gather(eng_exec *x, const step *s)
{
    const rt_val *d = IN(x, s, 0), *ix = IN(x, s, 1);
    int r = d->v.rank;
    int64_t axis = s->p.gather.axis < 0 ? s->p.gather.axis + r : s->p.gather.axis;
    if (r < 1 || axis < 0 || axis >= r)
        STEP_FAIL(x, s, "axis %lld out of range for rank %d", (long long)s->p.gather.axis, r);
    if (ix->v.dtype != ENG_DT_INT64 && ix->v.dtype != ENG_DT_INT32)
        STEP_FAIL(x, s, "indices must be INT64 or INT32, not %s", eng_dtype_name(ix->v.dtype));
    int orank = ix->v.rank + r - 1;
    if (orank > ENG_MAX_RANK)
        STEP_FAIL(x, s, "output rank %d too large", orank);
    int64_t od[ENG_MAX_RANK];
    int k = 0;
    for (int i = 0; i < axis; i++)
        od[k++] = d->v.dims[i];
    for (int i = 0; i < ix->v.rank; i++)
        od[k++] = ix->v.dims[i];
    for (int i = (int)axis + 1; i < r; i++)
        od[k++] = d->v.dims[i];
    return set_out(x, s, 0, d->v.dtype, orank, od);
}

static int run_gather(eng_exec *x, const step *s)
{
    const rt_val *d = IN(x, s, 0), *ix = IN(x, s, 1);
    rt_val *o = OUT(x, s, 0);
    if (x->shape_pass && (!d->v.data || !is_int_dtype(d->v.dtype)))
        return 0; /* only integer gathers matter for shapes */
    int r = d->v.rank;
    int64_t axis = s->p.gather.axis < 0 ? s->p.gather.axis + r : s->p.gather.axis;
    uint64_t n_idx = eng_view_numel(&ix->v);
    int64_t dim = d->v.dims[axis];
    if (s->p.gather.use_krn && ix->v.dtype == ENG_DT_INT64) {
        krn_gather_args a = {.table = d->v.data, .table_ld = (size_t)d->v.dims[1], .n_rows = (size_t)dim,
                             .n_cols = (size_t)d->v.dims[1], .idx = ix->v.data, .n_idx = n_idx,
                             .y = o->v.data, .y_ld = (size_t)d->v.dims[1]};
        if (x->p->krn.gather.fn(&a, 0, n_idx) != KRN_OK)
            goto range;
        return 0;
    }
    uint64_t outer = dims_numel(d->v.dims, (int)axis);
    uint64_t inner = dims_numel(d->v.dims + axis + 1, r - (int)axis - 1) * eng_dtype_size(d->v.dtype);
    const uint8_t *src = d->v.data;
    uint8_t *dst = o->v.data;
    for (uint64_t i = 0; i < n_idx; i++) {
        int64_t v = int_at(&ix->v, i);
        if (v < -dim || v >= dim)
            goto range;
    }
    for (uint64_t ob = 0; ob < outer; ob++)
        for (uint64_t i = 0; i < n_idx; i++) {
            int64_t v = int_at(&ix->v, i);
            if (v < 0)
                v += dim;
            memcpy(dst + (ob * n_idx + i) * inner, src + (ob * (uint64_t)dim + (uint64_t)v) * inner, inner);
        }
    return 0;
range:
    for (uint64_t i = 0; i < n_idx; i++) {
        int64_t v = int_at(&ix->v, i);
        if (v < -dim || v >= dim)
            STEP_FAIL(x, s, "index %lld out of range [-%lld, %lld)", (long long)v, (long long)dim, (long long)dim);
    }
    STEP_FAIL(x, s, "index out of range");
}

/* ---- ReduceSum ------------------------------------------------------------- */

static int prep_reduce(plan_builder *b, step *s)
{
    (void)b;
    s->p.reduce.keepdims = eng_node_attr_int(s->node, "keepdims", 1) != 0;
    s->p.reduce.noop_empty = eng_node_attr_int(s->node, "noop_with_empty_axes", 0) != 0;
    snprintf(s->kernel, sizeof s->kernel, "reduce_sum.generic");
    return 0;
}

/* Marks reduced axes; returns -1 on a bad axis. */
static int reduce_axes(eng_exec *x, const step *s, bool *red, bool *noop)
{
    const rt_val *in = IN(x, s, 0), *ax = IN(x, s, 1);
    int r = in->v.rank;
    memset(red, 0, ENG_MAX_RANK * sizeof *red);
    *noop = false;
    uint64_t n_axes = ax ? eng_view_numel(&ax->v) : 0;
    if (ax && n_axes && need_data(x, s, ax, "the axes input") != 0)
        return -1;
    if (!n_axes) {
        if (s->p.reduce.noop_empty)
            *noop = true;
        for (int i = 0; i < r; i++)
            red[i] = true;
        return 0;
    }
    for (uint64_t i = 0; i < n_axes; i++) {
        int64_t a = int_at(&ax->v, i);
        if (a < 0)
            a += r;
        if (a < 0 || a >= r)
            STEP_FAIL(x, s, "axis %lld out of range for rank %d", (long long)int_at(&ax->v, i), r);
        red[a] = true;
    }
    return 0;
}

static int infer_reduce(eng_exec *x, const step *s)
{
    const rt_val *in = IN(x, s, 0);
    bool red[ENG_MAX_RANK], noop;
    if (reduce_axes(x, s, red, &noop) != 0)
        return -1;
    if (in->v.dtype != ENG_DT_INT64 && in->v.dtype != ENG_DT_INT32 && in->v.dtype != ENG_DT_FLOAT)
        STEP_FAIL(x, s, "unsupported input type %s", eng_dtype_name(in->v.dtype));
    if (noop)
        return set_out(x, s, 0, in->v.dtype, in->v.rank, in->v.dims);
    int64_t od[ENG_MAX_RANK];
    int k = 0;
    for (int i = 0; i < in->v.rank; i++) {
        if (!red[i])
            od[k++] = in->v.dims[i];
        else if (s->p.reduce.keepdims)
            od[k++] = 1;
    }
    return set_out(x, s, 0, in->v.dtype, k, od);
}

static int run_reduce(eng_exec *x, const step *s)
{
    const rt_val *in = IN(x, s, 0);
    rt_val *o = OUT(x, s, 0);
    if (!in->v.data)
        return x->shape_pass ? 0 : -1;
    bool red[ENG_MAX_RANK], noop;
    if (reduce_axes(x, s, red, &noop) != 0)
        return -1;
    uint64_t n_out = eng_view_numel(&o->v), n_in = eng_view_numel(&in->v);
    size_t es = eng_dtype_size(in->v.dtype);
    if (noop) {
        memcpy(o->v.data, in->v.data, n_in * es);
        return 0;
    }
    int64_t *acci = o->v.data;
    bool isf = in->v.dtype == ENG_DT_FLOAT;
    if (isf) {
        memset(o->v.data, 0, n_out * sizeof(float));
    } else if (in->v.dtype == ENG_DT_INT64) {
        memset(acci, 0, n_out * sizeof(int64_t));
    } else {
        memset(o->v.data, 0, n_out * sizeof(int32_t));
    }
    int r = in->v.rank;
    int64_t idx[ENG_MAX_RANK] = {0};
    for (uint64_t i = 0; i < n_in; i++) {
        uint64_t oi = 0;
        for (int a = 0; a < r; a++)
            if (!red[a])
                oi = oi * (uint64_t)in->v.dims[a] + (uint64_t)idx[a];
        /* integer sums wrap as in the binary ops, without signed-overflow UB */
        if (isf)
            ((float *)o->v.data)[oi] += ((const float *)in->v.data)[i];
        else if (in->v.dtype == ENG_DT_INT64)
            acci[oi] = (int64_t)((uint64_t)acci[oi] + (uint64_t)((const int64_t *)in->v.data)[i]);
        else
            ((int32_t *)o->v.data)[oi] =
                (int32_t)((uint32_t)((int32_t *)o->v.data)[oi] + (uint32_t)((const int32_t *)in->v.data)[i]);
        for (int a = r - 1; a >= 0; a--) {
            if (++idx[a] < in->v.dims[a])
                break;
            idx[a] = 0;
        }
    }
    return 0;
}

/* ---- binary elementwise with broadcasting ---------------------------------- */

static int prep_binary(plan_builder *b, step *s)
{
    const char *op = s->node->op_type;
    s->p.binary.op = !strcmp(op, "Add") ? '+' : !strcmp(op, "Sub") ? '-' : '*';
    const char *k = s->p.binary.op == '+' ? b->p->krn.add.name : s->p.binary.op == '*' ? b->p->krn.mul.name : NULL;
    if (k)
        snprintf(s->kernel, sizeof s->kernel, "%s (same shape) / broadcast.generic", k);
    else
        snprintf(s->kernel, sizeof s->kernel, "sub.generic");
    return 0;
}

static int infer_binary(eng_exec *x, const step *s)
{
    if (s->silu_gate >= 0 && x->fused_now[s - x->p->steps]) {
        const rt_val *gv = &x->vals[s->silu_gate];
        return set_out(x, s, 0, gv->v.dtype, gv->v.rank, gv->v.dims);
    }
    const rt_val *a = IN(x, s, 0), *b = IN(x, s, 1);
    if (a->v.dtype != b->v.dtype)
        STEP_FAIL(x, s, "input types differ (%s, %s)", eng_dtype_name(a->v.dtype), eng_dtype_name(b->v.dtype));
    if (a->v.dtype != ENG_DT_FLOAT && a->v.dtype != ENG_DT_INT64 && a->v.dtype != ENG_DT_INT32)
        STEP_FAIL(x, s, "unsupported type %s", eng_dtype_name(a->v.dtype));
    int r = a->v.rank > b->v.rank ? a->v.rank : b->v.rank;
    int64_t od[ENG_MAX_RANK];
    for (int i = 0; i < r; i++) {
        int ia = i - (r - a->v.rank), ib = i - (r - b->v.rank);
        int64_t da = ia >= 0 ? a->v.dims[ia] : 1, db = ib >= 0 ? b->v.dims[ib] : 1;
        if (da != db && da != 1 && db != 1)
            STEP_FAIL(x, s, "shapes cannot be broadcast (axis %d: %lld vs %lld)", i, (long long)da, (long long)db);
        od[i] = da == 1 ? db : da;
    }
    return set_out(x, s, 0, a->v.dtype, r, od);
}

static int run_binary(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0), *b = IN(x, s, 1);
    rt_val *o = OUT(x, s, 0);
    if (s->silu_gate >= 0 && x->fused_now[s - x->p->steps] && !x->shape_pass) {
        const rt_val *gv = &x->vals[s->silu_gate], *uv = &x->vals[s->silu_up];
        uint64_t n = eng_view_numel(&gv->v);
        ew_call c = {&x->p->krn, {gv->v.data, uv->v.data, o->v.data, n}, x->p->krn.silu_mul.fn};
        run_par(x, n, 4096, do_ew, &c);
        return 0;
    }
    if (!a->v.data || !b->v.data)
        return 0; /* float tensors during the shape pass */
    uint64_t n = eng_view_numel(&o->v);
    char op = s->p.binary.op;
    if (a->v.dtype == ENG_DT_FLOAT && op != '-' && eng_view_numel(&a->v) == n && eng_view_numel(&b->v) == n) {
        ew_call c = {&x->p->krn, {a->v.data, b->v.data, o->v.data, n},
                     op == '*' ? x->p->krn.mul.fn : x->p->krn.add.fn};
        run_par(x, n, 4096, do_ew, &c);
        return 0;
    }
    int r = o->v.rank;
    int64_t sa[ENG_MAX_RANK], sb[ENG_MAX_RANK];
    int64_t ca = 1, cb = 1;
    for (int i = r - 1; i >= 0; i--) {
        int ia = i - (r - a->v.rank), ib = i - (r - b->v.rank);
        int64_t da = ia >= 0 ? a->v.dims[ia] : 1, db = ib >= 0 ? b->v.dims[ib] : 1;
        sa[i] = da == 1 ? 0 : ca;
        sb[i] = db == 1 ? 0 : cb;
        ca *= da;
        cb *= db;
    }
    int64_t idx[ENG_MAX_RANK] = {0};
    for (uint64_t i = 0; i < n; i++) {
        int64_t oa = 0, ob = 0;
        for (int k = 0; k < r; k++) {
            oa += idx[k] * sa[k];
            ob += idx[k] * sb[k];
        }
        switch (a->v.dtype) {
        case ENG_DT_FLOAT: {
            float u = ((const float *)a->v.data)[oa], v = ((const float *)b->v.data)[ob];
            ((float *)o->v.data)[i] = op == '+' ? u + v : op == '-' ? u - v : u * v;
            break;
        }
        case ENG_DT_INT64: {
            int64_t u = ((const int64_t *)a->v.data)[oa], v = ((const int64_t *)b->v.data)[ob];
            /* wrap like two's complement hardware, without signed overflow UB */
            uint64_t uu = (uint64_t)u, vv = (uint64_t)v;
            ((int64_t *)o->v.data)[i] = (int64_t)(op == '+' ? uu + vv : op == '-' ? uu - vv : uu * vv);
            break;
        }
        default: {
            uint32_t u = (uint32_t)((const int32_t *)a->v.data)[oa], v = (uint32_t)((const int32_t *)b->v.data)[ob];
            ((int32_t *)o->v.data)[i] = (int32_t)(op == '+' ? u + v : op == '-' ? u - v : u * v);
        }
        }
        for (int k = r - 1; k >= 0; k--) {
            if (++idx[k] < o->v.dims[k])
                break;
            idx[k] = 0;
        }
    }
    return 0;
}

/* ---- Sigmoid ----------------------------------------------------------------- */

static int prep_sigmoid(plan_builder *b, step *s)
{
    snprintf(s->kernel, sizeof s->kernel, "%s", b->p->krn.sigmoid.name);
    return 0;
}

static int infer_unary_same(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    if (a->v.dtype != ENG_DT_FLOAT)
        STEP_FAIL(x, s, "input must be FLOAT, not %s", eng_dtype_name(a->v.dtype));
    return set_out(x, s, 0, a->v.dtype, a->v.rank, a->v.dims);
}

static int run_sigmoid(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    rt_val *o = OUT(x, s, 0);
    uint64_t n = eng_view_numel(&o->v);
    ew_call c = {&x->p->krn, {a->v.data, NULL, o->v.data, n}, x->p->krn.sigmoid.fn};
    run_par(x, n, 4096, do_ew, &c);
    return 0;
}

/* ---- Cast ---------------------------------------------------------------------- */

static bool cast_supported(int32_t t)
{
    return t == ENG_DT_FLOAT || t == ENG_DT_DOUBLE || is_int_dtype(t);
}

static int prep_cast(plan_builder *b, step *s)
{
    s->p.cast.to = (int32_t)eng_node_attr_int(s->node, "to", 0);
    if (!cast_supported(s->p.cast.to))
        PREP_FAIL(b, s, "attribute 'to' = %d (%s) is not supported", (int)s->p.cast.to, eng_dtype_name(s->p.cast.to));
    snprintf(s->kernel, sizeof s->kernel, "cast.generic");
    return 0;
}

static int infer_cast(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    if (!cast_supported(a->v.dtype))
        STEP_FAIL(x, s, "input type %s is not supported", eng_dtype_name(a->v.dtype));
    return set_out(x, s, 0, s->p.cast.to, a->v.rank, a->v.dims);
}

static int run_cast(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    rt_val *o = OUT(x, s, 0);
    if (!a->v.data)
        return 0;
    uint64_t n = eng_view_numel(&a->v);
    for (uint64_t i = 0; i < n; i++) {
        bool src_float = a->v.dtype == ENG_DT_FLOAT || a->v.dtype == ENG_DT_DOUBLE;
        double d = a->v.dtype == ENG_DT_FLOAT ? ((const float *)a->v.data)[i]
                   : a->v.dtype == ENG_DT_DOUBLE ? ((const double *)a->v.data)[i] : 0;
        int64_t v = src_float ? (isfinite(d) && fabs(d) < 9.2e18 ? (int64_t)d : 0) : int_at(&a->v, i);
        void *dst = o->v.data;
        switch (o->v.dtype) {
        case ENG_DT_FLOAT: ((float *)dst)[i] = src_float ? (float)d : (float)v; break;
        case ENG_DT_DOUBLE: ((double *)dst)[i] = src_float ? d : (double)v; break;
        case ENG_DT_INT64: ((int64_t *)dst)[i] = v; break;
        case ENG_DT_UINT64: ((uint64_t *)dst)[i] = (uint64_t)v; break;
        /* narrowing keeps the low bits, as ONNX specifies for integers */
        case ENG_DT_INT32: case ENG_DT_UINT32: ((uint32_t *)dst)[i] = (uint32_t)(uint64_t)v; break;
        case ENG_DT_INT16: case ENG_DT_UINT16: ((uint16_t *)dst)[i] = (uint16_t)(uint64_t)v; break;
        case ENG_DT_BOOL: ((uint8_t *)dst)[i] = src_float ? d != 0 : v != 0; break;
        default: ((uint8_t *)dst)[i] = (uint8_t)(uint64_t)v; break;
        }
    }
    return 0;
}

/* ---- Reshape ------------------------------------------------------------------ */

static int prep_reshape(plan_builder *b, step *s)
{
    (void)b;
    s->p.reshape.allowzero = eng_node_attr_int(s->node, "allowzero", 0) != 0;
    snprintf(s->kernel, sizeof s->kernel, "view");
    return 0;
}

static int infer_reshape(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0), *sh = IN(x, s, 1);
    if (sh->v.dtype != ENG_DT_INT64 || sh->v.rank != 1)
        STEP_FAIL(x, s, "shape input must be a 1-D INT64 tensor");
    if (need_data(x, s, sh, "the target shape") != 0)
        return -1;
    int64_t r = sh->v.dims[0];
    if (r > ENG_MAX_RANK)
        STEP_FAIL(x, s, "target rank %lld too large", (long long)r);
    int64_t od[ENG_MAX_RANK];
    int infer_at = -1;
    uint64_t known = 1, total = eng_view_numel(&a->v);
    for (int i = 0; i < r; i++) {
        int64_t d = ((const int64_t *)sh->v.data)[i];
        if (d == 0 && !s->p.reshape.allowzero) {
            if (i >= a->v.rank)
                STEP_FAIL(x, s, "shape[%d] = 0 copies a dimension the input (rank %d) lacks", i, a->v.rank);
            d = a->v.dims[i];
        }
        if (d == -1) {
            if (infer_at >= 0)
                STEP_FAIL(x, s, "more than one -1 in the target shape");
            infer_at = i;
            d = 1;
        } else if (d < 0) {
            STEP_FAIL(x, s, "invalid target dimension %lld", (long long)d);
        }
        od[i] = d;
        if (!ck_mul_u64(known, (uint64_t)d, &known)) {
            char shape[200];
            STEP_FAIL(x, s, "target shape %s overflows: its element count passes 2^64",
                      eng_shape_str(sh->v.data, (int)r, shape, sizeof shape));
        }
    }
    if (infer_at >= 0) {
        if (known == 0 || total % known)
            STEP_FAIL(x, s, "cannot infer -1: %llu elements into blocks of %llu", (unsigned long long)total,
                      (unsigned long long)known);
        od[infer_at] = (int64_t)(total / known);
        known = total;
    }
    if (known != total)
        STEP_FAIL(x, s, "target shape holds %llu elements, input has %llu", (unsigned long long)known,
                  (unsigned long long)total);
    return set_out(x, s, 0, a->v.dtype, (int)r, od);
}

static int run_reshape(eng_exec *x, const step *s)
{
    OUT(x, s, 0)->v.data = IN(x, s, 0)->v.data;
    return 0;
}

/* ---- Split ------------------------------------------------------------------- */

static int prep_split(plan_builder *b, step *s)
{
    s->p.split.axis = eng_node_attr_int(s->node, "axis", 0);
    s->p.split.num_outputs = eng_node_attr_int(s->node, "num_outputs", 0);
    bool has_split = s->n_in > 1 && s->in[1] >= 0;
    if (has_split && s->p.split.num_outputs)
        PREP_FAIL(b, s, "both the 'split' input and attribute 'num_outputs' are given");
    if (s->p.split.num_outputs && s->p.split.num_outputs != s->n_out)
        PREP_FAIL(b, s, "attribute 'num_outputs' = %lld but %d outputs", (long long)s->p.split.num_outputs, s->n_out);
    for (int i = 0; i < s->n_out; i++)
        if (s->out[i] < 0)
            PREP_FAIL(b, s, "output %d has no name", i);
    snprintf(s->kernel, sizeof s->kernel, "split (view for one row, else copy)");
    return 0;
}

static int split_sizes(eng_exec *x, const step *s, int64_t axis, int64_t *sizes)
{
    const rt_val *a = IN(x, s, 0), *sp = IN(x, s, 1);
    int64_t dim = a->v.dims[axis];
    if (sp) {
        if (need_data(x, s, sp, "the split sizes") != 0)
            return -1;
        if ((int64_t)eng_view_numel(&sp->v) != s->n_out)
            STEP_FAIL(x, s, "%llu split sizes for %d outputs", (unsigned long long)eng_view_numel(&sp->v), s->n_out);
        int64_t sum = 0;
        for (int i = 0; i < s->n_out; i++) {
            sizes[i] = int_at(&sp->v, (uint64_t)i);
            if (sizes[i] < 0)
                STEP_FAIL(x, s, "negative split size %lld", (long long)sizes[i]);
            if (!ck_add_i64(sum, sizes[i], &sum))
                STEP_FAIL(x, s, "split sizes overflow: size %d (%lld) added to the ones before passes %lld", i,
                          (long long)sizes[i], (long long)INT64_MAX);
        }
        if (sum != dim)
            STEP_FAIL(x, s, "split sizes sum to %lld, axis has %lld", (long long)sum, (long long)dim);
        return 0;
    }
    /* equal parts; with num_outputs the last may be smaller (opset 18) */
    int64_t n = s->n_out, part = (dim + n - 1) / n;
    if (!s->p.split.num_outputs && dim % n)
        STEP_FAIL(x, s, "axis of %lld cannot be split evenly into %lld", (long long)dim, (long long)n);
    for (int i = 0; i < n; i++) {
        int64_t rem = dim - part * i;
        sizes[i] = rem < 0 ? 0 : rem < part ? rem : part;
    }
    return 0;
}

static int infer_split(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    int r = a->v.rank;
    int64_t axis = s->p.split.axis < 0 ? s->p.split.axis + r : s->p.split.axis;
    if (axis < 0 || axis >= r)
        STEP_FAIL(x, s, "axis %lld out of range for rank %d", (long long)s->p.split.axis, r);
    int64_t sizes[MAX_IO];
    if (split_sizes(x, s, axis, sizes) != 0)
        return -1;
    for (int i = 0; i < s->n_out; i++) {
        int64_t d[ENG_MAX_RANK];
        memcpy(d, a->v.dims, sizeof d);
        d[axis] = sizes[i];
        if (set_out(x, s, i, a->v.dtype, r, d) != 0)
            return -1;
    }
    return 0;
}

static int run_split(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    int r = a->v.rank;
    int64_t axis = s->p.split.axis < 0 ? s->p.split.axis + r : s->p.split.axis;
    int64_t sizes[MAX_IO];
    if (split_sizes(x, s, axis, sizes) != 0)
        return -1;
    uint64_t outer = dims_numel(a->v.dims, (int)axis);
    uint64_t inner = dims_numel(a->v.dims + axis + 1, r - (int)axis - 1) * eng_dtype_size(a->v.dtype);
    uint64_t row = (uint64_t)a->v.dims[axis] * inner;
    const uint8_t *src = a->v.data;
    uint64_t off = 0;
    for (int i = 0; i < s->n_out; i++) {
        rt_val *o = OUT(x, s, i);
        uint64_t chunk = (uint64_t)sizes[i] * inner;
        if (outer == 1 || !src) {
            o->v.data = src ? (void *)(src + off) : NULL; /* one row: a view is contiguous */
        } else {
            uint8_t *dst = x->vals[s->out[i]].v.data;
            for (uint64_t b = 0; b < outer; b++)
                memcpy(dst + b * chunk, src + b * row + off, chunk);
        }
        off += chunk;
    }
    return 0;
}

/* ---- SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization ---------- */

static int prep_sln(plan_builder *b, step *s)
{
    s->p.norm.axis = eng_node_attr_int(s->node, "axis", -1);
    s->p.norm.eps = eng_node_attr_float(s->node, "epsilon", 1e-5f);
    int64_t stash = eng_node_attr_int(s->node, "stash_type", 1);
    if (stash != 1)
        PREP_FAIL(b, s, "attribute 'stash_type' = %lld is not supported (only 1, fp32 statistics)", (long long)stash);
    if (s->n_out > 1 && s->out[1] >= 0)
        PREP_FAIL(b, s, "output 1 (inv_std_var) is not supported");
    snprintf(s->kernel, sizeof s->kernel, "%s", b->p->krn.rmsnorm.name);
    return 0;
}

/*
 * Fused quantization (fuse_norm_quant): where the step's int8 MatMulNBits
 * readers take rows of qa_k values, the norm kernel quantizes each finished
 * row into x->norm_qa, the bytes quant_a8 would write, and the readers skip
 * their own pass over the activations.
 */
static void reserve_norm_qa(eng_exec *x, const step *s, uint64_t rows, uint64_t n)
{
    if (!s->p.norm.qa_block || n != s->p.norm.qa_k)
        return;
    uint64_t need = krn_quant_a8_size(rows, n, s->p.norm.qa_block);
    if (need > x->norm_qa_need)
        x->norm_qa_need = need;
}

static int infer_sln(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0), *g = IN(x, s, 1);
    if (a->v.dtype != ENG_DT_FLOAT || g->v.dtype != ENG_DT_FLOAT)
        STEP_FAIL(x, s, "inputs must be FLOAT");
    int r = a->v.rank;
    int64_t axis = s->p.norm.axis < 0 ? s->p.norm.axis + r : s->p.norm.axis;
    if (axis < 0 || axis >= r)
        STEP_FAIL(x, s, "axis %lld out of range for rank %d", (long long)s->p.norm.axis, r);
    uint64_t n = dims_numel(a->v.dims + axis, r - (int)axis);
    if (eng_view_numel(&g->v) != n)
        STEP_FAIL(x, s, "scale has %llu elements, normalized size is %llu", (unsigned long long)eng_view_numel(&g->v),
                  (unsigned long long)n);
    if (set_out(x, s, 0, ENG_DT_FLOAT, r, a->v.dims) != 0)
        return -1;
    reserve_norm_qa(x, s, n ? eng_view_numel(&a->v) / n : 0, n);
    return 0;
}

/* The norm_qa record of row r0, or NULL when this run does not quantize. */
static void *norm_qa_at(eng_exec *x, const step *s, uint64_t n, uint64_t r0)
{
    if (!s->p.norm.qa_block || n != s->p.norm.qa_k || !x->norm_qa)
        return NULL;
    return x->norm_qa + r0 * krn_quant_a8_size(1, n, s->p.norm.qa_block);
}

static void norm_qa_done(eng_exec *x, const step *s, const void *data, uint64_t rows, uint64_t n)
{
    x->norm_qa_value = norm_qa_at(x, s, n, 0) ? s->out[0] : -1;
    x->norm_qa_data = data;
    x->norm_qa_rows = rows;
}

static int run_sln(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0), *g = IN(x, s, 1);
    rt_val *o = OUT(x, s, 0);
    int r = a->v.rank;
    int64_t axis = s->p.norm.axis < 0 ? s->p.norm.axis + r : s->p.norm.axis;
    uint64_t n = dims_numel(a->v.dims + axis, r - (int)axis);
    uint64_t rows = n ? eng_view_numel(&a->v) / n : 0;
    norm_call c = {&x->p->krn, {.x = a->v.data, .x_ld = n, .gamma = g->v.data, .y = o->v.data, .y_ld = n,
                                .rows = rows, .n = n, .group = 1, .eps = s->p.norm.eps,
                                .qa = norm_qa_at(x, s, n, 0), .qa_block = s->p.norm.qa_block}, false};
    run_par(x, rows, 1, do_norm, &c);
    norm_qa_done(x, s, o->v.data, rows, n);
    return 0;
}

static int prep_skip_sln(plan_builder *b, step *s)
{
    s->p.norm.eps = eng_node_attr_float(s->node, "epsilon", 1e-12f);
    for (int i = 1; i <= 2; i++)
        if (s->n_out > i && s->out[i] >= 0)
            PREP_FAIL(b, s, "output %d (%s) is not supported", i, i == 1 ? "mean" : "inv_std_var");
    snprintf(s->kernel, sizeof s->kernel, "%s", b->p->krn.skip_rmsnorm.name);
    return 0;
}

static int infer_skip_sln(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0), *sk = IN(x, s, 1), *g = IN(x, s, 2), *bias = IN(x, s, 3);
    if (a->v.dtype != ENG_DT_FLOAT || sk->v.dtype != ENG_DT_FLOAT || g->v.dtype != ENG_DT_FLOAT ||
        (bias && bias->v.dtype != ENG_DT_FLOAT))
        STEP_FAIL(x, s, "inputs must be FLOAT");
    int r = a->v.rank;
    if (r < 1)
        STEP_FAIL(x, s, "input must have rank >= 1");
    int64_t d = a->v.dims[r - 1];
    uint64_t na = eng_view_numel(&a->v), ns = eng_view_numel(&sk->v);
    if (sk->v.rank < 1 || sk->v.dims[sk->v.rank - 1] != d || ns == 0 || na % ns)
        STEP_FAIL(x, s, "skip shape does not match or broadcast to the input");
    if ((int64_t)eng_view_numel(&g->v) != d || (bias && (int64_t)eng_view_numel(&bias->v) != d))
        STEP_FAIL(x, s, "gamma/bias must have %lld elements", (long long)d);
    if (set_out(x, s, 0, ENG_DT_FLOAT, r, a->v.dims) != 0 ||
        (OUT(x, s, 3) && set_out(x, s, 3, ENG_DT_FLOAT, r, a->v.dims) != 0))
        return -1;
    reserve_norm_qa(x, s, na / (uint64_t)d, (uint64_t)d);
    return 0;
}

static int run_skip_sln(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0), *sk = IN(x, s, 1), *g = IN(x, s, 2), *bias = IN(x, s, 3);
    rt_val *o = OUT(x, s, 0), *sum = OUT(x, s, 3);
    size_t d = (size_t)a->v.dims[a->v.rank - 1];
    uint64_t rows = eng_view_numel(&a->v) / d, skip_rows = eng_view_numel(&sk->v) / d;
    /* the skip input repeats over leading (batch) dims when it is smaller */
    for (uint64_t r0 = 0; r0 < rows; r0 += skip_rows) {
        norm_call c = {&x->p->krn,
                       {.x = (const float *)a->v.data + r0 * d, .x_ld = d, .skip = sk->v.data, .skip_ld = d,
                        .bias = bias ? bias->v.data : NULL, .gamma = g->v.data,
                        .y = (float *)o->v.data + r0 * d, .y_ld = d,
                        .sum = sum ? (float *)sum->v.data + r0 * d : NULL, .sum_ld = d,
                        .rows = skip_rows, .n = d, .group = 1, .eps = s->p.norm.eps,
                        .qa = norm_qa_at(x, s, d, r0), .qa_block = s->p.norm.qa_block},
                       true};
        run_par(x, skip_rows, 1, do_norm, &c);
    }
    norm_qa_done(x, s, o->v.data, rows, d);
    return 0;
}

/* ---- MatMulNBits ---------------------------------------------------------------- */

static int prep_mmnb(plan_builder *b, step *s);

/*
 * Repacked weights (krn_q4_pack) are one long sequential stream per matrix;
 * transparent huge pages, where the system grants them on request, spare the
 * GEMV a TLB miss every 4 KiB (worth ~20% of decode bandwidth on the machines
 * measured). Freed with free() like the plan's other owned buffers.
 */
static void *alloc_weights(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    size_t align = bytes >= 2 * huge ? huge : ALIGN;
    uint64_t sz;
    if (!ck_add_u64(bytes, align - 1, &sz))
        return NULL;
    sz = sz / align * align;
    void *p = aligned_alloc(align, sz);
    if (p && align == huge)
        madvise(p, sz, MADV_HUGEPAGE); /* a hint; failure only costs speed */
    return p;
}

/*
 * Whether the packed copy of MatMulNBits node n can keep its scales as
 * bfloat16: they are an fp32 initializer whose every value fits exactly
 * (krn_q4_scales_fit_bf16; true of exports quantized from a bf16 checkpoint).
 */
static bool node_scales_bf16(const eng_tensor *scales)
{
    return scales->data && krn_q4_scales_fit_bf16(scales->data, (size_t)scales->n_elems);
}

/* Input I of node N when it is an initializer of DTYPE and N_ELEMS elements, else NULL. */
static const eng_tensor *node_init(const eng_plan *p, const eng_node *n, size_t i, int32_t dtype, uint64_t n_elems)
{
    if (n->n_inputs <= i || n->input_values[i] < 0)
        return NULL;
    const eng_value *v = &p->g->values[n->input_values[i]];
    if (v->kind != ENG_VALUE_INITIALIZER)
        return NULL;
    const eng_tensor *t = &p->inits[v->index];
    return t->dtype == dtype && t->n_elems == n_elems ? t : NULL;
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

static bool mmnb_sizes_of(int64_t K, int64_t N, int64_t bs, mmnb_sizes *z)
{
    uint64_t k = (uint64_t)K, b = (uint64_t)bs;
    z->kb = k / b + (k % b != 0);
    return ck_mul_u64((uint64_t)N, z->kb, &z->n_scales) && ck_mul_u64(z->n_scales, b / 2, &z->b_bytes) &&
           ck_mul_u64((uint64_t)N, (z->kb + 1) / 2, &z->zp_bytes) && z->b_bytes <= ENG_MAX_TENSOR_BYTES &&
           z->n_scales <= ENG_MAX_TENSOR_BYTES;
}

/*
 * Bytes of krn_q4_pack for a MatMulNBits node as its attributes and scales
 * describe it (0 when the packed form does not apply), and in *bf16 the form
 * of its scales.
 */
static size_t node_pack_size(const eng_plan *p, const eng_node *n, bool *bf16)
{
    *bf16 = false;
    if (strcmp(n->op_type, "MatMulNBits") || eng_node_attr_int(n, "bits", 4) != 4 ||
        eng_node_attr_int(n, "block_size", 0) != 32 || eng_node_attr_int(n, "accuracy_level", 0) != 4 ||
        (n->n_inputs > 3 && n->input_values[3] >= 0))
        return 0;
    int64_t N = eng_node_attr_int(n, "N", 0), K = eng_node_attr_int(n, "K", 0);
    mmnb_sizes z;
    const eng_tensor *scales;
    /* Only a node prep_mmnb will accept counts, so no size below overflows. */
    if (N <= 0 || K <= 0 || !mmnb_sizes_of(K, N, 32, &z) || !node_init(p, n, 1, ENG_DT_UINT8, z.b_bytes) ||
        !(scales = node_init(p, n, 2, ENG_DT_FLOAT, z.n_scales)))
        return 0;
    *bf16 = node_scales_bf16(scales);
    krn_q4_weights w = {.n = (size_t)N, .k = (size_t)K, .block_size = 32, .packed_bf16 = *bf16};
    krn_q4_weights_set_blocks(&w);
    return (krn_q4_pack_size(&w) + ALIGN - 1) / ALIGN * ALIGN;
}

/*
 * The sizing pass of the arena below, once per plan: every node's packed
 * bytes and scale form, so each node's scales are read once for it. False
 * when out of memory.
 */
static bool size_packs(plan_builder *b)
{
    if (b->pack_sized)
        return true;
    const eng_graph *g = b->p->g;
    b->scales_bf16 = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *b->scales_bf16);
    if (!b->scales_bf16)
        return false;
    /* An overflowing total cannot be allocated: packed_slot() then fails the node naming it. */
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!ck_add_u64(b->pack_total, node_pack_size(b->p, &g->nodes[i], &b->scales_bf16[i]), &b->pack_total))
            b->pack_total = UINT64_MAX;
    b->pack_sized = true;
    return true;
}

/*
 * Room for the next packed matrix. All packed weights of a plan share one
 * allocation, sized up front from the graph's MatMulNBits attributes, so the
 * whole set sits on huge pages (most matrices are a few MiB, too small to get
 * them on their own) and is faulted in with a few hundred faults. Matrices
 * are carved in step order after the last one packed; whatever does not fit
 * (a node the sizing pass counted differently) gets its own buffer. *counted
 * is the number of bytes this call newly allocated.
 */
static void *packed_slot(plan_builder *b, const step *s, size_t bytes, uint64_t *counted)
{
    eng_plan *p = b->p;
    size_t total = (size_t)b->pack_total; /* size_packs() has run */
    /* The arena is the first packed matrix's buffer; only matrices inside it count for the next offset. */
    uintptr_t base = 0, used = 0;
    for (const step *t = p->steps; t < s; t++) {
        if (!t->op || t->op->prepare != prep_mmnb || !t->p.mmnb.w.packed)
            continue;
        uintptr_t q = (uintptr_t)t->p.mmnb.w.packed;
        if (!base)
            base = q;
        if (q >= base && q - base < total) {
            uintptr_t e = q - base + (krn_q4_pack_size(&t->p.mmnb.w) + ALIGN - 1) / ALIGN * ALIGN;
            used = e > used ? e : used;
        }
    }
    *counted = 0;
    if (base && used + bytes <= total)
        return (void *)(base + used);
    size_t want = base ? bytes : (total >= bytes ? total : bytes);
    void *buf = alloc_weights(want);
    if (buf) {
        p->owned[p->n_owned++] = buf;
        *counted = want;
    }
    return buf;
}

/*
 * Repacks every MatMulNBits that prep_mmnb gave a packed buffer. Loading is
 * bound by reading the weights from the mapped file and faulting in the new
 * buffer, so the matrices are spread over one thread per online CPU (largest
 * first to the least loaded thread; up to 8), created for this and joined.
 */
typedef struct pack_job {
    step **steps;
    size_t n;
    _Atomic uint64_t *done;   /* packed bytes of all jobs */
    const eng_plan_opts *report; /* set for the caller's own job: it tells opts->progress */
    uint64_t total;
} pack_job;

static void release_mapped(const eng_tensor *t);

static void pack_one(step *s)
{
    mmnb_params *m = &s->p.mmnb;
    krn_q4_pack(&m->w, (void *)m->w.packed);
    /* The kernels now stream the copy; the mapped originals need not stay resident. */
    release_mapped(m->pack_b);
    release_mapped(m->pack_scales);
    m->pack_b = m->pack_scales = NULL;
}

static void *pack_thread(void *arg)
{
    pack_job *j = arg;
    for (size_t i = 0; i < j->n; i++) {
        pack_one(j->steps[i]);
        uint64_t bytes = krn_q4_pack_size(&j->steps[i]->p.mmnb.w);
        uint64_t d = atomic_fetch_add(j->done, bytes) + bytes;
        if (j->report && j->report->progress)
            j->report->progress(j->report->progress_ctx, d, j->total);
    }
    return NULL;
}

static int cmp_pack_size(const void *a, const void *b)
{
    size_t x = krn_q4_pack_size(&(*(step *const *)a)->p.mmnb.w), y = krn_q4_pack_size(&(*(step *const *)b)->p.mmnb.w);
    return x < y ? 1 : x > y ? -1 : 0;
}

static bool needs_pack(const step *s)
{
    return s->op && s->op->prepare == prep_mmnb && s->p.mmnb.pack_b;
}

static void pack_all(eng_plan *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_steps; i++)
        n += needs_pack(&p->steps[i]);
    long cpus = p->opts.pack_threads > 0 ? p->opts.pack_threads : sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = cpus < 1 ? 1 : cpus > 8 ? 8 : (size_t)cpus;
    if (nt > n)
        nt = n ? n : 1;
    step **all = calloc(n + 1, sizeof *all), **slots = calloc(n * nt + 1, sizeof *slots);
    if (!all || !slots) {
        /* no memory for the bookkeeping: one thread, in step order */
        for (size_t i = 0; i < p->n_steps; i++)
            if (needs_pack(&p->steps[i]))
                pack_one(&p->steps[i]);
        free(all);
        free(slots);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < p->n_steps; i++)
        if (needs_pack(&p->steps[i]))
            all[k++] = &p->steps[i];
    qsort(all, n, sizeof *all, cmp_pack_size);
    pack_job jobs[8];
    size_t load[8] = {0};
    _Atomic uint64_t done = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += krn_q4_pack_size(&all[i]->p.mmnb.w);
    for (size_t t = 0; t < nt; t++)
        jobs[t] = (pack_job){slots + t * n, 0, &done, t == 0 ? &p->opts : NULL, total};
    for (size_t i = 0; i < n; i++) {
        size_t t = 0;
        for (size_t u = 1; u < nt; u++)
            if (load[u] < load[t])
                t = u;
        jobs[t].steps[jobs[t].n++] = all[i];
        load[t] += krn_q4_pack_size(&all[i]->p.mmnb.w);
    }
    pthread_t th[8];
    bool started[8] = {false};
    for (size_t t = 1; t < nt; t++)
        started[t] = pthread_create(&th[t], NULL, pack_thread, &jobs[t]) == 0;
    pack_thread(&jobs[0]);
    for (size_t t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            pack_thread(&jobs[t]); /* could not start it: do its share here */
    }
    if (p->opts.progress && total)
        p->opts.progress(p->opts.progress_ctx, total, total);
    free(all);
    free(slots);
}

/*
 * Drops the pages of a tensor that lies in a mapped data file from this
 * process's resident set (read-only shared file mapping: a later read faults
 * them back in from the file). Only whole pages inside the tensor are touched.
 */
static void release_mapped(const eng_tensor *t)
{
    if (!t->external || !t->data)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)t->data + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)t->data + t->nbytes) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* What the kernel name adds for the weights' packed form. */
static const char *pack_note(const krn_q4_weights *w)
{
    return !w->packed ? "" : w->packed_bf16 ? " (packed, bf16 scales)" : " (packed)";
}

static int prep_mmnb(plan_builder *b, step *s)
{
    const eng_node *n = s->node;
    int64_t K = eng_node_attr_int(n, "K", 0), N = eng_node_attr_int(n, "N", 0);
    int64_t bits = eng_node_attr_int(n, "bits", 4), bs = eng_node_attr_int(n, "block_size", 0);
    int64_t acc = eng_node_attr_int(n, "accuracy_level", 0);
    if (bits != 4)
        PREP_FAIL(b, s, "attribute 'bits' = %lld is not supported (only 4)", (long long)bits);
    if (bs < 16 || (bs & (bs - 1)))
        PREP_FAIL(b, s, "attribute 'block_size' = %lld must be a power of two >= 16", (long long)bs);
    if (K <= 0 || N <= 0)
        PREP_FAIL(b, s, "attributes 'K' = %lld and 'N' = %lld must be positive", (long long)K, (long long)N);
    if (acc < 0 || acc > 4)
        PREP_FAIL(b, s, "attribute 'accuracy_level' = %lld is out of range 0..4", (long long)acc);
    if (s->n_in > 4 && s->in[4] >= 0)
        PREP_FAIL(b, s, "input 4 (g_idx) is not supported");
    const eng_tensor *B = const_input(b, s, 1), *sc = const_input(b, s, 2), *zp = const_input(b, s, 3);
    const eng_tensor *bias = const_input(b, s, 5);
    mmnb_sizes z;
    if (!mmnb_sizes_of(K, N, bs, &z))
        PREP_FAIL(b, s, "attributes 'N' = %lld, 'K' = %lld and 'block_size' = %lld overflow: input B would pass "
                  "the largest tensor (%llu bytes)", (long long)N, (long long)K, (long long)bs,
                  (unsigned long long)ENG_MAX_TENSOR_BYTES);
    uint64_t kb = z.kb, blob = (uint64_t)bs / 2;
    if (!B || B->dtype != ENG_DT_UINT8 || B->n_elems != z.b_bytes)
        PREP_FAIL(b, s, "input B must be a UINT8 initializer of %lld x %llu x %llu bytes", (long long)N,
                  (unsigned long long)kb, (unsigned long long)blob);
    if (!sc || sc->dtype != ENG_DT_FLOAT || sc->n_elems != z.n_scales)
        PREP_FAIL(b, s, "input scales must be a FLOAT initializer of %llu elements", (unsigned long long)z.n_scales);
    if (s->n_in > 3 && s->in[3] >= 0) {
        if (!zp || zp->dtype != ENG_DT_UINT8)
            PREP_FAIL(b, s, "input zero_points must be a UINT8 initializer (other types are not supported)");
        if (zp->n_elems != z.zp_bytes)
            PREP_FAIL(b, s, "input zero_points has %llu bytes, packed 4-bit zero points need %llu",
                      (unsigned long long)zp->n_elems, (unsigned long long)z.zp_bytes);
    }
    if (s->n_in > 5 && s->in[5] >= 0 && (!bias || bias->dtype != ENG_DT_FLOAT || bias->n_elems != (uint64_t)N))
        PREP_FAIL(b, s, "input bias must be a FLOAT initializer of %lld elements", (long long)N);
    mmnb_params *m = &s->p.mmnb;
    m->w = (krn_q4_weights){.b_data = B->data, .scales = sc->data, .zero_pts = zp ? zp->data : NULL,
                            .bias = bias ? bias->data : NULL, .n = (size_t)N, .k = (size_t)K,
                            .block_size = (size_t)bs, .k_blocks = (size_t)kb};
    /* ONNX Runtime runs accuracy_level 4 with int8 activations where the CPU
     * has int8 kernels (every x86-64 with AVX2 does); lower levels in fp32. */
    m->int8 = acc == 4 && !b->p->opts.matmul_fp32;
    bool packing = m->int8 && b->p->krn.q4_packed;
    if (packing && !size_packs(b))
        PREP_FAIL(b, s, "out of memory sizing the repacked weights");
    m->w.packed_bf16 = packing && b->scales_bf16[n - b->p->g->nodes];
    uint64_t resident = B->nbytes + sc->nbytes;
    size_t pack = packing ? krn_q4_pack_size(&m->w) : 0;
    if (pack) {
        void *buf = packed_slot(b, s, pack, &resident);
        if (!buf)
            PREP_FAIL(b, s, "out of memory repacking %zu bytes of weights", pack);
        /* Filled by pack_all() once every node is prepared, in parallel. */
        m->w.packed = buf;
        m->pack_b = B;
        m->pack_scales = sc;
    }
    /* (unpacked, the weights are used in place from the mapping: resident as they are;
     * packed, the arena is counted once, when it is allocated) */
    b->p->prepared_bytes += resident + (zp ? zp->nbytes : 0) + (bias ? bias->nbytes : 0);
    if (m->int8)
        snprintf(s->kernel, sizeof s->kernel, "%s + %s%s", b->p->krn.quant_a8.name, b->p->krn.mmnb_i8.name,
                 pack_note(&m->w));
    else
        snprintf(s->kernel, sizeof s->kernel, "%s", b->p->krn.mmnb_f32.name);
    return 0;
}

static int infer_mmnb(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    const krn_q4_weights *w = &s->p.mmnb.w;
    if (a->v.dtype != ENG_DT_FLOAT)
        STEP_FAIL(x, s, "input A must be FLOAT");
    if (a->v.rank < 1 || a->v.dims[a->v.rank - 1] != (int64_t)w->k)
        STEP_FAIL(x, s, "input A's last dimension must be K = %zu", w->k);
    int64_t d[ENG_MAX_RANK];
    memcpy(d, a->v.dims, sizeof d);
    d[a->v.rank - 1] = (int64_t)w->n;
    if (set_out(x, s, 0, ENG_DT_FLOAT, a->v.rank, d) != 0)
        return -1;
    if (s->p.mmnb.int8) {
        uint64_t m = eng_view_numel(&a->v) / w->k;
        uint64_t need = krn_quant_a8_size(m, w->k, w->block_size);
        if (need > x->scratch_need)
            x->scratch_need = need;
    }
    return 0;
}

static int run_mmnb(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    rt_val *o = OUT(x, s, 0);
    const mmnb_params *m = &s->p.mmnb;
    size_t rows = eng_view_numel(&a->v) / m->w.k;
    if (!rows)
        return 0;
    mmnb_call c = {&x->p->krn, {.w = m->w, .m = rows, .a = a->v.data, .a_ld = m->w.k, .y = o->v.data,
                                .y_ld = m->w.n}, m->int8};
    if (m->int8 && m->qa_from_norm && x->norm_qa_value == s->in[0] && x->norm_qa_data == a->v.data &&
        x->norm_qa_rows == rows) {
        c.a.qa = x->norm_qa; /* quantized by the norm that wrote A */
    } else if (m->int8) {
        quant_call q = {&x->p->krn, {.a = a->v.data, .a_ld = m->w.k, .m = rows, .k = m->w.k,
                                     .block_size = m->w.block_size, .qa = x->scratch}};
        /* A few rows (decode) take a microsecond: cheaper here than a pool round trip. */
        if (rows <= 4)
            do_quant(&q, 0, rows);
        else
            run_par(x, rows, 1, do_quant, &q);
        c.a.qa = x->scratch;
    }
    if (x->argmax_step == (int)(s - x->p->steps)) {
        mmnb_argmax_call ac = {c, &x->argmax_key};
        atomic_store(&x->argmax_key, 0);
        run_par(x, m->w.n, 16, do_mmnb_argmax, &ac);
        x->argmax_valid = true;
    } else {
        run_par(x, m->w.n, 16, do_mmnb, &c);
    }
    return 0;
}

/* ---- GroupQueryAttention ------------------------------------------------------- */

static int prep_gqa(plan_builder *b, step *s)
{
    const eng_node *n = s->node;
    gqa_params *g = &s->p.gqa;
    g->heads = eng_node_attr_int(n, "num_heads", 0);
    g->kv_heads = eng_node_attr_int(n, "kv_num_heads", 0);
    g->scale = eng_node_attr_float(n, "scale", 0.0f);
    g->rotary = eng_node_attr_int(n, "do_rotary", 0) != 0;
    if (g->heads <= 0 || g->kv_heads <= 0 || g->heads % g->kv_heads)
        PREP_FAIL(b, s, "num_heads = %lld must be a positive multiple of kv_num_heads = %lld", (long long)g->heads,
                  (long long)g->kv_heads);
    if (eng_node_attr_float(n, "softcap", 0.0f) != 0.0f)
        PREP_FAIL(b, s, "attribute 'softcap' is not supported");
    if (eng_node_attr_int(n, "local_window_size", -1) != -1)
        PREP_FAIL(b, s, "attribute 'local_window_size' (sliding window) is not supported");
    if (eng_node_attr_int(n, "rotary_interleaved", 0) != 0)
        PREP_FAIL(b, s, "attribute 'rotary_interleaved' = 1 is not supported");
    if (eng_node_attr_int(n, "smooth_softmax", -1) == 1)
        PREP_FAIL(b, s, "attribute 'smooth_softmax' = 1 is not supported");
    if (eng_node_attr_int(n, "qk_output", 0) != 0)
        PREP_FAIL(b, s, "attribute 'qk_output' is not supported");
    if (eng_node_attr_int(n, "kv_cache_bit_width", 0) != 0)
        PREP_FAIL(b, s, "attribute 'kv_cache_bit_width' (quantized KV cache) is not supported");
    const char *qt[] = {"k_quant_type", "v_quant_type"};
    for (int i = 0; i < 2; i++) {
        const eng_attr *a = eng_node_attr(n, qt[i]);
        if (a && strcmp(a->s, "NONE"))
            PREP_FAIL(b, s, "attribute '%s' = '%s' is not supported", qt[i], a->s);
    }
    bool has_k = s->n_in > 1 && s->in[1] >= 0, has_v = s->n_in > 2 && s->in[2] >= 0;
    if (has_k != has_v)
        PREP_FAIL(b, s, "key and value must both be given or both be absent");
    g->packed = !has_k;
    g->width_heads = g->heads;
    if (g->packed && (!ck_mul_i64(2, g->kv_heads, &g->width_heads) ||
                      !ck_add_i64(g->width_heads, g->heads, &g->width_heads)))
        PREP_FAIL(b, s, "num_heads = %lld + 2 x kv_num_heads = %lld overflows", (long long)g->heads,
                  (long long)g->kv_heads);
    g->index = b->p->n_gqa++;
    if (s->n_in < 7 || s->in[5] < 0 || s->in[6] < 0)
        PREP_FAIL(b, s, "inputs seqlens_k and total_sequence_length are required");
    bool has_pk = s->n_in > 3 && s->in[3] >= 0, has_pv = s->n_in > 4 && s->in[4] >= 0;
    if (has_pk != has_pv)
        PREP_FAIL(b, s, "past_key and past_value must both be given or both be absent");
    if (g->rotary && (s->n_in < 9 || s->in[7] < 0 || s->in[8] < 0))
        PREP_FAIL(b, s, "do_rotary = 1 needs inputs cos_cache and sin_cache");
    static const char *unsupported[] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                        "position_ids", "attention_bias", "head_sink", "k_scale",
                                        "v_scale", "q_norm_weight", "k_norm_weight"};
    for (int i = 9; i < s->n_in && i < 16; i++)
        if (s->in[i] >= 0)
            PREP_FAIL(b, s, "input %d (%s) is not supported", i, unsupported[i]);
    if (s->n_out < 3 || s->out[1] < 0 || s->out[2] < 0)
        PREP_FAIL(b, s, "outputs present_key and present_value are required");
    if (s->n_out > 3 && s->out[3] >= 0)
        PREP_FAIL(b, s, "output 3 (output_qk) is not supported");
    snprintf(s->kernel, sizeof s->kernel, "%s + %s + %s", b->p->krn.kv_store.name,
             g->rotary ? b->p->krn.rotary.name : "(no rotary)", b->p->krn.gqa.name);
    return 0;
}

typedef struct gqa_dims {
    int64_t S, H, W, T, P, present;
} gqa_dims;

static int gqa_shapes(eng_exec *x, const step *s, gqa_dims *d)
{
    const gqa_params *g = &s->p.gqa;
    const rt_val *q = IN(x, s, 0), *k = IN(x, s, 1), *pk = IN(x, s, 3), *pv = IN(x, s, 4);
    const rt_val *seq = IN(x, s, 5), *tot = IN(x, s, 6);
    if (q->v.dtype != ENG_DT_FLOAT || q->v.rank != 3)
        STEP_FAIL(x, s, "query must be FLOAT [batch, sequence, hidden]");
    if (q->v.dims[0] != 1)
        STEP_FAIL(x, s, "batch size %lld is not supported (only 1)", (long long)q->v.dims[0]);
    d->S = q->v.dims[1];
    d->W = q->v.dims[2];
    int64_t heads_total = g->width_heads;
    if (d->W % heads_total)
        STEP_FAIL(x, s, "query width %lld is not a multiple of %lld heads", (long long)d->W, (long long)heads_total);
    d->H = d->W / heads_total;
    /* H >= 8 also bounds the heads by the query's width, so head counts times H fit */
    if (d->H < 8 || d->H > KRN_MAX_HEAD_DIM || d->H % 8)
        STEP_FAIL(x, s, "head size %lld must be a positive multiple of 8 up to %d", (long long)d->H,
                  KRN_MAX_HEAD_DIM);
    if (!g->packed) {
        const rt_val *v = IN(x, s, 2);
        for (int i = 0; i < 2; i++) {
            const rt_val *t = i ? v : k;
            if (t->v.dtype != ENG_DT_FLOAT || t->v.rank != 3 || t->v.dims[0] != 1 || t->v.dims[1] != d->S ||
                t->v.dims[2] != g->kv_heads * d->H)
                STEP_FAIL(x, s, "%s must be FLOAT [1, %lld, %lld]", i ? "value" : "key", (long long)d->S,
                          (long long)(g->kv_heads * d->H));
        }
    }
    d->P = 0;
    if (pk) {
        for (int i = 0; i < 2; i++) {
            const rt_val *t = i ? pv : pk;
            if (t->v.dtype != ENG_DT_FLOAT || t->v.rank != 4 || t->v.dims[0] != 1 || t->v.dims[1] != g->kv_heads ||
                t->v.dims[3] != d->H || t->v.dims[2] != pk->v.dims[2])
                STEP_FAIL(x, s, "%s must be FLOAT [1, %lld, past, %lld]", i ? "past_value" : "past_key",
                          (long long)g->kv_heads, (long long)d->H);
        }
        d->P = pk->v.dims[2];
    }
    if (seq->v.dtype != ENG_DT_INT32 || eng_view_numel(&seq->v) != 1)
        STEP_FAIL(x, s, "seqlens_k must be INT32 [1]");
    if (tot->v.dtype != ENG_DT_INT32 || eng_view_numel(&tot->v) != 1)
        STEP_FAIL(x, s, "total_sequence_length must be one INT32");
    if (need_data(x, s, tot, "total_sequence_length") != 0)
        return -1;
    d->T = ((const int32_t *)tot->v.data)[0];
    if (d->T < d->S)
        STEP_FAIL(x, s, "total_sequence_length %lld is less than the %lld new tokens", (long long)d->T, (long long)d->S);
    d->present = d->T > d->P ? d->T : d->P;
    return 0;
}

static int infer_gqa(eng_exec *x, const step *s)
{
    gqa_dims d;
    if (gqa_shapes(x, s, &d) != 0)
        return -1;
    const gqa_params *g = &s->p.gqa;
    int64_t od[3] = {1, d.S, g->heads * d.H};
    /* with a session cache bound, the cache is the state and present is empty */
    int64_t pd[4] = {1, g->kv_heads, x->kv[g->index].k ? 0 : d.present, d.H};
    if (set_out(x, s, 0, ENG_DT_FLOAT, 3, od) != 0 || set_out(x, s, 1, ENG_DT_FLOAT, 4, pd) != 0 ||
        set_out(x, s, 2, ENG_DT_FLOAT, 4, pd) != 0)
        return -1;
    /* scratch: rotated queries, then positions */
    uint64_t need = (uint64_t)(d.S * g->heads * d.H) * sizeof(float) + (uint64_t)d.S * sizeof(int64_t) + ALIGN;
    if (need > x->scratch_need)
        x->scratch_need = need;
    return 0;
}

static int run_gqa(eng_exec *x, const step *s)
{
    const gqa_params *g = &s->p.gqa;
    gqa_dims d;
    if (gqa_shapes(x, s, &d) != 0)
        return -1;
    const rt_val *q = IN(x, s, 0), *kin = IN(x, s, 1), *vin = IN(x, s, 2), *pk = IN(x, s, 3), *pv = IN(x, s, 4);
    const rt_val *seq = IN(x, s, 5), *cos = IN(x, s, 7), *sin = IN(x, s, 8);
    rt_val *out = OUT(x, s, 0), *prk = OUT(x, s, 1), *prv = OUT(x, s, 2);
    int64_t S = d.S, H = d.H, Nq = g->heads, Nkv = g->kv_heads;
    int64_t total = (int64_t)((const int32_t *)seq->v.data)[0] + 1;
    bool first = S == d.T;
    int64_t past = first ? 0 : total - S;
    if (first && total != S)
        STEP_FAIL(x, s, "seqlens_k + 1 = %lld does not match the %lld prompt tokens (padding is not supported)",
                  (long long)total, (long long)S);
    if (!first && S > 1 && total != d.T)
        STEP_FAIL(x, s, "seqlens_k + 1 = %lld must equal total_sequence_length %lld", (long long)total, (long long)d.T);
    const eng_kv_binding *kvb = &x->kv[g->index];
    if (past < 0 || (!kvb->k && (past > d.P || past + S > d.present)))
        STEP_FAIL(x, s, "%lld cached tokens + %lld new do not fit past length %lld / present length %lld",
                  (long long)past, (long long)S, (long long)d.P, (long long)d.present);
    if (g->rotary) {
        if (cos->v.rank != 2 || sin->v.rank != 2 || cos->v.dims[1] != sin->v.dims[1] || cos->v.dims[1] * 2 > H ||
            cos->v.dims[1] % 8 || cos->v.dtype != ENG_DT_FLOAT || sin->v.dtype != ENG_DT_FLOAT)
            STEP_FAIL(x, s, "cos_cache/sin_cache must be FLOAT [positions, rotary_dim/2] with rotary_dim <= head size");
        if (past + S > cos->v.dims[0] || sin->v.dims[0] < cos->v.dims[0])
            STEP_FAIL(x, s, "position %lld is beyond the rotary cache (%lld rows)", (long long)(past + S - 1),
                      (long long)cos->v.dims[0]);
    }
    /* A session cache may hold fp16 (the tensor contract's present is always FLOAT). */
    bool f16 = kvb->k && kvb->dtype == ENG_DT_FLOAT16;
    krn_kv_type kvt = f16 ? KRN_KV_F16 : KRN_KV_F32;
    size_t esz = f16 ? sizeof(uint16_t) : sizeof(float);
    uint64_t row = (uint64_t)H * sizeof(float);
    /* Session cache or present tensor, both [kv_head, token, head]: a kv
     * head's rows are contiguous, only the distance between heads differs. */
    size_t tok_stride = (size_t)H;
    size_t head_stride = kvb->k ? (size_t)kvb->head_stride : (size_t)(d.present * H);
    if (kvb->k && past + S > kvb->capacity)
        STEP_FAIL(x, s, "%lld cached + %lld new tokens exceed the KV cache of %lld", (long long)past, (long long)S,
                  (long long)kvb->capacity);
    int64_t cap_elems;
    if (kvb->k && (!ck_mul_i64(kvb->capacity, H, &cap_elems) || kvb->head_stride < cap_elems))
        STEP_FAIL(x, s, "KV cache head stride %lld is below %lld tokens x head size %lld", (long long)kvb->head_stride,
                  (long long)kvb->capacity, (long long)H);
    void *kc = kvb->k ? kvb->k : prk->v.data, *vc = kvb->k ? kvb->v : prv->v.data;
    /* Separate past and present buffers: copy the cached rows over (the
     * tensor contract, always fp32; a shared buffer already holds them). */
    const float *pkd = pk ? pk->v.data : NULL, *pvd = pv ? pv->v.data : NULL;
    for (int64_t h = 0; h < Nkv && !kvb->k; h++) {
        for (int c = 0; c < 2; c++) {
            float *dst = (float *)(c ? vc : kc) + h * d.present * H;
            const float *src = c ? pvd : pkd;
            if (src && src + h * d.P * H != dst && past) {
                memcpy(dst, src + h * d.P * H, (uint64_t)past * row);
                x->kv_bytes_moved += (uint64_t)past * row;
            }
            if ((const void *)src != (c ? vc : kc) && past + S < d.present)
                memset(dst + (past + S) * H, 0, (uint64_t)(d.present - past - S) * row);
        }
    }
    int64_t qw = d.W;
    const float *qd = q->v.data;
    const float *kd = g->packed ? qd + Nq * H : kin->v.data;
    const float *vd = g->packed ? qd + (Nq + Nkv) * H : vin->v.data;
    int64_t kv_ld = g->packed ? qw : Nkv * H;
    /* Element offset of the first new row in the cache; the kernels take typed bases. */
    size_t new_off = (size_t)past * tok_stride;
    void *kc_new = (uint8_t *)kc + new_off * esz, *vc_new = (uint8_t *)vc + new_off * esz;

    float *qrot = (float *)x->scratch;
    int64_t *pos = (int64_t *)(x->scratch + (((uint64_t)(S * Nq * H) * sizeof(float) + ALIGN - 1) / ALIGN) * ALIGN);
    for (int64_t t = 0; t < S; t++)
        pos[t] = past + t;
    /*
     * New values (copied, or rounded into an fp16 cache) and keys (rotated on
     * the way in, or stored as they are); a decode step does them inside the
     * attention run (do_gqa_decode), each participant for its own kv heads.
     */
    const krn_table *kt = &x->p->krn;
    bool decode = S == 1;
    rows_call vs = {kt, {.x = vd, .x_tok_stride = (size_t)kv_ld, .x_head_stride = (size_t)H, .y = vc_new,
                         .y_tok_stride = tok_stride, .y_head_stride = head_stride, .n_tok = (size_t)S,
                         .n_heads = (size_t)Nkv, .n = (size_t)H, .y_type = kvt}};
    x->kv_bytes_moved += 2 * (uint64_t)(S * Nkv) * (uint64_t)H * esz;
    rot_call rk = {kt, {.x = kd, .y = kc_new, .x_tok_stride = (size_t)kv_ld, .x_head_stride = (size_t)H,
                        .y_tok_stride = tok_stride, .y_head_stride = head_stride, .n_tok = (size_t)S,
                        .n_heads = (size_t)Nkv, .head_dim = (size_t)H,
                        .rot_dim = g->rotary ? (size_t)(2 * cos->v.dims[1]) : 0,
                        .cos_cache = g->rotary ? cos->v.data : NULL, .sin_cache = g->rotary ? sin->v.data : NULL,
                        .cache_ld = g->rotary ? (size_t)cos->v.dims[1] : 0, .pos = pos, .y_type = kvt}};
    rot_call rq = rk;
    rq.a.x = qd;
    rq.a.y = qrot;
    rq.a.x_tok_stride = (size_t)qw;
    rq.a.y_tok_stride = (size_t)(Nq * H);
    rq.a.y_head_stride = (size_t)H;
    rq.a.n_heads = (size_t)Nq;
    rq.a.y_type = KRN_KV_F32;
    rows_call ks = vs;
    ks.a.x = kd;
    ks.a.y = kc_new;
    gqa_call ga = {kt, {.q = qrot, .q_ld = (size_t)(Nq * H), .k_cache = kc, .v_cache = vc,
                        .kv_head_stride = head_stride, .kv_tok_stride = tok_stride,
                        .out = out->v.data, .out_ld = (size_t)(Nq * H), .seq = (size_t)S,
                        .past = (size_t)past, .n_heads = (size_t)Nq, .n_kv_heads = (size_t)Nkv,
                        .head_dim = (size_t)H,
                        .scale = g->scale != 0.0f ? g->scale : 1.0f / sqrtf((float)H),
                        .local_window = -1, .softcap = 0.0f, .kv_type = kvt}};
    if (decode) {
        gqa_decode_call dc = {ga, vs.a, ks.a, rk.a, rq.a, g->rotary, qd};
        run_par(x, (size_t)Nq, (size_t)(Nq / Nkv), do_gqa_decode, &dc);
        return 0;
    }
    run_par(x, (size_t)(S * Nkv), 1, do_rows, &vs);
    if (g->rotary) {
        run_par(x, (size_t)(S * Nkv), 1, do_rot, &rk);
        run_par(x, (size_t)(S * Nq), 1, do_rot, &rq);
    } else {
        run_par(x, (size_t)(S * Nkv), 1, do_rows, &ks);
        for (int64_t t = 0; t < S; t++)
            memcpy(qrot + t * Nq * H, qd + t * qw, (uint64_t)(Nq * H) * sizeof(float));
    }
    /* Items are (kv head, token, head in group): an even split hands out whole kv groups. */
    run_par(x, (size_t)(S * Nq), (size_t)(Nq / Nkv), do_gqa, &ga);
    return 0;
}

/* ---- registry ------------------------------------------------------------------- */

static const op_def op_defs[] = {
    {"", "Constant", prep_constant, NULL, NULL, false, false},
    {"", "Shape", prep_shape, infer_shape, run_shape, true, false},
    {"", "Gather", prep_gather, infer_gather, run_gather, true, false},
    {"", "ReduceSum", prep_reduce, infer_reduce, run_reduce, true, false},
    {"", "Sub", prep_binary, infer_binary, run_binary, true, false},
    {"", "Add", prep_binary, infer_binary, run_binary, true, false},
    {"", "Mul", prep_binary, infer_binary, run_binary, true, false},
    {"", "Cast", prep_cast, infer_cast, run_cast, true, false},
    {"", "Sigmoid", prep_sigmoid, infer_unary_same, run_sigmoid, false, false},
    {"", "Reshape", prep_reshape, infer_reshape, run_reshape, false, true},
    {"", "Split", prep_split, infer_split, run_split, true, true},
    {"", "SimplifiedLayerNormalization", prep_sln, infer_sln, run_sln, false, false},
    {"com.microsoft", "SkipSimplifiedLayerNormalization", prep_skip_sln, infer_skip_sln, run_skip_sln, false, false},
    {"com.microsoft", "MatMulNBits", prep_mmnb, infer_mmnb, run_mmnb, false, false},
    {"com.microsoft", "GroupQueryAttention", prep_gqa, infer_gqa, run_gqa, false, false},
};

static const op_def *find_def(const eng_node *n)
{
    for (size_t i = 0; i < sizeof op_defs / sizeof op_defs[0]; i++)
        if (!strcmp(op_defs[i].domain, n->domain) && !strcmp(op_defs[i].op, n->op_type))
            return &op_defs[i];
    return NULL;
}

/* ---- plan ----------------------------------------------------------------------- */

/* Number of steps reading value v (graph outputs count as one more reader). */
static int readers(const eng_plan *p, int v)
{
    int n = p->vals[v].graph_output ? 1 : 0;
    for (size_t i = 0; i < p->n_steps; i++)
        for (int k = 0; k < p->steps[i].n_in; k++)
            n += p->steps[i].in[k] == v;
    return n;
}

static int producer_step(const eng_plan *p, int v)
{
    return p->vals[v].kind == PV_NODE ? p->vals[v].def : -1;
}

/* Step R is an int8-mode MatMulNBits whose A is value V. */
static bool int8_mmnb_reading(const step *r, int v)
{
    return r->op && r->op->run == run_mmnb && r->in[0] == v && r->p.mmnb.int8;
}

/*
 * Plan rewrite: an RMSNorm (Simplified or SkipSimplifiedLayerNormalization
 * over the last axis) whose output is read by int8-mode MatMulNBits nodes
 * quantizes its rows itself, once, for all of them (the Qwen3 gate and up
 * projections share one). Readers of another width or block size would need
 * other records, so the fusion applies only when all int8 readers agree; any
 * other reader just reads the float output, which is still written.
 */
static void fuse_norm_quant(eng_plan *p)
{
    for (size_t i = 0; i < p->n_steps; i++) {
        step *ns = &p->steps[i];
        if (!ns->op || (ns->op->run != run_sln && ns->op->run != run_skip_sln) || ns->out[0] < 0)
            continue;
        if (ns->op->run == run_sln && ns->p.norm.axis != -1)
            continue; /* the width per row is the last axis only when axis is -1 */
        size_t k = 0, bs = 0, readers_n = 0;
        bool agree = true;
        for (size_t j = i + 1; j < p->n_steps; j++) {
            const step *r = &p->steps[j];
            if (!int8_mmnb_reading(r, ns->out[0]))
                continue;
            if (readers_n++ && (r->p.mmnb.w.k != k || r->p.mmnb.w.block_size != bs))
                agree = false;
            k = r->p.mmnb.w.k;
            bs = r->p.mmnb.w.block_size;
        }
        if (!readers_n || !agree)
            continue;
        ns->p.norm.qa_block = bs;
        ns->p.norm.qa_k = k;
        for (size_t j = i + 1; j < p->n_steps; j++) {
            step *r = &p->steps[j];
            if (int8_mmnb_reading(r, ns->out[0])) {
                r->p.mmnb.qa_from_norm = true;
                snprintf(r->kernel, sizeof r->kernel, "%s%s (activations quantized by the norm)",
                         p->krn.mmnb_i8.name, pack_note(&r->p.mmnb.w));
            }
        }
        size_t len = strlen(ns->kernel);
        snprintf(ns->kernel + len, sizeof ns->kernel - len, " + %s", p->krn.quant_a8.name);
    }
}

/*
 * Plan rewrite: Mul(Mul(g, Sigmoid(g)), u) becomes one silu_mul step when the
 * intermediate values have no other reader. The Sigmoid and the first Mul
 * are deferred to the final Mul, which decides per run: equal float shapes
 * run the fused kernel, anything else runs the three steps in order. The
 * kernel rounds exactly like the three steps it replaces.
 */
static void fuse_silu(eng_plan *p)
{
    for (size_t i = 0; i < p->n_steps; i++) {
        step *m2 = &p->steps[i];
        if (m2->op->run != run_binary || m2->p.binary.op != '*')
            continue;
        for (int side = 0; side < 2; side++) {
            int silu = m2->in[side], u = m2->in[1 - side];
            int i1 = producer_step(p, silu);
            if (i1 < 0 || readers(p, silu) != 1)
                continue;
            step *m1 = &p->steps[i1];
            if (m1->op->run != run_binary || m1->p.binary.op != '*')
                continue;
            for (int gs = 0; gs < 2; gs++) {
                int gate = m1->in[gs], sig = m1->in[1 - gs];
                int i0 = producer_step(p, sig);
                if (i0 < 0 || readers(p, sig) != 1 || p->steps[i0].op->run != run_sigmoid ||
                    p->steps[i0].in[0] != gate || gate == u)
                    continue;
                p->steps[i0].silu_head = (int)i;
                m1->silu_head = (int)i;
                m2->silu_gate = gate;
                m2->silu_up = u;
                m2->silu_steps[0] = i0;
                m2->silu_steps[1] = i1;
                /* The replaced steps are deferred to the fused one (which
                 * runs them itself when shapes rule the fusion out), so
                 * gate and the Sigmoid's output must live until then. */
                if (!p->vals[gate].graph_output && p->vals[gate].last < (int)i)
                    p->vals[gate].last = (int)i;
                if (p->vals[sig].last < (int)i)
                    p->vals[sig].last = (int)i;
                snprintf(p->steps[i0].kernel, sizeof p->steps[i0].kernel, "fused into SiLU(gate) * up");
                snprintf(m1->kernel, sizeof m1->kernel, "fused into SiLU(gate) * up");
                snprintf(m2->kernel, sizeof m2->kernel, "%s (SiLU(gate) * up fused)", p->krn.silu_mul.name);
                goto next;
            }
        }
    next:;
    }
}

/*
 * External data carries no alignment promise, and kernels load floats and
 * integers as such: a misaligned initializer gets an aligned copy. A table
 * read only by Gather is copied row by row with memcpy and stays mapped.
 */
static int realign(eng_plan *p, const eng_graph *g, size_t v, const eng_tensor *t, void **data)
{
    size_t es = eng_dtype_size(t->dtype);
    if (es <= 1 || !t->data || (uintptr_t)t->data % es == 0)
        return 0;
    bool only_gathered = true;
    for (size_t i = 0; i < g->n_nodes && only_gathered; i++) {
        const eng_node *n = &g->nodes[i];
        for (size_t j = 0; j < n->n_inputs; j++)
            if (n->input_values[j] == (int)v && !(j == 0 && !strcmp(n->op_type, "Gather") && !*n->domain))
                only_gathered = false;
    }
    if (only_gathered)
        return 0;
    void *copy = aligned_alloc(ALIGN, (t->nbytes + ALIGN - 1) / ALIGN * ALIGN);
    if (!copy)
        return -1;
    memcpy(copy, t->data, t->nbytes);
    p->owned[p->n_owned++] = copy;
    p->prepared_bytes += t->nbytes;
    *data = copy;
    return 0;
}

int eng_plan_new(const eng_graph *g, const eng_plan_opts *opts, eng_plan **out, eng_diag *diag)
{
    *out = NULL;
    eng_plan *p = calloc(1, sizeof *p);
    if (!p)
        goto oom;
    p->g = g;
    if (opts)
        p->opts = *opts;
    p->krn = *krn_active();
    p->n_steps = g->n_nodes;
    p->steps = calloc(g->n_nodes + 1, sizeof *p->steps);
    p->vals = calloc(g->n_values + 1, sizeof *p->vals);
    p->inits = calloc(g->n_inits + 1, sizeof *p->inits);
    if (!p->inits)
        goto oom;
    /* folded constants (at most one per node) and realigned initializers */
    p->owned = calloc(g->n_nodes + g->n_inits + 1, sizeof *p->owned);
    if (!p->steps || !p->vals || !p->owned)
        goto oom;
    size_t before = diag->n_total;
    for (size_t v = 0; v < g->n_values; v++) {
        val_plan *vp = &p->vals[v];
        vp->def = -1;
        vp->last = -1;
        const eng_value *gv = &g->values[v];
        if (gv->kind == ENG_VALUE_INITIALIZER) {
            const eng_tensor *t = &g->inits[gv->index];
            vp->kind = PV_CONST;
            vp->cval = (eng_view){.dtype = t->dtype, .rank = t->rank, .data = (void *)t->data};
            memcpy(vp->cval.dims, t->dims, sizeof vp->cval.dims);
            if (realign(p, g, v, t, &vp->cval.data) != 0)
                goto oom;
            p->inits[gv->index] = *t;
            p->inits[gv->index].data = vp->cval.data;
        } else if (gv->kind == ENG_VALUE_INPUT) {
            vp->kind = PV_INPUT;
        } else {
            vp->kind = PV_NODE;
            vp->def = (int)gv->index;
        }
    }
    for (size_t o = 0; o < g->n_outputs; o++) {
        int v = eng_graph_value(g, g->outputs[o].name);
        if (v >= 0) {
            p->vals[v].graph_output = true;
            p->vals[v].last = (int)g->n_nodes;
        }
    }
    plan_builder b = {.p = p, .diag = diag};
    for (size_t i = 0; i < g->n_nodes; i++) {
        step *s = &p->steps[i];
        const eng_node *n = &g->nodes[i];
        s->node = n;
        s->op = find_def(n);
        if (n->n_inputs > MAX_IO || n->n_outputs > MAX_IO) {
            eng_diag_add(diag, "%s: node '%s' (%s): too many inputs or outputs", g->dir, node_label(n), n->op_type);
            continue;
        }
        s->n_in = (int)n->n_inputs;
        s->n_out = (int)n->n_outputs;
        for (int k = 0; k < s->n_in; k++) {
            s->in[k] = n->input_values[k];
            if (s->in[k] >= 0 && (int)i > p->vals[s->in[k]].last && !p->vals[s->in[k]].graph_output)
                p->vals[s->in[k]].last = (int)i;
        }
        for (int k = 0; k < s->n_out; k++)
            s->out[k] = n->output_values[k];
        if (!s->op) {
            eng_diag_add(diag, "%s: node '%s': no kernel for %s::%s", g->dir, node_label(n),
                         *n->domain ? n->domain : "ai.onnx", n->op_type);
            continue;
        }
        s->op->prepare(&b, s);
    }
    free(b.scales_bf16);
    for (size_t i = 0; i < g->n_nodes; i++) {
        p->steps[i].silu_head = -1;
        p->steps[i].silu_gate = p->steps[i].silu_up = -1;
    }
    if (!p->opts.no_fusion && diag->n_total == before) {
        fuse_silu(p);
        fuse_norm_quant(p);
    }
    /* A view keeps the storage it points into alive: extend lifetimes
     * backwards through Reshape and Split (reverse order handles chains). */
    for (size_t i = g->n_nodes; i-- > 0;) {
        step *s = &p->steps[i];
        if (!s->op || !s->op->places_outputs || s->in[0] < 0)
            continue;
        for (int k = 0; k < s->n_out; k++)
            if (s->out[k] >= 0 && p->vals[s->out[k]].last > p->vals[s->in[0]].last)
                p->vals[s->in[0]].last = p->vals[s->out[k]].last;
    }
    if (diag->n_total > before) {
        eng_plan_free(p);
        return -1;
    }
    if (!p->opts.describe_only)
        pack_all(p);
    *out = p;
    return 0;
oom:
    eng_diag_add(diag, "%s: out of memory building the plan", g->dir);
    eng_plan_free(p);
    return -1;
}

void eng_plan_free(eng_plan *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_owned; i++)
        free(p->owned[i]);
    free(p->owned);
    free(p->inits);
    free(p->steps);
    free(p->vals);
    free(p);
}

const eng_graph *eng_plan_graph(const eng_plan *p)
{
    return p->g;
}

const char *eng_plan_kernel(const eng_plan *p, size_t node)
{
    return node < p->n_steps && p->steps[node].kernel[0] ? p->steps[node].kernel : "unassigned";
}

uint64_t eng_plan_prepared_bytes(const eng_plan *p)
{
    return p->prepared_bytes;
}

/* ---- exec ----------------------------------------------------------------------- */

/*
 * The arena and scratch of an executor come straight from mmap and go back
 * with munmap: sessions come and go with arenas of many sizes, and malloc
 * would keep the freed ones in its heap (resident memory that only grows).
 */
static void *map_bytes(uint64_t n)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void unmap_bytes(void *p, uint64_t n)
{
    if (p)
        munmap(p, n ? n : 1);
}

eng_exec *eng_exec_new(const eng_plan *p, eng_pool *pool)
{
    if (p->opts.describe_only)
        return NULL; /* its packed weights were never written */
    eng_exec *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->norm_qa_value = -1;
    x->argmax_step = -1;
    size_t nv = p->g->n_values + 1;
    x->p = p;
    x->pool = pool;
    x->vals = calloc(nv, sizeof *x->vals);
    x->input_set = calloc(nv, sizeof *x->input_set);
    x->bound = calloc(nv, sizeof *x->bound);
    x->slot_off = calloc(nv, sizeof *x->slot_off);
    x->slot_cap = calloc(nv, sizeof *x->slot_cap);
    x->need = calloc(nv, sizeof *x->need);
    x->kv = calloc((size_t)p->n_gqa + 1, sizeof *x->kv);
    x->fused_now = calloc(p->n_steps + 1, sizeof *x->fused_now);
    x->last_row = calloc(p->n_steps + 1, sizeof *x->last_row);
    if (!x->vals || !x->input_set || !x->bound || !x->slot_off || !x->slot_cap || !x->need || !x->kv || !x->fused_now || !x->last_row) {
        eng_exec_free(x);
        return NULL;
    }
    for (size_t v = 0; v < p->g->n_values; v++)
        if (p->vals[v].kind == PV_CONST) {
            x->vals[v].v = p->vals[v].cval;
            x->vals[v].nbytes = eng_view_numel(&p->vals[v].cval) * eng_dtype_size(p->vals[v].cval.dtype);
        }
    return x;
}

void eng_exec_free(eng_exec *x)
{
    if (!x)
        return;
    free(x->vals);
    free(x->input_set);
    free(x->bound);
    free(x->slot_off);
    free(x->slot_cap);
    free(x->need);
    free(x->kv);
    free(x->fused_now);
    free(x->last_row);
    unmap_bytes(x->arena, x->arena_bytes);
    unmap_bytes(x->scratch, x->scratch_cap);
    unmap_bytes(x->norm_qa, x->norm_qa_cap);
    free(x->shape_buf);
    free(x);
}

int eng_exec_set_input(eng_exec *x, const char *name, int32_t dtype, int rank, const int64_t *dims,
                       const void *data, eng_diag *diag)
{
    const eng_graph *g = x->p->g;
    int v = eng_graph_value(g, name);
    if (v < 0 || g->values[v].kind != ENG_VALUE_INPUT) {
        eng_diag_add(diag, "'%s' is not an input of the graph", name);
        return -1;
    }
    const eng_value_info *vi = &g->inputs[g->values[v].index];
    if (dtype != vi->dtype) {
        eng_diag_add(diag, "input '%s' must be %s, not %s", name, eng_dtype_name(vi->dtype), eng_dtype_name(dtype));
        return -1;
    }
    if (rank < 0 || rank > ENG_MAX_RANK || (vi->rank >= 0 && rank != vi->rank)) {
        eng_diag_add(diag, "input '%s' must have rank %d, not %d", name, vi->rank, rank);
        return -1;
    }
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || (vi->rank >= 0 && vi->dims[i].value >= 0 && vi->dims[i].value != dims[i])) {
            eng_diag_add(diag, "input '%s': dimension %d is %lld, the graph fixes %lld", name, i, (long long)dims[i],
                         (long long)vi->dims[i].value);
            return -1;
        }
    }
    if (set_shape(&x->vals[v], dtype, rank, dims) != 0) {
        char shape[200];
        eng_diag_add(diag, "input '%s': shape %s is more than the largest tensor (%llu bytes)", name,
                     eng_shape_str(dims, rank, shape, sizeof shape), (unsigned long long)ENG_MAX_TENSOR_BYTES);
        return -1;
    }
    x->vals[v].v.data = (void *)data;
    x->input_set[v] = true;
    return 0;
}

int eng_exec_bind_output(eng_exec *x, const char *name, void *buf, uint64_t cap, eng_diag *diag)
{
    int v = eng_graph_value(x->p->g, name);
    if (v < 0 || !x->p->vals[v].graph_output || x->p->vals[v].kind != PV_NODE) {
        eng_diag_add(diag, "'%s' is not a computed output of the graph", name);
        return -1;
    }
    x->bound[v] = (bound_buf){buf, buf ? cap : 0};
    return 0;
}

int eng_exec_set_argmax(eng_exec *x, const char *name, bool on, eng_diag *diag)
{
    const eng_plan *p = x->p;
    int v = eng_graph_value(p->g, name);
    int i = v >= 0 ? producer_step(p, v) : -1;
    if (i < 0 || !p->vals[v].graph_output || p->steps[i].op->run != run_mmnb) {
        eng_diag_add(diag, "'%s' is not a graph output computed by MatMulNBits", name);
        return -1;
    }
    x->argmax_step = on && !p->opts.no_fusion ? i : -1;
    return 0;
}

int32_t eng_exec_argmax(const eng_exec *x)
{
    return x->argmax_valid ? eng_argmax_key_id(atomic_load(&x->argmax_key)) : -1;
}

int eng_exec_last_row_only(eng_exec *x, const char *name, bool on, eng_diag *diag)
{
    const eng_plan *p = x->p;
    int v = eng_graph_value(p->g, name);
    int i = v >= 0 ? producer_step(p, v) : -1;
    if (i < 0 || !p->vals[v].graph_output) {
        eng_diag_add(diag, "'%s' is not a computed output of the graph", name);
        return -1;
    }
    if (p->steps[i].op->run != run_mmnb) {
        eng_diag_add(diag, "output '%s' comes from %s, not a row-wise MatMulNBits", name, p->steps[i].node->op_type);
        return -1;
    }
    x->last_row[i] = on;
    return 0;
}

int eng_exec_bind_kv(eng_exec *x, const char *past_key_input, const eng_kv_binding *b, eng_diag *diag)
{
    const eng_plan *p = x->p;
    int v = eng_graph_value(p->g, past_key_input);
    for (size_t i = 0; v >= 0 && i < p->n_steps; i++) {
        const step *s = &p->steps[i];
        if (s->op->run != run_gqa || s->n_in < 4 || s->in[3] != v)
            continue;
        if (b && (!b->k || !b->v || b->capacity <= 0 || b->head_stride < b->capacity ||
                  (b->dtype != ENG_DT_FLOAT && b->dtype != ENG_DT_FLOAT16))) {
            eng_diag_add(diag, "invalid KV binding for '%s'", past_key_input);
            return -1;
        }
        x->kv[s->p.gqa.index] = b ? *b : (eng_kv_binding){0};
        return 0;
    }
    eng_diag_add(diag, "no GroupQueryAttention node reads past key '%s'", past_key_input);
    return -1;
}

/* Values that need arena storage this run. */
static bool in_arena(const eng_exec *x, size_t v)
{
    const val_plan *vp = &x->p->vals[v];
    return vp->kind == PV_NODE && !x->bound[v].buf;
}

typedef struct slot_order {
    size_t v;
    uint64_t cap;
} slot_order;

static int cmp_slot(const void *a, const void *b)
{
    const slot_order *x = a, *y = b;
    if (x->cap != y->cap)
        return x->cap > y->cap ? -1 : 1;
    return x->v < y->v ? -1 : 1;
}

/* Lays out every arena value by first fit, largest first, so that values
 * whose lifetimes [def, last] intersect never share bytes. */
static int layout_arena(eng_exec *x)
{
    const eng_plan *p = x->p;
    size_t nv = p->g->n_values, n = 0;
    slot_order *ord = malloc((nv + 1) * sizeof *ord);
    size_t *placed = malloc((nv + 1) * sizeof *placed);
    if (!ord || !placed) {
        free(ord);
        free(placed);
        return -1;
    }
    for (size_t v = 0; v < nv; v++) {
        if (!in_arena(x, v))
            continue;
        uint64_t cap = (x->need[v] > x->slot_cap[v] ? x->need[v] : x->slot_cap[v]);
        cap = (cap + ALIGN - 1) / ALIGN * ALIGN;
        x->slot_cap[v] = cap;
        if (cap)
            ord[n++] = (slot_order){v, cap};
    }
    qsort(ord, n, sizeof *ord, cmp_slot);
    uint64_t total = 0;
    size_t n_placed = 0;
    for (size_t i = 0; i < n; i++) {
        size_t v = ord[i].v;
        int d0 = p->vals[v].def, l0 = p->vals[v].last < d0 ? d0 : p->vals[v].last;
        uint64_t off = 0, end = ord[i].cap;
        bool fits = true;
        for (bool moved = true; moved && fits;) {
            moved = false;
            for (size_t j = 0; j < n_placed && fits; j++) {
                size_t u = placed[j];
                int d1 = p->vals[u].def, l1 = p->vals[u].last < d1 ? d1 : p->vals[u].last;
                if (l0 < d1 || l1 < d0)
                    continue; /* never alive together */
                uint64_t ub = x->slot_off[u], ue = ub + x->slot_cap[u]; /* an end already placed: fits */
                if (off < ue && ub < end) {
                    off = ue;
                    moved = true;
                    fits = ck_add_u64(off, ord[i].cap, &end);
                }
            }
        }
        if (!fits) { /* past 2^64 bytes: no such arena can exist */
            free(ord);
            free(placed);
            return -1;
        }
        x->slot_off[v] = off;
        placed[n_placed++] = v;
        if (end > total)
            total = end;
    }
    free(ord);
    free(placed);
    if (total > x->arena_bytes) {
        void *na = map_bytes(total);
        if (!na)
            return -1;
        unmap_bytes(x->arena, x->arena_bytes);
        x->arena = na;
        x->arena_bytes = total;
    }
    return 0;
}

/* Storage for an integer value of the shape pass; never NULL for a value that got some, even an empty one. */
static void *shape_alloc(eng_exec *x, uint64_t n)
{
    n = n ? (n + 15) / 16 * 16 : 16;
    if (x->shape_used + n > x->shape_cap)
        return NULL;
    void *r = x->shape_buf + x->shape_used;
    x->shape_used += n;
    return r;
}

/* Gives the outputs of step s their storage for this pass. */
static int place_outputs(eng_exec *x, const step *s)
{
    for (int k = 0; k < s->n_out; k++) {
        int v = s->out[k];
        if (v < 0)
            continue;
        rt_val *o = &x->vals[v];
        if (x->shape_pass) {
            /* a Reshape output is always a view and needs no storage of its own */
            x->need[v] = s->op->run == run_reshape ? 0 : o->nbytes;
            o->v.data = NULL;
            if (s->op->shape_op && is_int_dtype(o->v.dtype)) {
                o->v.data = shape_alloc(x, o->nbytes);
                if (!o->v.data) {
                    /* grow the shape buffer and redo this run's shape pass */
                    return 1;
                }
            }
            continue;
        }
        if (x->bound[v].buf) {
            if (o->nbytes > x->bound[v].cap)
                STEP_FAIL(x, s, "output '%s' needs %llu bytes, its buffer holds %llu", x->p->g->values[v].name,
                          (unsigned long long)o->nbytes, (unsigned long long)x->bound[v].cap);
            o->v.data = x->bound[v].buf;
        } else {
            o->v.data = x->arena + x->slot_off[v];
        }
    }
    return 0;
}

static bool outputs_are_int(const eng_exec *x, const step *s)
{
    if (!s->op->shape_op && !s->op->places_outputs)
        return false;
    for (int k = 0; k < s->n_out; k++)
        if (s->out[k] >= 0 && !is_int_dtype(x->vals[s->out[k]].v.dtype))
            return false;
    return true;
}

/* Infers, places and (where this pass runs it) executes one step. */
static int exec_step(eng_exec *x, const step *s, bool shape_pass)
{
    if (x->last_row[s - x->p->steps]) {
        /* Present the input as its last row alone for this step. */
        rt_val *in = &x->vals[s->in[0]];
        rt_val saved = *in;
        if (in->v.rank >= 1 && eng_view_numel(&in->v) > 0) {
            uint64_t row = (uint64_t)in->v.dims[in->v.rank - 1];
            uint64_t rows = eng_view_numel(&in->v) / (row ? row : 1);
            for (int k = 0; k + 1 < in->v.rank; k++)
                in->v.dims[k] = 1;
            if (in->v.data)
                in->v.data = (char *)in->v.data + (rows - 1) * row * eng_dtype_size(in->v.dtype);
            in->nbytes = row * eng_dtype_size(in->v.dtype);
        }
        x->last_row[s - x->p->steps] = false;
        int r = exec_step(x, s, shape_pass);
        x->last_row[s - x->p->steps] = true;
        *in = saved;
        return r;
    }
    if (s->op->infer(x, s) != 0)
        return -1;
    int r = place_outputs(x, s);
    if (r)
        return r;
    /* The shape pass computes integer values only: float data is never
     * needed to know a shape, and has no storage yet. */
    if (shape_pass && !outputs_are_int(x, s))
        return 0;
    struct timespec t0, t1;
    bool timed = x->profiling && !shape_pass;
    if (timed)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    if (s->op->run(x, s) != 0)
        return -1;
    if (timed) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        size_t k = (size_t)(s->op - op_defs);
        x->prof_ns[k] += (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
        x->prof_calls[k]++;
    }
    return 0;
}

static int pass(eng_exec *x, bool shape_pass)
{
    const eng_plan *p = x->p;
    x->shape_pass = shape_pass;
    x->shape_used = 0;
    for (size_t i = 0; i < p->n_steps; i++) {
        const step *s = &p->steps[i];
        if (!s->op->infer || s->silu_head >= 0)
            continue; /* folded constant, or deferred to its fused step */
        if (s->silu_gate >= 0) {
            const rt_val *gv = &x->vals[s->silu_gate], *uv = &x->vals[s->silu_up];
            bool same = gv->v.dtype == ENG_DT_FLOAT && uv->v.dtype == ENG_DT_FLOAT && gv->v.rank == uv->v.rank &&
                        !memcmp(gv->v.dims, uv->v.dims, (size_t)gv->v.rank * sizeof gv->v.dims[0]);
            x->fused_now[i] = same;
            for (int k = 0; k < 2 && !same; k++) {
                int r = exec_step(x, &p->steps[s->silu_steps[k]], shape_pass);
                if (r)
                    return r;
            }
        }
        int r = exec_step(x, s, shape_pass);
        if (r)
            return r;
    }
    return 0;
}

/* Grows a per-run buffer to at least NEED bytes (contents not kept): 0, or -1 out of memory. */
static int ensure_mapped(uint8_t **buf, uint64_t *cap, uint64_t need)
{
    if (need <= *cap)
        return 0;
    unmap_bytes(*buf, *cap);
    uint64_t c = (need + ALIGN - 1) / ALIGN * ALIGN;
    *buf = map_bytes(c);
    *cap = *buf ? c : 0;
    return *buf ? 0 : -1;
}

int eng_exec_run(eng_exec *x, eng_diag *diag)
{
    const eng_plan *p = x->p;
    const eng_graph *g = p->g;
    x->diag = diag;
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = eng_graph_value(g, g->inputs[i].name);
        if (v >= 0 && !x->input_set[v]) {
            eng_diag_add(diag, "graph input '%s' is not set", g->inputs[i].name);
            return -1;
        }
    }
    /* shape pass: every shape, and every byte count, of this run */
    x->scratch_need = 0;
    x->norm_qa_need = 0;
    x->norm_qa_value = -1;
    x->argmax_valid = false;
    int r;
    while ((r = pass(x, true)) == 1) {
        uint64_t cap = x->shape_cap ? x->shape_cap * 2 : 4096;
        uint8_t *nb = realloc(x->shape_buf, cap);
        if (!nb) {
            eng_diag_add(diag, "out of memory for shape values");
            return -1;
        }
        x->shape_buf = nb;
        x->shape_cap = cap;
    }
    if (r != 0)
        return -1;
    bool grow = false;
    for (size_t v = 0; v < g->n_values; v++)
        if (in_arena(x, v) && x->need[v] > x->slot_cap[v])
            grow = true;
    if (grow && layout_arena(x) != 0) {
        eng_diag_add(diag, "out of memory for the activation arena");
        return -1;
    }
    if (ensure_mapped(&x->norm_qa, &x->norm_qa_cap, x->norm_qa_need) != 0) {
        eng_diag_add(diag, "out of memory for quantized activations");
        return -1;
    }
    if (ensure_mapped(&x->scratch, &x->scratch_cap, x->scratch_need) != 0) {
        eng_diag_add(diag, "out of memory for kernel scratch");
        return -1;
    }
    return pass(x, false) == 0 ? 0 : -1;
}

int eng_exec_value(const eng_exec *x, const char *name, eng_view *out)
{
    int v = eng_graph_value(x->p->g, name);
    if (v < 0)
        return -1;
    *out = x->vals[v].v;
    return 0;
}

void eng_exec_set_profiling(eng_exec *x, bool on)
{
    x->profiling = on;
}

size_t eng_exec_profile(const eng_exec *x, eng_prof_entry *out, size_t cap)
{
    size_t n = 0;
    for (size_t k = 0; k < sizeof op_defs / sizeof op_defs[0] && n < cap; k++)
        if (x->prof_calls[k])
            out[n++] = (eng_prof_entry){op_defs[k].op, x->prof_ns[k], x->prof_calls[k]};
    return n;
}

uint64_t eng_exec_arena_bytes(const eng_exec *x)
{
    return x->arena_bytes;
}

uint64_t eng_exec_kv_bytes_moved(const eng_exec *x)
{
    return x->kv_bytes_moved;
}
