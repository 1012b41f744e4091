/*
 * op_norm: adapters of SimplifiedLayerNormalization and
 * com.microsoft::SkipSimplifiedLayerNormalization (RMS norms), which may
 * also quantize their output rows for the int8 MatMulNBits that read them
 * (fuse.c decides where).
 *
 * Threads: see plan_internal.h.
 */
#include "engine/plan_internal.h"

typedef struct norm_call { const krn_table *t; krn_norm_args a; bool skip; } norm_call;

static void do_norm(const void *c, size_t b, size_t e)
{
    const norm_call *n = c;
    (n->skip ? n->t->skip_rmsnorm.fn : n->t->rmsnorm.fn)(&n->a, b, e);
}

/* ---- SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization ---------- */

/*
 * Rows of N values per unit of pool work: at least NORM_GRAIN_VALUES values,
 * so that a small norm (Qwen3's per-head q and k norms in decode: 16 and 8
 * rows of 128) runs on the calling thread, where it costs less than waking
 * the pool, while a batch's hidden-state norms (8 streams: 8 rows of 1024)
 * are split: run on one thread they cost 0.94 ms of a 0.6b batch-8 step,
 * split 0.64 ms (bench --batch 8 --profile, 2 threads). The rows are the
 * same either way.
 */
#define NORM_GRAIN_VALUES 4096
static size_t norm_grain(uint64_t n)
{
    return n >= NORM_GRAIN_VALUES ? 1 : (size_t)(NORM_GRAIN_VALUES / (n ? n : 1));
}

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
 * Fused quantization (plan_fuse_norm_quant): where the step's int8 MatMulNBits
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
    plan_run_par(x, rows, norm_grain(n), do_norm, &c);
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
        plan_run_par(x, skip_rows, norm_grain(d), do_norm, &c);
    }
    norm_qa_done(x, s, o->v.data, rows, d);
    return 0;
}

/*
 * RMSNormalization (opset 23): the same computation as
 * SimplifiedLayerNormalization with the same attributes and defaults, so it
 * becomes that step (and takes part in the same fusions).
 */
static int prep_rmsnorm(plan_builder *b, step *s)
{
    s->op = &op_sln;
    return prep_sln(b, s);
}

/* ---- registry rows (op_registry.h) ---- */

const op_def op_sln = {
    .domain = "", .op = "SimplifiedLayerNormalization",
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 2,
    .attrs = {{"axis", ENG_ATTR_INT, false}, {"epsilon", ENG_ATTR_FLOAT, false},
              {"stash_type", ENG_ATTR_INT, false}},
    .prepare = prep_sln, .infer = infer_sln, .run = run_sln,
};
const op_def op_skip_sln = {
    .domain = OP_MS, .op = "SkipSimplifiedLayerNormalization",
    .min_in = 3, .max_in = 4, .min_out = 1, .max_out = 4,
    .attrs = {{"epsilon", ENG_ATTR_FLOAT, false}},
    .prepare = prep_skip_sln, .infer = infer_skip_sln, .run = run_skip_sln,
};
const op_def op_rmsnorm = {
    .domain = "", .op = "RMSNormalization",
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = {{"axis", ENG_ATTR_INT, false}, {"epsilon", ENG_ATTR_FLOAT, false},
              {"stash_type", ENG_ATTR_INT, false}},
    .prepare = prep_rmsnorm, .infer = infer_sln, .run = run_sln,
};
