/*
 * avx2/attn: AVX2/FMA GroupQueryAttention core for one sequence (batch 1),
 * reading an fp32, fp16 or q8 KV cache.
 *
 * A pass over the keys serves a "row set" of up to RMAX query rows: in
 * prefill the query heads of one kv group times a block of consecutive new
 * tokens, so each K/V row fetched serves many rows; in decode the heads of
 * one kv group over that kv head's rows (contiguous in the session cache and
 * the present tensor), or, when a cache keeps a token's kv heads side by
 * side, up to RMAX heads across kv groups, so the pass walks its token rows
 * as one stream. Keys are taken in
 * chunks of CH with an online softmax: when a chunk raises a row's running
 * maximum, its accumulated output and denominator are rescaled by
 * exp(old max - new max). Nothing grows with the context: the state is the
 * row set's accumulators and one chunk of scores, a few tens of KiB of stack.
 *
 * Scores are computed in 2-row x 4-key register tiles of rows sharing a kv
 * head (each K vector loaded or widened from fp16 once for two rows, eight
 * independent FMA chains, one horizontal reduction per eight scores); the
 * weighted sum of values in
 * 2-row x 32-dim tiles kept in registers across the chunk, so each V vector
 * is read once per row pair and the accumulators touch memory once per chunk
 * (fp32 decode: one row's dims in registers, each V row read whole).
 * Causality (and a local window) are per-row masks over the shared key range;
 * a decode set whose rows share one kv head and one key range, the usual
 * case, takes attend_dec(), the same arithmetic without the per-row work.
 *
 * Numerics versus the reference: the same scores up to summation order, the
 * vector exp (~2 ulp), and normalization by the total at the end instead of
 * per weight. fp16 values are widened exactly (F16C). q8 keys score as the
 * reference scores them, by exact integer dots with the query's int16
 * codes (score2x4_q8); q8 values are widened as they are and read like
 * fp16 (chunk_pv), their row's scale folded into the weight where the
 * reference multiplies each element: a rounding apart. Called by compute
 * workers with an item range. Compiled with the avx2 flags.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/avx2/attn_sets.h"
#include "kernels/avx2/simd.h"

#define PF_KEYS 16 /* keys ahead that attend() prefetches: 128 KiB of an fp32 pass */

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")
#define UNROLL16 _Pragma("GCC unroll 16")

/* The partner of row r in a 2-row tile: the next row if it shares r's kv head, else r itself. */
static inline size_t partner(const rowset *rs, size_t r)
{
    return r + 1 < rs->n && rs->g[r + 1] == rs->g[r] ? r + 1 : r;
}

/*
 * 8 cache values from element offset off: loaded, widened from fp16, or q8
 * codes widened to floats (their row's scale is applied by the caller: to
 * a key's dot product, to a value's weight).
 */
INLINE __m256 kv_load8(const void *base, size_t off, const krn_kv_type KT)
{
    if (KT == KRN_KV_Q8) {
        __m128i c = _mm_loadl_epi64((const __m128i *)(const void *)((const int8_t *)base + off));
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c));
    }
    if (KT == KRN_KV_F16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)base + off)));
    return _mm256_loadu_ps((const float *)base + off);
}

INLINE float kv_load1(const void *base, size_t off, const krn_kv_type KT)
{
    if (KT == KRN_KV_Q8)
        return (float)((const int8_t *)base)[off];
    if (KT == KRN_KV_F16)
        return _cvtsh_ss(((const uint16_t *)base)[off]);
    return ((const float *)base)[off];
}

/* The scale of the q8 row at element offset row. */
INLINE float q8_scale_at(const void *base, size_t row, size_t hd)
{
    return krn_q8_scale((const int8_t *)base + row, hd);
}

/* A set's query rows as int16 codes and scales, for q8 keys (krn_q16_row); unused otherwise. */
typedef struct qcodes {
    int16_t c[RMAX][KRN_MAX_HEAD_DIM] __attribute__((aligned(32)));
    float s[RMAX];
} qcodes;

INLINE void qcodes_fill(const rowset *rs, size_t hd, qcodes *qc, const krn_kv_type KT)
{
    if (KT == KRN_KV_Q8)
        for (size_t r = 0; r < rs->n; r++)
            qc->s[r] = krn_avx2_code_row(rs->q[r], hd, 32767, NULL, qc->c[r]); /* krn_q16_row's codes */
}

/*
 * q8 keys: exact integer dots of rows r0, r1 (int16 codes) with keys
 * koff[0..3] (int8 codes widened to int16, pairs summed by VPMADDWD), so
 * the order of the sums does not matter; then each score is the dot times
 * the row's and the key's scales and the attention scale, in
 * krn_q8_key_score()'s order. The same lanes as score2x4().
 */
INLINE __m256 score2x4_q8(const krn_gqa_args *a, size_t hd, const qcodes *qc, size_t r0, size_t r1,
                          const size_t *koff)
{
    const size_t hd16 = hd & ~(size_t)15;
    const int8_t *k = a->k_cache;
    const int16_t *c0 = qc->c[r0], *c1 = qc->c[r1];
    __m256i s00 = _mm256_setzero_si256(), s01 = s00, s02 = s00, s03 = s00;
    __m256i s10 = s00, s11 = s00, s12 = s00, s13 = s00;
    for (size_t d = 0; d < hd16; d += 16) {
        __m256i k0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k + koff[0] + d)));
        __m256i k1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k + koff[1] + d)));
        __m256i k2 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k + koff[2] + d)));
        __m256i k3 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)(k + koff[3] + d)));
        __m256i x0 = _mm256_load_si256((const __m256i *)(const void *)(c0 + d));
        __m256i x1 = _mm256_load_si256((const __m256i *)(const void *)(c1 + d));
        s00 = _mm256_add_epi32(s00, _mm256_madd_epi16(x0, k0));
        s01 = _mm256_add_epi32(s01, _mm256_madd_epi16(x0, k1));
        s02 = _mm256_add_epi32(s02, _mm256_madd_epi16(x0, k2));
        s03 = _mm256_add_epi32(s03, _mm256_madd_epi16(x0, k3));
        s10 = _mm256_add_epi32(s10, _mm256_madd_epi16(x1, k0));
        s11 = _mm256_add_epi32(s11, _mm256_madd_epi16(x1, k1));
        s12 = _mm256_add_epi32(s12, _mm256_madd_epi16(x1, k2));
        s13 = _mm256_add_epi32(s13, _mm256_madd_epi16(x1, k3));
    }
    const __m256i h[8] = {s00, s01, s02, s03, s10, s11, s12, s13};
    __m256i dots = q8_dots8(h);
    if (hd16 < hd) {
        int32_t t[8];
        _mm256_storeu_si256((__m256i *)(void *)t, dots);
        for (size_t d = hd16; d < hd; d++)
            for (int i = 0; i < 4; i++) {
                t[i] += (int32_t)c0[d] * k[koff[i] + d];
                t[4 + i] += (int32_t)c1[d] * k[koff[i] + d];
            }
        dots = _mm256_loadu_si256((const __m256i *)(const void *)t);
    }
    return q8_scores8(a, dots, qc->s[r0], qc->s[r1], koff, hd);
}

/*
 * Scaled dots of rows r0, r1 with keys j[0..3] (element offsets of the key
 * rows), as [r0.k0 .. r0.k3 | r1.k0 .. r1.k3]. q8 keys take score2x4_q8().
 */
INLINE __m256 score2x4(const krn_gqa_args *a, size_t hd, const rowset *rs, const qcodes *qc, size_t r0, size_t r1,
                       const size_t *koff, const krn_kv_type KT)
{
    if (KT == KRN_KV_Q8)
        return score2x4_q8(a, hd, qc, r0, r1, koff);
    const float *q0 = rs->q[r0], *q1 = rs->q[r1];
    const size_t hd8 = hd & ~(size_t)7;
    __m256 s00 = _mm256_setzero_ps(), s01 = s00, s02 = s00, s03 = s00;
    __m256 s10 = s00, s11 = s00, s12 = s00, s13 = s00;
    for (size_t d = 0; d < hd8; d += 8) {
        __m256 k0 = kv_load8(a->k_cache, koff[0] + d, KT), k1 = kv_load8(a->k_cache, koff[1] + d, KT);
        __m256 k2 = kv_load8(a->k_cache, koff[2] + d, KT), k3 = kv_load8(a->k_cache, koff[3] + d, KT);
        __m256 x0 = _mm256_loadu_ps(q0 + d), x1 = _mm256_loadu_ps(q1 + d);
        s00 = _mm256_fmadd_ps(x0, k0, s00);
        s01 = _mm256_fmadd_ps(x0, k1, s01);
        s02 = _mm256_fmadd_ps(x0, k2, s02);
        s03 = _mm256_fmadd_ps(x0, k3, s03);
        s10 = _mm256_fmadd_ps(x1, k0, s10);
        s11 = _mm256_fmadd_ps(x1, k1, s11);
        s12 = _mm256_fmadd_ps(x1, k2, s12);
        s13 = _mm256_fmadd_ps(x1, k3, s13);
    }
    /* hadd pairs, then the two 128-bit halves: lane order r0 k0..k3, r1 k0..k3. */
    __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(s00, s01), _mm256_hadd_ps(s02, s03));
    __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(s10, s11), _mm256_hadd_ps(s12, s13));
    __m256 r = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
    if (hd8 < hd) {
        float t[8];
        _mm256_storeu_ps(t, r);
        for (size_t d = hd8; d < hd; d++)
            for (int i = 0; i < 4; i++) {
                float kd = kv_load1(a->k_cache, koff[i] + d, KT);
                t[i] += q0[d] * kd;
                t[4 + i] += q1[d] * kd;
            }
        r = _mm256_loadu_ps(t);
    }
    return _mm256_mul_ps(r, _mm256_set1_ps(a->scale));
}

/* Scores of every row of the set against keys [jc, jc + cn) into sc (softcapped). */
INLINE void chunk_scores(const krn_gqa_args *a, const rowset *rs, const qcodes *qc, size_t jc, size_t cn, float (*sc)[CH],
                         const krn_kv_type KT)
{
    const size_t ts = a->kv_tok_stride;
    /* Keys outer: four key rows per kv head stay in L1 while its row pairs use them. */
    for (size_t jj = 0; jj < cn; jj += 4) {
        size_t rel[4];
        for (int i = 0; i < 4; i++) /* keys past the chunk repeat its last one; their scores are dropped */
            rel[i] = (jc + (jj + (size_t)i < cn ? jj + (size_t)i : cn - 1)) * ts;
        for (size_t r = 0, r1; r < rs->n; r = r1 + 1) {
            r1 = partner(rs, r);
            size_t kb = rs->g[r] * a->kv_head_stride;
            if (r == 0 || rs->g[r] != rs->g[r - 1])
                for (int i = 0; i < 4; i++) { /* the same keys of the next chunk, K and V */
                    size_t nj = (jc + PF_KEYS + jj + (size_t)i) * ts + kb;
                    prefetch_row(a->k_cache, nj, a->head_dim, KT, false);
                    prefetch_row(a->v_cache, nj, a->head_dim, KT, false);
                }
            size_t koff[4] = {kb + rel[0], kb + rel[1], kb + rel[2], kb + rel[3]};
            __m256 v = score2x4(a, a->head_dim, rs, qc, r, r1, koff, KT);
            float t[8];
            _mm256_storeu_ps(t, v);
            size_t m = cn - jj < 4 ? cn - jj : 4;
            for (size_t i = 0; i < m; i++) {
                sc[r][jj + i] = t[i];
                sc[r1][jj + i] = t[4 + i];
            }
        }
    }
    if (a->softcap > 0.0f)
        for (size_t r = 0; r < rs->n; r++)
            for (size_t jj = 0; jj < cn; jj++)
                sc[r][jj] = a->softcap * tanhf(sc[r][jj] / a->softcap);
}

/* acc[r][0, hd) *= c */
static void scale_row(float *acc, float c, size_t hd)
{
    __m256 vc = _mm256_set1_ps(c);
    const size_t hd8 = hd & ~(size_t)7;
    for (size_t d = 0; d < hd8; d += 8)
        _mm256_store_ps(acc + d, _mm256_mul_ps(vc, _mm256_load_ps(acc + d)));
    for (size_t d = hd8; d < hd; d++)
        acc[d] *= c;
}

/*
 * With a q8 cache, the weights of N rows of one kv head for the chunk's cn
 * keys times their value rows' scales (the rows from element offset v0), so
 * the weighted sum takes the codes as they are. After the softmax step (the
 * denominator sums the weights before this). The scales are read once for
 * all N rows.
 */
INLINE void fold_value_scales(const krn_gqa_args *a, size_t v0, size_t n, size_t cn, float (*p)[CH], size_t hd)
{
    float vs[CH] __attribute__((aligned(32)));
    for (size_t jj = 0; jj < cn; jj++)
        vs[jj] = q8_scale_at(a->v_cache, v0 + jj * a->kv_tok_stride, hd);
    for (size_t jj = cn; jj < CH; jj++)
        vs[jj] = 0.0f; /* past the chunk: weights there are 0 and stay so */
    for (size_t r = 0; r < n; r++)
        for (size_t jj = 0; jj < cn; jj += 8)
            _mm256_store_ps(&p[r][jj], _mm256_mul_ps(_mm256_load_ps(&p[r][jj]), _mm256_load_ps(&vs[jj])));
}

/*
 * acc[r] += sum_jj p[r][jj] * v(jc + jj) for every row: 32 dims of two rows
 * stay in eight registers over the whole chunk.
 */
INLINE void chunk_pv(const krn_gqa_args *a, size_t hd, const rowset *rs, size_t jc, size_t cn, float (*p)[CH],
                     float (*acc)[KRN_MAX_HEAD_DIM], const krn_kv_type KT)
{
    const size_t ts = a->kv_tok_stride;
    size_t d = 0;
    /* Dims outer: the chunk's 32-dim slice of V stays in L1 while every row pair uses it. */
    for (; d + 32 <= hd; d += 32)
        for (size_t r = 0, r1; r < rs->n; r = r1 + 1) {
            r1 = partner(rs, r);
            bool two = r1 > r;
            size_t vbase = rs->g[r] * a->kv_head_stride;
            __m256 a0 = _mm256_load_ps(acc[r] + d), a1 = _mm256_load_ps(acc[r] + d + 8);
            __m256 a2 = _mm256_load_ps(acc[r] + d + 16), a3 = _mm256_load_ps(acc[r] + d + 24);
            __m256 b0 = _mm256_setzero_ps(), b1 = b0, b2 = b0, b3 = b0;
            if (two) {
                b0 = _mm256_load_ps(acc[r + 1] + d);
                b1 = _mm256_load_ps(acc[r + 1] + d + 8);
                b2 = _mm256_load_ps(acc[r + 1] + d + 16);
                b3 = _mm256_load_ps(acc[r + 1] + d + 24);
            }
            for (size_t jj = 0; jj < cn; jj++) {
                size_t off = vbase + (jc + jj) * ts + d;
                __m256 v0 = kv_load8(a->v_cache, off, KT), v1 = kv_load8(a->v_cache, off + 8, KT);
                __m256 v2 = kv_load8(a->v_cache, off + 16, KT), v3 = kv_load8(a->v_cache, off + 24, KT);
                __m256 pa = _mm256_broadcast_ss(&p[r][jj]);
                a0 = _mm256_fmadd_ps(pa, v0, a0);
                a1 = _mm256_fmadd_ps(pa, v1, a1);
                a2 = _mm256_fmadd_ps(pa, v2, a2);
                a3 = _mm256_fmadd_ps(pa, v3, a3);
                if (two) {
                    __m256 pb = _mm256_broadcast_ss(&p[r + 1][jj]);
                    b0 = _mm256_fmadd_ps(pb, v0, b0);
                    b1 = _mm256_fmadd_ps(pb, v1, b1);
                    b2 = _mm256_fmadd_ps(pb, v2, b2);
                    b3 = _mm256_fmadd_ps(pb, v3, b3);
                }
            }
            _mm256_store_ps(acc[r] + d, a0);
            _mm256_store_ps(acc[r] + d + 8, a1);
            _mm256_store_ps(acc[r] + d + 16, a2);
            _mm256_store_ps(acc[r] + d + 24, a3);
            if (two) {
                _mm256_store_ps(acc[r + 1] + d, b0);
                _mm256_store_ps(acc[r + 1] + d + 8, b1);
                _mm256_store_ps(acc[r + 1] + d + 16, b2);
                _mm256_store_ps(acc[r + 1] + d + 24, b3);
            }
        }
    for (; d + 8 <= hd; d += 8)
        for (size_t r = 0, r1; r < rs->n; r = r1 + 1) {
            r1 = partner(rs, r);
            bool two = r1 > r;
            size_t vbase = rs->g[r] * a->kv_head_stride;
            __m256 a0 = _mm256_load_ps(acc[r] + d);
            __m256 b0 = two ? _mm256_load_ps(acc[r + 1] + d) : _mm256_setzero_ps();
            for (size_t jj = 0; jj < cn; jj++) {
                __m256 v0 = kv_load8(a->v_cache, vbase + (jc + jj) * ts + d, KT);
                a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[r][jj]), v0, a0);
                if (two)
                    b0 = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[r + 1][jj]), v0, b0);
            }
            _mm256_store_ps(acc[r] + d, a0);
            if (two)
                _mm256_store_ps(acc[r + 1] + d, b0);
        }
    for (; d < hd; d++)
        for (size_t r = 0; r < rs->n; r++)
            for (size_t jj = 0; jj < cn; jj++)
                acc[r][d] += p[r][jj] * kv_load1(a->v_cache, rs->g[r] * a->kv_head_stride + (jc + jj) * ts + d, KT);
}

/*
 * One chunk's online-softmax step for one row: s holds the chunk's cn8
 * scores (-inf where not visible) and becomes its weights; when the chunk
 * raises the running maximum mx, the accumulated output and the
 * denominator are rescaled first.
 */
INLINE void softmax_step(float *s, size_t cn8, float *mx, float *den, float *acc, size_t hd)
{
    __m256 vm = _mm256_set1_ps(-INFINITY);
    for (size_t jj = 0; jj < cn8; jj += 8)
        vm = _mm256_max_ps(vm, _mm256_load_ps(s + jj));
    float m_new = fmaxf(*mx, krn_avx2_hmax(vm));
    if (m_new == -INFINITY) { /* nothing visible yet: weights all zero */
        memset(s, 0, cn8 * sizeof(float));
        return;
    }
    if (m_new > *mx) {
        if (*den > 0.0f) {
            float c = expf(*mx - m_new);
            scale_row(acc, c, hd);
            *den *= c;
        }
        *mx = m_new;
    }
    __m256 vmx = _mm256_set1_ps(*mx), vsum = _mm256_setzero_ps();
    for (size_t jj = 0; jj < cn8; jj += 8) {
        __m256 p = krn_avx2_vexp(_mm256_sub_ps(_mm256_load_ps(s + jj), vmx));
        _mm256_store_ps(s + jj, p);
        vsum = _mm256_add_ps(vsum, p);
    }
    *den += krn_avx2_hsum(vsum);
}

/* Each row's output: its accumulated sum over its denominator (zeros when it saw no key). */
static void finish_rows(const rowset *rs, float (*acc)[KRN_MAX_HEAD_DIM], const float *den, size_t hd)
{
    for (size_t r = 0; r < rs->n; r++) {
        float *out = rs->out[r];
        if (den[r] > 0.0f) {
            __m256 vd = _mm256_set1_ps(den[r]);
            size_t d = 0;
            for (; d + 8 <= hd; d += 8)
                _mm256_storeu_ps(out + d, _mm256_div_ps(_mm256_load_ps(acc[r] + d), vd));
            for (; d < hd; d++)
                out[d] = acc[r][d] / den[r];
        } else {
            memset(out, 0, hd * sizeof(float));
        }
    }
}

/* All rows of a set, each against its kv head. */
INLINE void attend(const krn_gqa_args *a, const rowset *rs, const krn_kv_type KT)
{
    const size_t hd = a->head_dim;
    float acc[RMAX][KRN_MAX_HEAD_DIM] __attribute__((aligned(32)));
    float sc[RMAX][CH] __attribute__((aligned(32)));
    float mx[RMAX], den[RMAX];
    qcodes qc;
    qcodes_fill(rs, hd, &qc, KT);
    size_t jlo = SIZE_MAX, jhi = 0;

    for (size_t r = 0; r < rs->n; r++) {
        memset(acc[r], 0, hd * sizeof(float));
        mx[r] = -INFINITY;
        den[r] = 0.0f;
        if (rs->lo[r] < rs->hi[r]) {
            jlo = rs->lo[r] < jlo ? rs->lo[r] : jlo;
            jhi = rs->hi[r] > jhi ? rs->hi[r] : jhi;
        }
    }

    /*
     * Chunks start at multiples of CH whatever rows share the pass, so a row's
     * result does not depend on how the work was split (runs with different
     * thread counts stay bit-identical).
     */
    if (jlo < jhi)
        jlo -= jlo % CH;
    for (size_t jc = jlo; jc < jhi; jc += CH) {
        size_t cn = jhi - jc < CH ? jhi - jc : CH;
        size_t cn8 = (cn + 7) & ~(size_t)7;
        chunk_scores(a, rs, &qc, jc, cn, sc, KT);
        for (size_t r = 0; r < rs->n; r++) {
            /* Keys this row may not see, and the padding lanes, score -inf: exp gives 0. */
            for (size_t jj = 0; jj < cn8; jj++)
                if (jj >= cn || jc + jj < rs->lo[r] || jc + jj >= rs->hi[r])
                    sc[r][jj] = -INFINITY;
            softmax_step(sc[r], cn8, &mx[r], &den[r], acc[r], hd);
        }
        if (KT == KRN_KV_Q8)
            for (size_t r0 = 0, r1; r0 < rs->n; r0 = r1) { /* each run of rows of one kv head */
                for (r1 = r0 + 1; r1 < rs->n && rs->g[r1] == rs->g[r0]; r1++)
                    ;
                fold_value_scales(a, rs->g[r0] * a->kv_head_stride + jc * a->kv_tok_stride, r1 - r0, cn, sc + r0,
                                  hd);
            }
        chunk_pv(a, hd, rs, jc, cn, sc, acc, KT);
    }

    finish_rows(rs, acc, den, hd);
}

/*
 * A decode chunk's scores of rows [0, n) (keys [jc, jc + cn), visible from
 * lo) before their softmax step: soft-capping, then -inf for the keys
 * before lo (the first chunk, a local window) and the padding lanes.
 */
INLINE void dec_mask(const krn_gqa_args *a, size_t n, size_t lo, size_t jc, size_t cn, float (*sc)[CH])
{
    const size_t cn8 = (cn + 7) & ~(size_t)7;
    if (a->softcap > 0.0f)
        for (size_t r = 0; r < n; r++)
            for (size_t jj = 0; jj < cn; jj++)
                sc[r][jj] = a->softcap * tanhf(sc[r][jj] / a->softcap);
    size_t vis = lo > jc ? lo - jc : 0;
    if (vis || cn < cn8)
        for (size_t r = 0; r < n; r++)
            for (size_t jj = 0; jj < cn8; jj++)
                if (jj < vis || jj >= cn)
                    sc[r][jj] = -INFINITY;
}

/* A q8 decode chunk's scores become its weights (as in attend_dec), for the avx512 level's decode pass. */
void krn_avx2_dec_weights_q8(const krn_gqa_args *a, size_t n, size_t kb, size_t lo, size_t jc, size_t cn,
                             float (*sc)[CH], float *mx, float *den, float (*acc)[KRN_MAX_HEAD_DIM], size_t hd)
{
    krn_avx2_dec_weights(a, n, lo, jc, cn, sc, mx, den, acc, hd);
    fold_value_scales(a, kb + jc * a->kv_tok_stride, n, cn, sc, hd);
}

void krn_avx2_dec_weights(const krn_gqa_args *a, size_t n, size_t lo, size_t jc, size_t cn, float (*sc)[CH], float *mx,
                          float *den, float (*acc)[KRN_MAX_HEAD_DIM], size_t hd)
{
    const size_t cn8 = (cn + 7) & ~(size_t)7;
    dec_mask(a, n, lo, jc, cn, sc);
    for (size_t r = 0; r < n; r++)
        softmax_step(sc[r], cn8, &mx[r], &den[r], acc[r], hd);
}

/* finish_rows(), for the avx512 level's decode pass. */
void krn_avx2_dec_finish(const rowset *rs, float (*acc)[KRN_MAX_HEAD_DIM], const float *den, size_t hd)
{
    finish_rows(rs, acc, den, hd);
}

/*
 * acc[0, NV * 8) += sum_jj p[jj] * v(jc + jj)[0, NV * 8) for one row, keys
 * outer: each value row is read whole and in order, a stream the hardware
 * prefetchers follow, while the row's NV accumulators stay in registers. Per
 * dim it is the FMA chain of chunk_pv() in the same key order, so the bits
 * are those of chunk_pv().
 */
INLINE void row_pv(const float *v, size_t ts, size_t cn, const float *p, float *acc, const int NV)
{
    __m256 x[16];
    UNROLL16 for (int i = 0; i < NV; i++)
        x[i] = _mm256_load_ps(acc + 8 * i);
    for (size_t jj = 0; jj < cn; jj++) {
        __m256 pj = _mm256_broadcast_ss(&p[jj]);
        const float *vr = v + jj * ts;
        UNROLL16 for (int i = 0; i < NV; i++)
            x[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 8 * i), x[i]);
    }
    UNROLL16 for (int i = 0; i < NV; i++)
        _mm256_store_ps(acc + 8 * i, x[i]);
}

/* row_pv over all hd dims (a multiple of 8), in register blocks of at most 128 dims. */
static inline void row_pv_all(const float *v, size_t ts, size_t hd, size_t cn, const float *p, float *acc)
{
    size_t d = 0;
    for (; d + 128 <= hd; d += 128)
        row_pv(v + d, ts, cn, p, acc + d, 16);
    for (; d + 32 <= hd; d += 32)
        row_pv(v + d, ts, cn, p, acc + d, 4);
    for (; d < hd; d += 8)
        row_pv(v + d, ts, cn, p, acc + d, 1);
}

/*
 * Decode: rows that share one kv head and one visible key range (the heads of
 * a kv group for the one new token). Same arithmetic as attend(), operation
 * for operation, so a row's bits do not depend on which path ran it; what
 * goes is the per-row bookkeeping: scores are stored four at a time, the
 * visibility mask is only built for the chunks that reach outside the range,
 * and a row without a partner in its tile pairs with itself. head_dim must be
 * a multiple of 8.
 *
 * Prefetch: a head's K and V rows are two contiguous streams, but on the
 * session cache's 4 KiB pages the hardware prefetchers stop at every page
 * (8 fp32 keys). Each score tile asks for all lines of its four K rows at
 * once, for their V rows (read by the weighted sum after the chunk's scores),
 * and for the K and V rows a chunk (CH keys) further on into L2. The last is
 * an addition, not a replacement: asking for rows ahead into L2 instead of
 * the tile's own rows streamed 16-18 GB/s against 19-25 (bench/attn_bench,
 * one thread). With both, on a Zen 4 EPYC, attn_bench's fp16 passes at
 * context 4096 took 1.13-1.16 ms per 0.6b layer against 1.39-1.50, and a
 * 0.6b token at context 4096 took 33-36 ms against 39-47 (fp16 cache, 2
 * threads), alternated in one sitting; batch-8 steps of short contexts did
 * not change. The rows ahead stop at the head's last key; past it, when the
 * caller runs another kv head of the same step next (rs->next_kb), they are
 * that head's first rows, so a short pass does not start cold and no lines
 * past the context are fetched (a session cache reserves its capacity per
 * head, so those lines are never used): at 64 keys, attn_bench's cold
 * fp32 pass took 0.037-0.050 ms per 0.6b layer against 0.043-0.059.
 *
 * With an fp32 cache the weighted sum takes one row at a time with all its
 * dims in registers (row_pv), reading each V row whole and in key order,
 * where chunk_pv() crosses the chunk's rows once per 32-dim slice: at
 * context 4096, 2 threads, on a Zen 4 EPYC, a 0.6b token took 54-60 ms
 * against 66-70 (qwen3d bench --contexts 4096, alternated). fp16 keeps
 * chunk_pv(), whose row pairs share each widening. The bits are the same.
 * (Scoring a span of chunks before their weighted sums, so that K and V are
 * read one stream at a time, was no faster in the model on Zen 4 or Zen 5.)
 */
INLINE void attend_dec(const krn_gqa_args *a, const rowset *rs, const krn_kv_type KT, const size_t hd)
{
    const size_t ts = a->kv_tok_stride, n = rs->n;
    const size_t kb = rs->g[0] * a->kv_head_stride, lo = rs->lo[0], hi = rs->hi[0];
    /* L2 prefetch distance: a chunk, two for q8 rows (132 bytes), which keeps it near fp16's 8 KiB. */
    const size_t ahead = (KT == KRN_KV_Q8 ? 2 : 1) * CH, first = lo < hi ? lo - lo % CH : hi;
    float acc[RMAX][KRN_MAX_HEAD_DIM] __attribute__((aligned(32)));
    float sc[RMAX][CH] __attribute__((aligned(32)));
    float mx[RMAX], den[RMAX];
    qcodes qc;
    qcodes_fill(rs, hd, &qc, KT);

    dec_begin(n, hd, acc, mx, den);
    for (size_t jc = first; jc < hi; jc += CH) {
        size_t cn = hi - jc < CH ? hi - jc : CH;
        for (size_t jj = 0; jj < cn; jj += 4) {
            size_t koff[4];
            dec_tile(a, rs, kb, jc, cn, jj, first, hi, ahead, hd, KT, koff);
            for (size_t r = 0; r < n; r += 2) {
                size_t r1 = r + 1 < n ? r + 1 : r;
                __m256 v = score2x4(a, hd, rs, &qc, r, r1, koff, KT);
                _mm_store_ps(&sc[r][jj], _mm256_castps256_ps128(v));
                _mm_store_ps(&sc[r1][jj], _mm256_extractf128_ps(v, 1));
            }
        }
        const size_t cn8 = (cn + 7) & ~(size_t)7;
        dec_mask(a, n, lo, jc, cn, sc);
        for (size_t r = 0; r < n; r++) {
            softmax_step(sc[r], cn8, &mx[r], &den[r], acc[r], hd);
            if (KT == KRN_KV_F32)
                row_pv_all((const float *)a->v_cache + kb + jc * ts, ts, hd, cn, sc[r], acc[r]);
        }
        if (KT == KRN_KV_Q8)
            fold_value_scales(a, kb + jc * ts, n, cn, sc, hd);
        if (KT != KRN_KV_F32) /* row pairs share each widening */
            chunk_pv(a, hd, rs, jc, cn, sc, acc, KT);
    }
    finish_rows(rs, acc, den, hd);
}

/* ------------------------------------------------------------------------- */
/* Prefill: query rows in vector lanes                                         */

/*
 * With several new tokens (S > 1), or prompt rows (krn_gqa_args.prompt), every
 * set's rows share one kv head, and the
 * set is processed with its rows in the lanes of two vectors: the queries are
 * transposed once to qt[d][row], so a score tile is a chain of FMAs of one
 * broadcast key element against the 16 rows' query elements (no horizontal
 * reductions), the online softmax runs on whole vectors of rows, and the
 * weighted sum of values accumulates into acc[d][row] from broadcast value
 * elements. A row's result does not depend on which other rows share its set
 * (chunks start at multiples of CH), so any split of the work gives the same
 * bits. Decode (S = 1, a handful of rows per kv head) keeps the row-major code
 * above.
 */

/* sc[jj][row] = scale * q_row . k_jj for the chunk's cn keys, in tiles of four keys. */
INLINE void lane_scores(const float *qt, const lane_rows *k, size_t cn, size_t hd, float scale,
                        float (*sc)[LROWS], const int RV)
{
    const __m256 vs = _mm256_set1_ps(scale);
    for (size_t jj = 0; jj < cn; jj += 4) {
        const float *kr[4];
        for (size_t i = 0; i < 4; i++) /* keys past the chunk repeat its last one; dropped below */
            kr[i] = lane_row(k, jj + i < cn ? jj + i : cn - 1);
        __m256 acc[4][2];
        UNROLL for (int i = 0; i < 4; i++)
            acc[i][0] = acc[i][1] = _mm256_setzero_ps();
        for (size_t d = 0; d < hd; d++) {
            __m256 q0 = _mm256_load_ps(qt + d * LROWS);
            __m256 q1 = RV > 1 ? _mm256_load_ps(qt + d * LROWS + 8) : q0;
            UNROLL for (int i = 0; i < 4; i++) {
                __m256 kb = _mm256_broadcast_ss(kr[i] + d);
                acc[i][0] = _mm256_fmadd_ps(kb, q0, acc[i][0]);
                if (RV > 1)
                    acc[i][1] = _mm256_fmadd_ps(kb, q1, acc[i][1]);
            }
        }
        UNROLL for (int i = 0; i < 4; i++)
            if (jj + (size_t)i < cn) {
                _mm256_store_ps(sc[jj + (size_t)i], _mm256_mul_ps(acc[i][0], vs));
                if (RV > 1)
                    _mm256_store_ps(sc[jj + (size_t)i] + 8, _mm256_mul_ps(acc[i][1], vs));
            }
    }
}

/* acc[d][row] += sum_jj p[jj][row] * v_jj[d], DT dims at a time. */
INLINE void lane_pv_dims(float *acc, const lane_rows *v, size_t cn, size_t d0, float (*p)[LROWS], const int DT,
                         const int RV)
{
    __m256 a[6][2];
    UNROLL for (int i = 0; i < DT; i++) {
        a[i][0] = _mm256_load_ps(acc + (d0 + (size_t)i) * LROWS);
        a[i][1] = RV > 1 ? _mm256_load_ps(acc + (d0 + (size_t)i) * LROWS + 8) : a[i][0];
    }
    for (size_t jj = 0; jj < cn; jj++) {
        const float *vr = lane_row(v, jj) + d0;
        __m256 p0 = _mm256_load_ps(p[jj]);
        __m256 p1 = RV > 1 ? _mm256_load_ps(p[jj] + 8) : p0;
        UNROLL for (int i = 0; i < DT; i++) {
            __m256 vb = _mm256_broadcast_ss(vr + i);
            a[i][0] = _mm256_fmadd_ps(vb, p0, a[i][0]);
            if (RV > 1)
                a[i][1] = _mm256_fmadd_ps(vb, p1, a[i][1]);
        }
    }
    UNROLL for (int i = 0; i < DT; i++) {
        _mm256_store_ps(acc + (d0 + (size_t)i) * LROWS, a[i][0]);
        if (RV > 1)
            _mm256_store_ps(acc + (d0 + (size_t)i) * LROWS + 8, a[i][1]);
    }
}

INLINE void lane_pv(float *acc, const lane_rows *v, size_t cn, size_t hd, float (*p)[LROWS], const int RV)
{
    size_t d = 0;
    for (; d + 6 <= hd; d += 6)
        lane_pv_dims(acc, v, cn, d, p, 6, RV);
    for (; d < hd; d++)
        lane_pv_dims(acc, v, cn, d, p, 1, RV);
}

/* Rows [r0, r0 + n) of a set, n <= LROWS, all of kv head rs->g[r0]. */
INLINE void attend_lanes(const krn_gqa_args *a, const rowset *rs, size_t r0, size_t n, const int RV)
{
    const size_t hd = a->head_dim;
    const size_t kvo = rs->g[r0] * a->kv_head_stride;
    float qt[KRN_MAX_HEAD_DIM * LROWS] __attribute__((aligned(32)));
    float acc[KRN_MAX_HEAD_DIM * LROWS] __attribute__((aligned(32)));
    float sc[CH][LROWS] __attribute__((aligned(32)));
    static __thread float wide[2][CH * KRN_MAX_HEAD_DIM] __attribute__((aligned(32)));
    int32_t lo[LROWS], hi[LROWS];
    size_t jlo, jhi;

    lanes_begin(rs, r0, n, hd, qt, acc, lo, hi, &jlo, &jhi);
    __m256i vlo[2], vhi[2];
    __m256 mx[2], den[2];
    for (int v = 0; v < 2; v++) {
        vlo[v] = _mm256_loadu_si256((const __m256i *)(const void *)(lo + 8 * v));
        vhi[v] = _mm256_loadu_si256((const __m256i *)(const void *)(hi + 8 * v));
        mx[v] = _mm256_set1_ps(-INFINITY);
        den[v] = _mm256_setzero_ps();
    }
    const __m256 ninf = _mm256_set1_ps(-INFINITY), one = _mm256_set1_ps(1.0f);

    for (size_t jc = jlo; jc < jhi; jc += CH) {
        size_t cn = jhi - jc < CH ? jhi - jc : CH;
        lane_rows kr, vr;
        lanes_chunk_rows(a, kvo, jc, cn, wide, &kr, &vr);
        lane_scores(qt, &kr, cn, hd, a->scale, sc, RV);
        lanes_softcap(sc, cn, a->softcap);
        bool rescale = false;
        __m256 mnew[2], c[2], ok[2];
        for (int v = 0; v < RV; v++) {
            /* Keys a row may not see score -inf (exp gives 0). */
            __m256 m = mx[v];
            for (size_t jj = 0; jj < cn; jj++) {
                __m256i j = _mm256_set1_epi32((int32_t)(jc + jj));
                __m256i vis = _mm256_andnot_si256(_mm256_cmpgt_epi32(vlo[v], j), _mm256_cmpgt_epi32(vhi[v], j));
                __m256 s = _mm256_blendv_ps(ninf, _mm256_load_ps(sc[jj] + 8 * v), _mm256_castsi256_ps(vis));
                _mm256_store_ps(sc[jj] + 8 * v, s);
                m = _mm256_max_ps(m, s);
            }
            mnew[v] = m;
            __m256 up = _mm256_cmp_ps(m, mx[v], _CMP_GT_OQ);
            c[v] = _mm256_blendv_ps(one, krn_avx2_vexp(_mm256_sub_ps(mx[v], m)), up);
            rescale |= _mm256_movemask_ps(up) != 0;
            ok[v] = _mm256_cmp_ps(m, ninf, _CMP_NEQ_OQ); /* rows with nothing visible yet weigh 0 */
        }
        if (rescale)
            for (size_t d = 0; d < hd; d++)
                for (int v = 0; v < RV; v++)
                    _mm256_store_ps(acc + d * LROWS + 8 * v, _mm256_mul_ps(c[v], _mm256_load_ps(acc + d * LROWS + 8 * v)));
        for (int v = 0; v < RV; v++) {
            __m256 sum = _mm256_setzero_ps();
            for (size_t jj = 0; jj < cn; jj++) {
                __m256 e = _mm256_and_ps(krn_avx2_vexp(_mm256_sub_ps(_mm256_load_ps(sc[jj] + 8 * v), mnew[v])), ok[v]);
                _mm256_store_ps(sc[jj] + 8 * v, e);
                sum = _mm256_add_ps(sum, e);
            }
            den[v] = _mm256_add_ps(_mm256_mul_ps(den[v], c[v]), sum);
            mx[v] = mnew[v];
        }
        lane_pv(acc, &vr, cn, hd, sc, RV);
    }

    float dn[LROWS];
    _mm256_storeu_ps(dn, den[0]);
    _mm256_storeu_ps(dn + 8, den[1]);
    lanes_store_outputs(rs, r0, n, hd, acc, dn);
}

/* A prefill set: runs of rows that share a kv head, LROWS at a time. */
static void run_set_lanes(const krn_gqa_args *a, const rowset *rs)
{
    for (size_t r0 = 0, r1; r0 < rs->n; r0 = r1) {
        r1 = lane_run_end(rs, r0);
        if (r1 - r0 > 8)
            attend_lanes(a, rs, r0, r1 - r0, 2);
        else
            attend_lanes(a, rs, r0, r1 - r0, 1);
    }
}

/* A decode set on a cache of type KT; Qwen3's head_dim as a constant, so the passes' dim loops unroll whole. */
INLINE void decode_set_typed(const krn_gqa_args *a, const rowset *rs, const krn_kv_type KT)
{
    if (!one_head_one_range(a, rs))
        attend(a, rs, KT);
    else if (a->head_dim == 128)
        attend_dec(a, rs, KT, 128);
    else
        attend_dec(a, rs, KT, a->head_dim);
}

/* The decode arithmetic for a set of one new token's rows (and the avx512 level's where its passes do not apply). */
void krn_avx2_gqa_decode_set(const krn_gqa_args *a, const rowset *rs)
{
    switch (a->kv_type) {
    case KRN_KV_Q8: decode_set_typed(a, rs, KRN_KV_Q8); break;
    case KRN_KV_F16: decode_set_typed(a, rs, KRN_KV_F16); break;
    default: decode_set_typed(a, rs, KRN_KV_F32); break;
    }
}

static void run_set(const krn_gqa_args *a, const rowset *rs)
{
    if (a->seq > 1 || a->prompt)
        run_set_lanes(a, rs);
    else
        krn_avx2_gqa_decode_set(a, rs);
}

void krn_avx2_gqa(const krn_gqa_args *a, size_t i_begin, size_t i_end)
{
    gqa_drive(a, i_begin, i_end, run_set);
}
