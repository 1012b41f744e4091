/*
 * op_math: adapters of the arithmetic ops: ReduceSum and the integer
 * shape arithmetic (run in the shape pass), and the float elementwise ops
 * Sub, Add, Mul and Sigmoid (the SiLU(gate) * up fusion runs in the final
 * Mul; see fuse.c).
 *
 * Threads: see plan_internal.h.
 */
#include "engine/plan_internal.h"

#include <math.h>
#include <stdlib.h>

typedef struct ew_call { const krn_table *t; krn_ew_args a; krn_ew_fn fn; } ew_call;

static void do_ew(const void *c, size_t b, size_t e)
{
    const ew_call *w = c;
    w->fn(&w->a, b, e);
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
        plan_run_par(x, n, 4096, do_ew, &c);
        return 0;
    }
    if (!a->v.data || !b->v.data)
        return 0; /* float tensors during the shape pass */
    uint64_t n = eng_view_numel(&o->v);
    char op = s->p.binary.op;
    if (a->v.dtype == ENG_DT_FLOAT && op != '-' && eng_view_numel(&a->v) == n && eng_view_numel(&b->v) == n) {
        ew_call c = {&x->p->krn, {a->v.data, b->v.data, o->v.data, n},
                     op == '*' ? x->p->krn.mul.fn : x->p->krn.add.fn};
        plan_run_par(x, n, 4096, do_ew, &c);
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
    plan_run_par(x, n, 4096, do_ew, &c);
    return 0;
}

/* ---- registry rows (op_registry.h) ---- */

const op_def op_reduce_sum = {
    .domain = "", .op = "ReduceSum",
    .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = {{"keepdims", ENG_ATTR_INT, false}, {"noop_with_empty_axes", ENG_ATTR_INT, false}},
    .prepare = prep_reduce, .infer = infer_reduce, .run = run_reduce, .shape_op = true,
};
const op_def op_sub = {
    .domain = "", .op = "Sub",
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .prepare = prep_binary, .infer = infer_binary, .run = run_binary, .shape_op = true,
};
const op_def op_add = {
    .domain = "", .op = "Add",
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .prepare = prep_binary, .infer = infer_binary, .run = run_binary, .shape_op = true,
};
const op_def op_mul = {
    .domain = "", .op = "Mul",
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .prepare = prep_binary, .infer = infer_binary, .run = run_binary, .shape_op = true,
};
const op_def op_sigmoid = {
    .domain = "", .op = "Sigmoid",
    .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .prepare = prep_sigmoid, .infer = infer_unary_same, .run = run_sigmoid,
};
