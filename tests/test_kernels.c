/*
 * test_kernels: the kernel layer (kernels/).
 *
 * Two kinds of checks. (1) The scalar reference kernels against direct
 * double-precision evaluations of each op's definition (graph-contract.md
 * sections 2-5). (2) Every SIMD level the CPU has against the reference on
 * awkward shapes and edge values; levels the CPU lacks are skipped and named on
 * stderr. Every tolerance is a worst-case rounding bound derived in the comment
 * above its use, with u = 2^-24 the unit roundoff of fp32; none is a tuned
 * constant. White-box: the quantized-activation layout comes from
 * kernels/krn_internal.h.
 */
#include <check.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/krn.h"
#include "kernels/krn_internal.h"
#include "tests/check_main.h"

#define U 0x1p-24 /* unit roundoff of fp32 */

/* ------------------------------------------------------------------------- */
/* Helpers                                                                     */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rnext(rng *r)
{
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

static float runif(rng *r, float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(rnext(r) >> 40) / 16777216.0);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *frand(size_t n, rng *r, float lo, float hi)
{
    float *p = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        p[i] = runif(r, lo, hi);
    return p;
}

#ifdef QD_EMU_AVX512
/*
 * kernels/avx512/ compiled a second time over SIMDe's portable AVX-512
 * (tests/emu512/immintrin.h), under these names: on a CPU without AVX-512
 * the avx512 kernels' code is still compared with the reference.
 */
void krn_emu512_mmnb_i8(const krn_mmnb_args *a, size_t b, size_t e);
void krn_emu512_mmnb_i8_vnni(const krn_mmnb_args *a, size_t b, size_t e);
void krn_emu512_mmnb8_i8_vnni(const krn_mmnb_args *a, size_t b, size_t e);
void krn_emu512_mmnb_f32(const krn_mmnb_args *a, size_t b, size_t e);
void krn_emu512_gqa(const krn_gqa_args *a, size_t b, size_t e);
void krn_emu512_gqa_vnni(const krn_gqa_args *a, size_t b, size_t e);
/* kernels/avx2/mmnb_avxvnni.c over SIMDe's VPDPBUSD, for CPUs without AVX-VNNI. */
void krn_emu_mmnb_i8_avxvnni(const krn_mmnb_args *a, size_t b, size_t e);
void krn_emu_mmnb8_i8_avxvnni(const krn_mmnb_args *a, size_t b, size_t e);
#endif

/*
 * The kernel tables krn.c builds: the reference, AVX2 with the plain int8
 * matmul and with the AVX-VNNI one, and AVX-512 with the plain int8 matmul
 * and with the VNNI one. The tests run each one on every
 * machine that can: natively where the CPU, as the probe reports it
 * (QWEN3D_CPU_HIDE included), runs it; else the avx512 tables from the
 * SIMDe-emulated objects (and the AVX-VNNI matmul's), when the tests were
 * built with them and the CPU runs AVX2, which those objects are compiled for.
 */
typedef enum tab_id { TAB_REF, TAB_AVX2, TAB_AVXVNNI, TAB_AVX512, TAB_AVX512VNNI, TAB_COUNT } tab_id;
typedef enum tab_how { TAB_NONE, TAB_NATIVE, TAB_EMULATED } tab_how;
static const char *const tab_names[TAB_COUNT] = {"ref", "avx2", "avxvnni", "avx512", "avx512vnni"};
static const char *const how_names[] = {"not run", "native", "emulated"};

static tab_how table_get(tab_id id, krn_table *out)
{
    krn_table t;
    if (id == TAB_REF)
        return krn_table_for_level(KRN_LEVEL_REF, out) == KRN_OK ? TAB_NATIVE : TAB_NONE;
    if (id == TAB_AVX2 || id == TAB_AVXVNNI) {
        if (krn_table_for_level(KRN_LEVEL_AVX2, &t) != KRN_OK)
            return TAB_NONE;
        *out = t; /* krn.c's pick: the AVX-VNNI matmul exactly where the CPU has it */
        if (id == TAB_AVX2) { /* the plain one, which an AVX-VNNI CPU runs too */
            out->mmnb_i8.fn = krn_avx2_mmnb_i8;
            out->mmnb_i8.name = "mmnb_i8.avx2";
            out->mmnb8_i8.fn = krn_avx2_mmnb8_i8;
            out->mmnb8_i8.name = "mmnb8_i8.avx2";
            return TAB_NATIVE;
        }
        if (krn_cpu_detect().avxvnni)
            return TAB_NATIVE;
#ifdef QD_EMU_AVX512
        out->mmnb_i8.fn = krn_emu_mmnb_i8_avxvnni;
        out->mmnb_i8.name = "mmnb_i8.avxvnni (emulated)";
        out->mmnb8_i8.fn = krn_emu_mmnb8_i8_avxvnni;
        out->mmnb8_i8.name = "mmnb8_i8.avxvnni (emulated)";
        return TAB_EMULATED;
#else
        return TAB_NONE;
#endif
    }
    bool vnni = id == TAB_AVX512VNNI, cpu_vnni = krn_cpu_detect().avx512vnni;
    if (krn_table_for_level(KRN_LEVEL_AVX512, &t) == KRN_OK && (cpu_vnni || !vnni)) {
        if (vnni == cpu_vnni)
            *out = t; /* the one krn.c picks for this CPU */
        else          /* a VNNI CPU runs the plain kernel too, which krn.c never picks there */
            krn_table_avx512(out, krn_avx512_mmnb_f32, krn_avx512_mmnb_i8, NULL, false, krn_avx512_gqa);
        return TAB_NATIVE;
    }
#ifdef QD_EMU_AVX512
    if (krn_table_for_level(KRN_LEVEL_AVX2, &t) == KRN_OK) {
        krn_table_avx512(out, krn_emu512_mmnb_f32, vnni ? krn_emu512_mmnb_i8_vnni : krn_emu512_mmnb_i8,
                         vnni ? krn_emu512_mmnb8_i8_vnni : NULL, vnni, vnni ? krn_emu512_gqa_vnni : krn_emu512_gqa);
        out->level_name = vnni ? "avx512vnni (emulated)" : "avx512 (emulated)";
        out->mmnb_f32.name = "mmnb_f32.avx512 (emulated)";
        out->mmnb_i8.name = vnni ? "mmnb_i8.avx512vnni (emulated)" : "mmnb_i8.avx512 (emulated)";
        if (vnni)
            out->mmnb8_i8.name = "mmnb8_i8.avx512vnni (emulated)";
        out->gqa.name = vnni ? "gqa.avx512vnni (emulated)" : "gqa.avx512 (emulated)";
        return TAB_EMULATED;
    }
#endif
    return TAB_NONE;
}

/* Room for every table simd_tables() may give. */
#define MAX_TABS TAB_COUNT

/*
 * The SIMD tables to compare with ref. The matmul and attention tests take
 * all of them, natively or emulated; the others one per level the CPU has
 * natively, since the avx512 tables differ from AVX2's only in the matmul
 * and attention kernels.
 */
static int simd_tables(krn_table *tabs, bool matmuls)
{
    int n = 0;
    for (int id = TAB_AVX2; id < TAB_COUNT; id++) {
        tab_how how = table_get((tab_id)id, &tabs[n]);
        if (how == TAB_NATIVE && !matmuls && id == TAB_AVX512 && krn_cpu_detect().avx512vnni)
            continue; /* the level's own table is the VNNI one */
        if (!matmuls && id == TAB_AVXVNNI)
            continue; /* AVX2's but for the int8 matmul */
        if (how == TAB_NATIVE || (how == TAB_EMULATED && matmuls))
            n++;
    }
    return n;
}

static krn_table ref_tab(void)
{
    krn_table t;
    ck_assert_int_eq(krn_table_for_level(KRN_LEVEL_REF, &t), KRN_OK);
    return t;
}

/* |got - want| <= tol, with a message naming the case. */
#define CHECK_CLOSE(got, want, tol, ...)                                                     \
    do {                                                                                     \
        double g_ = (got), w_ = (want), t_ = (tol);                                          \
        if (!(fabs(g_ - w_) <= t_)) {                                                        \
            char m_[256];                                                                    \
            snprintf(m_, sizeof m_, __VA_ARGS__);                                            \
            ck_abort_msg("%s: got %.9g want %.9g diff %.3g tol %.3g", m_, g_, w_,           \
                         fabs(g_ - w_), t_);                                                 \
        }                                                                                    \
    } while (0)

/* ------------------------------------------------------------------------- */
/* Dispatch                                                                    */

START_TEST(levels_and_names)
{
    krn_level l;
    ck_assert_int_eq(krn_level_parse("avx2", &l), KRN_OK);
    ck_assert_int_eq(l, KRN_LEVEL_AVX2);
    ck_assert_int_eq(krn_level_parse("AVX2", &l), KRN_EINVAL);
    ck_assert_str_eq(krn_level_name(KRN_LEVEL_AVX512), "avx512");
    ck_assert_str_eq(krn_strerror(KRN_ERANGE), "index out of range");

    /* Before krn_init() the active table is the reference, fully populated. */
    const krn_table *t = krn_active();
    ck_assert_int_eq(t->level, KRN_LEVEL_REF);
    ck_assert_str_eq(t->mmnb_i8.name, "mmnb_i8.ref");

    krn_level best = krn_cpu_best_level();
    for (int lv = 0; lv < KRN_LEVEL_COUNT; lv++) {
        krn_table tab;
        int rc = krn_table_for_level((krn_level)lv, &tab);
        if (lv > (int)best) {
            ck_assert_int_eq(rc, KRN_ENOTSUP);
            continue;
        }
        ck_assert_int_eq(rc, KRN_OK);
        const void *fns[] = {tab.quant_a8.fn, tab.mmnb_f32.fn, tab.mmnb_i8.fn, tab.rmsnorm.fn,
                             tab.skip_rmsnorm.fn, tab.rotary.fn, tab.gqa.fn, tab.sigmoid.fn,
                             tab.mul.fn, tab.add.fn, tab.silu_mul.fn, tab.gather.fn};
        const char *names[] = {tab.quant_a8.name, tab.mmnb_f32.name, tab.mmnb_i8.name,
                               tab.rmsnorm.name, tab.skip_rmsnorm.name, tab.rotary.name,
                               tab.gqa.name, tab.sigmoid.name, tab.mul.name, tab.add.name,
                               tab.silu_mul.name, tab.gather.name};
        for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
            ck_assert_ptr_nonnull(fns[i]);
            ck_assert_ptr_nonnull(names[i]);
            ck_assert_ptr_nonnull(strchr(names[i], '.'));
        }
    }

    /* QWEN3D_KERNELS lowers the level, is capped at the CPU's, and rejects junk. */
    setenv("QWEN3D_KERNELS", "ref", 1);
    ck_assert_int_eq(krn_init(), KRN_OK);
    ck_assert_int_eq(krn_active()->level, KRN_LEVEL_REF);
    setenv("QWEN3D_KERNELS", "avx512", 1);
    ck_assert_int_eq(krn_init(), KRN_OK);
    ck_assert_int_eq(krn_active()->level, best);
    setenv("QWEN3D_KERNELS", "fast", 1);
    ck_assert_int_eq(krn_init(), KRN_EENV);
    ck_assert_int_eq(krn_active()->level, best);
    char line[KRN_DESCRIBE_LEN];
    krn_describe(line, sizeof line);
    ck_assert_ptr_nonnull(strstr(line, "QWEN3D_KERNELS=fast ignored"));
    unsetenv("QWEN3D_KERNELS");
    ck_assert_int_eq(krn_init(), KRN_OK);
    ck_assert_int_eq(krn_active()->level, best);
    krn_describe(line, sizeof line);
    ck_assert_ptr_nonnull(strstr(line, krn_level_name(best)));
    fprintf(stderr, "test_kernels: %s\n", line);
    for (int id = 0; id < TAB_COUNT; id++) {
        krn_table tab;
        tab_how how = table_get((tab_id)id, &tab);
        fprintf(stderr, "test_kernels: table %s %s%s%s\n", tab_names[id], how_names[how], how ? ": " : "",
                how ? tab.mmnb_i8.name : "");
    }
}
END_TEST

START_TEST(plan_checks)
{
    uint8_t b[64];
    float s[4], y[8], a[64];
    char qa[1024];
    krn_mmnb_args m = {.w = {.b_data = b, .scales = s, .n = 2, .k = 40, .block_size = 32},
                       .m = 1, .a = a, .a_ld = 40, .qa = qa, .y = y, .y_ld = 2};
    krn_q4_weights_set_blocks(&m.w);
    ck_assert_uint_eq(m.w.k_blocks, 2);
    ck_assert_int_eq(krn_mmnb_check(&m, false), KRN_OK);
    ck_assert_int_eq(krn_mmnb_check(&m, true), KRN_OK);
    m.w.block_size = 24;
    ck_assert_int_eq(krn_mmnb_check(&m, false), KRN_EINVAL);
    m.w.block_size = 8;
    ck_assert_int_eq(krn_mmnb_check(&m, false), KRN_EINVAL);
    m.w.block_size = 32;
    m.w.k_blocks = 1;
    ck_assert_int_eq(krn_mmnb_check(&m, false), KRN_EINVAL);
    m.w.k_blocks = 2;
    m.qa = NULL;
    ck_assert_int_eq(krn_mmnb_check(&m, true), KRN_EINVAL);

    /* One padded record per row, large enough for values and block stats. */
    ck_assert_uint_eq(krn_quant_a8_size(3, 40, 32) % 64, 0);
    ck_assert_uint_ge(krn_quant_a8_size(1, 40, 32), 64 + 2 * 12);

    float kv[128];
    krn_gqa_args g = {.q = kv, .q_ld = 64, .k_cache = kv, .v_cache = kv, .kv_head_stride = 32,
                      .kv_tok_stride = 8, .out = y, .out_ld = 64, .seq = 1, .n_heads = 8,
                      .n_kv_heads = 4, .head_dim = 8, .scale = 1, .local_window = -1};
    ck_assert_int_eq(krn_gqa_check(&g), KRN_OK);
    g.n_kv_heads = 3;
    ck_assert_int_eq(krn_gqa_check(&g), KRN_EINVAL);
    g.n_kv_heads = 4;
    g.head_dim = KRN_MAX_HEAD_DIM + 1;
    ck_assert_int_eq(krn_gqa_check(&g), KRN_EINVAL);
}
END_TEST

/* ------------------------------------------------------------------------- */
/* MatMulNBits                                                                 */

typedef struct qweights {
    krn_q4_weights w;
    uint8_t *b, *zp;
    float *scales, *bias;
} qweights;

/*
 * Random 4-bit weights. The padding nibbles of a partial last block are random
 * too: the kernels must ignore them. Scales take both signs.
 */
static void qw_make(qweights *q, size_t n, size_t k, size_t bs, bool zp, bool bias, float smag, rng *r)
{
    memset(q, 0, sizeof *q);
    q->w.n = n;
    q->w.k = k;
    q->w.block_size = bs;
    krn_q4_weights_set_blocks(&q->w);
    size_t kb = q->w.k_blocks, nb = n * kb * bs / 2;
    q->b = xmalloc(nb);
    for (size_t i = 0; i < nb; i++)
        q->b[i] = (uint8_t)rnext(r);
    q->scales = frand(n * kb, r, -smag, smag);
    if (zp) {
        size_t nz = n * ((kb + 1) / 2);
        q->zp = xmalloc(nz);
        for (size_t i = 0; i < nz; i++)
            q->zp[i] = (uint8_t)rnext(r);
    }
    if (bias)
        q->bias = frand(n, r, -1, 1);
    q->w.b_data = q->b;
    q->w.scales = q->scales;
    q->w.zero_pts = q->zp;
    q->w.bias = q->bias;
}

static void qw_free(qweights *q)
{
    free(q->b);
    free(q->zp);
    free(q->scales);
    free(q->bias);
}

/* W[n][k] exactly as the fp32 reference rounds it. */
static float wval(const krn_q4_weights *w, size_t n, size_t k)
{
    return (float)((int)krn_q4_get(w, n, k) - krn_q4_zp(w, n, k / w->block_size)) *
           w->scales[n * w->k_blocks + k / w->block_size];
}

static void *qa_alloc(size_t m, size_t k, size_t bs)
{
    size_t sz = krn_quant_a8_size(m, k, bs);
    void *p = aligned_alloc(64, sz);
    ck_assert_ptr_nonnull(p);
    memset(p, 0xA5, sz); /* row padding stays this; the compared parts are all written */
    return p;
}

static void quantize(const krn_table *t, const float *a, size_t m, size_t k, size_t bs, void *qa)
{
    krn_quant_args qa_args = {.a = a, .a_ld = k, .m = m, .k = k, .block_size = bs, .qa = qa};
    t->quant_a8.fn(&qa_args, 0, m);
}

/*
 * fp32 reference against a double evaluation of sum_k a_k W_k (+ bias). The
 * reference forms each W_k as a rounded product (relative error u) and sums K
 * products in fp32 (recursive summation, error <= (K-1)u sum|a W| to first
 * order) and adds the bias: |err| <= (K + 2) u (sum |a_k W_k| + |bias|).
 */
START_TEST(mmnb_f32_ref_vs_double)
{
    static const size_t ks[] = {32, 40, 100, 1024};
    static const size_t bss[] = {16, 32, 64, 128};
    krn_table ref = ref_tab();
    rng r = {0x1234567};
    for (size_t ik = 0; ik < 4; ik++)
        for (size_t ib = 0; ib < 4; ib++) {
            size_t k = ks[ik], bs = bss[ib], m = 3, n = 9;
            bool zp = (ik + ib) & 1;
            qweights q;
            qw_make(&q, n, k, bs, zp, ib & 1, 0.1f, &r);
            float *a = frand(m * k, &r, -2, 2), *y = xmalloc(m * n * sizeof(float));
            krn_mmnb_args args = {.w = q.w, .m = m, .a = a, .a_ld = k, .y = y, .y_ld = n};
            ck_assert_int_eq(krn_mmnb_check(&args, false), KRN_OK);
            ref.mmnb_f32.fn(&args, 0, n);
            for (size_t i = 0; i < m; i++)
                for (size_t j = 0; j < n; j++) {
                    double want = q.bias ? q.bias[j] : 0, mag = fabs(want);
                    for (size_t kk = 0; kk < k; kk++) {
                        double wd = ((int)krn_q4_get(&q.w, j, kk) - krn_q4_zp(&q.w, j, kk / bs)) *
                                    (double)q.scales[j * q.w.k_blocks + kk / bs];
                        want += a[i * k + kk] * wd;
                        mag += fabs(a[i * k + kk] * wd);
                    }
                    CHECK_CLOSE(y[i * n + j], want, (k + 2) * U * mag, "k=%zu bs=%zu m=%zu n=%zu",
                                k, bs, i, j);
                }
            free(a);
            free(y);
            qw_free(&q);
        }
}
END_TEST

/*
 * The quantizer against its definition, including exact ties: with amax = 127
 * the multiplier 127/amax is exactly 1, so x.5 inputs are ties and must round
 * to even. Also: zero blocks, tiny (subnormal) and huge blocks, the padding of a
 * partial block, the storage order, and identical bytes from every level.
 */
START_TEST(quant_a8_definition)
{
    const size_t bs = 32, k = 72, kb = 3; /* last block has 8 values and 24 padding slots */
    float a[72];
    rng r = {99};
    for (size_t i = 0; i < k; i++)
        a[i] = runif(&r, -3, 3);
    /* Block 0: ties. */
    static const float ties[] = {127, 0.5f, 1.5f, 2.5f, 3.5f, -0.5f, -1.5f, -2.5f, 126.5f, -126.5f};
    static const int8_t tie_q[] = {127, 0, 2, 2, 4, 0, -2, -2, 126, -126};
    for (size_t i = 0; i < 10; i++)
        a[i] = ties[i];
    /* Block 1: all zero except it is not: half zero, half subnormal. */
    for (size_t i = 32; i < 64; i++)
        a[i] = i < 48 ? 0.0f : (float)(i - 47) * 1e-44f;
    /* Block 2 (partial): huge. */
    for (size_t i = 64; i < 72; i++)
        a[i] = (i & 1 ? -3e38f : 1e38f) * ((float)(i - 63) / 8);

    krn_table ref = ref_tab();
    void *qa = qa_alloc(1, k, bs);
    quantize(&ref, a, 1, k, bs, qa);
    const int8_t *q = krn_qa_q(qa, 0, kb, bs);
    const float *sc = krn_qa_scale(qa, 0, kb, bs);
    const int32_t *qs = krn_qa_qsum(qa, 0, kb, bs);
    for (size_t i = 0; i < 10; i++)
        ck_assert_int_eq(q[krn_qa_slot(i, bs)], tie_q[i]);
    ck_assert(sc[0] == 1.0f);
    for (size_t b = 0; b < kb; b++) {
        float amax = 0;
        int32_t sum = 0;
        size_t len = k - b * bs < bs ? k - b * bs : bs;
        for (size_t j = 0; j < len; j++)
            amax = fmaxf(amax, fabsf(a[b * bs + j]));
        ck_assert(sc[b] == amax / 127.0f);
        for (size_t j = 0; j < bs; j++) {
            int v = q[b * bs + krn_qa_slot(j, bs)];
            sum += v;
            if (j >= len) {
                ck_assert_int_eq(v, 0);
                continue;
            }
            /* In exact arithmetic a/sA is within half a step of v (plus the rounding of 127/amax). */
            double exact = (double)a[b * bs + j] * 127.0 / amax;
            ck_assert_msg(fabs(exact - v) <= 0.5 + 3 * 127 * U, "b=%zu j=%zu a=%g q=%d", b, j,
                          a[b * bs + j], v);
            ck_assert(v >= -127 && v <= 127);
        }
        ck_assert_int_eq(qs[b], sum);
    }
    /* Subnormal inputs still quantize to the full range. */
    ck_assert_int_eq(q[bs + krn_qa_slot(31, bs)], 127);

    /* All-zero row: zero values and scales. */
    float z[40] = {0};
    void *qz = qa_alloc(1, 40, 32);
    quantize(&ref, z, 1, 40, 32, qz);
    for (size_t i = 0; i < 64; i++)
        ck_assert_int_eq(krn_qa_q(qz, 0, 2, 32)[i], 0);
    ck_assert(krn_qa_scale(qz, 0, 2, 32)[0] == 0.0f && krn_qa_scale(qz, 0, 2, 32)[1] == 0.0f);

    /* The 64-k copy holds the same values as [evens | odds] per chunk, and per-pair stats. */
    const int8_t *q64 = krn_qa_q64(qa, 0, kb, bs);
    for (size_t j = 0; j < krn_qa_chunks(kb, bs) * 64; j++) {
        int want = j < kb * bs ? q[(j / bs) * bs + krn_qa_slot(j % bs, bs)] : 0;
        ck_assert_int_eq(q64[(j / 64) * 64 + krn_qa_slot64(j % 64)], want);
    }
    for (size_t p = 0; p < krn_qa_pairs(kb); p++)
        for (size_t l = 0; l < 8; l++) {
            size_t b = 2 * p + l / 4;
            ck_assert(krn_qa_sa8(qa, 0, kb, bs)[8 * p + l] == (b < kb ? sc[b] : 0.0f));
            ck_assert_int_eq(krn_qa_qs8(qa, 0, kb, bs)[8 * p + l], b < kb ? qs[b] : 0);
        }

    krn_table tabs[MAX_TABS];
    int nl = simd_tables(tabs, false);
    for (int l = 0; l < nl; l++) {
        void *q2 = qa_alloc(1, k, bs);
        quantize(&tabs[l], a, 1, k, bs, q2);
        ck_assert_msg(memcmp(q2, qa, krn_qa_used_bytes(kb, bs)) == 0, "%s", tabs[l].quant_a8.name);
        free(q2);
    }
    free(qa);
    free(qz);
}
END_TEST

/*
 * int8 mode against fp32 mode (both reference): the difference is the
 * activation quantization. Element k of block b is represented as qa * sA with
 * |qa sA - a| <= sA/2 + 3u|a| (half a step, plus the roundings of 127/amax and
 * of amax/127), so |y_i8 - y_f32| <= sum_k (sA_b/2 + 3u|a_k|) |W_k| plus the
 * fp32 evaluation errors of both sides, each <= (K + 2) u sum |a_k W_k| (for
 * the int8 side with |a| replaced by |a| + sA/2).
 */
START_TEST(mmnb_i8_vs_f32_ref)
{
    static const size_t ks[] = {32, 40, 96, 100, 1024};
    krn_table ref = ref_tab();
    rng r = {77};
    for (size_t ik = 0; ik < 5; ik++)
        for (int zp = 0; zp < 2; zp++) {
            size_t k = ks[ik], m = 4, n = 13, bs = 32;
            qweights q;
            qw_make(&q, n, k, bs, zp, true, 0.05f, &r);
            float *a = frand(m * k, &r, -4, 4);
            for (size_t i = 0; i < 32 && i < k; i++)
                a[k + i] = 0; /* row 1 block 0: all zero */
            float *y8 = xmalloc(m * n * sizeof(float)), *yf = xmalloc(m * n * sizeof(float));
            void *qa = qa_alloc(m, k, bs);
            quantize(&ref, a, m, k, bs, qa);
            krn_mmnb_args args = {.w = q.w, .m = m, .a = a, .a_ld = k, .qa = qa, .y = y8, .y_ld = n};
            ref.mmnb_i8.fn(&args, 0, n);
            args.y = yf;
            ref.mmnb_f32.fn(&args, 0, n);
            for (size_t i = 0; i < m; i++) {
                const float *sa = krn_qa_scale(qa, i, q.w.k_blocks, bs);
                for (size_t j = 0; j < n; j++) {
                    double qerr = 0, mag = fabs(q.bias[j]);
                    for (size_t kk = 0; kk < k; kk++) {
                        double aw = fabs(wval(&q.w, j, kk));
                        double ak = fabs(a[i * k + kk]);
                        qerr += (sa[kk / bs] / 2 + 3 * U * ak) * aw;
                        mag += (ak + sa[kk / bs] / 2) * aw;
                    }
                    double tol = qerr + 2 * (k + 2) * U * mag;
                    CHECK_CLOSE(y8[i * n + j], yf[i * n + j], tol, "k=%zu zp=%d m=%zu n=%zu", k, zp, i, j);
                }
            }
            free(a);
            free(y8);
            free(yf);
            free(qa);
            qw_free(&q);
        }
}
END_TEST

/*
 * The bfloat16 record of scales (packed_bf16): the same weights with their
 * scales cut to bfloat16 values, packed both ways, must give the same
 * results bit for bit (the record only stores the same floats in fewer
 * bytes); scales that do not fit are refused.
 */
static void mmnb_bf16_case(const krn_table *lv, const qweights *q, size_t m, const float *a, size_t lda,
                           const void *qa, size_t ldy)
{
    krn_q4_weights w = q->w;
    size_t n = w.n, count = n * w.k_blocks;
    w.packed_bf16 = true;
    w.packed_zp = w.zero_pts != NULL;
    if (!krn_q4_scales_fit_bf16(w.scales, count)) {
        uint8_t probe[64];
        ck_assert_int_eq(krn_q4_pack(&w, probe), KRN_EINVAL);
    }
    float *cut = xmalloc(count * sizeof *cut);
    for (size_t i = 0; i < count; i++) {
        uint32_t u;
        memcpy(&u, &w.scales[i], sizeof u);
        u &= 0xFFFF0000u;
        memcpy(&cut[i], &u, sizeof u);
    }
    ck_assert(krn_q4_scales_fit_bf16(cut, count));
    w.scales = cut;
    float *y[2];
    for (int v = 0; v < 2; v++) {
        w.packed_bf16 = v == 1;
        size_t sz = krn_q4_pack_size(&w);
        ck_assert_uint_eq(sz, (n + 15) / 16 * 2 * w.k_blocks * (w.block_size * 4 + (v ? 16 : 32) + (w.packed_zp ? 8 : 0)));
        void *pk = aligned_alloc(64, (sz + 63) & ~(size_t)63);
        ck_assert_ptr_nonnull(pk);
        ck_assert_int_eq(krn_q4_pack(&w, pk), KRN_OK);
        w.packed = pk;
        y[v] = xmalloc(m * ldy * sizeof(float));
        for (size_t i = 0; i < m * ldy; i++)
            y[v][i] = -12345.0f;
        krn_mmnb_args args = {.w = w, .m = m, .a = a, .a_ld = lda, .qa = qa, .y = y[v], .y_ld = ldy};
        size_t cut_at = n / 3 + (n > 1);
        lv->mmnb_i8.fn(&args, 0, cut_at);
        lv->mmnb_i8.fn(&args, cut_at, n);
        free(pk);
        w.packed = NULL;
    }
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < ldy; j++)
            ck_assert_msg(memcmp(&y[0][i * ldy + j], &y[1][i * ldy + j], sizeof(float)) == 0,
                          "%s (packed, bf16 scales) m=%zu n=%zu k=%zu at (%zu,%zu): %a vs %a", lv->mmnb_i8.name,
                          m, n, w.k, i, j, (double)y[1][i * ldy + j], (double)y[0][i * ldy + j]);
    free(y[0]);
    free(y[1]);
    free(cut);
}

/*
 * Zero points in the records (packed_zp) that are all 8 must give the bits of
 * the records without them: zq * zp8_sum is then exactly zp8_sum. Q has no
 * zero points.
 */
static void mmnb_zp8_case(const krn_table *lv, const qweights *q, size_t m, const void *qa, size_t ldy)
{
    size_t n = q->w.n, zbytes = n * ((q->w.k_blocks + 1) / 2);
    uint8_t *eights = xmalloc(zbytes);
    memset(eights, 0x88, zbytes);
    float *y[2];
    for (int v = 0; v < 2; v++) {
        krn_q4_weights w = q->w;
        w.zero_pts = v ? eights : NULL;
        w.packed_zp = v == 1;
        size_t sz = krn_q4_pack_size(&w);
        ck_assert_uint_eq(sz, (n + 15) / 16 * 2 * w.k_blocks * (w.block_size * 4 + 32 + (v ? 8 : 0)));
        void *pk = aligned_alloc(64, (sz + 63) & ~(size_t)63);
        ck_assert_ptr_nonnull(pk);
        ck_assert_int_eq(krn_q4_pack(&w, pk), KRN_OK);
        w.packed = pk;
        y[v] = xmalloc(m * ldy * sizeof(float));
        krn_mmnb_args args = {.w = w, .m = m, .qa = qa, .y = y[v], .y_ld = ldy};
        lv->mmnb_i8.fn(&args, 0, n);
        free(pk);
    }
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            ck_assert_msg(memcmp(&y[0][i * ldy + j], &y[1][i * ldy + j], sizeof(float)) == 0,
                          "%s (packed, zero points 8) m=%zu n=%zu k=%zu at (%zu,%zu): %a vs %a", lv->mmnb_i8.name, m,
                          n, q->w.k, i, j, (double)y[1][i * ldy + j], (double)y[0][i * ldy + j]);
    free(y[0]);
    free(y[1]);
    free(eights);
}

/*
 * One shape, every table of tabs against the reference (evaluated once) in
 * both modes.
 * fp32 mode: both sides form identical W_k and differ only in summation order
 * (vector lanes, block partial sums): |diff| <= 2 (K + 16) u (sum|a_k W_k| + |bias|).
 * int8 mode: per-block int32 dots are exact on both sides; the fp32 part sums
 * kb products isum_b * d_b (d_b identical) in different orders and lane
 * splits: |diff| <= 2 (kb + 16) u (sum_b |d_b| sum_j |qa_j||q_j - zp| + |bias|).
 * Packed weights take the zero point off in floating point instead, per block
 * t_b = fl(sA_b * dot_b - fl(zp_b * fl(sA_b * qsum_b))) then acc += t_b * sB_b
 * (zp_b * fl(...) exact for zp_b = 8): that adds at most (2 u + u^2) zp_b
 * |sA_b qsum_b| to each block's term before sB_b, covered by
 * (2 u + u^2) sum_b |d_b| zp_b |qsum_b| on top (and, for subnormal d_b, the
 * reference's own rounding of d_b times the block's integer sums).
 * Columns outside the range must stay untouched.
 */
static void mmnb_case(const krn_table *tabs, int nt, size_t m, size_t n, size_t k, size_t bs, bool zp,
                      bool bias, float amag, float smag, rng *r)
{
    krn_table ref = ref_tab(), avx2;
    bool have_avx2 = table_get(TAB_AVX2, &avx2) == TAB_NATIVE; /* the plain AVX2 int8 matmul */
    qweights q;
    qw_make(&q, n, k, bs, zp, bias, smag, r);
    size_t lda = k + 3, ldy = n + 2, kb = q.w.k_blocks;
    float *a = frand(m * lda, r, -amag, amag);
    if (m > 1) /* an all-zero activation block */
        memset(a + lda, 0, (k < bs ? k : bs) * sizeof(float));
    float *yr = xmalloc(m * ldy * sizeof(float)), *yl = xmalloc(m * ldy * sizeof(float));
    float *ya = xmalloc(m * ldy * sizeof(float));
    double *tols = xmalloc(m * n * sizeof(double));
    void *qa = qa_alloc(m, k, bs);
    krn_quant_args qargs = {.a = a, .a_ld = lda, .m = m, .k = k, .block_size = bs, .qa = qa};
    ref.quant_a8.fn(&qargs, 0, m);
    /* Each table's quantizer must write the same bytes (values, scales, sums) for every row. */
    void *qal = qa_alloc(m, k, bs);
    bool any_packed = false;
    for (int t = 0; t < nt; t++) {
        qargs.qa = qal;
        tabs[t].quant_a8.fn(&qargs, 0, m / 2);
        tabs[t].quant_a8.fn(&qargs, m / 2, m);
        for (size_t i = 0; i < m; i++)
            ck_assert_msg(memcmp(krn_qa_q(qa, i, kb, bs), krn_qa_q(qal, i, kb, bs), krn_qa_used_bytes(kb, bs)) == 0,
                          "%s m=%zu k=%zu bs=%zu row %zu", tabs[t].quant_a8.name, m, k, bs, i);
        any_packed |= tabs[t].q4_packed;
    }
    free(qal);

    /* Tables that read repacked weights run the int8 mode a second time from them (zero points in the records). */
    void *packed = NULL;
    q.w.packed_zp = zp;
    size_t psize = krn_q4_pack_size(&q.w);
    if (any_packed && psize) {
        packed = aligned_alloc(64, (psize + 63) & ~(size_t)63);
        ck_assert_ptr_nonnull(packed);
        ck_assert_int_eq(krn_q4_pack(&q.w, packed), KRN_OK);
    }
    for (int mode = 0; mode < 3; mode++) {
        if (mode == 2 && !packed)
            break;
        /* The reference and the bound once per mode; then every table against them. */
        krn_mmnb_args args = {.w = q.w, .m = m, .a = a, .a_ld = lda, .qa = qa, .y = yr, .y_ld = ldy};
        ck_assert_int_eq(krn_mmnb_check(&args, mode >= 1), KRN_OK);
        (mode ? ref.mmnb_i8.fn : ref.mmnb_f32.fn)(&args, 0, n);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                double mag = bias ? fabs(q.bias[j]) : 0;
                double tol;
                if (mode == 0) {
                    for (size_t kk = 0; kk < k; kk++)
                        mag += fabs(a[i * lda + kk] * wval(&q.w, j, kk));
                    tol = 2.0 * (k + 16) * U * mag;
                } else {
                    const int8_t *qq = krn_qa_q(qa, i, kb, bs);
                    const float *sa = krn_qa_scale(qa, i, kb, bs);
                    const int32_t *qs = krn_qa_qsum(qa, i, kb, bs);
                    double zp_tol = 0; /* the packed form's extra terms, below */
                    for (size_t b = 0; b < kb; b++) {
                        double d = fabs((double)sa[b] * q.scales[j * kb + b]);
                        long isum = 0;
                        for (size_t kk = b * bs; kk < k && kk < (b + 1) * bs; kk++) {
                            int prod = qq[b * bs + krn_qa_slot(kk % bs, bs)] *
                                       ((int)krn_q4_get(&q.w, j, kk) - krn_q4_zp(&q.w, j, b));
                            mag += d * abs(prod);
                            isum += prod;
                        }
                        int zpb = krn_q4_zp(&q.w, j, b);
                        zp_tol += (2.0 * U + U * U) * d * zpb * abs(qs[b]);
                        /* The reference's d_b = fl(sA_b sB_b) may be subnormal: its absolute
                         * error 2^-150 comes back times |isum_b|; the packed kernel's terms
                         * are products of normal numbers until the last one. */
                        zp_tol += 0x1p-150 * (double)(labs(isum) + (long)zpb * abs(qs[b]));
                    }
                    tol = 2.0 * (kb + 16) * U * mag;
                    if (mode == 2)
                        tol += zp_tol;
                }
                /*
                 * Products in the subnormal range round with an absolute error of up to
                 * 2^-150 instead of a relative one; at most k + kb + 16 of them per side.
                 */
                tols[i * n + j] = tol + 2.0 * (k + kb + 16) * 0x1p-150;
            }
        /* Every table's packed int8 kernel does the AVX2 kernel's operations per column: the same bits. */
        if (mode == 2 && have_avx2) {
            args.w.packed = packed;
            args.y = ya;
            avx2.mmnb_i8.fn(&args, 0, n);
        }
        for (int t = 0; t < nt; t++) {
            const krn_table *lv = &tabs[t];
            if (mode == 2 && !lv->q4_packed)
                continue;
            for (size_t i = 0; i < m * ldy; i++)
                yl[i] = -12345.0f;
            args.y = yl;
            args.w.packed = mode == 2 ? packed : NULL;
            krn_mmnb_fn fn = mode ? lv->mmnb_i8.fn : lv->mmnb_f32.fn;
            /* Split the columns unevenly, as a thread pool would. */
            size_t cut = n / 3 + (n > 1);
            fn(&args, 0, cut);
            for (size_t i = 0; i < m; i++) /* a range cut inside a tile stores only its own columns */
                for (size_t j = cut; j < ldy; j++)
                    ck_assert_msg(yl[i * ldy + j] == -12345.0f,
                                  "%s%s m=%zu n=%zu k=%zu: column %zu past the range %zu written",
                                  mode ? lv->mmnb_i8.name : lv->mmnb_f32.name, mode == 2 ? " (packed)" : "", m, n, k,
                                  j, cut);
            fn(&args, cut, n);
            for (size_t i = 0; i < m; i++) {
                for (size_t j = 0; j < n; j++) {
                    CHECK_CLOSE(yl[i * ldy + j], yr[i * ldy + j], tols[i * n + j],
                                "%s%s m=%zu n=%zu k=%zu bs=%zu zp=%d at (%zu,%zu)",
                                mode ? lv->mmnb_i8.name : lv->mmnb_f32.name, mode == 2 ? " (packed)" : "", m, n,
                                k, bs, zp, i, j);
                    if (mode == 2 && have_avx2 && lv->mmnb_i8.fn != avx2.mmnb_i8.fn)
                        ck_assert_msg(memcmp(&yl[i * ldy + j], &ya[i * ldy + j], sizeof(float)) == 0,
                                      "%s (packed) m=%zu n=%zu k=%zu at (%zu,%zu): %a, %s gives %a",
                                      lv->mmnb_i8.name, m, n, k, i, j, (double)yl[i * ldy + j], avx2.mmnb_i8.name,
                                      (double)ya[i * ldy + j]);
                }
                for (size_t j = n; j < ldy; j++)
                    ck_assert(yl[i * ldy + j] == -12345.0f);
            }
        }
    }
    for (int t = 0; t < nt && packed; t++)
        if (tabs[t].q4_packed) {
            mmnb_bf16_case(&tabs[t], &q, m, a, lda, qa, ldy);
            if (!zp)
                mmnb_zp8_case(&tabs[t], &q, m, qa, ldy);
        }
    free(packed);
    free(a);
    free(yr);
    free(yl);
    free(ya);
    free(tols);
    free(qa);
    qw_free(&q);
}

/*
 * Which tables run natively and which emulated, on this CPU and on the
 * smaller ones QWEN3D_CPU_HIDE makes of it: natively exactly where the
 * features left allow, and every table one way or the other wherever AVX2
 * runs and the tests have the emulation. Also which avx512 matmul krn.c
 * picks and which level krn_init() chooses under the hook, and that the
 * emulated tables a hidden feature calls for really run here.
 */
START_TEST(table_selection)
{
    unsetenv("QWEN3D_CPU_HIDE");
    unsetenv("QWEN3D_KERNELS");
    krn_cpu_features cpu = krn_cpu_detect();
    bool avx2 = cpu.avx2 && cpu.fma && cpu.f16c;
    bool avx512 = avx2 && cpu.avx512f && cpu.avx512bw && cpu.avx512vl, vnni = avx512 && cpu.avx512vnni;
#ifdef QD_EMU_AVX512
    const bool emu = true;
#else
    const bool emu = false;
#endif
    /* Each list, and what of the real CPU it leaves: AVX2, AVX-512 F/BW/VL, VNNI. */
    static const struct {
        const char *hide;
        bool avx2, avx512, vnni;
    } cases[] = {
        {"", true, true, true},
        {"avx512vnni", true, true, false},
        {"avx512f", true, false, false},
        {"avx512vl,avx512vnni", true, false, false},
        {"avxvnni", true, true, true},
        {"f16c", false, false, true},
        {"avx2", false, false, true},
    };
    rng r = {99};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *hd = cases[c].hide;
        setenv("QWEN3D_CPU_HIDE", hd, 1);
        bool has2 = avx2 && cases[c].avx2, has512 = avx512 && cases[c].avx512;
        bool hasvnni = has512 && vnni && cases[c].vnni;
        krn_cpu_features f = krn_cpu_detect();
        ck_assert_msg(f.avx512f == (cpu.avx512f && !strstr(hd, "avx512f")), "hide '%s': avx512f", hd);
        ck_assert_msg(f.avx512vnni == (cpu.avx512vnni && f.avx512f && !strstr(hd, "avx512vnni")),
                      "hide '%s': avx512vnni", hd);
        ck_assert_msg(f.avxvnni == (cpu.avxvnni && !strstr(hd, "avxvnni")), "hide '%s': avxvnni", hd);
        ck_assert_msg(f.avx512bw == cpu.avx512bw, "hide '%s' hid avx512bw", hd);
        krn_level want = has512 ? KRN_LEVEL_AVX512 : has2 ? KRN_LEVEL_AVX2 : KRN_LEVEL_REF;
        ck_assert_msg(krn_cpu_best_level() == want, "hide '%s': best level %s, want %s", hd,
                      krn_level_name(krn_cpu_best_level()), krn_level_name(want));

        /* The avx512 table krn.c builds for this CPU has the VNNI matmul exactly when VNNI is left. */
        krn_table t;
        ck_assert_int_eq(krn_table_for_level(KRN_LEVEL_AVX512, &t), has512 ? KRN_OK : KRN_ENOTSUP);
        if (has512) {
            ck_assert_msg(t.mmnb_i8.fn == (hasvnni ? krn_avx512_mmnb_i8_vnni : krn_avx512_mmnb_i8),
                          "hide '%s': krn.c picks %s", hd, t.mmnb_i8.name);
            ck_assert_str_eq(t.mmnb_i8.name, hasvnni ? "mmnb_i8.avx512vnni" : "mmnb_i8.avx512");
        }

        /* Native where the features allow, else emulated where AVX2 runs; never neither. */
        bool hasavxvnni = has2 && cpu.avxvnni && !strstr(hd, "avxvnni");
        ck_assert_int_eq(krn_table_for_level(KRN_LEVEL_AVX2, &t), has2 ? KRN_OK : KRN_ENOTSUP);
        if (has2)
            ck_assert_msg(t.mmnb_i8.fn == (hasavxvnni ? krn_avx2_mmnb_i8_avxvnni : krn_avx2_mmnb_i8),
                          "hide '%s': krn.c picks %s on the avx2 level", hd, t.mmnb_i8.name);
        bool native[TAB_COUNT] = {true, has2, hasavxvnni, has512, hasvnni};
        krn_table emu_tabs[TAB_COUNT];
        int n_emu = 0;
        for (int id = 0; id < TAB_COUNT; id++) {
            tab_how how = table_get((tab_id)id, &t);
            bool emulable = id == TAB_AVXVNNI || id >= TAB_AVX512;
            tab_how expect = native[id] ? TAB_NATIVE : (emulable && has2 && emu) ? TAB_EMULATED : TAB_NONE;
            ck_assert_msg(how == expect, "hide '%s': table %s %s, want %s", hd, tab_names[id], how_names[how],
                          how_names[expect]);
            if (how == TAB_NATIVE && id == TAB_AVXVNNI)
                ck_assert(t.mmnb_i8.fn == krn_avx2_mmnb_i8_avxvnni);
            if (how == TAB_NATIVE && id >= TAB_AVX512)
                ck_assert(t.mmnb_i8.fn == (id == TAB_AVX512VNNI ? krn_avx512_mmnb_i8_vnni : krn_avx512_mmnb_i8));
            if (how == TAB_EMULATED) {
                ck_assert_ptr_nonnull(strstr(t.mmnb_i8.name, "emulated"));
                emu_tabs[n_emu++] = t;
            }
            if (has2 && emu)
                ck_assert_msg(how != TAB_NONE, "hide '%s': table %s is tested nowhere", hd, tab_names[id]);
        }
        if (n_emu) {
            mmnb_case(emu_tabs, n_emu, 3, 33, 100, 32, false, true, 2.0f, 0.1f, &r);
            mmnb_case(emu_tabs, n_emu, 1, 17, 256, 32, true, false, 2.0f, 0.1f, &r);
        }

        /* krn_init() chooses the best level left, and says what was hidden. */
        setenv("QWEN3D_KERNELS", "avx512", 1);
        ck_assert_int_eq(krn_init(), KRN_OK);
        ck_assert_int_eq(krn_active()->level, want);
        if (has512)
            ck_assert_str_eq(krn_active()->mmnb_i8.name, hasvnni ? "mmnb_i8.avx512vnni" : "mmnb_i8.avx512");
        char line[KRN_DESCRIBE_LEN], note[64];
        krn_describe(line, sizeof line);
        snprintf(note, sizeof note, "QWEN3D_CPU_HIDE=%s", hd);
        ck_assert_msg(!*hd || strstr(line, note), "hide '%s': %s", hd, line);
        unsetenv("QWEN3D_KERNELS");
    }

    /* An unknown name is refused and named; the known ones are still hidden. */
    setenv("QWEN3D_CPU_HIDE", "avx512vnni,sse9", 1);
    ck_assert_int_eq(krn_init(), KRN_EENV);
    char line[KRN_DESCRIBE_LEN];
    krn_describe(line, sizeof line);
    ck_assert_msg(strstr(line, "QWEN3D_CPU_HIDE: unknown sse9 ignored"), "%s", line);
    ck_assert(!krn_cpu_detect().avx512vnni);
    unsetenv("QWEN3D_CPU_HIDE");
    ck_assert_int_eq(krn_init(), KRN_OK);
}
END_TEST

START_TEST(mmnb_levels_grid)
{
    static const size_t ms[] = {1, 2, 3, 7, 16, 33};
    static const size_t ns[] = {1, 7, 31, 33, 127, 129};
    static const size_t ks[] = {32, 64, 96, 1024, 40, 100};
    krn_table tabs[MAX_TABS];
    int nl = simd_tables(tabs, true);
    if (nl == 0)
        fprintf(stderr, "test_kernels: no SIMD level on this CPU, grid skipped\n");
    rng r = {2024};
    for (size_t im = 0; im < 6; im++)
        for (size_t in = 0; in < 6; in++)
            for (size_t ik = 0; ik < 6; ik++) {
                /* Keep the largest products out to bound the run time. */
                if (ms[im] * ns[in] * ks[ik] > 33 * 129 * 100)
                    continue;
                mmnb_case(tabs, nl, ms[im], ns[in], ks[ik], 32, (im + in + ik) & 1, ik & 1, 2.0f, 0.1f, &r);
            }
    /* The large-K cases at a few sizes each. */
    for (int zp = 0; zp < 2; zp++) {
        mmnb_case(tabs, nl, 1, 129, 1024, 32, zp, true, 2.0f, 0.1f, &r);
        mmnb_case(tabs, nl, 7, 33, 1024, 32, zp, false, 2.0f, 0.1f, &r);
        mmnb_case(tabs, nl, 33, 7, 1024, 32, zp, true, 2.0f, 0.1f, &r);
        /* K beyond one unpacked GEMM segment (32 block pairs), even and odd block counts. */
        mmnb_case(tabs, nl, 6, 9, 4160, 32, zp, true, 2.0f, 0.1f, &r);
        mmnb_case(tabs, nl, 5, 6, 4120, 32, zp, false, 2.0f, 0.1f, &r);
        mmnb_case(tabs, nl, 1, 6, 4120, 32, zp, false, 2.0f, 0.1f, &r);
        /* More rows than one row block (64). */
        mmnb_case(tabs, nl, 70, 5, 96, 32, zp, true, 2.0f, 0.1f, &r);
    }
}
END_TEST

/*
 * Every projection shape of the Qwen3 0.6B and 4B graphs (K x N: fused QKV,
 * o_proj, gate/up, down, LM head), decode (M = 1) and a short prefill (M = 5),
 * each level against the reference in both modes, in place and repacked.
 */
START_TEST(mmnb_levels_projection_shapes)
{
    static const size_t shapes[][2] = {
        {1024, 4096}, {2048, 1024}, {1024, 3072}, {3072, 1024}, {1024, 151936},  /* 0.6B */
        {2560, 6144}, {4096, 2560}, {2560, 9728}, {9728, 2560}, {2560, 151936},  /* 4B */
    };
    krn_table tabs[MAX_TABS];
    int nl = simd_tables(tabs, true);
    rng r = {1717};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t k = shapes[i][0], n = shapes[i][1];
        mmnb_case(tabs, nl, 1, n, k, 32, false, false, 2.0f, 0.1f, &r);
        if (n < 100000) /* the LM head runs on one row: the prompt's last */
            mmnb_case(tabs, nl, 5, n, k, 32, false, false, 2.0f, 0.1f, &r);
    }
}
END_TEST

START_TEST(mmnb_levels_block_sizes_and_edges)
{
    krn_table tabs[MAX_TABS];
    int nl = simd_tables(tabs, true);
    rng r = {31337};
    static const size_t bss[] = {16, 64, 128, 256};
    for (size_t ib = 0; ib < 4; ib++)
        for (int zp = 0; zp < 2; zp++) {
            size_t bs = bss[ib];
            mmnb_case(tabs, nl, 1, 9, bs * 3, bs, zp, true, 2.0f, 0.1f, &r);
            mmnb_case(tabs, nl, 5, 7, bs * 2 + 8, bs, zp, false, 2.0f, 0.1f, &r);
            mmnb_case(tabs, nl, 2, 33, 24, bs, zp, true, 2.0f, 0.1f, &r); /* k < one block */
            /* Register tiles of several rows over several column tiles, a partial last block. */
            mmnb_case(tabs, nl, 17, 40, bs * 5 + 40, bs, zp, !zp, 2.0f, 0.1f, &r);
        }
    /* Blocks of several groups: huge and tiny magnitudes, the Qwen3 widths. */
    mmnb_case(tabs, nl, 3, 31, 300, 128, false, false, 1e30f, 1e-3f, &r);
    mmnb_case(tabs, nl, 3, 31, 300, 64, true, false, 1e-30f, 1e3f, &r);
    mmnb_case(tabs, nl, 8, 48, 1024, 128, false, false, 2.0f, 0.1f, &r);
    mmnb_case(tabs, nl, 1, 129, 3072, 128, true, true, 2.0f, 0.1f, &r);
    /* Huge and tiny magnitudes, both in activations and in scales. */
    mmnb_case(tabs, nl, 3, 31, 100, 32, false, false, 1e30f, 1e-3f, &r);
    mmnb_case(tabs, nl, 3, 31, 100, 32, true, false, 1e-30f, 1e3f, &r);
    mmnb_case(tabs, nl, 2, 7, 64, 32, false, false, 1e-39f, 1.0f, &r); /* subnormal A */
    mmnb_case(tabs, nl, 2, 7, 64, 32, false, true, 1.0f, 1e-20f, &r);
    /* The same with zero points (packed into the records where a table packs). */
    mmnb_case(tabs, nl, 3, 31, 100, 32, true, false, 1e30f, 1e-3f, &r);
    mmnb_case(tabs, nl, 2, 7, 64, 32, true, false, 1e-39f, 1.0f, &r);
    mmnb_case(tabs, nl, 17, 7, 64, 32, true, true, 1.0f, 1e-20f, &r);
}
END_TEST

/*
 * Batch invariance: a row's output must not depend on which rows share the
 * call. Every level computes M rows at once (M = 3, 8, 9, 13, 17, 37: register
 * tiles of several sizes and their tails) and each row again alone (M = 1),
 * in both modes, the int8 one in place and from repacked weights with fp32
 * and bfloat16 scale records; the two must be the same bits. Odd N (a tile
 * pair with a lone last tile, a partial tile) and K with a partial last block
 * or an odd block count. The M-row results are also held against the
 * reference (mmnb_case).
 */
static void rows_alone_case(const krn_table *lv, const qweights *q, const float *a, size_t lda, size_t m,
                            const void *pk, bool bf16, int mode)
{
    const size_t n = q->w.n, k = q->w.k, bs = q->w.block_size, ldy = n + 1;
    krn_table ref = ref_tab();
    krn_q4_weights w = q->w;
    w.packed = pk;
    w.packed_bf16 = bf16;
    w.packed_zp = w.zero_pts != NULL; /* the records hold Q's zero points */
    void *qa = qa_alloc(m, k, bs), *qa1 = qa_alloc(1, k, bs);
    krn_quant_args qargs = {.a = a, .a_ld = lda, .m = m, .k = k, .block_size = bs, .qa = qa};
    ref.quant_a8.fn(&qargs, 0, m);
    float *y = xmalloc(m * ldy * sizeof(float)), *y1 = xmalloc(ldy * sizeof(float));
    krn_mmnb_args args = {.w = w, .m = m, .a = a, .a_ld = lda, .qa = qa, .y = y, .y_ld = ldy};
    krn_mmnb_fn fn = mode ? lv->mmnb_i8.fn : lv->mmnb_f32.fn;
    size_t cut = n / 3 + 1;
    fn(&args, 0, cut);
    fn(&args, cut, n);
    for (size_t i = 0; i < m; i++) {
        krn_quant_args q1 = {.a = a + i * lda, .a_ld = lda, .m = 1, .k = k, .block_size = bs, .qa = qa1};
        ref.quant_a8.fn(&q1, 0, 1);
        krn_mmnb_args one = {.w = w, .m = 1, .a = a + i * lda, .a_ld = lda, .qa = qa1, .y = y1, .y_ld = ldy};
        fn(&one, 0, n);
        for (size_t j = 0; j < n; j++)
            ck_assert_msg(memcmp(&y[i * ldy + j], &y1[j], sizeof(float)) == 0,
                          "%s%s m=%zu n=%zu k=%zu: row %zu col %zu is %a in the batch, %a alone",
                          mode ? lv->mmnb_i8.name : lv->mmnb_f32.name,
                          pk ? (bf16 ? " (packed, bf16 scales)" : " (packed)") : "", m, n, k, i, j,
                          (double)y[i * ldy + j], (double)y1[j]);
    }
    free(y);
    free(y1);
    free(qa);
    free(qa1);
}

START_TEST(mmnb_rows_batch_invariant)
{
    static const size_t ms[] = {3, 8, 9, 13, 17, 37};
    /* 9 x 6656: K past the packed AVX-512 VNNI kernel's 16-row tiles, which then runs 8-row ones.
     * Then blocks of 64, 128 and 256 (records of several groups), one with a partial last block. */
    static const size_t shapes[][3] = {{37, 100, 32}, {23, 96, 32}, {41, 1000, 32}, {8, 64, 32},
                                       {9, 6656, 32}, {33, 1000, 128}, {19, 320, 64}, {17, 768, 256}};
    krn_table tabs[MAX_TABS + 1];
    tabs[0] = ref_tab();
    int nt = 1 + simd_tables(tabs + 1, true);
    rng r = {4242};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s][0], k = shapes[s][1], bs = shapes[s][2], lda = k + 5;
        bool zp = s % 2 == 0; /* asymmetric weights too: zero points in the packed records */
        qweights q;
        qw_make(&q, n, k, bs, zp, s & 1, 0.1f, &r);
        /* Scales cut to bfloat16 values, so that both records can hold them. */
        for (size_t i = 0; i < n * q.w.k_blocks; i++) {
            uint32_t u;
            memcpy(&u, &q.scales[i], sizeof u);
            u &= 0xFFFF0000u;
            memcpy(&q.scales[i], &u, sizeof u);
        }
        void *pk[2];
        for (int v = 0; v < 2; v++) {
            krn_q4_weights w = q.w;
            w.packed_bf16 = v == 1;
            w.packed_zp = zp;
            size_t sz = krn_q4_pack_size(&w);
            pk[v] = aligned_alloc(64, (sz + 63) & ~(size_t)63);
            ck_assert_ptr_nonnull(pk[v]);
            ck_assert_int_eq(krn_q4_pack(&w, pk[v]), KRN_OK);
        }
        for (size_t im = 0; im < sizeof ms / sizeof ms[0]; im++) {
            size_t m = ms[im];
            float *a = frand(m * lda, &r, -2.0f, 2.0f);
            for (int t = 0; t < nt; t++) {
                rows_alone_case(&tabs[t], &q, a, lda, m, NULL, false, 0);
                rows_alone_case(&tabs[t], &q, a, lda, m, NULL, false, 1);
                if (tabs[t].q4_packed) {
                    rows_alone_case(&tabs[t], &q, a, lda, m, pk[0], false, 1);
                    rows_alone_case(&tabs[t], &q, a, lda, m, pk[1], true, 1);
                }
            }
            free(a);
            mmnb_case(tabs + 1, nt - 1, m, n, k, bs, zp, s & 1, 2.0f, 0.1f, &r);
        }
        free(pk[0]);
        free(pk[1]);
        qw_free(&q);
    }
}
END_TEST

/*
 * QWEN3D_PREFETCH: each packed kernel gives the same bits whichever software
 * prefetches of its stream krn_init chose (both, L2 only, none), at one row
 * and at a register tile's worth with a tail, with blocks of one group and of
 * four, with and without zero points; unknown names are refused and named.
 */
START_TEST(packed_prefetch_modes)
{
    static const char *modes[] = {"l1+l2", "l2", "none"};
    static const size_t shapes[][4] = {{37, 1000, 32, 0}, {33, 1000, 128, 1}, {19, 320, 64, 0}};
    static const size_t ms[] = {1, 19};
    krn_table tabs[MAX_TABS];
    int nt = simd_tables(tabs, true);
    rng r = {5151};
    char line[KRN_DESCRIBE_LEN];
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s][0], k = shapes[s][1], bs = shapes[s][2], ldy = n + 3;
        bool zp = shapes[s][3];
        qweights q;
        qw_make(&q, n, k, bs, zp, true, 0.1f, &r);
        krn_q4_weights w = q.w;
        w.packed_zp = zp;
        size_t sz = krn_q4_pack_size(&w);
        void *pk = aligned_alloc(64, (sz + 63) & ~(size_t)63);
        ck_assert_ptr_nonnull(pk);
        ck_assert_int_eq(krn_q4_pack(&w, pk), KRN_OK);
        w.packed = pk;
        for (size_t im = 0; im < sizeof ms / sizeof ms[0]; im++) {
            size_t m = ms[im];
            float *a = frand(m * k, &r, -2.0f, 2.0f);
            void *qa = qa_alloc(m, k, bs);
            krn_table ref = ref_tab();
            krn_quant_args qargs = {.a = a, .a_ld = k, .m = m, .k = k, .block_size = bs, .qa = qa};
            ref.quant_a8.fn(&qargs, 0, m);
            float *y[3];
            for (int t = 0; t < nt; t++) {
                if (!tabs[t].q4_packed)
                    continue;
                for (int md = 0; md < 3; md++) {
                    setenv("QWEN3D_PREFETCH", modes[md], 1);
                    ck_assert_int_eq(krn_init(), KRN_OK);
                    krn_describe(line, sizeof line);
                    char want[32];
                    snprintf(want, sizeof want, "weight prefetch %s", modes[md]);
                    ck_assert_msg(strstr(line, want), "%s: %s", want, line);
                    y[md] = xmalloc(m * ldy * sizeof(float));
                    krn_mmnb_args args = {.w = w, .m = m, .a = a, .a_ld = k, .qa = qa, .y = y[md], .y_ld = ldy};
                    tabs[t].mmnb_i8.fn(&args, 0, n / 2);
                    tabs[t].mmnb_i8.fn(&args, n / 2, n);
                }
                for (int md = 1; md < 3; md++) {
                    for (size_t i = 0; i < m; i++)
                        for (size_t j = 0; j < n; j++)
                            ck_assert_msg(memcmp(&y[md][i * ldy + j], &y[0][i * ldy + j], sizeof(float)) == 0,
                                          "%s m=%zu n=%zu k=%zu bs=%zu: (%zu, %zu) is %a with prefetch %s, %a with %s",
                                          tabs[t].mmnb_i8.name, m, n, k, bs, i, j, (double)y[md][i * ldy + j],
                                          modes[md], (double)y[0][i * ldy + j], modes[0]);
                }
                for (int md = 0; md < 3; md++)
                    free(y[md]);
            }
            free(qa);
            free(a);
        }
        free(pk);
        qw_free(&q);
    }
    setenv("QWEN3D_PREFETCH", "l3", 1);
    ck_assert_int_eq(krn_init(), KRN_EENV);
    krn_describe(line, sizeof line);
    ck_assert_msg(strstr(line, "QWEN3D_PREFETCH=l3 ignored") && strstr(line, "weight prefetch l1+l2"), "%s", line);
    unsetenv("QWEN3D_PREFETCH");
    ck_assert_int_eq(krn_init(), KRN_OK);
    krn_describe(line, sizeof line);
    ck_assert_msg(strstr(line, "), weight prefetch l1+l2"), "%s", line);
}
END_TEST

/*
 * 8-bit weights (bits8): one byte per weight, zero points one byte per
 * block. Codes and zero points take their whole range; the first column's
 * first block is all 0 codes and the second's all 255, with zero points 255
 * and 0 where the weights carry them: the sums' extremes.
 */
static void qw8_make(qweights *q, size_t n, size_t k, size_t bs, bool zp, bool bias, rng *r)
{
    memset(q, 0, sizeof *q);
    q->w.n = n;
    q->w.k = k;
    q->w.block_size = bs;
    q->w.bits8 = true;
    krn_q4_weights_set_blocks(&q->w);
    size_t kb = q->w.k_blocks, nb = n * kb * bs;
    q->b = xmalloc(nb);
    for (size_t i = 0; i < nb; i++)
        q->b[i] = (uint8_t)rnext(r);
    memset(q->b, 0, bs);
    if (n > 1)
        memset(q->b + kb * bs, 255, bs);
    q->scales = frand(n * kb, r, -0.01f, 0.01f);
    if (zp) {
        q->zp = xmalloc(n * kb);
        for (size_t i = 0; i < n * kb; i++)
            q->zp[i] = (uint8_t)rnext(r);
        q->zp[0] = 255;
        if (n > 1)
            q->zp[kb] = 0;
    }
    if (bias)
        q->bias = frand(n, r, -1, 1);
    q->w.b_data = q->b;
    q->w.scales = q->scales;
    q->w.zero_pts = q->zp;
    q->w.bias = q->bias;
}

/*
 * The reference on 8-bit weights against the layout read byte by byte: the
 * int8 mode's per-block integer dots and float steps written out here, bit
 * for bit, and the fp32 mode against a double evaluation within the bound
 * of mmnb_f32_ref_vs_double.
 */
START_TEST(mmnb8_ref_definition)
{
    static const size_t shapes[][3] = {{5, 32, 32}, {9, 40, 16}, {7, 100, 32}, {6, 256, 128}, {3, 520, 256}};
    krn_table ref = ref_tab();
    ck_assert(ref.mmnb8_i8.fn != NULL && ref.mmnb8_f32.fn != NULL);
    rng r = {0x8b17};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int zp = 0; zp < 2; zp++) {
            size_t n = shapes[s][0], k = shapes[s][1], bs = shapes[s][2], m = 3;
            qweights q;
            qw8_make(&q, n, k, bs, zp, s & 1, &r);
            size_t kb = q.w.k_blocks;
            float *a = frand(m * k, &r, -2, 2), *y8 = xmalloc(m * n * sizeof(float)), *yf = xmalloc(m * n * sizeof(float));
            for (size_t j = 0; j < bs && j < k; j++)
                a[j] = (j & 1) ? 2.0f : -2.0f; /* row 0 block 0: codes of +-127 */
            void *qa = qa_alloc(m, k, bs);
            quantize(&ref, a, m, k, bs, qa);
            krn_mmnb_args args = {.w = q.w, .m = m, .a = a, .a_ld = k, .qa = qa, .y = y8, .y_ld = n};
            ck_assert_int_eq(krn_mmnb_check(&args, true), KRN_OK);
            ref.mmnb8_i8.fn(&args, 0, n);
            args.y = yf;
            ref.mmnb8_f32.fn(&args, 0, n);
            for (size_t i = 0; i < m; i++) {
                const int8_t *qv = krn_qa_q(qa, i, kb, bs);
                const float *sa = krn_qa_scale(qa, i, kb, bs);
                for (size_t j = 0; j < n; j++) {
                    float acc = 0.0f;
                    double want = q.bias ? q.bias[j] : 0, mag = fabs(want);
                    for (size_t b = 0; b < kb; b++) {
                        int z = q.zp ? q.zp[j * kb + b] : 128;
                        int32_t isum = 0;
                        for (size_t t = 0; t < bs && b * bs + t < k; t++) {
                            int code = q.b[(j * kb + b) * bs + t];
                            isum += (int32_t)qv[b * bs + krn_qa_slot(t, bs)] * (code - z);
                            double wd = (double)(code - z) * q.scales[j * kb + b];
                            want += a[i * k + b * bs + t] * wd;
                            mag += fabs(a[i * k + b * bs + t] * wd);
                        }
                        acc += (float)isum * (sa[b] * q.scales[j * kb + b]);
                    }
                    if (q.bias)
                        acc += q.bias[j];
                    ck_assert_msg(memcmp(&acc, &y8[i * n + j], sizeof acc) == 0, "k=%zu bs=%zu zp=%d m=%zu n=%zu: %a, want %a",
                                  k, bs, zp, i, j, (double)y8[i * n + j], (double)acc);
                    CHECK_CLOSE(yf[i * n + j], want, (k + 2) * U * mag, "fp32 k=%zu bs=%zu m=%zu n=%zu", k, bs, i, j);
                }
            }
            free(a);
            free(y8);
            free(yf);
            free(qa);
            qw_free(&q);
        }
}
END_TEST

/*
 * One row count's case for the 8-bit kernels: M rows of activations (row 0's
 * first block at +-127 against the extreme codes), quantized, and the
 * reference's product of them with W in WANT (row stride LDY); GOT, ONE and
 * QA1 are room for the kernels under test. ARGS is the reference's call.
 */
typedef struct mm8_rows {
    float *a, *want, *got, *one;
    void *qa, *qa1;
    krn_mmnb_args args;
} mm8_rows;

static void mm8_rows_make(mm8_rows *c, const krn_table *ref, const krn_q4_weights *w, size_t m, size_t ldy, rng *r)
{
    size_t k = w->k, bs = w->block_size;
    c->a = frand(m * k, r, -3, 3);
    c->want = xmalloc(m * ldy * sizeof(float));
    c->got = xmalloc(m * ldy * sizeof(float));
    c->one = xmalloc(ldy * sizeof(float));
    for (size_t j = 0; j < bs && j < k; j++)
        c->a[j] = (j % 3) ? -1.0f : 1.0f;
    c->qa = qa_alloc(m, k, bs);
    c->qa1 = qa_alloc(1, k, bs);
    quantize(ref, c->a, m, k, bs, c->qa);
    c->args = (krn_mmnb_args){.w = *w, .m = m, .a = c->a, .a_ld = k, .qa = c->qa, .y = c->want, .y_ld = ldy};
    ref->mmnb8_i8.fn(&c->args, 0, w->n);
}

static void mm8_rows_free(mm8_rows *c)
{
    free(c->a);
    free(c->want);
    free(c->got);
    free(c->one);
    free(c->qa);
    free(c->qa1);
}

/*
 * Every level's 8-bit int8 kernel against the reference, bit for bit:
 * blocks of 16 (an odd count too, and more than KRN8_KEEP_BLOCKS) to 256,
 * K with a partial last block, column counts and column ranges that are not multiples of the kernels'
 * eight, 1 to 9 rows; and each row alone gives its bits in the batch.
 * Then the 8-bit weights as columns of a larger matrix (krn_q4_columns).
 */
START_TEST(mmnb8_levels)
{
    static const size_t shapes[][3] = {{1, 32, 32},  {7, 40, 32},   {8, 64, 16},   {9, 48, 16},  {17, 100, 16},
                                       {13, 96, 32}, {33, 1000, 128}, {19, 320, 64}, {17, 768, 256}, {24, 1024, 32},
                                       {9, 4100, 16}}; /* the last: more blocks than a tile keeps transposed */
    static const size_t ms[] = {1, 2, 3, 4, 5, 9};
    krn_table ref = ref_tab(), tabs[MAX_TABS];
    int nt = simd_tables(tabs, true);
    rng r = {0x8b8b};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s][0], k = shapes[s][1], bs = shapes[s][2], ldy = n + 3;
        bool zp = s % 3 != 1;
        qweights q;
        qw8_make(&q, n, k, bs, zp, s & 1, &r);
        for (size_t im = 0; im < sizeof ms / sizeof ms[0]; im++) {
            size_t m = ms[im];
            mm8_rows c;
            mm8_rows_make(&c, &ref, &q.w, m, ldy, &r);
            float *a = c.a, *want = c.want, *got = c.got, *one = c.one;
            void *qa1 = c.qa1;
            krn_mmnb_args args = c.args;
            for (int t = 0; t < nt; t++) {
                args.y = got;
                size_t cut = n / 3 + 1;
                tabs[t].mmnb8_i8.fn(&args, 0, cut);
                tabs[t].mmnb8_i8.fn(&args, cut, n);
                for (size_t i = 0; i < m; i++)
                    for (size_t j = 0; j < n; j++)
                        ck_assert_msg(memcmp(&got[i * ldy + j], &want[i * ldy + j], sizeof(float)) == 0,
                                      "%s m=%zu n=%zu k=%zu bs=%zu zp=%d: row %zu col %zu is %a, the reference %a",
                                      tabs[t].mmnb8_i8.name, m, n, k, bs, zp, i, j, (double)got[i * ldy + j],
                                      (double)want[i * ldy + j]);
                for (size_t i = 0; i < m; i++) {
                    quantize(&ref, a + i * k, 1, k, bs, qa1);
                    krn_mmnb_args a1 = {.w = q.w, .m = 1, .a = a + i * k, .a_ld = k, .qa = qa1, .y = one, .y_ld = ldy};
                    tabs[t].mmnb8_i8.fn(&a1, 0, n);
                    ck_assert_msg(memcmp(one, &got[i * ldy], n * sizeof(float)) == 0, "%s m=%zu k=%zu: row %zu alone",
                                  tabs[t].mmnb8_i8.name, m, k, i);
                }
            }
            if (n > 8) { /* columns [5, n) as weights of their own */
                krn_mmnb_args sub = args;
                sub.w = krn_q4_columns(&q.w, 5, n - 5);
                sub.y = got;
                for (int t = -1; t < nt; t++) {
                    (t < 0 ? &ref : &tabs[t])->mmnb8_i8.fn(&sub, 0, n - 5);
                    for (size_t i = 0; i < m; i++)
                        ck_assert(memcmp(&got[i * ldy], &want[i * ldy + 5], (n - 5) * sizeof(float)) == 0);
                }
            }
            mm8_rows_free(&c);
        }
        /* Blocks of 16 are never packed; 32 and up pack only with a record for their zero points. */
        if (bs == 16 || zp)
            ck_assert_uint_eq(krn_q4_pack_size(&q.w), 0);
        qw_free(&q);
    }
}
END_TEST

/*
 * 8-bit weights from their packed copy (tables with q8_packed: the AVX-512
 * VNNI kernel, native or emulated) against the reference in place, bit for
 * bit: blocks of 32 to 256, K with a partial last block, column counts and
 * ranges off the tiles' sixteen, 1 to 37 rows (several register tiles and
 * a row block's edge), zero points or none, fp32 or bfloat16 records, a
 * bias or none; each row alone gives its bits in the batch; the packed
 * copy read back row by row (krn_q4_dequant_row) equals the weights, its
 * padding columns are zero, and columns from a tile boundary on run as
 * weights of their own (krn_q4_columns).
 */
START_TEST(mmnb8_packed)
{
    static const size_t shapes[][3] = {{1, 32, 32},   {7, 40, 32},    {16, 64, 32},  {17, 100, 32}, {33, 1000, 128},
                                       {19, 320, 64}, {40, 768, 256}, {24, 1024, 32}, {37, 96, 32}};
    static const size_t ms[] = {1, 2, 5, 8, 9, 16, 17, 37, 70};
    krn_table ref = ref_tab(), tabs[MAX_TABS];
    int nt = simd_tables(tabs, true), ran = 0;
    rng r = {0x8bac};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int form = 0; form < 2; form++) {
            size_t n = shapes[s][0], k = shapes[s][1], bs = shapes[s][2], ldy = n + 3;
            bool zp = (s + (size_t)form) % 3 != 1, bf16 = form == 1;
            qweights q;
            qw8_make(&q, n, k, bs, zp, (s + (size_t)form) & 1, &r);
            if (bf16) /* scales that fit the bfloat16 record, as a bfloat16 checkpoint's do */
                for (size_t i = 0; i < n * q.w.k_blocks; i++) {
                    uint32_t u;
                    memcpy(&u, &q.scales[i], sizeof u);
                    u &= 0xFFFF0000u;
                    memcpy(&q.scales[i], &u, sizeof u);
                }
            krn_q4_weights pw = q.w;
            pw.packed_bf16 = bf16;
            pw.packed_zp = zp;
            size_t bytes = krn_q4_pack_size(&pw), kb = q.w.k_blocks;
            ck_assert_uint_eq(bytes, (n + 15) / 16 * kb * (bs / 32 * 512 + 16 * (bf16 ? 2 : 4) + (zp ? 16 : 0)));
            uint8_t *pk = aligned_alloc(64, (bytes + 63) / 64 * 64);
            ck_assert_ptr_nonnull(pk);
            memset(pk, 0xCD, bytes);
            ck_assert_int_eq(krn_q4_pack(&pw, pk), KRN_OK);
            pw.packed = pk;
            float *row = xmalloc(k * sizeof(float)), *row_pk = xmalloc(k * sizeof(float));
            for (size_t j = 0; j < n; j++) {
                krn_q4_dequant_row(&q.w, j, row);
                krn_q4_dequant_row(&pw, j, row_pk);
                ck_assert_msg(memcmp(row, row_pk, k * sizeof(float)) == 0, "k=%zu bs=%zu: row %zu read back", k, bs, j);
            }
            if (n % 16) { /* the last tile's padding columns: zero codes, scales and zero points */
                size_t rec = bytes / ((n + 15) / 16) / kb, tile = bytes - rec * kb;
                for (size_t b = 0; b < kb; b++)
                    for (size_t i = 0; i < rec; i++) {
                        size_t c = i < bs / 32 * 512 ? i % 64 / 4 : i < bs / 32 * 512 + 16 * (bf16 ? 2 : 4)
                                                                      ? (i - bs / 32 * 512) / (bf16 ? 2 : 4)
                                                                      : i - bs / 32 * 512 - 16 * (bf16 ? 2 : 4);
                        if (c >= n % 16)
                            ck_assert_uint_eq(pk[tile + b * rec + i], 0);
                    }
            }
            for (size_t im = 0; im < sizeof ms / sizeof ms[0]; im++) {
                size_t m = ms[im];
                mm8_rows c;
                mm8_rows_make(&c, &ref, &q.w, m, ldy, &r);
                float *a = c.a, *want = c.want, *got = c.got, *one = c.one;
                void *qa1 = c.qa1;
                krn_mmnb_args args = c.args;
                args.w = pw;
                for (int t = 0; t < nt; t++) {
                    if (!tabs[t].q8_packed)
                        continue;
                    ran++;
                    args.y = got;
                    size_t cut = n / 3 + 1;
                    tabs[t].mmnb8_i8.fn(&args, 0, cut);
                    tabs[t].mmnb8_i8.fn(&args, cut, n);
                    for (size_t i = 0; i < m; i++)
                        for (size_t j = 0; j < n; j++)
                            ck_assert_msg(memcmp(&got[i * ldy + j], &want[i * ldy + j], sizeof(float)) == 0,
                                          "%s packed m=%zu n=%zu k=%zu bs=%zu zp=%d bf16=%d: row %zu col %zu is %a, "
                                          "the reference %a",
                                          tabs[t].mmnb8_i8.name, m, n, k, bs, zp, bf16, i, j, (double)got[i * ldy + j],
                                          (double)want[i * ldy + j]);
                    for (size_t i = 0; i < m; i += 1 + m / 4) {
                        quantize(&ref, a + i * k, 1, k, bs, qa1);
                        krn_mmnb_args a1 = {.w = pw, .m = 1, .a = a + i * k, .a_ld = k, .qa = qa1, .y = one, .y_ld = ldy};
                        tabs[t].mmnb8_i8.fn(&a1, 0, n);
                        ck_assert_msg(memcmp(one, &got[i * ldy], n * sizeof(float)) == 0,
                                      "%s packed m=%zu k=%zu: row %zu alone", tabs[t].mmnb8_i8.name, m, k, i);
                    }
                    if (n > 16) { /* columns [16, n) as weights of their own */
                        krn_mmnb_args sub = args;
                        sub.w = krn_q4_columns(&pw, 16, n - 16);
                        sub.y = got;
                        tabs[t].mmnb8_i8.fn(&sub, 0, n - 16);
                        for (size_t i = 0; i < m; i++)
                            ck_assert(memcmp(&got[i * ldy], &want[i * ldy + 16], (n - 16) * sizeof(float)) == 0);
                    }
                }
                mm8_rows_free(&c);
            }
            free(row);
            free(row_pk);
            free(pk);
            qw_free(&q);
        }
#ifdef QD_EMU_AVX512
    ck_assert_msg(ran > 0, "no table read the packed 8-bit copy");
#else
    if (krn_cpu_detect().avx512vnni)
        ck_assert_msg(ran > 0, "no table read the packed 8-bit copy");
#endif
}
END_TEST

/*
 * Repacking: block sizes 32 to 256 (one record per block holds block_size /
 * 32 groups of 32 k), and zero points only into records that hold them
 * (packed_zp); the size covers whole 16-column tiles of two 8-column
 * records per block; every weight byte, scale (fp32 or bfloat16 record) and
 * zero point lands where krn_internal.h says, padding columns (a whole
 * padding record included) are zero.
 */
START_TEST(q4_pack_layout)
{
    rng r = {555};
    qweights q;
    qw_make(&q, 6, 100, 32, true, false, 0.1f, &r);
    ck_assert_uint_eq(krn_q4_pack_size(&q.w), 0); /* zero points, records without them */
    qw_free(&q);
    qw_make(&q, 6, 100, 32, false, false, 0.1f, &r);
    q.w.packed_zp = true;
    uint8_t probe[64];
    ck_assert_int_eq(krn_q4_pack(&q.w, probe), KRN_EINVAL); /* records with zero points, none given */
    qw_free(&q);
    qw_make(&q, 6, 100, 16, false, false, 0.1f, &r);
    ck_assert_uint_eq(krn_q4_pack_size(&q.w), 0); /* block 16 */
    qw_free(&q);
    qw_make(&q, 6, 1000, 512, false, false, 0.1f, &r);
    ck_assert_uint_eq(krn_q4_pack_size(&q.w), 0); /* block 512 */
    qw_free(&q);

    static const size_t ns[] = {1, 4, 8, 9, 16, 21, 33}, ks[] = {32, 96, 100, 1024}, bss[] = {32, 64, 128, 256};
    for (size_t ib = 0; ib < sizeof bss / sizeof bss[0]; ib++)
    for (size_t in = 0; in < sizeof ns / sizeof ns[0]; in++)
        for (size_t ik = 0; ik < 2 * sizeof ks / sizeof ks[0]; ik++) {
            size_t n = ns[in], k = ks[ik / 2], bs = bss[ib], groups = bs / 32;
            bool zp = ik & 1;
            if (bs > 32 && in % 2) /* fewer column counts at the larger blocks */
                continue;
            qw_make(&q, n, k, bs, zp, false, 0.1f, &r);
            q.w.packed_zp = zp;
            size_t kb = q.w.k_blocks, tiles = (n + 15) / 16, wb = 128 * groups;
            size_t sz = krn_q4_pack_size(&q.w);
            uint8_t *pk = aligned_alloc(64, (sz + 63) & ~(size_t)63);
            ck_assert_ptr_nonnull(pk);
            /* The fp32 record, then the bfloat16 one: the same weight bytes, then each scale's upper half. */
            for (int v = 0; v < 2; v++) {
                if (v) {
                    for (size_t i = 0; i < n * kb; i++) {
                        uint32_t u;
                        memcpy(&u, &q.scales[i], 4);
                        u &= 0xFFFF0000u;
                        memcpy(&q.scales[i], &u, 4);
                    }
                    q.w.packed_bf16 = true;
                }
                size_t rec = wb + (v ? 16 : 32) + (zp ? 8 : 0);
                ck_assert_uint_eq(krn_q4_pack_size(&q.w), tiles * 2 * kb * rec);
                memset(pk, 0xEE, sz);
                ck_assert_int_eq(krn_q4_pack(&q.w, pk), KRN_OK);
                for (size_t t = 0; t < 2 * tiles; t++) /* eight-column halves */
                    for (size_t b = 0; b < kb; b++) {
                        const uint8_t *g = pk + ((t / 2) * 2 * kb + 2 * b + t % 2) * rec;
                        for (size_t c = 0; c < 8; c++) {
                            size_t col = 8 * t + c;
                            bool have = col < n;
                            uint32_t want = 0, got = 0;
                            if (have)
                                memcpy(&want, &q.scales[col * kb + b], 4);
                            if (v) {
                                uint16_t hi;
                                memcpy(&hi, g + wb + 2 * c, 2);
                                got = (uint32_t)hi << 16;
                            } else {
                                memcpy(&got, g + wb + 4 * c, 4);
                            }
                            ck_assert_uint_eq(got, want);
                            if (zp)
                                ck_assert_int_eq(g[wb + (v ? 16 : 32) + c], have ? krn_q4_zp(&q.w, col, b) : 0);
                            for (size_t gi = 0; gi < groups; gi++)
                                for (size_t h = 0; h < 4; h++)
                                    for (size_t j = 0; j < 4; j++)
                                        ck_assert_int_eq(g[128 * gi + 32 * h + 4 * c + j],
                                                         have ? q.b[(col * kb + b) * (bs / 2) + 16 * gi + 4 * h + j]
                                                              : 0);
                        }
                    }
            }
            /* nothing written past the smaller copy */
            ck_assert(pk[tiles * 2 * kb * (wb + 16 + (zp ? 8 : 0))] == 0xEE);
            free(pk);
            qw_free(&q);
        }

    /* Which scales fit bfloat16: exactly those whose low 16 bits are zero. */
    static const uint32_t fit[] = {0x00000000u, 0x80000000u, 0x3F800000u, 0xBE800000u, 0x00010000u,
                                   0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F7F0000u};
    static const uint32_t unfit[] = {0x3F808000u, 0x00000001u, 0x3E99999Au, 0x7F7FFFFFu, 0x80008000u};
    for (size_t i = 0; i < sizeof fit / sizeof fit[0]; i++) {
        float f[3] = {1.0f, 0.0f, -2.0f};
        memcpy(&f[1], &fit[i], 4);
        ck_assert_msg(krn_q4_scales_fit_bf16(f, 3), "0x%08x should fit", fit[i]);
    }
    for (size_t i = 0; i < sizeof unfit / sizeof unfit[0]; i++)
        for (size_t at = 0; at < 37; at += 12) { /* first, middle and last of a vector-sized run */
            float f[37];
            for (size_t j = 0; j < 37; j++)
                f[j] = (float)j;
            memcpy(&f[at], &unfit[i], 4);
            ck_assert_msg(!krn_q4_scales_fit_bf16(f, 37), "0x%08x at %zu should not fit", unfit[i], at);
        }
    ck_assert(krn_q4_scales_fit_bf16(NULL, 0));
}
END_TEST

/* ------------------------------------------------------------------------- */
/* Norms                                                                       */

/*
 * Reference against double: ms carries the fp32 sum's error <= (n + 1) u ms,
 * d = sqrt(ms + eps) then <= (n/2 + 2) u relative, and the divide and gamma
 * multiply 2u more: |y - y_exact| <= (n/2 + 6) u |y_exact| (plus u|v| for the
 * rounded skip sum feeding it, ~1u relative more). Levels against ref: both
 * sides within that bound, so twice it.
 */
static void norm_case(const krn_table *lv, size_t rows, size_t n, size_t group, bool skip, bool bias,
                      bool store_sum, bool in_place, rng *r)
{
    krn_table ref = ref_tab();
    size_t ld = group * n + 5; /* rows are groups of `group` vectors per line */
    size_t lines = (rows + group - 1) / group, sz = lines * ld;
    float *x = frand(sz, r, -3, 3), *sk = frand(sz, r, -3, 3), *gm = frand(n, r, -2, 2);
    float *bs = bias ? frand(n, r, -1, 1) : NULL;
    float *yr = xmalloc(sz * sizeof(float)), *sr = xmalloc(sz * sizeof(float));
    float *yl = xmalloc(sz * sizeof(float)), *sl = xmalloc(sz * sizeof(float));
    float *xl = xmalloc(sz * sizeof(float));
    memcpy(xl, x, sz * sizeof(float));
    for (size_t i = 0; i < sz; i++)
        yr[i] = sr[i] = yl[i] = sl[i] = 7.0f;
    krn_norm_args args = {.x = x, .x_ld = ld, .skip = skip ? sk : NULL, .skip_ld = ld, .bias = bs,
                          .gamma = gm, .y = yr, .y_ld = ld, .sum = store_sum ? sr : NULL, .sum_ld = ld,
                          .rows = rows, .n = n, .group = group, .eps = 1e-6f};
    krn_norm_fn rf = skip ? ref.skip_rmsnorm.fn : ref.rmsnorm.fn;
    rf(&args, 0, rows);

    /* Reference against double, from the fp32 skip sum the op defines. */
    double *v = xmalloc(n * sizeof(double));
    for (size_t rr = 0; rr < rows; rr++) {
        size_t off = (rr / group) * ld + (rr % group) * n;
        double ss = 0;
        for (size_t i = 0; i < n; i++) {
            float vf = x[off + i];
            if (skip) {
                vf = x[off + i] + sk[off + i];
                if (bias)
                    vf = vf + bs[i];
            }
            v[i] = vf;
            ss += v[i] * v[i];
        }
        double d = sqrt(ss / n + 1e-6f);
        for (size_t i = 0; i < n; i++) {
            double want = v[i] / d * gm[i];
            CHECK_CLOSE(yr[off + i], want, (n / 2.0 + 8) * U * fabs(want) + 1e-37,
                        "ref norm rows=%zu n=%zu row %zu i %zu", rows, n, rr, i);
            if (store_sum)
                ck_assert(sr[off + i] == (float)v[i]);
        }
    }
    free(v);

    /* The level, optionally in place (y = x, sum = skip), over two uneven ranges. */
    krn_norm_args la = args;
    if (in_place) {
        la.x = xl;
        la.y = xl;
        float *skl = xmalloc(sz * sizeof(float));
        memcpy(skl, sk, sz * sizeof(float));
        la.skip = skip ? skl : NULL;
        la.sum = store_sum ? skl : NULL;
        krn_norm_fn f = skip ? lv->skip_rmsnorm.fn : lv->rmsnorm.fn;
        f(&la, 0, rows / 2);
        f(&la, rows / 2, rows);
        memcpy(yl, xl, sz * sizeof(float));
        memcpy(sl, skl, sz * sizeof(float));
        free(skl);
    } else {
        la.y = yl;
        la.sum = store_sum ? sl : NULL;
        krn_norm_fn f = skip ? lv->skip_rmsnorm.fn : lv->rmsnorm.fn;
        f(&la, 0, rows / 2);
        f(&la, rows / 2, rows);
    }
    for (size_t rr = 0; rr < rows; rr++) {
        size_t off = (rr / group) * ld + (rr % group) * n;
        for (size_t i = 0; i < n; i++) {
            CHECK_CLOSE(yl[off + i], yr[off + i], (n + 16) * U * fabs(yr[off + i]) + 1e-37,
                        "%s rows=%zu n=%zu group=%zu", skip ? lv->skip_rmsnorm.name : lv->rmsnorm.name,
                        rows, n, group);
            if (store_sum)
                ck_assert(sl[off + i] == sr[off + i]);
        }
    }
    if (!in_place) /* gaps between rows untouched */
        for (size_t line = 0; line < lines; line++)
            for (size_t i = group * n; i < ld; i++)
                ck_assert(yl[line * ld + i] == 7.0f);
    free(x);
    free(sk);
    free(gm);
    free(bs);
    free(yr);
    free(sr);
    free(yl);
    free(sl);
    free(xl);
}

START_TEST(norms)
{
    static const size_t ns[] = {1, 7, 8, 31, 128, 1000, 1024};
    krn_table tabs[MAX_TABS + 1];
    tabs[0] = ref_tab();
    int nl = 1 + simd_tables(tabs + 1, false);
    rng r = {5};
    for (int l = 0; l < nl; l++)
        for (size_t i = 0; i < 7; i++) {
            norm_case(&tabs[l], 3, ns[i], 1, false, false, false, false, &r);
            norm_case(&tabs[l], 5, ns[i], 1, true, false, true, false, &r);
            norm_case(&tabs[l], 4, ns[i], 1, true, true, true, true, &r);
            norm_case(&tabs[l], 2, ns[i], 1, true, false, false, true, &r);
            norm_case(&tabs[l], 6, ns[i], 3, false, false, false, true, &r); /* per-head view */
            norm_case(&tabs[l], 7, ns[i], 2, true, true, true, false, &r);
        }
}
END_TEST

/*
 * Norms with fused quantization: y is unchanged and the quantized records are
 * byte for byte what quant_a8 of the same level makes of y (and every level's
 * are the reference's, as the quantizers agree exactly); for block sizes 32
 * and 64 and rows whose length is not a multiple of the block.
 */
START_TEST(norm_quant_fused)
{
    static const size_t ns[] = {32, 100, 1024};
    krn_table tabs[MAX_TABS + 1];
    tabs[0] = ref_tab();
    int nl = 1 + simd_tables(tabs + 1, false);
    rng r = {55};
    for (int l = 0; l < nl; l++)
        for (size_t in = 0; in < 3; in++)
            for (int skip = 0; skip < 2; skip++)
                for (size_t bs = 32; bs <= 64; bs *= 2) {
                    size_t n = ns[in], rows = 5, kb = (n + bs - 1) / bs;
                    float *x = frand(rows * n, &r, -3, 3), *sk = frand(rows * n, &r, -3, 3);
                    float *g = frand(n, &r, 0.5f, 1.5f);
                    float *y1 = xmalloc(rows * n * sizeof(float)), *y2 = xmalloc(rows * n * sizeof(float));
                    void *qf = qa_alloc(rows, n, bs), *qs = qa_alloc(rows, n, bs), *qr = qa_alloc(rows, n, bs);
                    krn_norm_args a = {.x = x, .x_ld = n, .skip = skip ? sk : NULL, .skip_ld = n, .gamma = g,
                                       .y = y1, .y_ld = n, .rows = rows, .n = n, .group = 1, .eps = 1e-6f,
                                       .qa = qf, .qa_block = bs};
                    krn_norm_fn fn = skip ? tabs[l].skip_rmsnorm.fn : tabs[l].rmsnorm.fn;
                    fn(&a, 0, 2);
                    fn(&a, 2, rows);
                    a.y = y2;
                    a.qa = NULL;
                    fn(&a, 0, rows);
                    ck_assert(memcmp(y1, y2, rows * n * sizeof(float)) == 0);
                    quantize(&tabs[l], y2, rows, n, bs, qs);
                    quantize(&tabs[0], y2, rows, n, bs, qr);
                    for (size_t i = 0; i < rows; i++) {
                        ck_assert_msg(memcmp(krn_qa_q(qf, i, kb, bs), krn_qa_q(qs, i, kb, bs),
                                             krn_qa_used_bytes(kb, bs)) == 0,
                                      "%s n=%zu bs=%zu row %zu", skip ? tabs[l].skip_rmsnorm.name : tabs[l].rmsnorm.name,
                                      n, bs, i);
                        ck_assert(memcmp(krn_qa_q(qf, i, kb, bs), krn_qa_q(qr, i, kb, bs),
                                         krn_qa_used_bytes(kb, bs)) == 0);
                    }
                    free(x);
                    free(sk);
                    free(g);
                    free(y1);
                    free(y2);
                    free(qf);
                    free(qs);
                    free(qr);
                }
}
END_TEST

/* ------------------------------------------------------------------------- */
/* Rotary                                                                      */

/*
 * Against the direct formula in double: each output is x0 c - x1 s with fp32
 * products and difference, |err| <= 2u (|x0 c| + |x1 s|) + u|result|.
 */
START_TEST(rotary)
{
    krn_table tabs[MAX_TABS + 1];
    tabs[0] = ref_tab();
    int nl = 1 + simd_tables(tabs + 1, false);
    rng r = {8};
    const size_t rows = 50, cache_ld = 70;
    float *cs = xmalloc(rows * cache_ld * sizeof(float)), *sn = xmalloc(rows * cache_ld * sizeof(float));
    for (size_t p = 0; p < rows; p++)
        for (size_t i = 0; i < cache_ld; i++) {
            cs[p * cache_ld + i] = (float)cos(p * pow(1e4, -2.0 * i / 128));
            sn[p * cache_ld + i] = (float)sin(p * pow(1e4, -2.0 * i / 128));
        }
    static const size_t hds[] = {8, 64, 128, 130};
    for (int l = 0; l < nl; l++)
        for (size_t ih = 0; ih < 4; ih++)
            for (int il = 0; il < 2; il++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    size_t hd = hds[ih], rot = ih == 3 ? 96 : hd, nt = 5, nh = 3;
                    int64_t pos[5] = {0, 1, 17, 49, 3};
                    size_t xs = nt * nh * hd;
                    float *x = frand(xs, &r, -2, 2), *xin = xmalloc(xs * sizeof(float));
                    memcpy(xin, x, xs * sizeof(float));
                    /* Output into a [heads, tokens, hd] "cache" layout unless in place. */
                    float *y = inplace ? x : xmalloc(xs * sizeof(float));
                    krn_rotary_args a = {.x = x, .y = y, .x_tok_stride = nh * hd, .x_head_stride = hd,
                                         .y_tok_stride = inplace ? nh * hd : hd,
                                         .y_head_stride = inplace ? hd : nt * hd, .n_tok = nt,
                                         .n_heads = nh, .head_dim = hd, .rot_dim = rot,
                                         .cos_cache = cs, .sin_cache = sn, .cache_ld = cache_ld,
                                         .pos = pos, .interleaved = il};
                    tabs[l].rotary.fn(&a, 0, 4);
                    tabs[l].rotary.fn(&a, 4, nt * nh);
                    for (size_t t = 0; t < nt; t++)
                        for (size_t h = 0; h < nh; h++) {
                            const float *xi = xin + t * nh * hd + h * hd;
                            const float *yo = y + t * a.y_tok_stride + h * a.y_head_stride;
                            const float *c = cs + pos[t] * cache_ld, *s = sn + pos[t] * cache_ld;
                            for (size_t j = 0; j < rot / 2; j++) {
                                size_t i0 = il ? 2 * j : j, i1 = il ? 2 * j + 1 : j + rot / 2;
                                double o0 = (double)xi[i0] * c[j] - (double)xi[i1] * s[j];
                                double o1 = (double)xi[i1] * c[j] + (double)xi[i0] * s[j];
                                double m0 = fabs(xi[i0] * c[j]) + fabs(xi[i1] * s[j]);
                                double m1 = fabs(xi[i1] * c[j]) + fabs(xi[i0] * s[j]);
                                CHECK_CLOSE(yo[i0], o0, 3 * U * m0, "%s", tabs[l].rotary.name);
                                CHECK_CLOSE(yo[i1], o1, 3 * U * m1, "%s", tabs[l].rotary.name);
                            }
                            for (size_t j = rot; j < hd; j++)
                                ck_assert(yo[j] == xi[j]);
                        }
                    free(x);
                    free(xin);
                    if (!inplace)
                        free(y);
                }
    /*
     * Every level rotates with the reference's operations (no FMA), so fp32
     * outputs are bit-identical, and fp16 outputs (a KV cache) are those values
     * rounded to nearest even: bit-identical too.
     */
    for (int l = 1; l < nl; l++)
        for (int ty = 0; ty < 3; ty++)
            for (size_t ih = 0; ih < 4; ih++) {
                krn_kv_type kt = ty == 2 ? KRN_KV_Q8 : ty ? KRN_KV_F16 : KRN_KV_F32;
                bool f16 = kt == KRN_KV_F16;
                size_t hd = hds[ih], rot = ih == 3 ? 96 : hd, nt = 5, nh = 3, n = nt * nh * hd;
                size_t row = krn_kv_row_elems(kt, hd), ny = nt * nh * row;
                int64_t pos[5] = {3, 0, 49, 17, 1};
                float *x = frand(n, &r, -300, 300);
                x[1] = 70000.0f; /* rounds to inf in fp16 */
                x[2] = 1e-6f;    /* fp16 subnormal */
                size_t esz = krn_kv_elem_bytes(kt);
                uint8_t *yr = xmalloc(ny * esz), *yl = xmalloc(ny * esz);
                memset(yr, 0x11, ny * esz);
                memset(yl, 0x11, ny * esz);
                krn_rotary_args a = {.x = x, .y = yr, .x_tok_stride = nh * hd, .x_head_stride = hd,
                                     .y_tok_stride = row, .y_head_stride = nt * row, .n_tok = nt, .n_heads = nh,
                                     .head_dim = hd, .rot_dim = rot, .cos_cache = cs, .sin_cache = sn,
                                     .cache_ld = cache_ld, .pos = pos, .y_type = kt};
                tabs[0].rotary.fn(&a, 0, nt * nh);
                a.y = yl;
                tabs[l].rotary.fn(&a, 0, 7);
                tabs[l].rotary.fn(&a, 7, nt * nh);
                ck_assert_msg(memcmp(yr, yl, ny * esz) == 0, "%s type=%d hd=%zu", tabs[l].rotary.name, ty, hd);
                if (kt == KRN_KV_Q8) /* and the reference's rows are the fp32 rotation quantized */
                    for (size_t t = 0; t < nt; t++)
                        for (size_t h = 0; h < nh; h++) {
                            float f[KRN_MAX_HEAD_DIM];
                            int8_t want[KRN_MAX_HEAD_DIM + 4];
                            krn_rotary_args one = a;
                            one.y = f;
                            one.y_type = KRN_KV_F32;
                            one.y_tok_stride = one.y_head_stride = 0;
                            tabs[0].rotary.fn(&one, t * nh + h, t * nh + h + 1);
                            krn_kv_row_from_f32(KRN_KV_Q8, f, hd, want);
                            ck_assert(memcmp(yr + t * row + h * nt * row, want, row) == 0);
                        }
                if (f16) /* and the reference's halves are the rounded fp32 rotation */
                    for (size_t t = 0; t < nt; t++)
                        for (size_t h = 0; h < nh; h++) {
                            const float *xi = x + t * nh * hd + h * hd;
                            const uint16_t *yo = (const uint16_t *)(const void *)yr + t * hd + h * nt * hd;
                            const float *c = cs + pos[t] * cache_ld, *sv = sn + pos[t] * cache_ld;
                            for (size_t j = 0; j < rot / 2; j++) {
                                float o0 = xi[j] * c[j] - xi[j + rot / 2] * sv[j];
                                ck_assert_uint_eq(yo[j], krn_f32_to_f16(o0));
                            }
                            for (size_t j = rot; j < hd; j++)
                                ck_assert_uint_eq(yo[j], krn_f32_to_f16(xi[j]));
                        }
                free(x);
                free(yr);
                free(yl);
            }
    free(cs);
    free(sn);
}
END_TEST

/* ------------------------------------------------------------------------- */
/* fp16 KV cache                                                               */

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, 0); /* 0 = round to nearest even */
}

__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}
#endif

static uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/*
 * The portable conversions against their definition: every half widens to
 * the float of the same value (so round trips are exact), and narrowing is
 * round-to-nearest-even with overflow to inf (ties at the boundaries
 * included). Where the CPU has F16C, both directions must give its exact bits
 * for every half and for a sweep of floats (normal, subnormal, ties, NaN
 * payloads), since SIMD levels convert with it.
 */
START_TEST(f16_conversions)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = krn_f16_to_f32((uint16_t)h);
        unsigned e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) {
            ck_assert(m ? isnan(f) : isinf(f));
            continue;
        }
        double want = (e ? ldexp(1024 + m, (int)e - 25) : ldexp(m, -24)) * ((h & 0x8000) ? -1 : 1);
        ck_assert_msg((double)f == want && !!signbit(f) == !!(h & 0x8000), "half %#x", h);
        ck_assert_uint_eq(krn_f32_to_f16(f), h);
    }
    /* Ties and boundaries: 65504 max, 65520 ties to inf, 2^-25 ties to 0, 3 * 2^-25 to 2^-23. */
    ck_assert_uint_eq(krn_f32_to_f16(65504.0f), 0x7BFF);
    ck_assert_uint_eq(krn_f32_to_f16(65519.99f), 0x7BFF);
    ck_assert_uint_eq(krn_f32_to_f16(65520.0f), 0x7C00);
    ck_assert_uint_eq(krn_f32_to_f16(-1e9f), 0xFC00);
    ck_assert_uint_eq(krn_f32_to_f16(0x1p-25f), 0);
    ck_assert_uint_eq(krn_f32_to_f16(0x1.000002p-25f), 1);
    ck_assert_uint_eq(krn_f32_to_f16(0x3p-25f), 2);
    ck_assert_uint_eq(krn_f32_to_f16(1.0f + 0x1p-11f), 0x3C00);     /* tie, even stays */
    ck_assert_uint_eq(krn_f32_to_f16(1.0f + 0x3p-11f), 0x3C02);     /* tie, odd rounds up */
    ck_assert_uint_eq(krn_f32_to_f16(0x1.ffcp-15f), 0x0400);         /* subnormal carries into the smallest normal */
    ck_assert_uint_eq(krn_f32_to_f16(-0.0f), 0x8000);
#if defined(__x86_64__)
    if (!krn_cpu_detect().f16c) {
        fprintf(stderr, "test_kernels: no F16C, hardware comparison skipped\n");
        return;
    }
    for (uint32_t h = 0; h < 65536; h++)
        ck_assert_msg(fbits(krn_f16_to_f32((uint16_t)h)) == fbits(hw_f16_to_f32((uint16_t)h)), "half %#x", h);
    rng r = {16};
    for (uint32_t i = 0; i < 2000000; i++) {
        uint32_t u;
        if (i < 65536 * 8) /* every half's neighbourhood: exact, ties, just off ties */
            u = fbits(krn_f16_to_f32((uint16_t)(i >> 3))) + (uint32_t)((int)(i & 7) - 3) * 0x800u;
        else
            u = (uint32_t)rnext(&r);
        float f = bitsf(u);
        ck_assert_msg(krn_f32_to_f16(f) == hw_f32_to_f16(f), "float %#x: %#x vs %#x", u, krn_f32_to_f16(f),
                      hw_f32_to_f16(f));
    }
#endif
}
END_TEST

/*
 * q8 rows (krn_kv_type): the scale is the largest magnitude over 127, codes
 * round to nearest even within [-127, 127] and read back within half a
 * step; zero rows, subnormal rows, and rows holding inf or NaN.
 */
START_TEST(kv_q8_rows)
{
    rng r = {33};
    int8_t row[KRN_MAX_HEAD_DIM + 4];
    for (size_t n = 1; n <= 131; n += 13) {
        float *x = frand(n, &r, -5, 5);
        x[n / 2] = n % 2 ? -7.5f : 7.5f; /* the largest magnitude, either sign */
        krn_kv_row_from_f32(KRN_KV_Q8, x, n, row);
        float s = krn_q8_scale(row, n);
        ck_assert(s == 7.5f / 127.0f);
        ck_assert_int_eq(row[n / 2], n % 2 ? -127 : 127);
        for (size_t d = 0; d < n; d++) {
            ck_assert(row[d] >= -127 && row[d] <= 127);
            ck_assert(row[d] == (int8_t)lrintf(x[d] / s));
            ck_assert(fabsf(krn_kv_row_value(KRN_KV_Q8, row, n, d) - x[d]) <= s * 0.5f * (1 + 1e-6f));
        }
        free(x);
    }
    /* ties go to even codes: with a = 127 the scale is 1 */
    float ties[6] = {127.0f, 0.5f, 1.5f, -2.5f, -0.5f, 126.5f};
    krn_kv_row_from_f32(KRN_KV_Q8, ties, 6, row);
    ck_assert(krn_q8_scale(row, 6) == 1.0f);
    ck_assert_int_eq(row[1], 0);
    ck_assert_int_eq(row[2], 2);
    ck_assert_int_eq(row[3], -2);
    ck_assert_int_eq(row[4], 0);
    ck_assert_int_eq(row[5], 126);
    /* zeros, and a row whose scale underflows to 0: codes 0, scale 0 */
    float z[5] = {0.0f, -0.0f, 0.0f, 0.0f, 0.0f};
    krn_kv_row_from_f32(KRN_KV_Q8, z, 5, row);
    ck_assert(krn_q8_scale(row, 5) == 0.0f);
    for (int d = 0; d < 5; d++)
        ck_assert_int_eq(row[d], 0);
    z[3] = 1e-44f; /* a / 127 rounds to 0 */
    krn_kv_row_from_f32(KRN_KV_Q8, z, 5, row);
    ck_assert(krn_q8_scale(row, 5) == 0.0f && row[3] == 0);
    /* a subnormal scale rounded far below a / 127: codes clamp */
    z[3] = 2.5e-43f;
    z[1] = -2.5e-43f;
    krn_kv_row_from_f32(KRN_KV_Q8, z, 5, row);
    ck_assert(krn_q8_scale(row, 5) > 0.0f);
    ck_assert_int_eq(row[3], 127);
    ck_assert_int_eq(row[1], -127);
    /* inf or NaN anywhere: codes 0 and a NaN scale, so every value reads NaN */
    float bad[4] = {1.0f, INFINITY, 2.0f, 3.0f};
    for (int k = 0; k < 2; k++) {
        bad[1] = k ? NAN : -INFINITY;
        krn_kv_row_from_f32(KRN_KV_Q8, bad, 4, row);
        ck_assert(isnan(krn_q8_scale(row, 4)));
        for (int d = 0; d < 4; d++) {
            ck_assert_int_eq(row[d], 0);
            ck_assert(isnan(krn_kv_row_value(KRN_KV_Q8, row, 4, (size_t)d)));
        }
    }
}
END_TEST

/*
 * The AVX2 row quantizer (q8 cache rows, int16 query codes) against the
 * portable krn_code_row(): the same codes and scale bits for both limits, at
 * sizes around the eight-value step, on random rows, exact ties, zeros,
 * rows whose scale underflows or is subnormal (codes clamp), values near
 * FLT_MAX, and inf or NaN in the vector part or the tail.
 */
START_TEST(code_rows_avx2)
{
    krn_table t;
    if (krn_table_for_level(KRN_LEVEL_AVX2, &t) != KRN_OK)
        return; /* no AVX2 on this CPU: the level is never selected */
    rng r = {57};
    static const size_t sizes[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 64, 127, 128, 131};
    static const long limits[] = {127, 32767};
    float x[KRN_MAX_HEAD_DIM + 8];
    int8_t c8[2][KRN_MAX_HEAD_DIM + 8];
    int16_t c16[2][KRN_MAX_HEAD_DIM + 8];
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
        for (int kind = 0; kind < 9; kind++) {
            size_t n = sizes[si];
            for (size_t d = 0; d < n; d++) {
                float v = runif(&r, -5, 5);
                switch (kind) {
                case 1: v = (float)(long)(v * 20) + 0.5f; break;  /* ties once the scale is 1 */
                case 2: v = d % 3 ? 0.0f : -0.0f; break;
                case 3: v = d % 4 ? 0.0f : 1e-44f; break;          /* a / limit rounds to 0 */
                case 4: v = d % 4 ? v * 1e-44f : d % 8 ? -2.5e-43f : 2.5e-43f; break; /* subnormal scale */
                case 5: v *= 6e37f; break;                          /* near FLT_MAX */
                default: break;
                }
                x[d] = v;
            }
            if (kind == 1)
                x[n / 2] = 127.0f; /* q8's scale is 1: the ties above stay ties */
            if (kind >= 6) /* inf, -inf or NaN at the first, middle or last value */
                x[(kind - 6) * (n - 1) / 2] = kind == 6 ? INFINITY : kind == 7 ? -INFINITY : NAN;
            for (int li = 0; li < 2; li++) {
                long lim = limits[li];
                bool q8 = lim == 127;
                float s0 = krn_code_row(x, n, lim, q8 ? c8[0] : NULL, q8 ? NULL : c16[0]);
                float s1 = krn_avx2_code_row(x, n, lim, q8 ? c8[1] : NULL, q8 ? NULL : c16[1]);
                ck_assert_msg(memcmp(&s0, &s1, sizeof s0) == 0, "n=%zu kind=%d limit=%ld: scale %a vs %a", n, kind,
                              lim, (double)s0, (double)s1);
                if (q8)
                    ck_assert_msg(memcmp(c8[0], c8[1], n) == 0, "n=%zu kind=%d: q8 codes differ", n, kind);
                else
                    ck_assert_msg(memcmp(c16[0], c16[1], n * sizeof **c16) == 0, "n=%zu kind=%d: int16 codes differ",
                                  n, kind);
            }
            if (kind == 4) { /* the clamp acted: a subnormal scale far below a / 127 */
                krn_avx2_code_row(x, n, 127, c8[1], NULL);
                bool clamped = false;
                for (size_t d = 0; d < n; d++)
                    clamped |= c8[1][d] == 127 || c8[1][d] == -127;
                ck_assert(clamped);
            }
        }
}
END_TEST

/* Row stores into a strided cache: fp32 copies, fp16 as the portable conversion, q8 rows, every level. */
START_TEST(kv_store)
{
    krn_table tabs[MAX_TABS + 1];
    tabs[0] = ref_tab();
    int nl = 1 + simd_tables(tabs + 1, false);
    rng r = {21};
    const size_t nt = 3, nh = 4, n = 37, xt = nh * 40, yt = 2 * nh * 40;
    float *x = frand(nt * xt, &r, -70000, 70000);
    for (int l = 0; l < nl; l++)
        for (int f16 = 0; f16 < 3; f16++) {
            size_t esz = f16 == 2 ? 1 : f16 ? 2 : 4, ny = nt * yt;
            uint8_t *y = xmalloc(ny * esz);
            memset(y, 0x5C, ny * esz);
            krn_rows_args a = {.x = x, .x_tok_stride = xt, .x_head_stride = 40, .y = y, .y_tok_stride = yt,
                               .y_head_stride = 80, .n_tok = nt, .n_heads = nh, .n = n,
                               .y_type = f16 == 2 ? KRN_KV_Q8 : f16 ? KRN_KV_F16 : KRN_KV_F32};
            tabs[l].kv_store.fn(&a, 0, 5);
            tabs[l].kv_store.fn(&a, 5, nt * nh);
            if (f16 == 2) { /* q8: each row is krn_kv_row_from_f32's n + 4 bytes, the rest untouched */
                for (size_t t = 0; t < nt; t++)
                    for (size_t h = 0; h < nh; h++) {
                        uint8_t want[41];
                        const uint8_t *got = y + t * yt + h * 80;
                        krn_kv_row_from_f32(KRN_KV_Q8, x + t * xt + h * 40, n, want);
                        ck_assert(memcmp(got, want, n + 4) == 0);
                        for (size_t j = n + 4; j < 80; j++)
                            ck_assert_int_eq(got[j], 0x5C);
                    }
                free(y);
                continue;
            }
            for (size_t t = 0; t < nt; t++)
                for (size_t h = 0; h < nh; h++)
                    for (size_t j = 0; j < 80; j++) {
                        size_t yo = t * yt + h * 80 + j;
                        /* x ends 40 values after the last head starts: read it for j < n only. */
                        float xv = j < n ? x[t * xt + h * 40 + j] : 0.0f;
                        if (j >= n) { /* untouched */
                            ck_assert_int_eq(y[yo * esz], 0x5C);
                        } else if (f16) {
                            ck_assert_uint_eq(((uint16_t *)(void *)y)[yo], krn_f32_to_f16(xv));
                        } else {
                            ck_assert(((float *)(void *)y)[yo] == xv);
                        }
                    }
            free(y);
        }
    free(x);
}
END_TEST

/* ------------------------------------------------------------------------- */
/* Attention                                                                   */

typedef struct gqa_case {
    size_t past, seq, nq, nkv, hd;
    int64_t window;
    float softcap;
    bool token_major; /* cache as [T, Nkv, H] instead of [Nkv, T, H] */
    bool f16;         /* fp16 cache */
    bool q8;          /* q8 cache (f16 false) */
} gqa_case;

/*
 * A q8 copy of an fp32 cache of NKV x CAP rows of HD (element (g, t, e) at
 * f[g * hs + t * ts + e]) in the same layout with q8 rows (strides scaled to
 * rows of hd + 4 bytes), and f's rows replaced by the values the copy holds,
 * so fp32 arithmetic on f is what the q8 kernels must approximate. Sets the
 * copy's strides.
 */
static int8_t *q8_cache(float *f, size_t nkv, size_t cap, size_t hd, size_t hs, size_t ts, size_t *hs8,
                        size_t *ts8)
{
    size_t row = krn_kv_row_elems(KRN_KV_Q8, hd);
    *hs8 = hs / hd * row;
    *ts8 = ts / hd * row;
    int8_t *c = xmalloc(nkv * cap * row);
    for (size_t g = 0; g < nkv; g++)
        for (size_t t = 0; t < cap; t++) {
            float *x = f + g * hs + t * ts;
            int8_t *y = c + g * *hs8 + t * *ts8;
            krn_kv_row_from_f32(KRN_KV_Q8, x, hd, y);
            for (size_t e = 0; e < hd; e++)
                x[e] = krn_kv_row_value(KRN_KV_Q8, y, hd, e);
        }
    return c;
}

/*
 * Tolerance, shared by ref-vs-double and level-vs-ref. A score's fp32 dot has
 * error <= (H + 2) u scale sum|q k| =: delta (tanh soft-capping is 1-Lipschitz
 * and adds ~2u softcap). A weight p_j = e^(s_j - max) / sum then has relative
 * error <= 2 delta_max + (L + 8) u (exp ~2 ulp in the vector code, the sum of
 * L terms, the divide), and the output sum_j p_j v_j adds (L + 2) u max|v|.
 * So |err| <= max|v| (2 delta_max + 2 (L + H + 8) u + 4u softcap), and twice
 * that between two implementations.
 */
/* A's attention on the cache K, V of type T and strides HS, TS (checked). */
static krn_gqa_args on_cache(const krn_gqa_args *a, const void *k, const void *v, krn_kv_type t, size_t hs, size_t ts)
{
    krn_gqa_args an = *a;
    an.k_cache = k;
    an.v_cache = v;
    an.kv_head_stride = hs;
    an.kv_tok_stride = ts;
    an.kv_type = t;
    ck_assert_int_eq(krn_gqa_check(&an), KRN_OK);
    return an;
}

/*
 * The reference on the narrow cache K, V (of type T, strides HS, TS) gives
 * bit for bit what it gave on A's fp32 cache holding the values they read
 * as (in A's output); returns A on the narrow cache. (fp16: its widening
 * is exact. q8 keys take the query as int16 codes, so not for q8.)
 */
static krn_gqa_args narrow_ref_agrees(const krn_table *ref, const krn_gqa_args *a, const void *k, const void *v,
                                      krn_kv_type t, size_t hs, size_t ts, size_t items)
{
    size_t n = a->seq * a->out_ld;
    float *o = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        o[i] = 3.0f;
    krn_gqa_args an = on_cache(a, k, v, t, hs, ts);
    an.out = o;
    ref->gqa.fn(&an, 0, items);
    ck_assert_msg(memcmp(o, a->out, n * sizeof(float)) == 0, "ref gqa on a type %d cache != fp32 on its values", t);
    free(o);
    an.out = a->out;
    return an;
}

static void gqa_run(const krn_table *lv, const gqa_case *c, rng *r)
{
    krn_table ref = ref_tab();
    size_t T = c->past + c->seq, cap = T + 3, hd = c->hd;
    size_t q_ld = c->nq * hd + 4, out_ld = c->nq * hd + 1;
    size_t head_stride = c->token_major ? hd : cap * hd;
    size_t tok_stride = c->token_major ? c->nkv * hd : hd;
    size_t cache_sz = c->nkv * cap * hd;
    float *q = frand(c->seq * q_ld, r, -1, 1);
    float *kc = frand(cache_sz, r, -1, 1), *vc = frand(cache_sz, r, -2, 2);
    float *o_ref = xmalloc(c->seq * out_ld * sizeof(float)), *o_l = xmalloc(c->seq * out_ld * sizeof(float));
    for (size_t i = 0; i < c->seq * out_ld; i++)
        o_ref[i] = o_l[i] = 3.0f;
    /*
     * fp16 cache: the halves of the random values, and kc/vc replaced by their
     * exact widening, so the fp32 reference on kc/vc is what the fp16 kernels
     * must match (the reference's fp16 path bit for bit).
     */
    uint16_t *k16 = NULL, *v16 = NULL;
    if (c->f16) {
        k16 = xmalloc(cache_sz * 2);
        v16 = xmalloc(cache_sz * 2);
        for (size_t i = 0; i < cache_sz; i++) {
            k16[i] = krn_f32_to_f16(kc[i]);
            v16[i] = krn_f32_to_f16(vc[i]);
            kc[i] = krn_f16_to_f32(k16[i]);
            vc[i] = krn_f16_to_f32(v16[i]);
        }
    }
    krn_gqa_args a = {.q = q, .q_ld = q_ld, .k_cache = kc, .v_cache = vc, .kv_head_stride = head_stride,
                      .kv_tok_stride = tok_stride, .out = o_ref, .out_ld = out_ld, .seq = c->seq,
                      .past = c->past, .n_heads = c->nq, .n_kv_heads = c->nkv, .head_dim = hd,
                      .scale = 1.0f / sqrtf((float)hd) * 4.0f, /* sharper than usual: a peaky softmax */
                      .local_window = c->window, .softcap = c->softcap};
    ck_assert_int_eq(krn_gqa_check(&a), KRN_OK);
    size_t items = c->seq * c->nq;
    ref.gqa.fn(&a, 0, items);
    if (c->f16)
        a = narrow_ref_agrees(&ref, &a, k16, v16, KRN_KV_F16, head_stride, tok_stride, items);
    int8_t *k8 = NULL, *v8 = NULL;
    if (c->q8) {
        /*
         * q8 rows read as code * scale: the fp32 values kc / vc now hold. A
         * key's score takes the query as int16 codes (krn_q16_row): within
         * half its step per element, added to each score's bound below.
         */
        size_t hs8, ts8;
        k8 = q8_cache(kc, c->nkv, cap, hd, head_stride, tok_stride, &hs8, &ts8);
        v8 = q8_cache(vc, c->nkv, cap, hd, head_stride, tok_stride, &hs8, &ts8);
        a = on_cache(&a, k8, v8, KRN_KV_Q8, hs8, ts8);
        ref.gqa.fn(&a, 0, items); /* against the values kc / vc now hold, below */
    }
    a.out = o_l;
    /* Odd cuts split kv groups across calls. */
    size_t cut1 = items / 3, cut2 = cut1 + (items - cut1) / 2 + 1;
    if (cut2 > items)
        cut2 = items;
    lv->gqa.fn(&a, 0, cut1);
    lv->gqa.fn(&a, cut1, cut2);
    lv->gqa.fn(&a, cut2, items);

    double *sc = xmalloc(T * sizeof(double));
    double *dl = xmalloc(T * sizeof(double));
    for (size_t s = 0; s < c->seq; s++)
        for (size_t h = 0; h < c->nq; h++) {
            size_t g = h / (c->nq / c->nkv), len = c->past + s + 1, j0 = 0;
            if (c->window >= 0 && len > (size_t)c->window)
                j0 = len - (size_t)c->window;
            const float *qh = q + s * q_ld + h * hd;
            double mx = -INFINITY, den = 0, vmax = 0, dmax = 0;
            double qstep = 0; /* half a step of the query's int16 codes (q8 keys) */
            for (size_t e = 0; c->q8 && e < hd; e++)
                qstep = fmax(qstep, fabs((double)qh[e]) / 32767 * 0.5 * (1 + 1e-6));
            for (size_t j = j0; j < len; j++) {
                const float *k = kc + g * head_stride + j * tok_stride;
                double d = 0, mag = 0, kabs = 0;
                for (size_t e = 0; e < hd; e++) {
                    d += (double)qh[e] * k[e];
                    mag += fabs((double)qh[e] * k[e]);
                    kabs += fabs((double)k[e]);
                }
                d *= a.scale;
                if (c->softcap > 0)
                    d = c->softcap * tanh(d / c->softcap);
                sc[j] = d;
                dl[j] = (hd + 2) * U * a.scale * mag + a.scale * qstep * kabs;
                mx = fmax(mx, d);
                dmax = fmax(dmax, dl[j]);
            }
            for (size_t j = j0; j < len; j++)
                den += exp(sc[j] - mx);
            for (size_t e = 0; e < hd; e++) {
                double want = 0;
                for (size_t j = j0; j < len; j++) {
                    double v = vc[g * head_stride + j * tok_stride + e];
                    want += exp(sc[j] - mx) / den * v;
                    vmax = fmax(vmax, fabs(v));
                }
                double tol = vmax * (2 * dmax + 2.0 * (len + hd + 8) * U + 4 * U * c->softcap) + 1e-30;
                CHECK_CLOSE(o_ref[s * out_ld + h * hd + e], want, tol,
                            "ref gqa P=%zu S=%zu nq=%zu nkv=%zu hd=%zu w=%lld s=%zu h=%zu e=%zu", c->past,
                            c->seq, c->nq, c->nkv, hd, (long long)c->window, s, h, e);
                CHECK_CLOSE(o_l[s * out_ld + h * hd + e], o_ref[s * out_ld + h * hd + e], 2 * tol,
                            "%s P=%zu S=%zu nq=%zu nkv=%zu hd=%zu w=%lld s=%zu h=%zu e=%zu", lv->gqa.name,
                            c->past, c->seq, c->nq, c->nkv, hd, (long long)c->window, s, h, e);
            }
            ck_assert(o_l[s * out_ld + out_ld - 1] == 3.0f); /* past the last head */
        }
    free(sc);
    free(dl);
    free(q);
    free(kc);
    free(vc);
    free(k16);
    free(v16);
    free(k8);
    free(v8);
    free(o_ref);
    free(o_l);
}

START_TEST(gqa)
{
    static const gqa_case cases[] = {
        {0, 1, 2, 1, 8, -1, 0, false, false, false},     {0, 7, 4, 2, 64, -1, 0, false, false, false},
        {5, 1, 16, 8, 128, -1, 0, false, false, false},  {70, 3, 4, 2, 128, -1, 0, true, false, false},
        {200, 1, 6, 2, 36, -1, 0, false, false, false},  {3, 17, 3, 3, 20, -1, 0, false, false, false},
        {40, 5, 4, 1, 64, 4, 0, false, false, false},    {10, 3, 2, 2, 32, 0, 0, false, false, false},
        {100, 2, 4, 2, 128, 50, 0, true, false, false},  {30, 4, 4, 2, 64, -1, 5.0f, false, false, false},
        {130, 1, 16, 2, 128, -1, 0, false, false, false}, /* group of 8 heads, chunk boundaries */
        /* Query blocks (prefill): groups of 2, 8, and 32 heads (more than one pass's rows). */
        {0, 40, 4, 2, 64, -1, 0, true, false, false},    {9, 23, 8, 1, 24, -1, 0, false, false, false},
        {0, 5, 32, 1, 16, -1, 0, false, false, false},   {17, 33, 4, 2, 128, 20, 0, true, false, false},
        /* Decode over a token-major cache: passes span kv heads (odd groups, 1:1, > 16 heads). */
        {33, 1, 6, 2, 40, -1, 0, true, false, false},  {50, 1, 4, 4, 64, -1, 0, true, true, false},
        {9, 1, 32, 2, 128, -1, 0, true, false, false}, {20, 1, 12, 4, 24, 7, 0, true, false, false},
        /* Decode over a head-major cache: groups of 3 and 4, a window starting inside a chunk,
         * soft-capping, head sizes with an 8-dim tail, an empty past, fp16 at the 4B geometry. */
        {77, 1, 8, 2, 64, -1, 0, false, false, false},   {45, 1, 6, 2, 128, 10, 0, false, false, false},
        {33, 1, 12, 4, 64, -1, 3.0f, false, false, false}, {0, 1, 4, 2, 24, -1, 0, false, false, false},
        {64, 1, 3, 1, 40, -1, 0, false, false, false},   {95, 1, 32, 8, 128, -1, 0, false, true, false},
        {160, 1, 8, 2, 128, 33, 0, false, true, false},
        /* ... and longer: 256-dim heads over 601 keys, 72 dims (blocks of 32, 32 and 8) with a 150-key window. */
        {600, 1, 4, 2, 256, -1, 0, false, false, false}, {300, 1, 8, 2, 72, 150, 0, false, false, false},
        /* fp16 caches, decode and prefill. */
        {70, 1, 16, 8, 128, -1, 0, true, true, false}, {300, 1, 4, 1, 128, -1, 0, false, true, false},
        {0, 37, 4, 2, 128, -1, 0, true, true, false},  {12, 9, 6, 3, 36, 5, 0, true, true, false},
        /* q8 caches, decode and prefill, head sizes with tails. */
        {70, 1, 16, 8, 128, -1, 0, true, false, true}, {300, 1, 4, 1, 128, -1, 0, false, false, true},
        {45, 1, 12, 4, 44, 20, 3.0f, false, false, true}, {0, 37, 4, 2, 128, -1, 0, true, false, true},
        {12, 9, 6, 3, 36, 5, 0, false, false, true},
    };
    krn_table tabs[MAX_TABS + 1];
    tabs[0] = ref_tab();
    int nl = 1 + simd_tables(tabs + 1, true);
    rng r = {4242};
    for (int l = 0; l < nl; l++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            gqa_run(&tabs[l], &cases[i], &r);
}
END_TEST

/*
 * Every level's attention gives the AVX2 core's bits: prompt rows (S > 1, or
 * the prompt flag) take the lane arithmetic, which the avx512 core does lane
 * for lane as the AVX2 core does, and decode rows take the AVX2 core's
 * row-major pass on every level. So a request's attention does not depend on
 * the CPU's level. Each case is cut into odd item ranges.
 */
static void gqa_levels_agree(const gqa_case *cases, size_t n_cases, bool prompt, const char *what)
{
    krn_table tabs[MAX_TABS], avx2;
    int nl = simd_tables(tabs, true);
    if (krn_table_for_level(KRN_LEVEL_AVX2, &avx2) != KRN_OK)
        return; /* no SIMD level runs here */
    rng r = {777};
    for (size_t i = 0; i < n_cases; i++) {
        const gqa_case *c = &cases[i];
        size_t T = c->past + c->seq, cap = T + 2, hd = c->hd, esz = c->f16 ? 2 : 4;
        size_t q_ld = c->nq * hd + 3, out_ld = c->nq * hd, cache_sz = c->nkv * cap * hd;
        float *q = frand(c->seq * q_ld, &r, -1, 1);
        float *kf = frand(cache_sz, &r, -1, 1), *vf = frand(cache_sz, &r, -2, 2);
        void *kc = kf, *vc = vf;
        size_t hs = c->token_major ? hd : cap * hd, ts = c->token_major ? c->nkv * hd : hd;
        if (c->f16) {
            kc = xmalloc(cache_sz * esz);
            vc = xmalloc(cache_sz * esz);
            for (size_t e = 0; e < cache_sz; e++) {
                ((uint16_t *)kc)[e] = krn_f32_to_f16(kf[e]);
                ((uint16_t *)vc)[e] = krn_f32_to_f16(vf[e]);
            }
        } else if (c->q8) {
            kc = q8_cache(kf, c->nkv, cap, hd, hs, ts, &hs, &ts);
            size_t hs0 = c->token_major ? hd : cap * hd, ts0 = c->token_major ? c->nkv * hd : hd;
            vc = q8_cache(vf, c->nkv, cap, hd, hs0, ts0, &hs, &ts);
        }
        size_t out_n = c->seq * out_ld, items = c->seq * c->nq;
        float *want = xmalloc(out_n * sizeof(float)), *got = xmalloc(out_n * sizeof(float));
        krn_gqa_args a = {.q = q, .q_ld = q_ld, .k_cache = kc, .v_cache = vc, .kv_head_stride = hs,
                          .kv_tok_stride = ts, .out = want, .out_ld = out_ld,
                          .seq = c->seq, .past = c->past, .n_heads = c->nq, .n_kv_heads = c->nkv,
                          .head_dim = hd, .scale = 4.0f / sqrtf((float)hd), .local_window = c->window,
                          .softcap = c->softcap,
                          .kv_type = c->f16 ? KRN_KV_F16 : c->q8 ? KRN_KV_Q8 : KRN_KV_F32, .prompt = prompt};
        avx2.gqa.fn(&a, 0, items);
        for (int l = 0; l < nl; l++) {
            memset(got, 0xff, out_n * sizeof(float));
            a.out = got;
            size_t cut = items / 3 + 1;
            tabs[l].gqa.fn(&a, 0, cut);
            tabs[l].gqa.fn(&a, cut, items);
            ck_assert_msg(memcmp(got, want, out_n * sizeof(float)) == 0,
                          "%s differs from gqa.avx2 on %s rows: P=%zu S=%zu nq=%zu nkv=%zu hd=%zu", tabs[l].gqa.name, what,
                          c->past, c->seq, c->nq, c->nkv, hd);
            a.out = want;
        }
        if (c->f16 || c->q8) {
            free(kc);
            free(vc);
        }
        free(q);
        free(kf);
        free(vf);
        free(want);
        free(got);
    }
}

/*
 * Prompt rows: shapes with fewer rows than a vector, head sizes with tails,
 * windows, soft-capping, fp16 and q8 caches and both cache layouts.
 */
START_TEST(gqa_prompt_levels_agree)
{
    static const gqa_case cases[] = {
        {0, 40, 4, 2, 64, -1, 0, true, false, false},  {9, 23, 8, 1, 24, -1, 0, false, false, false},
        {0, 5, 32, 1, 16, -1, 0, false, false, false}, {17, 33, 4, 2, 128, 20, 0, true, false, false},
        {3, 17, 3, 3, 20, -1, 0, false, true, false},  {30, 4, 4, 2, 64, -1, 5.0f, false, false, false},
        {0, 37, 16, 8, 128, -1, 0, false, true, false}, {64, 1, 16, 8, 128, -1, 0, false, false, false},
        {100, 2, 6, 2, 36, 50, 0, true, true, false},  {0, 70, 2, 1, 8, -1, 0, false, false, false},
        {17, 33, 4, 2, 128, 20, 0, true, false, true}, {3, 17, 3, 3, 20, -1, 0, false, false, true},
        /* Lane sets that the avx512 core runs in pairs: pairs whose halves end in different chunks
         * (64 tokens), groups of 4 (sets of 4 tokens), a window that starts the halves in different
         * chunks, soft-capping, fp16 and q8 caches, and a lone set at the end (S = 72 in groups of 2). */
        {0, 64, 4, 2, 128, -1, 0, false, false, false}, {0, 50, 8, 2, 128, -1, 0, false, false, false},
        {5, 60, 4, 2, 64, 20, 0, false, false, false},  {11, 48, 4, 1, 32, -1, 3.0f, false, false, false},
        {0, 48, 4, 2, 64, -1, 0, false, true, false},   {0, 48, 4, 2, 64, -1, 0, false, false, true},
        {30, 72, 2, 1, 40, -1, 0, false, false, false},
    };
    gqa_levels_agree(cases, sizeof cases / sizeof cases[0], true, "prompt");
}
END_TEST

/*
 * Decode rows (one new token): kv groups of 1 to 8 heads (odd ones leave a
 * row without a partner), head sizes from 8 to 128, pasts that end inside, at
 * and past chunk boundaries, windows, soft-capping, fp16 and q8 caches,
 * and token-major caches (whose sets span kv heads).
 */
START_TEST(gqa_decode_levels_agree)
{
    static const gqa_case cases[] = {
        {0, 1, 2, 1, 8, -1, 0, false, false, false},      {30, 1, 16, 8, 128, -1, 0, false, false, false},
        {31, 1, 4, 2, 64, -1, 0, false, true, false},     {32, 1, 6, 2, 24, -1, 0, false, false, false},
        {63, 1, 3, 1, 40, -1, 0, false, false, false},    {100, 1, 32, 8, 128, -1, 0, false, true, false},
        {137, 1, 8, 1, 80, 50, 0, false, false, false},   {45, 1, 12, 4, 120, -1, 4.0f, false, false, false},
        {300, 1, 16, 8, 128, 33, 0, false, true, false},  {9, 1, 5, 5, 16, -1, 0, false, false, false},
        {70, 1, 16, 8, 128, -1, 0, true, false, false},   {50, 1, 4, 4, 64, -1, 0, true, true, false},
        {20, 1, 12, 4, 24, 7, 0, true, false, false},     {257, 1, 14, 2, 96, -1, 0, false, false, false},
        {70, 1, 16, 8, 128, -1, 0, true, false, true}, {31, 1, 4, 2, 64, -1, 0, false, false, true},
        {137, 1, 8, 1, 80, 50, 0, false, false, true}, {45, 1, 12, 4, 120, -1, 4.0f, false, false, true},
        {300, 1, 16, 8, 128, 33, 0, false, false, true}, {9, 1, 5, 5, 12, -1, 0, false, false, true},
        /* q8 sets of one kv head whose head size is a multiple of 32 take the avx512 level's own pass:
         * groups of 1 to 5 rows, head sizes 32 to 160, pasts in and across chunks, a window, soft-capping. */
        {100, 1, 32, 8, 128, -1, 0, false, false, true}, {63, 1, 6, 2, 96, -1, 0, false, false, true},
        {0, 1, 4, 4, 32, -1, 0, false, false, true},     {95, 1, 5, 1, 160, 40, 0, false, false, true},
        {33, 1, 8, 2, 64, -1, 3.0f, false, false, true}, {1000, 1, 16, 8, 128, -1, 0, false, false, true},
        /* fp32 and fp16 sets of one kv head whose head size is a multiple of 16 take the avx512 level's own
         * pass too: groups of 1 to 7 rows, head sizes 32 to 144 (a 128-dim block and 16-dim ones), pasts in
         * and across chunks, a window, soft-capping, token-major rows. */
        {0, 1, 4, 4, 32, -1, 0, false, false, false},    {95, 1, 5, 1, 144, 40, 0, false, true, false},
        {33, 1, 8, 2, 64, -1, 3.0f, false, false, false}, {33, 1, 8, 2, 64, -1, 3.0f, false, true, false},
        {63, 1, 6, 2, 112, -1, 0, false, true, false},   {1000, 1, 16, 8, 128, -1, 0, false, false, false},
        {129, 1, 14, 2, 48, -1, 0, true, true, false},   {95, 1, 5, 1, 144, 40, 0, false, false, false},
    };
    gqa_levels_agree(cases, sizeof cases / sizeof cases[0], false, "decode");
}
END_TEST

/* ------------------------------------------------------------------------- */
/* Elementwise and gather                                                      */

/*
 * Sigmoid: the reference is 1/(1+e) or e/(1+e) with e = expf(-|x|) (glibc
 * expf < 1 ulp), so within 4u relative of the exact value; the vector exp is
 * ~2 ulp, so levels are within 8u relative of ref. SiLU-mul adds two rounded
 * products: 3u more. Results in the subnormal range carry absolute errors
 * instead (bounds below). Mul and add are exact copies.
 */
START_TEST(elementwise)
{
    const size_t n = 1003;
    rng r = {11};
    float *a = frand(n, &r, -30, 30), *b = frand(n, &r, -3, 3);
    static const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 89.0f, -89.0f,
                                     100.0f, -100.0f, 1e30f, -1e30f, INFINITY, -INFINITY, 0.5f, -0.5f};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        a[i * 7] = specials[i];
    float *yr = xmalloc(n * sizeof(float)), *yl = xmalloc(n * sizeof(float));
    krn_table tabs[MAX_TABS + 1];
    tabs[0] = ref_tab();
    int nl = 1 + simd_tables(tabs + 1, false);

    krn_ew_args ar = {.a = a, .b = b, .y = yr, .n = n};
    tabs[0].sigmoid.fn(&ar, 0, n);
    for (size_t i = 0; i < n; i++) {
        double want = 1.0 / (1.0 + exp(-(double)a[i]));
        CHECK_CLOSE(yr[i], want, 4 * U * want + 0x1p-147, "ref sigmoid(%g)", a[i]);
    }
    tabs[0].silu_mul.fn(&ar, 0, n);
    for (size_t i = 0; i < n; i++) {
        double want = a[i] / (1.0 + exp(-(double)a[i])) * b[i];
        if (isinf(a[i]))
            continue; /* -inf * 0: NaN in both forms */
        /* A subnormal sigmoid carries an absolute 2^-147, scaled by |a b| here. */
        CHECK_CLOSE(yr[i], want, 7 * U * fabs(want) + 0x1p-147 * (1 + fabs(a[i] * b[i])),
                    "ref silu_mul(%g, %g)", a[i], b[i]);
    }

    for (int l = 1; l < nl; l++) {
        struct {
            krn_ew_fn rf, lf;
            const char *name;
            double rel;
        } ops[] = {{tabs[0].sigmoid.fn, tabs[l].sigmoid.fn, tabs[l].sigmoid.name, 8 * U},
                   {tabs[0].silu_mul.fn, tabs[l].silu_mul.fn, tabs[l].silu_mul.name, 11 * U},
                   {tabs[0].mul.fn, tabs[l].mul.fn, tabs[l].mul.name, 0},
                   {tabs[0].add.fn, tabs[l].add.fn, tabs[l].add.name, 0}};
        for (size_t o = 0; o < 4; o++) {
            for (size_t i = 0; i < n; i++)
                yl[i] = 9.0f;
            krn_ew_args al = {.a = a, .b = b, .y = yl, .n = n};
            ar.y = yr;
            ops[o].rf(&ar, 0, n);
            /* Ranges with ragged ends; [1000, 1003) is a pure tail. */
            ops[o].lf(&al, 3, 500);
            ops[o].lf(&al, 500, 1000);
            ops[o].lf(&al, 1000, n);
            for (size_t i = 0; i < 3; i++)
                ck_assert(yl[i] == 9.0f);
            for (size_t i = 3; i < n; i++) {
                if (yl[i] == yr[i]) /* also equal infinities */
                    continue;
                if (isnan(yr[i])) {
                    ck_assert_msg(isnan(yl[i]), "%s(%g)", ops[o].name, a[i]);
                    continue;
                }
                /* Flushing e^x below FLT_MIN costs up to FLT_MIN, times |a b| for silu_mul. */
                double tol = ops[o].rel * fabs(yr[i]) + (ops[o].rel ? 0x1p-126 * (1 + fabs(a[i] * b[i])) : 0);
                CHECK_CLOSE(yl[i], yr[i], tol, "%s(%g, %g)", ops[o].name, a[i], b[i]);
            }
        }
        /* In place: y = a. */
        float *c = xmalloc(n * sizeof(float));
        memcpy(c, a, n * sizeof(float));
        krn_ew_args ip = {.a = c, .b = b, .y = c, .n = n};
        tabs[l].mul.fn(&ip, 0, n);
        for (size_t i = 0; i < n; i++)
            ck_assert(c[i] == a[i] * b[i] || (isnan(c[i]) && isnan(a[i] * b[i])));
        free(c);
    }
    free(a);
    free(b);
    free(yr);
    free(yl);
}
END_TEST

/*
 * krn_q4_dequant_row: each row of the weights, from the packed copy (fp32 and
 * bfloat16 scales, with and without zero points) and from the ONNX layout
 * (with and without zero points),
 * equals (q - zp) * scale computed here from the definition, bit for bit
 * (a 4-bit difference times a scale is exact in fp32 for these scales).
 * Odd row counts (a partial last tile), K with a partial last block.
 */
START_TEST(q4_dequant_rows)
{
    rng r = {4242};
    static const size_t ns[] = {1, 7, 9, 21}, ks[] = {32, 40, 96, 100};
    for (size_t in = 0; in < 4; in++)
        for (size_t ik = 0; ik < 4; ik++)
            for (int form = 0; form < 6; form++) {
                /* packed fp32, packed bf16, ONNX, ONNX with zero points, packed fp32 / bf16 with zero points */
                size_t n = ns[in], k = ks[ik];
                bool bf16 = form == 1 || form == 5, packed = form < 2 || form >= 4;
                qweights q;
                qw_make(&q, n, k, 32, form >= 3, false, 0.1f, &r);
                size_t kb = q.w.k_blocks;
                if (bf16) /* scales exact in bfloat16: the packed copy keeps their upper halves */
                    for (size_t i = 0; i < n * kb; i++) {
                        uint32_t u;
                        memcpy(&u, &q.scales[i], 4);
                        u &= 0xFFFF0000u;
                        memcpy(&q.scales[i], &u, 4);
                    }
                uint8_t *pk = NULL;
                if (packed) {
                    q.w.packed_bf16 = bf16;
                    q.w.packed_zp = form >= 4;
                    size_t sz = krn_q4_pack_size(&q.w);
                    pk = aligned_alloc(64, (sz + 63) & ~(size_t)63);
                    ck_assert_ptr_nonnull(pk);
                    ck_assert_int_eq(krn_q4_pack(&q.w, pk), KRN_OK);
                    q.w.packed = pk;
                }
                float *row = xmalloc(k * sizeof(float));
                for (size_t i = 0; i < n; i++) {
                    krn_q4_dequant_row(&q.w, i, row);
                    for (size_t j = 0; j < k; j++) {
                        size_t b = j / 32;
                        float want = (float)((int)krn_q4_get(&q.w, i, j) - krn_q4_zp(&q.w, i, b)) *
                                     q.scales[i * kb + b];
                        ck_assert_msg(memcmp(&row[j], &want, 4) == 0, "form %d n %zu k %zu: row %zu col %zu: %g vs %g",
                                      form, n, k, i, j, row[j], want);
                    }
                }
                free(row);
                free(pk);
                qw_free(&q);
            }
}
END_TEST

/*
 * mm_f (MatMul with a constant float weight): the reference against the
 * definition in double (eight partial sums of K/8 terms each, then three
 * levels of pairwise adds: each product and add rounds once, so
 * |err| <= (K/8 + 3 + 1) u sum |a w| plus the double's own), and every SIMD
 * level against the reference bit for bit (the same order of operations).
 * Both weight layouts, fp32 and bfloat16 weights, odd N and K, tails of
 * every width, and a row of zeros and negative zeros.
 */
START_TEST(mm_f_levels)
{
    rng r = {777};
    krn_table ref = ref_tab(), tabs[MAX_TABS];
    int nl = simd_tables(tabs, true);
    static const size_t ms[] = {1, 3}, ns[] = {1, 7, 8, 9, 33}, ks[] = {1, 7, 8, 17, 64, 100};
    for (size_t im = 0; im < 2; im++)
        for (size_t in = 0; in < 5; in++)
            for (size_t ik = 0; ik < 6; ik++)
                for (int form = 0; form < 4; form++) {
                    size_t m = ms[im], n = ns[in], k = ks[ik];
                    bool nk = form & 1, bf16 = form & 2;
                    size_t ld = (nk ? k : n) + 3, rows = nk ? n : k;
                    float *a = frand(m * (k + 2), &r, -2, 2);
                    float *wf = frand(rows * ld, &r, -1, 1);
                    uint16_t *wh = xmalloc(rows * ld * sizeof *wh);
                    for (size_t i = 0; i < rows * ld; i++) {
                        uint32_t u;
                        memcpy(&u, &wf[i], 4);
                        wh[i] = (uint16_t)(u >> 16);
                        u &= 0xFFFF0000u; /* the bfloat16 value, for the double reference */
                        memcpy(&wf[i], &u, 4);
                    }
                    if (m > 1)
                        for (size_t j = 0; j < k; j++)
                            a[(k + 2) + j] = (j & 1) ? -0.0f : 0.0f;
                    float *y0 = xmalloc(m * (n + 1) * sizeof(float)), *y1 = xmalloc(m * (n + 1) * sizeof(float));
                    krn_mmf_args args = {.a = a, .a_ld = k + 2, .w = bf16 ? (const void *)wh : (const void *)wf,
                                         .w_ld = ld, .w_bf16 = bf16, .w_nk = nk, .y = y0, .y_ld = n + 1,
                                         .m = m, .n = n, .k = k};
                    ref.mm_f.fn(&args, 0, n);
                    for (size_t i = 0; i < m; i++)
                        for (size_t j = 0; j < n; j++) {
                            double want = 0, mag = 0;
                            for (size_t t = 0; t < k; t++) {
                                double w = wf[nk ? j * ld + t : t * ld + j];
                                want += (double)a[i * (k + 2) + t] * w;
                                mag += fabs((double)a[i * (k + 2) + t] * w);
                            }
                            CHECK_CLOSE(y0[i * (n + 1) + j], want, ((double)k / 8 + 5) * U * mag + 1e-30,
                                        "mm_f ref m %zu n %zu k %zu form %d (%zu, %zu)", m, n, k, form, i, j);
                        }
                    for (int l = 0; l < nl; l++) {
                        args.y = y1;
                        memset(y1, 0xAB, m * (n + 1) * sizeof(float));
                        /* two ranges, as two workers would split the columns */
                        tabs[l].mm_f.fn(&args, 0, n / 2);
                        tabs[l].mm_f.fn(&args, n / 2, n);
                        for (size_t i = 0; i < m; i++)
                            ck_assert_msg(memcmp(y0 + i * (n + 1), y1 + i * (n + 1), n * sizeof(float)) == 0,
                                          "%s: m %zu n %zu k %zu form %d row %zu differs from the reference",
                                          tabs[l].mm_f.name, m, n, k, form, i);
                    }
                    free(a);
                    free(wf);
                    free(wh);
                    free(y0);
                    free(y1);
                }
}
END_TEST

START_TEST(gather)
{
    const size_t rows = 10, cols = 6, ld = 8;
    float table[80];
    for (size_t i = 0; i < 80; i++)
        table[i] = (float)i;
    int64_t idx[] = {0, 9, -1, -10, 4};
    float y[5 * 7];
    for (size_t i = 0; i < 35; i++)
        y[i] = -1;
    krn_gather_args a = {.table = table, .table_ld = ld, .n_rows = rows, .n_cols = cols, .idx = idx,
                         .n_idx = 5, .y = y, .y_ld = 7};
    krn_table tabs[MAX_TABS + 1];
    tabs[0] = ref_tab();
    int nl = 1 + simd_tables(tabs + 1, false);
    for (int l = 0; l < nl; l++) {
        ck_assert_int_eq(tabs[l].gather.fn(&a, 0, 2), KRN_OK);
        ck_assert_int_eq(tabs[l].gather.fn(&a, 2, 5), KRN_OK);
        static const size_t want_row[] = {0, 9, 9, 0, 4};
        for (size_t i = 0; i < 5; i++) {
            for (size_t j = 0; j < cols; j++)
                ck_assert(y[i * 7 + j] == table[want_row[i] * ld + j]);
            ck_assert(y[i * 7 + 6] == -1);
        }
        int64_t bad[] = {3, 10};
        a.idx = bad;
        a.n_idx = 2;
        ck_assert_int_eq(tabs[l].gather.fn(&a, 0, 2), KRN_ERANGE);
        bad[1] = -11;
        ck_assert_int_eq(tabs[l].gather.fn(&a, 1, 2), KRN_ERANGE);
        a.idx = idx;
        a.n_idx = 5;
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels");
    TCase *tc = tcase_create("kernels");
    /* The grids take a few seconds and the full projection shapes ~30 s
     * (the LM heads' exact tolerances), several times that under sanitizers. */
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, levels_and_names);
    tcase_add_test(tc, table_selection);
    tcase_add_test(tc, plan_checks);
    tcase_add_test(tc, quant_a8_definition);
    tcase_add_test(tc, mmnb_f32_ref_vs_double);
    tcase_add_test(tc, mmnb_i8_vs_f32_ref);
    tcase_add_test(tc, mmnb_levels_grid);
    tcase_add_test(tc, mmnb_levels_block_sizes_and_edges);
    tcase_add_test(tc, mmnb_levels_projection_shapes);
    tcase_add_test(tc, mmnb_rows_batch_invariant);
    tcase_add_test(tc, packed_prefetch_modes);
    tcase_add_test(tc, mmnb8_ref_definition);
    tcase_add_test(tc, mmnb8_levels);
    tcase_add_test(tc, mmnb8_packed);
    tcase_add_test(tc, q4_pack_layout);
    tcase_add_test(tc, q4_dequant_rows);
    tcase_add_test(tc, mm_f_levels);
    tcase_add_test(tc, norms);
    tcase_add_test(tc, norm_quant_fused);
    tcase_add_test(tc, rotary);
    tcase_add_test(tc, f16_conversions);
    tcase_add_test(tc, kv_q8_rows);
    tcase_add_test(tc, code_rows_avx2);
    tcase_add_test(tc, kv_store);
    tcase_add_test(tc, gqa);
    tcase_add_test(tc, gqa_prompt_levels_agree);
    tcase_add_test(tc, gqa_decode_levels_agree);
    tcase_add_test(tc, elementwise);
    tcase_add_test(tc, gather);
    suite_add_tcase(s, tc);
    return qd_run_suite(s);
}
