/*
 * avx2/attn_sets: what the AVX2 and AVX-512 GroupQueryAttention cores share,
 * for files compiled with at least the avx2 flags: the row set (query rows
 * that share one pass over the keys), how an item range is cut into sets,
 * and the lane layout's query and output transposes. A level supplies the
 * function that runs one set; the cut is the same on every level, and a
 * row's result never depends on which other rows share its set.
 */
#ifndef QWEN3D_KERNELS_AVX2_ATTN_SETS_H
#define QWEN3D_KERNELS_AVX2_ATTN_SETS_H

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/krn_internal.h"

#define RMAX 16   /* query rows sharing one pass over the keys */
#define CH 32     /* keys per online-softmax step; chunks start at multiples of CH */
#define LROWS 16  /* rows per lane set (prefill) */

typedef struct rowset {
    size_t n;               /* rows; rows of one kv head are consecutive */
    const float *q[RMAX];   /* head_dim floats each */
    float *out[RMAX];
    size_t lo[RMAX], hi[RMAX]; /* visible keys [lo, hi) */
    size_t g[RMAX];         /* kv head of each row */
    size_t next_kb;         /* element offset of the kv head whose pass comes next on this thread, or NO_NEXT */
} rowset;

#define NO_NEXT SIZE_MAX

/* Runs every row of a set: a level's attention core. */
typedef void (*gqa_set_fn)(const krn_gqa_args *a, const rowset *rs);

/* The AVX2 core's decode sets (one new token, row-major arithmetic). */
void krn_avx2_gqa_decode_set(const krn_gqa_args *a, const rowset *rs);

/* The AVX2 decode pass's chunk weights and outputs on a q8 cache (avx2/attn.c), for the avx512 level's pass. */
void krn_avx2_dec_weights_q8(const krn_gqa_args *a, size_t n, size_t kb, size_t lo, size_t jc, size_t cn,
                             float (*sc)[CH], float *mx, float *den, float (*acc)[KRN_MAX_HEAD_DIM], size_t hd);
/* Its weights step for an fp32 or fp16 cache: the same without the value scales. */
void krn_avx2_dec_weights(const krn_gqa_args *a, size_t n, size_t lo, size_t jc, size_t cn, float (*sc)[CH], float *mx,
                          float *den, float (*acc)[KRN_MAX_HEAD_DIM], size_t hd);
void krn_avx2_dec_finish(const rowset *rs, float (*acc)[KRN_MAX_HEAD_DIM], const float *den, size_t hd);

/* Whether every row of a set reads one kv head over one key range (attend_dec). */
static inline bool one_head_one_range(const krn_gqa_args *a, const rowset *rs)
{
    if (a->head_dim % 8)
        return false;
    for (size_t r = 1; r < rs->n; r++)
        if (rs->g[r] != rs->g[0] || rs->lo[r] != rs->lo[0] || rs->hi[r] != rs->hi[0])
            return false;
    return true;
}

/*
 * Asks for cache row `off` (head_dim elements) ahead of use. In a token-major
 * cache ([token, kv_head, head_dim]) one head's consecutive keys are a
 * kv_heads * head_dim stride apart (4 KiB for Qwen3 in fp32): every key row
 * starts a new page, where hardware prefetchers stop, and without this a
 * decode step waits on DRAM latency key by key; in a head-major one it
 * keeps the stream ahead across page boundaries. Prefetches never fault, so
 * rows past the end of the cache are harmless. L2 asks for the lines into L2
 * only (each branch names its hint: _mm_prefetch needs a constant).
 */
static inline __attribute__((always_inline)) void prefetch_row(const void *base, size_t off, size_t hd, const krn_kv_type KT, const bool L2)
{
    const char *p = (const char *)base + off * krn_kv_elem_bytes(KT);
    size_t bytes = krn_kv_row_elems(KT, hd) * krn_kv_elem_bytes(KT);
    for (size_t b = 0; b < bytes; b += 64) {
        if (L2)
            _mm_prefetch(p + b, _MM_HINT_T1);
        else
            _mm_prefetch(p + b, _MM_HINT_T0);
    }
    if (KT == KRN_KV_Q8) { /* a q8 row (hd + 4 bytes) need not start on a line: its last byte's line too */
        if (L2)
            _mm_prefetch(p + bytes - 1, _MM_HINT_T1);
        else
            _mm_prefetch(p + bytes - 1, _MM_HINT_T0);
    }
}

/*
 * A decode pass's tile of four keys from jc + jj in the chunk of cn keys at
 * jc, of the kv head at element offset kb, whose pass covers keys
 * [first, hi): the element offsets of its key rows into koff (keys past the
 * chunk repeat its last one; their scores are masked), and its prefetches:
 * the four keys' K and V rows into L1, and the rows `ahead` keys on into
 * L2, in this head while they are before hi, past its last the opening rows
 * of the kv head this thread runs next (rs->next_kb), so no lines past the
 * context are fetched.
 */
static inline __attribute__((always_inline)) void dec_tile(const krn_gqa_args *a, const rowset *rs, size_t kb,
                                                           size_t jc, size_t cn, size_t jj, size_t first, size_t hi,
                                                           size_t ahead, size_t hd, const krn_kv_type KT,
                                                           size_t *koff)
{
    const size_t ts = a->kv_tok_stride;
    for (int i = 0; i < 4; i++)
        koff[i] = kb + (jc + (jj + (size_t)i < cn ? jj + (size_t)i : cn - 1)) * ts;
    for (size_t i = 0; i < 4; i++) {
        size_t j = jc + jj + i, nj = kb + j * ts;
        prefetch_row(a->k_cache, nj, hd, KT, false);
        prefetch_row(a->v_cache, nj, hd, KT, false);
        size_t ja = j + ahead, na = ja < hi ? kb + ja * ts : NO_NEXT;
        if (na == NO_NEXT && rs->next_kb != NO_NEXT && ja - hi < hi - first)
            na = rs->next_kb + (first + ja - hi) * ts;
        if (na != NO_NEXT) {
            prefetch_row(a->k_cache, na, hd, KT, true);
            prefetch_row(a->v_cache, na, hd, KT, true);
        }
    }
}

/* A decode pass's rows [0, n) before their first chunk: nothing accumulated, no maximum, no weight. */
static inline void dec_begin(size_t n, size_t hd, float (*acc)[KRN_MAX_HEAD_DIM], float *mx, float *den)
{
    for (size_t r = 0; r < n; r++) {
        memset(acc[r], 0, hd * sizeof(float));
        mx[r] = -INFINITY;
        den[r] = 0.0f;
    }
}

/*
 * A q8 score tile's exact integer dots from eight vectors of partial sums
 * (h[i]: row i / 4 with key i % 4), as [r0.k0 .. r0.k3 | r1.k0 .. r1.k3].
 */
static inline __attribute__((always_inline)) __m256i q8_dots8(const __m256i *h)
{
    __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
    __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(h[4], h[5]), _mm256_hadd_epi32(h[6], h[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

/*
 * A q8 score tile's scores from its dots (q8_dots8's lanes): each dot times
 * its row's scale (s0, s1) times its key's (the q8 rows at koff), times the
 * attention scale, in krn_q8_key_score()'s order. Every level's q8 decode
 * pass ends its tiles here, so their scores have the same bits.
 */
static inline __attribute__((always_inline)) __m256 q8_scores8(const krn_gqa_args *a, __m256i dots, float s0,
                                                               float s1, const size_t *koff, size_t hd)
{
    const int8_t *k = a->k_cache;
    /* Lane i: the row's scale times key i's (built in registers: scalar stores read back as a vector stall). */
    __m128 ks = _mm_setr_ps(krn_q8_scale(k + koff[0], hd), krn_q8_scale(k + koff[1], hd),
                            krn_q8_scale(k + koff[2], hd), krn_q8_scale(k + koff[3], hd));
    __m256 f = _mm256_mul_ps(_mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(s0)), _mm256_set_m128(ks, ks));
    __m256 r = _mm256_mul_ps(_mm256_cvtepi32_ps(dots), f);
    return _mm256_mul_ps(r, _mm256_set1_ps(a->scale));
}

/* Key or value row jj of the chunk: in the cache, or in the widened copy of an fp16 or q8 chunk. */
typedef struct lane_rows {
    const float *base; /* row 0 */
    size_t stride;     /* floats between rows */
} lane_rows;

static inline const float *lane_row(const lane_rows *lr, size_t jj)
{
    return lr->base + jj * lr->stride;
}

/* Widens cn fp16 rows of hd values (row stride ts elements) into dst rows of hd floats. */
static inline void widen_rows(const uint16_t *src, size_t ts, size_t cn, size_t hd, float *dst)
{
    for (size_t jj = 0; jj < cn; jj++) {
        const uint16_t *s = src + jj * ts;
        float *o = dst + jj * hd;
        size_t d = 0;
        for (; d + 8 <= hd; d += 8)
            _mm256_storeu_ps(o + d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(s + d))));
        for (; d < hd; d++)
            o[d] = _cvtsh_ss(s[d]);
    }
}

/* Dequantizes cn q8 rows of hd codes (row stride ts bytes) into dst rows of hd floats: code * scale. */
static inline void widen_q8_rows(const int8_t *src, size_t ts, size_t cn, size_t hd, float *dst)
{
    for (size_t jj = 0; jj < cn; jj++) {
        const int8_t *s = src + jj * ts;
        float qs = krn_q8_scale(s, hd);
        __m256 vs = _mm256_set1_ps(qs);
        float *o = dst + jj * hd;
        size_t d = 0;
        for (; d + 8 <= hd; d += 8) {
            __m128i c = _mm_loadl_epi64((const __m128i *)(const void *)(s + d));
            _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), vs));
        }
        for (; d < hd; d++)
            o[d] = (float)s[d] * qs;
    }
}

/* In-register transpose of an 8 x 8 float block: r[i][j] becomes r[j][i]. */
static inline __attribute__((always_inline)) void transpose8(__m256 r[8])
{
    __m256 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
    }
}

/*
 * qt[d][row] = q_row[d] for the set's rows [r0, r0 + n) (absent rows zero),
 * eight rows by eight dims at a time through register transposes.
 */
static inline void lanes_load_queries(const rowset *rs, size_t r0, size_t n, size_t hd, float *qt)
{
    size_t d8 = hd & ~(size_t)7;
    for (size_t v = 0; v < LROWS; v += 8) {
        for (size_t d0 = 0; d0 < d8; d0 += 8) {
            __m256 b[8];
            for (size_t i = 0; i < 8; i++)
                b[i] = v + i < n ? _mm256_loadu_ps(rs->q[r0 + v + i] + d0) : _mm256_setzero_ps();
            transpose8(b);
            for (size_t i = 0; i < 8; i++)
                _mm256_store_ps(qt + (d0 + i) * LROWS + v, b[i]);
        }
        for (size_t d = d8; d < hd; d++)
            for (size_t i = 0; i < 8; i++)
                qt[d * LROWS + v + i] = v + i < n ? rs->q[r0 + v + i][d] : 0.0f;
    }
}

/* out_row[d] = acc[d][row] / den[row] for rows [r0, r0 + n); rows that saw nothing get zeros. */
static inline void lanes_store_outputs(const rowset *rs, size_t r0, size_t n, size_t hd, const float *acc,
                                const float *den)
{
    size_t d8 = hd & ~(size_t)7;
    for (size_t v = 0; v < n; v += 8) {
        __m256 dv = _mm256_loadu_ps(den + v);
        __m256 live = _mm256_cmp_ps(dv, _mm256_setzero_ps(), _CMP_GT_OQ);
        /* Dead rows divide by one and are masked to zero afterwards. */
        __m256 divisor = _mm256_blendv_ps(_mm256_set1_ps(1.0f), dv, live);
        for (size_t d0 = 0; d0 < d8; d0 += 8) {
            __m256 b[8];
            for (size_t i = 0; i < 8; i++)
                b[i] = _mm256_and_ps(_mm256_div_ps(_mm256_load_ps(acc + (d0 + i) * LROWS + v), divisor), live);
            transpose8(b);
            for (size_t i = 0; i < 8 && v + i < n; i++)
                _mm256_storeu_ps(rs->out[r0 + v + i] + d0, b[i]);
        }
        for (size_t i = 0; i < 8 && v + i < n; i++)
            for (size_t d = d8; d < hd; d++)
                rs->out[r0 + v + i][d] = den[v + i] > 0.0f ? acc[d * LROWS + v + i] / den[v + i] : 0.0f;
    }
}

/*
 * The start of a lane set: the queries transposed into qt, acc zeroed, each
 * lane's visible keys [lo, hi) (absent rows see none), and the key range the
 * set's pass covers, [*jlo, *jhi), starting at a multiple of CH.
 */
static inline void lanes_begin(const rowset *rs, size_t r0, size_t n, size_t hd, float *qt, float *acc,
                               int32_t *lo, int32_t *hi, size_t *jlo, size_t *jhi)
{
    lanes_load_queries(rs, r0, n, hd, qt);
    memset(acc, 0, hd * LROWS * sizeof(float));
    *jlo = SIZE_MAX;
    *jhi = 0;
    for (size_t r = 0; r < LROWS; r++) {
        lo[r] = hi[r] = 0;
        if (r >= n)
            continue;
        lo[r] = (int32_t)rs->lo[r0 + r];
        hi[r] = (int32_t)rs->hi[r0 + r];
        if (rs->lo[r0 + r] < rs->hi[r0 + r]) {
            *jlo = rs->lo[r0 + r] < *jlo ? rs->lo[r0 + r] : *jlo;
            *jhi = rs->hi[r0 + r] > *jhi ? rs->hi[r0 + r] : *jhi;
        }
    }
    if (*jlo < *jhi)
        *jlo -= *jlo % CH;
}

/*
 * The key and value rows of the chunk of cn keys at jc of the kv head at
 * element offset kvo: in the cache, or widened from fp16 or q8 into wide.
 */
static inline void lanes_chunk_rows(const krn_gqa_args *a, size_t kvo, size_t jc, size_t cn,
                                    float (*wide)[CH * KRN_MAX_HEAD_DIM], lane_rows *kr, lane_rows *vr)
{
    const size_t hd = a->head_dim, ts = a->kv_tok_stride;
    if (a->kv_type == KRN_KV_F16) {
        widen_rows((const uint16_t *)a->k_cache + kvo + jc * ts, ts, cn, hd, wide[0]);
        widen_rows((const uint16_t *)a->v_cache + kvo + jc * ts, ts, cn, hd, wide[1]);
        *kr = (lane_rows){wide[0], hd};
        *vr = (lane_rows){wide[1], hd};
    } else if (a->kv_type == KRN_KV_Q8) {
        widen_q8_rows((const int8_t *)a->k_cache + kvo + jc * ts, ts, cn, hd, wide[0]);
        widen_q8_rows((const int8_t *)a->v_cache + kvo + jc * ts, ts, cn, hd, wide[1]);
        *kr = (lane_rows){wide[0], hd};
        *vr = (lane_rows){wide[1], hd};
    } else {
        *kr = (lane_rows){(const float *)a->k_cache + kvo + jc * ts, ts};
        *vr = (lane_rows){(const float *)a->v_cache + kvo + jc * ts, ts};
    }
}

/* Soft-capping of a lane chunk's scores, sc[jj][row] for its cn keys (nothing when softcap is 0). */
static inline void lanes_softcap(float (*sc)[LROWS], size_t cn, float softcap)
{
    if (softcap > 0.0f)
        for (size_t jj = 0; jj < cn; jj++)
            for (size_t r = 0; r < LROWS; r++)
                sc[jj][r] = softcap * tanhf(sc[jj][r] / softcap);
}

/* The end of the run of rows from r0 that share r0's kv head, at most LROWS long: one lane set. */
static inline size_t lane_run_end(const rowset *rs, size_t r0)
{
    size_t r1 = r0 + 1;
    while (r1 < rs->n && r1 - r0 < LROWS && rs->g[r1] == rs->g[r0])
        r1++;
    return r1;
}

/* Adds row (token s, head h) to a set, with its visible key range. */
static inline void add_row(const krn_gqa_args *a, rowset *rs, size_t s, size_t h)
{
    size_t len = a->past + s + 1, j0 = 0;
    if (a->local_window >= 0 && len > (size_t)a->local_window)
        j0 = len - (size_t)a->local_window;
    rs->q[rs->n] = a->q + s * a->q_ld + h * a->head_dim;
    rs->out[rs->n] = a->out + s * a->out_ld + h * a->head_dim;
    rs->lo[rs->n] = j0;
    rs->hi[rs->n] = len;
    rs->g[rs->n] = h / (a->n_heads / a->n_kv_heads);
    rs->n++;
}

/*
 * Heads [h, h + cnt) of token s, RMAX at a time, across kv heads. For a
 * decode step this makes one pass over the keys serve every kv head of the
 * range: a token-major cache keeps a token's kv heads side by side, so the pass
 * reads each token's rows as one contiguous span instead of a 4 KiB-strided
 * stream per head.
 */
static inline void run_token_heads(const krn_gqa_args *a, size_t s, size_t h, size_t cnt, gqa_set_fn run_set)
{
    while (cnt) {
        size_t nh = cnt < RMAX ? cnt : RMAX;
        rowset rs = {.n = 0, .next_kb = NO_NEXT};
        for (size_t r = 0; r < nh; r++)
            add_row(a, &rs, s, h + r);
        run_set(a, &rs);
        h += nh;
        cnt -= nh;
    }
}

/*
 * Items are ordered (kv head, token, head in group) (krn.h). A decode step's
 * items are just heads: with a token-major cache, sets of RMAX heads across kv
 * heads. Otherwise (each kv head's keys contiguous), within each kv head of
 * the range, whole tokens are done in query blocks of qb tokens times up to
 * RMAX / qb heads, so each pass over the keys serves several tokens; a token
 * cut by the range's ends goes alone.
 */
static inline void gqa_drive(const krn_gqa_args *a, size_t i_begin, size_t i_end, gqa_set_fn run_set)
{
    const size_t group = a->n_heads / a->n_kv_heads, per_g = a->seq * group;
    const size_t hpr = group < RMAX ? group : RMAX; /* heads per set */
    const size_t qb = RMAX / hpr;                    /* tokens per set */
    /* Token-major caches (a token's kv heads adjacent): decode passes span kv heads. */
    if (a->seq == 1 && !a->prompt && a->kv_tok_stride >= a->kv_head_stride) {
        run_token_heads(a, 0, i_begin, i_end - i_begin, run_set);
        return;
    }
    for (size_t g = i_begin / per_g; g < a->n_kv_heads && g * per_g < i_end; g++) {
        size_t lb = i_begin > g * per_g ? i_begin - g * per_g : 0;
        size_t le = i_end - g * per_g < per_g ? i_end - g * per_g : per_g;
        size_t s_lo = (lb + group - 1) / group, s_hi = le / group;
        if (s_lo > s_hi) { /* inside one token */
            run_token_heads(a, lb / group, g * group + lb % group, le - lb, run_set);
            continue;
        }
        /* (run_token_heads only ever sees heads of kv head g here.) */
        if (lb % group)
            run_token_heads(a, lb / group, g * group + lb % group, group - lb % group, run_set);
        for (size_t h0 = 0; h0 < group; h0 += hpr)
            for (size_t s0 = s_lo; s0 < s_hi; s0 += qb) {
                rowset rs = {.n = 0, .next_kb = NO_NEXT};
                size_t s1 = s_hi - s0 < qb ? s_hi : s0 + qb;
                /* A decode pass is short: the next kv head's opening rows load during its last chunk. */
                if (h0 + hpr >= group && s1 == s_hi && !(le % group) && g + 1 < a->n_kv_heads &&
                    (g + 1) * per_g < i_end)
                    rs.next_kb = (g + 1) * a->kv_head_stride;
                for (size_t s = s0; s < s1; s++)
                    for (size_t h = h0; h < h0 + hpr && h < group; h++)
                        add_row(a, &rs, s, g * group + h);
                run_set(a, &rs);
            }
        if (le % group)
            run_token_heads(a, s_hi, g * group, le % group, run_set);
    }
}

#endif
