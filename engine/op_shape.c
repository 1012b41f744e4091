/*
 * op_shape: adapters of the shape and data-movement ops: Constant (folded at
 * plan time), Shape, Gather (integer gathers in the shape pass, the
 * embedding lookup through the gather kernel), Cast, Reshape (always a
 * view) and Split (a view when only one row is split, a copy otherwise).
 *
 * Threads: see plan_internal.h.
 */
#include "engine/plan_internal.h"

#include <math.h>
#include <stdlib.h>

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
        if (!plan_own(p, buf))
            PREP_FAIL(b, s, "out of memory");
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
        if (!plan_own(p, buf))
            PREP_FAIL(b, s, "out of memory");
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
    else if (table && table->dtype == ENG_DT_BFLOAT16)
        snprintf(s->kernel, sizeof s->kernel, "gather.generic (bf16 rows widened to fp32)");
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
    /* the plan keeps BF16 values in FP32 (lower.c): a BF16 table gives FLOAT rows */
    return set_out(x, s, 0, d->v.dtype == ENG_DT_BFLOAT16 ? ENG_DT_FLOAT : d->v.dtype, orank, od);
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
    bool widen = d->v.dtype == ENG_DT_BFLOAT16;
    for (uint64_t ob = 0; ob < outer; ob++)
        for (uint64_t i = 0; i < n_idx; i++) {
            int64_t v = int_at(&ix->v, i);
            if (v < 0)
                v += dim;
            const uint8_t *from = src + (ob * (uint64_t)dim + (uint64_t)v) * inner;
            if (!widen) {
                memcpy(dst + (ob * n_idx + i) * inner, from, inner);
                continue;
            }
            float *to = (float *)(void *)dst + (ob * n_idx + i) * (inner / 2);
            for (uint64_t e = 0; e < inner / 2; e++) {
                uint16_t h;
                memcpy(&h, from + 2 * e, sizeof h);
                uint32_t u = (uint32_t)h << 16;
                memcpy(&to[e], &u, sizeof u);
            }
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

/* ---- Cast ---------------------------------------------------------------------- */

/* BFLOAT16 is a target, kept as FLOAT: the plan never rounds to BF16 (lower.c). */
static bool cast_supported(int32_t t)
{
    return t == ENG_DT_FLOAT || t == ENG_DT_DOUBLE || t == ENG_DT_BFLOAT16 || is_int_dtype(t);
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
    if (!cast_supported(a->v.dtype) || a->v.dtype == ENG_DT_BFLOAT16)
        STEP_FAIL(x, s, "input type %s is not supported", eng_dtype_name(a->v.dtype));
    return set_out(x, s, 0, s->p.cast.to == ENG_DT_BFLOAT16 ? ENG_DT_FLOAT : s->p.cast.to, a->v.rank, a->v.dims);
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

/* ---- registry rows (op_registry.h) ---- */

const op_def op_constant = {
    .domain = "", .op = "Constant",
    .min_in = 0, .max_in = 0, .min_out = 1, .max_out = 1,
    .attrs = {{"value", ENG_ATTR_TENSOR, false}, {"value_float", ENG_ATTR_FLOAT, false},
              {"value_floats", ENG_ATTR_FLOATS, false}, {"value_int", ENG_ATTR_INT, false},
              {"value_ints", ENG_ATTR_INTS, false}},
    .prepare = prep_constant, .infer = NULL, .run = NULL,
};
const op_def op_shape = {
    .domain = "", .op = "Shape",
    .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .attrs = {{"start", ENG_ATTR_INT, false}, {"end", ENG_ATTR_INT, false}},
    .prepare = prep_shape, .infer = infer_shape, .run = run_shape, .shape_op = true,
};
const op_def op_gather = {
    .domain = "", .op = "Gather",
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = {{"axis", ENG_ATTR_INT, false}},
    .prepare = prep_gather, .infer = infer_gather, .run = run_gather, .shape_op = true,
};
const op_def op_cast = {
    .domain = "", .op = "Cast",
    .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .attrs = {{"to", ENG_ATTR_INT, true}, {"saturate", ENG_ATTR_INT, false}},
    .prepare = prep_cast, .infer = infer_cast, .run = run_cast, .shape_op = true,
};
const op_def op_reshape = {
    .domain = "", .op = "Reshape",
    .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = {{"allowzero", ENG_ATTR_INT, false}},
    .prepare = prep_reshape, .infer = infer_reshape, .run = run_reshape, .places_outputs = true,
};
const op_def op_split = {
    .domain = "", .op = "Split",
    .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 64,
    .attrs = {{"axis", ENG_ATTR_INT, false}, {"num_outputs", ENG_ATTR_INT, false}},
    .prepare = prep_split, .infer = infer_split, .run = run_split, .shape_op = true, .places_outputs = true,
};
