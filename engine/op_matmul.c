/*
 * op_matmul: the adapter of com.microsoft::MatMulNBits: checks the node
 * and its constant weights at plan time, chooses the int8 or fp32 kernel,
 * reserves the packed copy (pack.c fills it), and at run time quantizes the
 * activations (unless the norm before did) and fans the columns out over
 * the pool, with the greedy argmax folded into the LM head when asked.
 *
 * Threads: see plan_internal.h.
 */
#include "engine/plan_internal.h"
#include "engine/sampler.h"

#include <stdlib.h>

typedef struct mmnb_call { const krn_table *t; krn_mmnb_args a; bool int8; } mmnb_call;

typedef struct quant_call { const krn_table *t; krn_quant_args a; } quant_call;

static void do_mmnb(const void *c, size_t b, size_t e)
{
    const mmnb_call *m = c;
    if (m->a.w.bits8)
        (m->int8 ? m->t->mmnb8_i8.fn : m->t->mmnb8_f32.fn)(&m->a, b, e);
    else
        (m->int8 ? m->t->mmnb_i8.fn : m->t->mmnb_f32.fn)(&m->a, b, e);
}

/*
 * The LM head with greedy sampling: each worker also finds the largest logit
 * of the columns it just wrote, while they are in its cache, and merges it
 * into one key (eng_argmax_key), so nobody reads the whole row again.
 */
typedef struct mmnb_argmax_call { mmnb_call mm; _Atomic uint64_t *keys; } mmnb_argmax_call;

static void do_mmnb_argmax(const void *c, size_t b, size_t e)
{
    const mmnb_argmax_call *m = c;
    do_mmnb(&m->mm, b, e);
    for (size_t r = 0; r < m->mm.a.m; r++) {
        const float *row = m->mm.a.y + r * m->mm.a.y_ld;
        uint64_t k = eng_argmax_key(row, b, e), cur = atomic_load_explicit(&m->keys[r], memory_order_relaxed);
        while (k > cur && !atomic_compare_exchange_weak(&m->keys[r], &cur, k))
            ;
    }
}

/*
 * Outputs written in one pass: a fused Split's parts (fuse_mmnb_split) and
 * the sibling steps' (fuse_mmnb_siblings). Part k is columns [off[k], off[k +
 * 1]) of the pass, each with its own weights and tensor.
 */
typedef struct mmnb_parts_call {
    mmnb_call mm[MMNB_MAX_RUN_PARTS];
    size_t off[MMNB_MAX_RUN_PARTS + 1];
    int n;
} mmnb_parts_call;

static void do_mmnb_parts(const void *c, size_t b, size_t e)
{
    const mmnb_parts_call *p = c;
    for (int k = 0; k < p->n; k++) {
        size_t lo = b > p->off[k] ? b : p->off[k], hi = e < p->off[k + 1] ? e : p->off[k + 1];
        if (lo < hi)
            do_mmnb(&p->mm[k], lo - p->off[k], hi - p->off[k]);
    }
}

/* Adds the outputs of MatMulNBits step S (its Split's parts, or its one output) to PC, as C computes them. */
static void add_parts(mmnb_parts_call *pc, const mmnb_call *c, eng_exec *x, const step *s)
{
    const mmnb_params *m = &s->p.mmnb;
    size_t col = 0; /* of S's own columns */
    for (int k = 0; k < (m->n_parts ? m->n_parts : 1); k++) {
        size_t cols = m->n_parts ? m->part_cols[k] : m->w.n;
        mmnb_call *mm = &pc->mm[pc->n];
        *mm = *c;
        mm->a.w = m->n_parts ? krn_q4_columns(&m->w, col, cols) : m->w;
        mm->a.y = OUT(x, s, k)->v.data;
        mm->a.y_ld = cols;
        pc->off[pc->n + 1] = pc->off[pc->n] + cols;
        pc->n++;
        col += cols;
    }
}

static void do_quant(const void *c, size_t b, size_t e)
{
    const quant_call *q = c;
    q->t->quant_a8.fn(&q->a, b, e);
}

/* What the kernel name adds for the weights' packed form. */
const char *plan_pack_note(const krn_q4_weights *w)
{
    if (!w->packed)
        return "";
    if (w->packed_zp)
        return w->packed_bf16 ? " (packed, bf16 scales, zero points)" : " (packed, zero points)";
    return w->packed_bf16 ? " (packed, bf16 scales)" : " (packed)";
}

/* Whether T is [D0] (FLAT) or [N, D1]: ONNX Runtime's shapes of MatMulNBits' scales and zero points. */
static bool per_column(const eng_tensor *t, uint64_t flat, int64_t n, uint64_t d1)
{
    return (t->rank == 1 && (uint64_t)t->dims[0] == flat) ||
           (t->rank == 2 && t->dims[0] == n && (uint64_t)t->dims[1] == d1);
}

static int prep_mmnb(plan_builder *b, step *s)
{
    const eng_node *n = s->node;
    int64_t K = eng_node_attr_int(n, "K", 0), N = eng_node_attr_int(n, "N", 0);
    int64_t bits = eng_node_attr_int(n, "bits", 4), bs = eng_node_attr_int(n, "block_size", 0);
    int64_t acc = eng_node_attr_int(n, "accuracy_level", 0);
    if (bits != 4 && bits != 8)
        PREP_FAIL(b, s, "attribute 'bits' = %lld is not supported (only 4 and 8)", (long long)bits);
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
    if (!mmnb_sizes_of(K, N, bs, (int)bits, &z))
        PREP_FAIL(b, s, "attributes 'N' = %lld, 'K' = %lld and 'block_size' = %lld overflow: input B would pass "
                  "the largest tensor (%llu bytes)", (long long)N, (long long)K, (long long)bs,
                  (unsigned long long)ENG_MAX_TENSOR_BYTES);
    uint64_t kb = z.kb, blob = (uint64_t)bs * (uint64_t)bits / 8;
    /* Shapes as ONNX Runtime checks them (matmul_nbits_helper.h), so that no tensor of the right size but
     * another layout, a transposed [k_blocks, N] for one, is read as if it were the right one. */
    if (!B || B->dtype != ENG_DT_UINT8 || B->n_elems != z.b_bytes || B->rank != 3 || B->dims[0] != N ||
        (uint64_t)B->dims[1] != kb)
        PREP_FAIL(b, s, "input B must be a UINT8 initializer of shape [%lld, %llu, %llu]", (long long)N,
                  (unsigned long long)kb, (unsigned long long)blob);
    if (!sc || sc->dtype != ENG_DT_FLOAT || sc->n_elems != z.n_scales || !per_column(sc, z.n_scales, N, kb))
        PREP_FAIL(b, s, "input scales must be a FLOAT initializer of shape [%llu] or [%lld, %llu]",
                  (unsigned long long)z.n_scales, (long long)N, (unsigned long long)kb);
    if (s->n_in > 3 && s->in[3] >= 0) {
        if (!zp || zp->dtype != ENG_DT_UINT8)
            PREP_FAIL(b, s, "input zero_points must be a UINT8 initializer (other types are not supported)");
        if (zp->n_elems != z.zp_bytes || !per_column(zp, z.zp_bytes, N, z.zp_bytes / (uint64_t)N))
            PREP_FAIL(b, s, "input zero_points must have shape [%llu] or [%lld, %llu] (packed %lld-bit zero points)",
                      (unsigned long long)z.zp_bytes, (long long)N, (unsigned long long)(z.zp_bytes / (uint64_t)N),
                      (long long)bits);
    }
    if (s->n_in > 5 && s->in[5] >= 0 &&
        (!bias || bias->dtype != ENG_DT_FLOAT || bias->n_elems != (uint64_t)N || bias->rank != 1))
        PREP_FAIL(b, s, "input bias must be a FLOAT initializer of shape [%lld]", (long long)N);
    mmnb_params *m = &s->p.mmnb;
    m->w = (krn_q4_weights){.b_data = B->data, .scales = sc->data, .zero_pts = zp ? zp->data : NULL,
                            .bias = bias ? bias->data : NULL, .n = (size_t)N, .k = (size_t)K,
                            .block_size = (size_t)bs, .k_blocks = (size_t)kb, .bits8 = bits == 8};
    /* ONNX Runtime runs accuracy_level 4 with int8 activations where the CPU
     * has int8 kernels (every x86-64 with AVX2 does); lower levels in fp32. */
    m->int8 = acc == 4 && !b->p->opts.matmul_fp32;
    /* 8-bit codes are packed for the tables whose kernel reads them so, else run in place */
    bool packing = m->int8 && (m->w.bits8 ? b->p->krn.q8_packed : b->p->krn.q4_packed);
    if (packing && !plan_size_packs(b))
        PREP_FAIL(b, s, "out of memory sizing the repacked weights");
    m->w.packed_bf16 = packing && b->scales_bf16[n - b->p->g->nodes];
    /* Zero points all 8 (8-bit: 128) pack as none (the same bits, smaller records), as node_pack_size
     * found: they are the default, so the weights are read as having none. */
    m->w.packed_zp = packing && zp && b->zp_records[n - b->p->g->nodes];
    if (packing && zp && !m->w.packed_zp)
        m->w.zero_pts = NULL;
    uint64_t resident = B->nbytes + sc->nbytes;
    size_t pack = packing ? krn_q4_pack_size(&m->w) : 0;
    if (pack) {
        void *buf = plan_packed_slot(b, s, pack, &resident);
        if (!buf)
            PREP_FAIL(b, s, "out of memory repacking %zu bytes of weights", pack);
        /* Filled by plan_pack_all() once every node is prepared, in parallel. */
        m->w.packed = buf;
        m->pack_b = B;
        m->pack_scales = sc;
        m->pack_zp = zp;
        /* the packed copy holds the codes, the scales and the zero points */
        plan_mark_repacked(b->p, B);
        plan_mark_repacked(b->p, sc);
        plan_mark_repacked(b->p, zp);
    }
    /* (unpacked, the weights are used in place from the mapping: resident as they are;
     * packed, the arena is counted once, when it is allocated) */
    b->p->prepared_bytes += resident + (zp && !pack ? zp->nbytes : 0) + (bias ? bias->nbytes : 0);
    if (m->int8)
        snprintf(s->kernel, sizeof s->kernel, "%s + %s%s", b->p->krn.quant_a8.name,
                 m->w.bits8 ? b->p->krn.mmnb8_i8.name : b->p->krn.mmnb_i8.name, plan_pack_note(&m->w));
    else
        snprintf(s->kernel, sizeof s->kernel, "%s", m->w.bits8 ? b->p->krn.mmnb8_f32.name : b->p->krn.mmnb_f32.name);
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
    for (int k = 0; k < s->p.mmnb.n_parts; k++) {
        d[a->v.rank - 1] = (int64_t)s->p.mmnb.part_cols[k];
        if (set_out(x, s, k, ENG_DT_FLOAT, a->v.rank, d) != 0)
            return -1;
    }
    if (!s->p.mmnb.n_parts && set_out(x, s, 0, ENG_DT_FLOAT, a->v.rank, d) != 0)
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
            plan_run_par(x, rows, 1, do_quant, &q);
        c.a.qa = x->scratch;
    }
    if (m->n_parts || m->n_sibs) {
        mmnb_parts_call pc = {.n = 0};
        for (int i = 0; i <= m->n_sibs; i++)
            add_parts(&pc, &c, x, i < m->n_sibs ? &x->p->steps[m->sibs[i]] : s);
        plan_run_par(x, pc.off[pc.n], 16, do_mmnb_parts, &pc);
    } else if (x->argmax_step == (int)(s - x->p->steps) && rows <= x->argmax_cap) {
        /* One key per row: the last row, or in a batched run each sequence's. */
        mmnb_argmax_call ac = {c, x->argmax_keys};
        for (size_t r = 0; r < rows; r++)
            atomic_store(&x->argmax_keys[r], 0);
        plan_run_par(x, m->w.n, 16, do_mmnb_argmax, &ac);
        x->argmax_rows = rows;
    } else {
        plan_run_par(x, m->w.n, 16, do_mmnb, &c);
    }
    return 0;
}

/* ---- lowered DequantizeLinear -> MatMul (lower.c) ---------------------------------- */

/*
 * The same kernels as MatMulNBits over the same 4-bit codes: a weight whose
 * zero points are all 8 is repacked like MatMulNBits' (the int8 kernels'
 * packed form, scales kept as bfloat16 when they are), any other gets a copy
 * in MatMulNBits' own layout with its zero points, which the kernels read in
 * place. pack_all() fills either from the mapped tensors.
 */
int plan_prep_q4(plan_builder *b, step *s, const q4_src *src, const char *what)
{
    mmnb_params *m = &s->p.mmnb;
    s->op = &op_matmulnbits;
    s->lowered = true;
    s->origin = what;
    m->w = (krn_q4_weights){.n = src->n, .k = src->k, .block_size = 32};
    krn_q4_weights_set_blocks(&m->w);
    m->qdq = src;
    for (int i = 0; i < 3; i++) /* packed or copied below: the kernels never read them */
        plan_mark_repacked(b->p, src->tensors[i]);
    m->int8 = !b->p->opts.matmul_fp32;
    bool packing = m->int8 && b->p->krn.q4_packed && !m->w.bits8; /* 8-bit codes run in place */
    size_t kb = m->w.k_blocks;
    if (packing) {
        if (!plan_size_packs(b))
            PREP_FAIL(b, s, "out of memory sizing the repacked weights");
        m->w.packed_bf16 = b->scales_bf16[s - b->p->steps]; /* plan_q4_scales_bf16(), or the cache's record */
        m->w.packed_zp = !src->zp_all_8;
        uint64_t counted = 0;
        void *buf = plan_packed_slot(b, s, krn_q4_pack_size(&m->w), &counted);
        if (!buf)
            PREP_FAIL(b, s, "out of memory repacking %zu bytes of weights", krn_q4_pack_size(&m->w));
        m->w.packed = buf;
        b->p->prepared_bytes += counted;
    } else {
        /* MatMulNBits' layout: [n, k_blocks, 16] codes, fp32 scales, packed zero points (none when all 8) */
        uint8_t *bd = malloc(src->n * kb * 16 + 1);
        float *sc = malloc(src->n * kb * sizeof *sc + 1);
        uint8_t *zp = src->zp_all_8 ? NULL : calloc(src->n * ((kb + 1) / 2) + 1, 1);
        if (!plan_own(b->p, bd) | !plan_own(b->p, sc) | (!src->zp_all_8 && !plan_own(b->p, zp)))
            PREP_FAIL(b, s, "out of memory copying %zu x %zu weights", src->n, src->k);
        m->w.b_data = bd;
        m->w.scales = sc;
        m->w.zero_pts = zp;
        b->p->prepared_bytes += src->n * kb * (16 + sizeof *sc) + (zp ? src->n * ((kb + 1) / 2) : 0);
    }
    if (m->int8)
        snprintf(s->kernel, sizeof s->kernel, "%s: %s + %s%s%s", what, b->p->krn.quant_a8.name,
                 b->p->krn.mmnb_i8.name, plan_pack_note(&m->w),
                 src->zp_all_8 || m->w.packed ? "" : " (zero points)");
    else
        snprintf(s->kernel, sizeof s->kernel, "%s: %s%s", what, b->p->krn.mmnb_f32.name,
                 src->zp_all_8 ? "" : " (zero points)");
    return 0;
}

/* ---- MatMul with a constant float weight (lower.c) -------------------------------- */

typedef struct mmf_call { const krn_table *t; krn_mmf_args a; } mmf_call;

static void do_mmf(const void *c, size_t b, size_t e)
{
    const mmf_call *m = c;
    m->t->mm_f.fn(&m->a, b, e);
}

int plan_prep_matmul_f(plan_builder *b, step *s, const eng_tensor *w, bool nk)
{
    s->op = &op_matmul_f;
    s->lowered = true;
    mmf_params *f = &s->p.mmf;
    *f = (mmf_params){.w = w->data, .w_ld = (size_t)w->dims[1], .bf16 = w->dtype == ENG_DT_BFLOAT16, .nk = nk,
                      .n = (size_t)w->dims[nk ? 0 : 1], .k = (size_t)w->dims[nk ? 1 : 0]};
    /* used in place from the mapping */
    b->p->prepared_bytes += w->nbytes;
    snprintf(s->kernel, sizeof s->kernel, "%s (%s weight%s, in place)", b->p->krn.mm_f.name,
             f->bf16 ? "bf16" : "fp32", nk ? ", transposed" : "");
    return 0;
}

static int infer_mmf(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    const mmf_params *f = &s->p.mmf;
    if (a->v.dtype != ENG_DT_FLOAT)
        STEP_FAIL(x, s, "input A must be a float tensor");
    if (a->v.rank < 1 || a->v.dims[a->v.rank - 1] != (int64_t)f->k)
        STEP_FAIL(x, s, "input A's last dimension must be K = %zu", f->k);
    int64_t d[ENG_MAX_RANK];
    memcpy(d, a->v.dims, sizeof d);
    d[a->v.rank - 1] = (int64_t)f->n;
    return set_out(x, s, 0, ENG_DT_FLOAT, a->v.rank, d);
}

static int run_mmf(eng_exec *x, const step *s)
{
    const rt_val *a = IN(x, s, 0);
    const mmf_params *f = &s->p.mmf;
    size_t rows = eng_view_numel(&a->v) / f->k;
    mmf_call c = {&x->p->krn, {.a = a->v.data, .a_ld = f->k, .w = f->w, .w_ld = f->w_ld, .w_bf16 = f->bf16,
                                .w_nk = f->nk, .y = OUT(x, s, 0)->v.data, .y_ld = f->n, .m = rows, .n = f->n,
                                .k = f->k}};
    if (rows)
        plan_run_par(x, f->n, 16, do_mmf, &c);
    return 0;
}

/* ---- embedding rows of the tied INT4 weight (lower.c) ------------------------------ */

static int infer_gather_q4(eng_exec *x, const step *s)
{
    const rt_val *ix = IN(x, s, 1);
    const krn_q4_weights *w = &s->p.gq4.head->p.mmnb.w;
    if (ix->v.dtype != ENG_DT_INT64 && ix->v.dtype != ENG_DT_INT32)
        STEP_FAIL(x, s, "indices must be INT64 or INT32, not %s", eng_dtype_name(ix->v.dtype));
    if (ix->v.rank + 1 > ENG_MAX_RANK)
        STEP_FAIL(x, s, "indices of rank %d are too many", ix->v.rank);
    int64_t d[ENG_MAX_RANK];
    memcpy(d, ix->v.dims, sizeof d);
    d[ix->v.rank] = (int64_t)w->k;
    return set_out(x, s, 0, ENG_DT_FLOAT, ix->v.rank + 1, d);
}

static int run_gather_q4(eng_exec *x, const step *s)
{
    const rt_val *ix = IN(x, s, 1);
    float *o = OUT(x, s, 0)->v.data;
    const krn_q4_weights *w = &s->p.gq4.head->p.mmnb.w;
    uint64_t n = eng_view_numel(&ix->v);
    int64_t rows = (int64_t)w->n;
    for (uint64_t i = 0; i < n; i++) {
        int64_t r = int_at(&ix->v, i);
        if (r < -rows || r >= rows)
            STEP_FAIL(x, s, "index %lld out of range [-%lld, %lld)", (long long)r, (long long)rows, (long long)rows);
        krn_q4_dequant_row(w, (size_t)(r < 0 ? r + rows : r), o + i * w->k);
    }
    return 0;
}

/* ---- registry rows (op_registry.h) ---- */

const op_def op_matmulnbits = {
    .domain = OP_MS, .op = "MatMulNBits",
    .min_in = 3, .max_in = 6, .min_out = 1, .max_out = 1,
    .attrs = {{"K", ENG_ATTR_INT, true}, {"N", ENG_ATTR_INT, true}, {"bits", ENG_ATTR_INT, false},
              {"block_size", ENG_ATTR_INT, false}, {"accuracy_level", ENG_ATTR_INT, false}},
    .prepare = prep_mmnb, .infer = infer_mmnb, .run = run_mmnb,
};

/* Internal steps of lowered graphs (lower.c); no ONNX op names them. */
const op_def op_matmul_f = {
    .domain = "", .op = "MatMul (float weight)", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .infer = infer_mmf, .run = run_mmf,
};
const op_def op_gather_q4 = {
    .domain = "", .op = "Gather (tied INT4 embedding)", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .infer = infer_gather_q4, .run = run_gather_q4,
};
