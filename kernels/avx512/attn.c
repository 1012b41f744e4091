/*
 * avx512/attn: the GroupQueryAttention core of the avx512 level. Prompt rows
 * (prefill) run here with a kv group's rows in the sixteen lanes of one zmm
 * vector. Decode sets of one kv head and key range (every decode set of a
 * Qwen3 model) run the AVX2 core's row-major pass 512 bits wide with its
 * bits: on a q8 cache with exact integer dots (dec_q8_512; VPDPWSSD in
 * krn_avx512_gqa_vnni, the table's choice on AVX512-VNNI CPUs), on fp32 and
 * fp16 caches with two keys' same dims side by side in a vector, so that
 * every lane runs the AVX2 pass's FMA chain (dec_f_512). Other decode sets
 * take the AVX2 core (krn_avx2_gqa_decode_set). The set cut is
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
 * are eight keys and the weighted sum keeps sixteen head dims in registers.
 * Two sets of the same kv head (the next tokens' rows) share one pass over
 * the keys where their ranges meet, each key and value element loaded once
 * for both (attend_lanes16x2). Compiled with the avx512 flags.
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

/*
 * Two lane sets' scores against the same keys, eight keys a tile: each key
 * element is broadcast once for both sets' query vectors. Per lane this is
 * lane_scores16()'s FMA chain, so the bits are the same; each broadcast
 * feeds two FMAs and sixteen chains are in flight. Keys of the tile past cn
 * repeat the last one and are dropped, as there.
 */
INLINE void lane_scores16x2(const float *qt0, const float *qt1, const lane_rows *k, size_t cn, size_t hd,
                            float scale, float (*sc0)[LROWS], float (*sc1)[LROWS])
{
    const __m512 vs = _mm512_set1_ps(scale);
    for (size_t jj = 0; jj < cn; jj += 8) {
        const float *kr[8];
        UNROLL for (size_t i = 0; i < 8; i++)
            kr[i] = lane_row(k, jj + i < cn ? jj + i : cn - 1);
        __m512 a0[8], a1[8];
        UNROLL for (int i = 0; i < 8; i++)
            a0[i] = a1[i] = _mm512_setzero_ps();
        for (size_t d = 0; d < hd; d++) {
            __m512 q0 = _mm512_load_ps(qt0 + d * LROWS), q1 = _mm512_load_ps(qt1 + d * LROWS);
            UNROLL for (int i = 0; i < 8; i++) {
                __m512 kb = _mm512_set1_ps(kr[i][d]);
                a0[i] = _mm512_fmadd_ps(kb, q0, a0[i]);
                a1[i] = _mm512_fmadd_ps(kb, q1, a1[i]);
            }
        }
        UNROLL for (size_t i = 0; i < 8; i++)
            if (jj + i < cn) {
                _mm512_store_ps(sc0[jj + i], _mm512_mul_ps(a0[i], vs));
                _mm512_store_ps(sc1[jj + i], _mm512_mul_ps(a1[i], vs));
            }
    }
}

/* lane_pv_dims16() for two sets over the same values: each value element broadcast once for both. */
INLINE void lane_pv_dims16x2(float *acc0, float *acc1, const lane_rows *v, size_t cn, size_t d0,
                             float (*p0)[LROWS], float (*p1)[LROWS], const int DT)
{
    __m512 a0[8], a1[8];
    UNROLL for (int i = 0; i < DT; i++) {
        a0[i] = _mm512_load_ps(acc0 + (d0 + (size_t)i) * LROWS);
        a1[i] = _mm512_load_ps(acc1 + (d0 + (size_t)i) * LROWS);
    }
    for (size_t jj = 0; jj < cn; jj++) {
        const float *vr = lane_row(v, jj) + d0;
        __m512 pa = _mm512_load_ps(p0[jj]), pb = _mm512_load_ps(p1[jj]);
        UNROLL for (int i = 0; i < DT; i++) {
            __m512 vb = _mm512_set1_ps(vr[i]);
            a0[i] = _mm512_fmadd_ps(vb, pa, a0[i]);
            a1[i] = _mm512_fmadd_ps(vb, pb, a1[i]);
        }
    }
    UNROLL for (int i = 0; i < DT; i++) {
        _mm512_store_ps(acc0 + (d0 + (size_t)i) * LROWS, a0[i]);
        _mm512_store_ps(acc1 + (d0 + (size_t)i) * LROWS, a1[i]);
    }
}

INLINE void lane_pv16x2(float *acc0, float *acc1, const lane_rows *v, size_t cn, size_t hd, float (*p0)[LROWS],
                        float (*p1)[LROWS])
{
    size_t d = 0;
    for (; d + 8 <= hd; d += 8)
        lane_pv_dims16x2(acc0, acc1, v, cn, d, p0, p1, 8);
    for (; d < hd; d++)
        lane_pv_dims16x2(acc0, acc1, v, cn, d, p0, p1, 1);
}

/* One lane set's state through its pass over the keys. */
typedef struct lane_state {
    float qt[KRN_MAX_HEAD_DIM * LROWS] __attribute__((aligned(64)));
    float acc[KRN_MAX_HEAD_DIM * LROWS] __attribute__((aligned(64)));
    float sc[CH][LROWS] __attribute__((aligned(64)));
    int32_t lo[LROWS], hi[LROWS];
    size_t jlo, jhi; /* the chunks the set's pass covers */
    __m512 mx, den;
} lane_state;

/* Rows [r0, r0 + n) of a set, n <= LROWS, all of one kv head, before their first chunk. */
static void lane_state_begin(lane_state *L, const rowset *rs, size_t r0, size_t n, size_t hd)
{
    lanes_begin(rs, r0, n, hd, L->qt, L->acc, L->lo, L->hi, &L->jlo, &L->jhi);
    L->mx = _mm512_set1_ps(-INFINITY);
    L->den = _mm512_setzero_ps();
}

/*
 * The online-softmax step of the chunk of cn keys at jc on the set's scores:
 * keys a row may not see score -inf (exp gives 0), the accumulator is
 * rescaled to the new maxima, and the scores become the chunk's weights.
 */
INLINE void lane_softmax16(lane_state *L, size_t jc, size_t cn, size_t hd)
{
    const __m512i vlo = _mm512_loadu_si512(L->lo), vhi = _mm512_loadu_si512(L->hi);
    const __m512 ninf = _mm512_set1_ps(-INFINITY), one = _mm512_set1_ps(1.0f);
    __m512 m = L->mx;
    for (size_t jj = 0; jj < cn; jj++) {
        __m512i j = _mm512_set1_epi32((int32_t)(jc + jj));
        __mmask16 vis = _mm512_cmpgt_epi32_mask(vhi, j) & ~_mm512_cmpgt_epi32_mask(vlo, j);
        __m512 s = _mm512_mask_mov_ps(ninf, vis, _mm512_load_ps(L->sc[jj]));
        _mm512_store_ps(L->sc[jj], s);
        m = _mm512_max_ps(m, s);
    }
    __mmask16 up = _mm512_cmp_ps_mask(m, L->mx, _CMP_GT_OQ);
    __m512 c = _mm512_mask_mov_ps(one, up, vexp16(_mm512_sub_ps(L->mx, m)));
    __mmask16 ok = _mm512_cmp_ps_mask(m, ninf, _CMP_NEQ_OQ); /* rows with nothing visible yet weigh 0 */
    if (up)
        for (size_t d = 0; d < hd; d++)
            _mm512_store_ps(L->acc + d * LROWS, _mm512_mul_ps(c, _mm512_load_ps(L->acc + d * LROWS)));
    __m512 sum = _mm512_setzero_ps();
    for (size_t jj = 0; jj < cn; jj++) {
        __m512 e = _mm512_maskz_mov_ps(ok, vexp16(_mm512_sub_ps(_mm512_load_ps(L->sc[jj]), m)));
        _mm512_store_ps(L->sc[jj], e);
        sum = _mm512_add_ps(sum, e);
    }
    L->den = _mm512_add_ps(_mm512_mul_ps(L->den, c), sum);
    L->mx = m;
}

static void lane_state_finish(const lane_state *L, const rowset *rs, size_t r0, size_t n, size_t hd)
{
    float dn[LROWS];
    _mm512_storeu_ps(dn, L->den);
    lanes_store_outputs(rs, r0, n, hd, L->acc, dn);
}

/* The chunk's rows from key jj on: lane_rows R advanced by jj rows. */
static inline lane_rows lane_rows_from(const lane_rows *r, size_t jj)
{
    return (lane_rows){lane_row(r, jj), r->stride};
}

/*
 * Two lane sets of the same kv head in one pass over its keys: rows [r0,
 * r0 + n0) of S0 and [r1, r1 + n1) of S1 (n1 = 0: S0 alone). Each set goes
 * through exactly the chunks, keys and operations it would alone: a chunk
 * only one set covers runs for that set alone, and where both do, the
 * scores and the weighted sum over the keys both see share each key's and
 * value's loads, and the keys only one sees finish that set's sum in the
 * same order. So a row's bits do not depend on the pairing. On a Zen 5 EPYC
 * the 0.6b model's prompt attention at 1024 tokens took 8-12% less time
 * than with every set alone.
 */
static void attend_lanes16x2(const krn_gqa_args *a, const rowset *s0, size_t r0, size_t n0, const rowset *s1,
                             size_t r1, size_t n1)
{
    const size_t hd = a->head_dim;
    const size_t kvo = s0->g[r0] * a->kv_head_stride;
    static __thread lane_state L[2];
    static __thread float wide[2][CH * KRN_MAX_HEAD_DIM] __attribute__((aligned(64))); /* fp16 or q8 rows widened */

    lane_state_begin(&L[0], s0, r0, n0, hd);
    lane_state_begin(&L[1], s1, r1, n1, hd);
    /* Both sets' chunks start at multiples of CH, so stepping from the first covers each set's. */
    size_t jb = L[0].jlo < L[1].jlo ? L[0].jlo : L[1].jlo, je = L[0].jhi > L[1].jhi ? L[0].jhi : L[1].jhi;
    for (size_t jc = jb; jc < je; jc += CH) {
        size_t cn[2];
        for (int h = 0; h < 2; h++)
            cn[h] = L[h].jlo <= jc && jc < L[h].jhi ? (L[h].jhi - jc < CH ? L[h].jhi - jc : CH) : 0;
        size_t cmax = cn[0] > cn[1] ? cn[0] : cn[1], cmin = cn[0] < cn[1] ? cn[0] : cn[1];
        if (!cmax)
            continue;
        lane_rows kr, vr;
        lanes_chunk_rows(a, kvo, jc, cmax, wide, &kr, &vr);
        if (cmin)
            lane_scores16x2(L[0].qt, L[1].qt, &kr, cmax, hd, a->scale, L[0].sc, L[1].sc);
        else
            lane_scores16(L[cn[0] ? 0 : 1].qt, &kr, cmax, hd, a->scale, L[cn[0] ? 0 : 1].sc);
        for (int h = 0; h < 2; h++)
            if (cn[h]) {
                lanes_softcap(L[h].sc, cn[h], a->softcap);
                lane_softmax16(&L[h], jc, cn[h], hd);
            }
        if (cmin)
            lane_pv16x2(L[0].acc, L[1].acc, &vr, cmin, hd, L[0].sc, L[1].sc);
        for (int h = 0; h < 2; h++)
            if (cn[h] > cmin) {
                lane_rows vt = lane_rows_from(&vr, cmin);
                lane_pv16(L[h].acc, &vt, cn[h] - cmin, hd, L[h].sc + cmin);
            }
    }
    lane_state_finish(&L[0], s0, r0, n0, hd);
    lane_state_finish(&L[1], s1, r1, n1, hd);
}

/* Rows [r0, r0 + n) of a set, n <= LROWS, all of kv head rs->g[r0]. */
static void attend_lanes16(const krn_gqa_args *a, const rowset *rs, size_t r0, size_t n)
{
    attend_lanes16x2(a, rs, r0, n, rs, r0, 0);
}

/*
 * Prompt rows come in runs of one kv head (lane_run_end); each thread holds
 * one back, and runs it paired with the next run of the same kv head, or
 * alone when the next is of another kv head or the thread's range ends
 * (lanes_flush).
 */
typedef struct lane_held {
    rowset rs;
    size_t r0, n;
    bool have;
} lane_held;

static __thread lane_held held;

static void lanes_take(const krn_gqa_args *a, const rowset *rs, size_t r0, size_t n)
{
    if (held.have && held.rs.g[held.r0] == rs->g[r0]) {
        attend_lanes16x2(a, &held.rs, held.r0, held.n, rs, r0, n);
        held.have = false;
        return;
    }
    if (held.have)
        attend_lanes16(a, &held.rs, held.r0, held.n);
    held.rs = *rs;
    held.r0 = r0;
    held.n = n;
    held.have = true;
}

static void lanes_flush(const krn_gqa_args *a)
{
    if (held.have)
        attend_lanes16(a, &held.rs, held.r0, held.n);
    held.have = false;
}

/* ------------------------------------------------------------------------- */
/* Decode: the weighted sum of values                                          */

/* 16 cache values at element offset o: q8 codes or fp16 values widened, or fp32 loaded. */
INLINE __m512 kv_load16(const void *base, size_t o, const krn_kv_type KT)
{
    if (KT == KRN_KV_Q8) {
        const __m128i c = _mm_loadu_si128((const __m128i *)(const void *)((const int8_t *)base + o));
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c));
    }
    if (KT == KRN_KV_F16)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)base + o)));
    return _mm512_loadu_ps((const float *)base + o);
}

/*
 * acc0/acc1[0, 16 * NV) += sum_jj p0/p1[jj] * v_jj[d] over the chunk's cn
 * value rows (from element offset v0, ts apart; q8 codes as they are, their
 * scales being in the weights), keys in order: per dim the AVX2 pass's FMA
 * chain (chunk_pv, row_pv), so the same bits. With TWO false only row 0.
 */
INLINE void pv_512(const void *v, size_t v0, size_t ts, size_t cn, const float *p0, const float *p1, float *acc0,
                     float *acc1, const int NV, const bool TWO, const krn_kv_type KT)
{
    __m512 x[8], y[8];
    UNROLL for (int i = 0; i < NV; i++) {
        x[i] = _mm512_load_ps(acc0 + 16 * i);
        y[i] = TWO ? _mm512_load_ps(acc1 + 16 * i) : _mm512_setzero_ps();
    }
    for (size_t jj = 0; jj < cn; jj++) {
        const size_t o = v0 + jj * ts;
        const __m512 pa = _mm512_set1_ps(p0[jj]), pb = _mm512_set1_ps(TWO ? p1[jj] : 0.0f);
        UNROLL for (int i = 0; i < NV; i++) {
            const __m512 c = kv_load16(v, o + 16 * (size_t)i, KT);
            x[i] = _mm512_fmadd_ps(pa, c, x[i]);
            if (TWO)
                y[i] = _mm512_fmadd_ps(pb, c, y[i]);
        }
    }
    UNROLL for (int i = 0; i < NV; i++) {
        _mm512_store_ps(acc0 + 16 * i, x[i]);
        if (TWO)
            _mm512_store_ps(acc1 + 16 * i, y[i]);
    }
}

/*
 * The chunk's weighted sums of rows [0, n), in pairs, 128 dims at a time,
 * then 32, then 16 (head_dim a multiple of 16): each call walks the chunk's
 * keys once, so the fewer the calls the better.
 */
INLINE void chunk_pv_512(const krn_gqa_args *a, size_t v0, size_t n, size_t cn, float (*sc)[CH],
                         float (*acc)[KRN_MAX_HEAD_DIM], size_t hd, const krn_kv_type KT)
{
    const size_t ts = a->kv_tok_stride;
    for (size_t r = 0; r < n; r += 2) {
        const bool two = r + 1 < n;
        const float *p1 = two ? sc[r + 1] : NULL;
        float *acc1 = two ? acc[r + 1] : NULL;
        size_t d = 0;
        for (; d + 128 <= hd; d += 128)
            if (two)
                pv_512(a->v_cache, v0 + d, ts, cn, sc[r], p1, acc[r] + d, acc1 + d, 8, true, KT);
            else
                pv_512(a->v_cache, v0 + d, ts, cn, sc[r], NULL, acc[r] + d, NULL, 8, false, KT);
        for (; d + 32 <= hd; d += 32)
            if (two)
                pv_512(a->v_cache, v0 + d, ts, cn, sc[r], p1, acc[r] + d, acc1 + d, 2, true, KT);
            else
                pv_512(a->v_cache, v0 + d, ts, cn, sc[r], NULL, acc[r] + d, NULL, 2, false, KT);
        for (; d < hd; d += 16)
            if (two)
                pv_512(a->v_cache, v0 + d, ts, cn, sc[r], p1, acc[r] + d, acc1 + d, 1, true, KT);
            else
                pv_512(a->v_cache, v0 + d, ts, cn, sc[r], NULL, acc[r] + d, NULL, 1, false, KT);
    }
}

/* ------------------------------------------------------------------------- */
/* Decode on a q8 cache                                                        */

/*
 * s plus the sums of x * k's adjacent int16 products, per int32 lane: one
 * VPDPWSSD with VNNI, else VPMADDWD then VPADDD. Both wrap modulo 2^32, so
 * the integers are the same. The VNNI form is inline assembly because this
 * file is not compiled for VNNI (krn_avx512_gqa_vnni runs only where CPUID
 * reports it); under the tests' emulation it is the emulated intrinsic.
 */
INLINE __m512i dot_pairs16(__m512i s, __m512i x, __m512i k, const bool VNNI)
{
    if (VNNI) {
#ifdef QD_EMU512_IMMINTRIN_H
        return _mm512_dpwssd_epi32(s, x, k);
#else
        __asm__("vpdpwssd %2, %1, %0" : "+v"(s) : "v"(x), "v"(k));
        return s;
#endif
    }
    return _mm512_add_epi32(s, _mm512_madd_epi16(x, k));
}

/*
 * Exact integer dots of rows c0, c1 (int16 codes) with the four q8 keys at
 * koff, 32 dims per product (dot_pairs16); then the float steps every
 * level's q8 pass shares (q8_scores8). Lanes [r0.k0 .. r0.k3 | r1.k0 .. r1.k3].
 */
INLINE __m256 score2x4_q8_512(const krn_gqa_args *a, const size_t hd, const int16_t *c0, const int16_t *c1, float s0,
                              float s1, const size_t *koff, const bool VNNI)
{
    const int8_t *k = a->k_cache;
    __m512i s[8];
    UNROLL for (int i = 0; i < 8; i++)
        s[i] = _mm512_setzero_si512();
    for (size_t d = 0; d < hd; d += 32) {
        const __m512i x0 = _mm512_load_si512((const void *)(c0 + d)), x1 = _mm512_load_si512((const void *)(c1 + d));
        UNROLL for (int i = 0; i < 4; i++) {
            __m512i kv = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)(const void *)(k + koff[i] + d)));
            s[i] = dot_pairs16(s[i], x0, kv, VNNI);
            s[4 + i] = dot_pairs16(s[4 + i], x1, kv, VNNI);
        }
    }
    __m256i h[8];
    UNROLL for (int i = 0; i < 8; i++)
        h[i] = _mm256_add_epi32(_mm512_castsi512_si256(s[i]), _mm512_extracti64x4_epi64(s[i], 1));
    return q8_scores8(a, q8_dots8(h), s0, s1, koff, hd);
}

/*
 * The AVX2 decode pass (attend_dec in avx2/attn.c) on a q8 cache with
 * 512-bit integer dots and weighted sums, for sets whose rows share one kv
 * head and key range and head sizes that are multiples of 32. On a q8 cache
 * that pass waits on arithmetic rather than memory (bench/README.md), and
 * here each instruction does twice the work. Every float step is the AVX2
 * pass's, lane for lane and in its order, and the chunk's softmax and the
 * outputs are its own functions: the bits are the AVX2 level's.
 */
INLINE void dec_q8_512(const krn_gqa_args *a, const rowset *rs, const size_t hd, const bool VNNI)
{
    const size_t ts = a->kv_tok_stride, n = rs->n;
    const size_t kb = rs->g[0] * a->kv_head_stride, lo = rs->lo[0], hi = rs->hi[0];
    const size_t ahead = 2 * CH, first = lo < hi ? lo - lo % CH : hi; /* attend_dec's q8 distance */
    float acc[RMAX][KRN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float sc[RMAX][CH] __attribute__((aligned(64)));
    int16_t codes[RMAX][KRN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float qs[RMAX], mx[RMAX], den[RMAX];

    for (size_t r = 0; r < n; r++)
        qs[r] = krn_avx2_code_row(rs->q[r], hd, 32767, NULL, codes[r]); /* krn_q16_row's codes */
    dec_begin(n, hd, acc, mx, den);
    for (size_t jc = first; jc < hi; jc += CH) {
        size_t cn = hi - jc < CH ? hi - jc : CH;
        for (size_t jj = 0; jj < cn; jj += 4) {
            size_t koff[4];
            dec_tile(a, rs, kb, jc, cn, jj, first, hi, ahead, hd, KRN_KV_Q8, koff);
            for (size_t r = 0; r < n; r += 2) {
                size_t r1 = r + 1 < n ? r + 1 : r;
                __m256 v = score2x4_q8_512(a, hd, codes[r], codes[r1], qs[r], qs[r1], koff, VNNI);
                _mm_store_ps(&sc[r][jj], _mm256_castps256_ps128(v));
                _mm_store_ps(&sc[r1][jj], _mm256_extractf128_ps(v, 1));
            }
        }
        krn_avx2_dec_weights_q8(a, n, kb, lo, jc, cn, sc, mx, den, acc, hd);
        chunk_pv_512(a, kb + jc * ts, n, cn, sc, acc, hd, KRN_KV_Q8);
    }
    krn_avx2_dec_finish(rs, acc, den, hd);
}

/* ------------------------------------------------------------------------- */
/* Decode on an fp32 or fp16 cache                                            */

/* The 8 cache values at element offsets o0 and o1, widened from fp16 or loaded: [o0's | o1's]. */
INLINE __m512 kv_pair8(const void *base, size_t o0, size_t o1, const krn_kv_type KT)
{
    if (KT == KRN_KV_F16) {
        const uint16_t *h = base;
        __m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)(h + o0));
        __m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)(h + o1));
        __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(x0), x1, 1);
        return _mm512_cvtph_ps(x);
    }
    const float *f = base;
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(_mm256_loadu_ps(f + o0))),
                                               _mm256_castps_pd(_mm256_loadu_ps(f + o1)), 1));
}

/* The 8 floats at p in both halves. */
INLINE __m512 bcast8(const float *p)
{
    return _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_castps_pd(_mm256_loadu_ps(p))));
}

/*
 * [r0.k0 .. r0.k3 | r1.k0 .. r1.k3] from the lanes' sums, reduced as
 * score2x4 (avx2/attn.c) reduces its own, times the scale.
 */
INLINE __m256 reduce2x4(const krn_gqa_args *a, __m512 a01, __m512 a23, __m512 b01, __m512 b23)
{
#define LO(v) _mm512_castps512_ps256(v)
#define HI(v) _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))
    __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(LO(a01), HI(a01)), _mm256_hadd_ps(LO(a23), HI(a23)));
    __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(LO(b01), HI(b01)), _mm256_hadd_ps(LO(b23), HI(b23)));
#undef LO
#undef HI
    __m256 r = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
    return _mm256_mul_ps(r, _mm256_set1_ps(a->scale));
}

/*
 * Scores of rows q0, q1 with the four keys at ka and the four at kb, each
 * group as the AVX2 pass's tile (score2x4 in avx2/attn.c) computes it: a
 * vector holds two keys' same eight dims side by side, so each lane runs
 * that tile's FMA chain over the dims in order, and the sums are reduced by
 * its own steps. Two tiles at once keep eight chains in flight, as the AVX2
 * tile does. *sa, *sb: lanes [q0.k0 .. q0.k3 | q1.k0 .. q1.k3] of each
 * group; head_dim a multiple of 8.
 */
INLINE void score2x8_f_512(const krn_gqa_args *a, const size_t hd, const float *q0, const float *q1,
                           const size_t *ka, const size_t *kb, const krn_kv_type KT, __m256 *sa, __m256 *sb)
{
    __m512 s[8];
    UNROLL for (int i = 0; i < 8; i++)
        s[i] = _mm512_setzero_ps();
    for (size_t d = 0; d < hd; d += 8) {
        const __m512 x0 = bcast8(q0 + d), x1 = bcast8(q1 + d);
        const __m512 k0 = kv_pair8(a->k_cache, ka[0] + d, ka[1] + d, KT);
        const __m512 k1 = kv_pair8(a->k_cache, ka[2] + d, ka[3] + d, KT);
        const __m512 k2 = kv_pair8(a->k_cache, kb[0] + d, kb[1] + d, KT);
        const __m512 k3 = kv_pair8(a->k_cache, kb[2] + d, kb[3] + d, KT);
        s[0] = _mm512_fmadd_ps(x0, k0, s[0]);
        s[1] = _mm512_fmadd_ps(x0, k1, s[1]);
        s[2] = _mm512_fmadd_ps(x1, k0, s[2]);
        s[3] = _mm512_fmadd_ps(x1, k1, s[3]);
        s[4] = _mm512_fmadd_ps(x0, k2, s[4]);
        s[5] = _mm512_fmadd_ps(x0, k3, s[5]);
        s[6] = _mm512_fmadd_ps(x1, k2, s[6]);
        s[7] = _mm512_fmadd_ps(x1, k3, s[7]);
    }
    *sa = reduce2x4(a, s[0], s[1], s[2], s[3]);
    *sb = reduce2x4(a, s[4], s[5], s[6], s[7]);
}

/*
 * The AVX2 decode pass (attend_dec in avx2/attn.c) on an fp32 or fp16 cache
 * with 512-bit dots and weighted sums, for sets whose rows share one kv head
 * and key range and head sizes that are multiples of 16. Every float step is
 * the AVX2 pass's, lane for lane and in its order, and the chunk's softmax
 * and the outputs are its own functions: the bits are the AVX2 level's.
 * Each widened fp16 element and each loaded fp32 one serves two rows in the
 * weighted sum (the AVX2 pass reads fp32 values once per row).
 */
INLINE void dec_f_512(const krn_gqa_args *a, const rowset *rs, const size_t hd, const krn_kv_type KT)
{
    const size_t ts = a->kv_tok_stride, n = rs->n;
    const size_t kb = rs->g[0] * a->kv_head_stride, lo = rs->lo[0], hi = rs->hi[0];
    const size_t ahead = CH, first = lo < hi ? lo - lo % CH : hi; /* attend_dec's distance */
    float acc[RMAX][KRN_MAX_HEAD_DIM] __attribute__((aligned(64)));
    float sc[RMAX][CH] __attribute__((aligned(64)));
    float mx[RMAX], den[RMAX];

    dec_begin(n, hd, acc, mx, den);
    for (size_t jc = first; jc < hi; jc += CH) {
        size_t cn = hi - jc < CH ? hi - jc : CH;
        /* Eight keys at a time: the second four past the chunk's end (cn <= jj + 4) repeat its last key,
         * as dec_tile pads the first four, and score into the masked padding lanes. */
        for (size_t jj = 0; jj < cn; jj += 8) {
            size_t ka[4], kn[4];
            dec_tile(a, rs, kb, jc, cn, jj, first, hi, ahead, hd, KT, ka);
            if (jj + 4 < cn)
                dec_tile(a, rs, kb, jc, cn, jj + 4, first, hi, ahead, hd, KT, kn);
            else
                for (int i = 0; i < 4; i++)
                    kn[i] = ka[3];
            for (size_t r = 0; r < n; r += 2) {
                size_t r1 = r + 1 < n ? r + 1 : r;
                __m256 va, vb;
                score2x8_f_512(a, hd, rs->q[r], rs->q[r1], ka, kn, KT, &va, &vb);
                _mm_store_ps(&sc[r][jj], _mm256_castps256_ps128(va));
                _mm_store_ps(&sc[r1][jj], _mm256_extractf128_ps(va, 1));
                _mm_store_ps(&sc[r][jj + 4], _mm256_castps256_ps128(vb));
                _mm_store_ps(&sc[r1][jj + 4], _mm256_extractf128_ps(vb, 1));
            }
        }
        krn_avx2_dec_weights(a, n, lo, jc, cn, sc, mx, den, acc, hd);
        chunk_pv_512(a, kb + jc * ts, n, cn, sc, acc, hd, KT);
    }
    krn_avx2_dec_finish(rs, acc, den, hd);
}

/* The q8 decode pass applies: one decode row per head, sharing a kv head and key range. */
static bool q8_decode_set(const krn_gqa_args *a, const rowset *rs)
{
    return a->seq == 1 && !a->prompt && a->kv_type == KRN_KV_Q8 && a->head_dim % 32 == 0 && one_head_one_range(a, rs);
}

INLINE void run_q8_decode(const krn_gqa_args *a, const rowset *rs, const bool VNNI)
{
    if (a->head_dim == 128)
        dec_q8_512(a, rs, 128, VNNI);
    else
        dec_q8_512(a, rs, a->head_dim, VNNI);
}

static void run_set(const krn_gqa_args *a, const rowset *rs)
{
    if (a->seq == 1 && !a->prompt) {
        if (q8_decode_set(a, rs)) {
            run_q8_decode(a, rs, false);
        } else if (a->kv_type != KRN_KV_Q8 && a->head_dim % 16 == 0 && one_head_one_range(a, rs)) {
            const krn_kv_type kt = a->kv_type == KRN_KV_F16 ? KRN_KV_F16 : KRN_KV_F32;
            if (a->head_dim == 128 && kt == KRN_KV_F16)
                dec_f_512(a, rs, 128, KRN_KV_F16);
            else if (a->head_dim == 128)
                dec_f_512(a, rs, 128, KRN_KV_F32);
            else if (kt == KRN_KV_F16)
                dec_f_512(a, rs, a->head_dim, KRN_KV_F16);
            else
                dec_f_512(a, rs, a->head_dim, KRN_KV_F32);
        } else {
            krn_avx2_gqa_decode_set(a, rs);
        }
        return;
    }
    for (size_t r0 = 0, r1; r0 < rs->n; r0 = r1) { /* runs of rows that share a kv head */
        r1 = lane_run_end(rs, r0);
        lanes_take(a, rs, r0, r1 - r0);
    }
}

/* Only the q8 decode pass differs with VNNI; every other set takes run_set's path. */
static void run_set_vnni(const krn_gqa_args *a, const rowset *rs)
{
    if (q8_decode_set(a, rs))
        run_q8_decode(a, rs, true);
    else
        run_set(a, rs);
}

void krn_avx512_gqa(const krn_gqa_args *a, size_t i_begin, size_t i_end)
{
    gqa_drive(a, i_begin, i_end, run_set);
    lanes_flush(a);
}

/* The same with the q8 decode pass's dots on VPDPWSSD: for CPUs with AVX512-VNNI only. */
void krn_avx512_gqa_vnni(const krn_gqa_args *a, size_t i_begin, size_t i_end)
{
    gqa_drive(a, i_begin, i_end, run_set_vnni);
    lanes_flush(a);
}
