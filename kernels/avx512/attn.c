/*
 * avx512/attn: the GroupQueryAttention core of the avx512 level. Prompt rows
 * (prefill) run here with a kv group's rows in the sixteen lanes of one zmm
 * vector; decode sets take the AVX2 core's row-major arithmetic
 * (krn_avx2_gqa_decode_set): a decode pass waits on the cache's memory, and
 * a 512-bit version of it measured no faster, while keeping AVX2's
 * arithmetic keeps every level's decode bits equal. The set cut is
 * avx2/attn_sets.h's.
 *
 * The lane path does, lane by lane, exactly the AVX2 lane path's operations
 * in the same order: each score is one FMA chain over the head dims in
 * order, then times the scale; the same masks, maxima and vector exp (the
 * same polynomial and rounding steps); the denominator as den * c + sum;
 * the output accumulated over the keys in order and divided at the end. So
 * the two levels give the same prefill bits, and a prompt's attention does
 * not change with the level the CPU picks. What the wider vectors change is
 * the work per instruction: one vector holds all sixteen rows, score tiles
 * are eight keys (eight independent FMA chains, enough to cover the FMA
 * latency) and the weighted sum keeps sixteen head dims in registers.
 * Compiled with the avx512 flags.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/avx2/attn_sets.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

/* krn_avx2_vexp on sixteen lanes, step for step (see avx2/simd.h). */
INLINE __m512 vexp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33654475f), hi = _mm512_set1_ps(88.0f);
    __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), xc);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_cvtps_epi32(n), 23);
    __m512 res = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(p), e));
    res = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_GE_OQ), res);
    return _mm512_mask_mov_ps(res, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), _mm512_set1_ps(__builtin_inff()));
}

/* sc[jj][row] = scale * q_row . k_jj for the chunk's cn keys, in tiles of eight keys. */
INLINE void lane_scores16(const float *qt, const lane_rows *k, size_t cn, size_t hd, float scale,
                          float (*sc)[LROWS])
{
    const __m512 vs = _mm512_set1_ps(scale);
    for (size_t jj = 0; jj < cn; jj += 8) {
        const float *kr[8];
        UNROLL for (size_t i = 0; i < 8; i++) /* keys past the chunk repeat its last one; dropped below */
            kr[i] = lane_row(k, jj + i < cn ? jj + i : cn - 1);
        __m512 acc[8];
        UNROLL for (int i = 0; i < 8; i++)
            acc[i] = _mm512_setzero_ps();
        for (size_t d = 0; d < hd; d++) {
            __m512 q = _mm512_load_ps(qt + d * LROWS);
            UNROLL for (int i = 0; i < 8; i++)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(kr[i][d]), q, acc[i]);
        }
        UNROLL for (size_t i = 0; i < 8; i++)
            if (jj + i < cn)
                _mm512_store_ps(sc[jj + i], _mm512_mul_ps(acc[i], vs));
    }
}

/* acc[d][row] += sum_jj p[jj][row] * v_jj[d] for dims [d0, d0 + DT), keys in order. */
INLINE void lane_pv_dims16(float *acc, const lane_rows *v, size_t cn, size_t d0, float (*p)[LROWS], const int DT)
{
    __m512 a[16];
    UNROLL for (int i = 0; i < DT; i++)
        a[i] = _mm512_load_ps(acc + (d0 + (size_t)i) * LROWS);
    for (size_t jj = 0; jj < cn; jj++) {
        const float *vr = lane_row(v, jj) + d0;
        __m512 pj = _mm512_load_ps(p[jj]);
        UNROLL for (int i = 0; i < DT; i++)
            a[i] = _mm512_fmadd_ps(_mm512_set1_ps(vr[i]), pj, a[i]);
    }
    UNROLL for (int i = 0; i < DT; i++)
        _mm512_store_ps(acc + (d0 + (size_t)i) * LROWS, a[i]);
}

INLINE void lane_pv16(float *acc, const lane_rows *v, size_t cn, size_t hd, float (*p)[LROWS])
{
    size_t d = 0;
    for (; d + 16 <= hd; d += 16)
        lane_pv_dims16(acc, v, cn, d, p, 16);
    for (; d + 4 <= hd; d += 4)
        lane_pv_dims16(acc, v, cn, d, p, 4);
    for (; d < hd; d++)
        lane_pv_dims16(acc, v, cn, d, p, 1);
}

/* Rows [r0, r0 + n) of a set, n <= LROWS, all of kv head rs->g[r0]. */
static void attend_lanes16(const krn_gqa_args *a, const rowset *rs, size_t r0, size_t n)
{
    const size_t hd = a->head_dim;
    const size_t kvo = rs->g[r0] * a->kv_head_stride;
    float qt[KRN_MAX_HEAD_DIM * LROWS] __attribute__((aligned(64)));
    float acc[KRN_MAX_HEAD_DIM * LROWS] __attribute__((aligned(64)));
    float sc[CH][LROWS] __attribute__((aligned(64)));
    static __thread float wide[2][CH * KRN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    int32_t lo[LROWS], hi[LROWS];
    size_t jlo, jhi;

    lanes_begin(rs, r0, n, hd, qt, acc, lo, hi, &jlo, &jhi);
    const __m512i vlo = _mm512_loadu_si512(lo), vhi = _mm512_loadu_si512(hi);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    __m512 mx = ninf, den = _mm512_setzero_ps();

    for (size_t jc = jlo; jc < jhi; jc += CH) {
        size_t cn = jhi - jc < CH ? jhi - jc : CH;
        lane_rows kr, vr;
        lanes_chunk_rows(a, kvo, jc, cn, wide, &kr, &vr);
        lane_scores16(qt, &kr, cn, hd, a->scale, sc);
        lanes_softcap(sc, cn, a->softcap);
        /* Keys a row may not see score -inf (exp gives 0). */
        __m512 m = mx;
        for (size_t jj = 0; jj < cn; jj++) {
            __m512i j = _mm512_set1_epi32((int32_t)(jc + jj));
            __mmask16 vis = _mm512_cmpgt_epi32_mask(vhi, j) & ~_mm512_cmpgt_epi32_mask(vlo, j);
            __m512 s = _mm512_mask_mov_ps(ninf, vis, _mm512_load_ps(sc[jj]));
            _mm512_store_ps(sc[jj], s);
            m = _mm512_max_ps(m, s);
        }
        __mmask16 up = _mm512_cmp_ps_mask(m, mx, _CMP_GT_OQ);
        __m512 c = _mm512_mask_mov_ps(one, up, vexp16(_mm512_sub_ps(mx, m)));
        __mmask16 ok = _mm512_cmp_ps_mask(m, ninf, _CMP_NEQ_OQ); /* rows with nothing visible yet weigh 0 */
        if (up)
            for (size_t d = 0; d < hd; d++)
                _mm512_store_ps(acc + d * LROWS, _mm512_mul_ps(c, _mm512_load_ps(acc + d * LROWS)));
        __m512 sum = _mm512_setzero_ps();
        for (size_t jj = 0; jj < cn; jj++) {
            __m512 e = _mm512_maskz_mov_ps(ok, vexp16(_mm512_sub_ps(_mm512_load_ps(sc[jj]), m)));
            _mm512_store_ps(sc[jj], e);
            sum = _mm512_add_ps(sum, e);
        }
        den = _mm512_add_ps(_mm512_mul_ps(den, c), sum);
        mx = m;
        lane_pv16(acc, &vr, cn, hd, sc);
    }

    float dn[LROWS];
    _mm512_storeu_ps(dn, den);
    lanes_store_outputs(rs, r0, n, hd, acc, dn);
}

static void run_set(const krn_gqa_args *a, const rowset *rs)
{
    if (a->seq == 1 && !a->prompt) {
        krn_avx2_gqa_decode_set(a, rs);
        return;
    }
    for (size_t r0 = 0, r1; r0 < rs->n; r0 = r1) { /* runs of rows that share a kv head */
        r1 = lane_run_end(rs, r0);
        attend_lanes16(a, rs, r0, r1 - r0);
    }
}

void krn_avx512_gqa(const krn_gqa_args *a, size_t i_begin, size_t i_end)
{
    gqa_drive(a, i_begin, i_end, run_set);
}
