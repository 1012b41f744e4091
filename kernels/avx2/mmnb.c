/*
 * avx2/mmnb: AVX2/FMA MatMulNBits (4-bit weights in the ONNX layout) in both
 * numeric modes, plus the activation quantizer of the int8 mode.
 *
 * The work is done in register tiles of MR rows of A by NR output columns:
 * each 16-byte group of weights is unpacked once per tile and used for all MR
 * rows, so the GEMV case (M = 1, decode) streams four weight rows side by side
 * and the GEMM case (prefill) amortizes the unpacking over four rows of A.
 *
 * int8 mode: a weight chunk of 32 nibbles is loaded as [low nibbles | high
 * nibbles], the order the quantizer stores activations in (krn_internal.h).
 * _mm256_maddubs_epi16 multiplies unsigned by signed bytes. With per-block zero
 * points the signed weight w = q - zp (in [-15, 15]) enters as |w| and its sign
 * is moved onto the activation with _mm256_sign_epi8; pair sums are at most
 * 2 * 15 * 127 = 3810, far from int16 saturation, and activations are never
 * -128, so the product is exact. Without zero points (the exported graph) the
 * unsigned q multiplies directly and 8 * (qa pair sum) is subtracted, also
 * exact. _mm256_madd_epi16 with ones widens to int32. The int32 block dot is
 * exact, as in the reference; only the fp32 accumulation order differs.
 *
 * Called by compute workers through the dispatch table, each with its own
 * column range. Compiled with -mavx2 -mfma -mf16c only.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/avx2/simd.h"
#include "kernels/krn_internal.h"

#define UNROLL _Pragma("GCC unroll 8")
#define INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------------- */
/* Activation quantization                                                     */

/* Up to 8 floats of a block from offset j of a row segment of len values; zero past len. */
static inline __m256 load_upto8(const float *a, size_t j, size_t len)
{
    if (j + 8 <= len)
        return _mm256_loadu_ps(a + j);
    if (j >= len)
        return _mm256_setzero_ps();
    return _mm256_maskload_ps(a + j, krn_avx2_tail_mask(len - j));
}

/*
 * Stores 32 quantized values (4 x 8 int32, natural k order, all in [-127, 127])
 * as int8 in the chunk order of krn_internal.h: evens, then odds.
 */
static inline void store_chunk32(int8_t *dst, __m256i v0, __m256i v1, __m256i v2, __m256i v3)
{
    /* Saturating packs work per 128-bit lane; the dword permute restores k order. */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    /* Per lane: 8 evens then 8 odds; then quads (even0, odd0, even1, odd1) -> (e0, e1, o0, o1). */
    const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                           0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    p = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(p, split), 0xD8);
    _mm256_storeu_si256((__m256i *)(void *)dst, p);
}

void krn_avx2_quant_a8(const krn_quant_args *args, size_t m_begin, size_t m_end)
{
    size_t bs = args->block_size, k = args->k;
    size_t kb = (k + bs - 1) / bs;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
    for (size_t m = m_begin; m < m_end; m++) {
        const float *a = args->a + m * args->a_ld;
        int8_t *q = krn_qa_q(args->qa, m, kb, bs);
        float *scale = krn_qa_scale(args->qa, m, kb, bs);
        int32_t *qsum = krn_qa_qsum(args->qa, m, kb, bs);
        float *ssum = krn_qa_scaled_sum(args->qa, m, kb, bs);
        for (size_t b = 0; b < kb; b++) {
            size_t k0 = b * bs, len = k - k0 < bs ? k - k0 : bs;
            const float *ab = a + k0;
            __m256 vmax = _mm256_setzero_ps();
            for (size_t j = 0; j < len; j += 8)
                vmax = _mm256_max_ps(vmax, _mm256_and_ps(load_upto8(ab, j, len), absmask));
            float amax = krn_avx2_hmax(vmax);
            float pre = amax < KRN_QA_TINY ? KRN_QA_UPSCALE : 1.0f;
            float inv = amax != 0.0f ? 127.0f / (amax * pre) : 0.0f;
            const __m256 vpre = _mm256_set1_ps(pre), vinv = _mm256_set1_ps(inv);
            int8_t *qb = q + k0;
            __m256i vsum = _mm256_setzero_si256();
            /* Same operations as the reference, in the same order: bit-identical values. */
#define QUANT8(j)                                                                            \
    _mm256_cvtps_epi32(_mm256_min_ps(                                                        \
        _mm256_max_ps(_mm256_round_ps(_mm256_mul_ps(_mm256_mul_ps(load_upto8(ab, j, len), vpre), vinv), \
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),       \
                      nlim),                                                                 \
        lim))
            if (bs >= 32) {
                for (size_t c = 0; c < bs; c += 32) {
                    __m256i v0 = QUANT8(c), v1 = QUANT8(c + 8), v2 = QUANT8(c + 16), v3 = QUANT8(c + 24);
                    store_chunk32(qb + c, v0, v1, v2, v3);
                    vsum = _mm256_add_epi32(vsum, _mm256_add_epi32(_mm256_add_epi32(v0, v1),
                                                                   _mm256_add_epi32(v2, v3)));
                }
            } else {
                /* block_size 16: one 16-value chunk, reordered through a small array. */
                int32_t tmp[16];
                __m256i v0 = QUANT8(0), v1 = QUANT8(8);
                _mm256_storeu_si256((__m256i *)(void *)tmp, v0);
                _mm256_storeu_si256((__m256i *)(void *)(tmp + 8), v1);
                for (size_t t = 0; t < 16; t++)
                    qb[krn_qa_slot(t, 16)] = (int8_t)tmp[t];
                vsum = _mm256_add_epi32(v0, v1);
            }
#undef QUANT8
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(vsum), _mm256_extracti128_si256(vsum, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
            scale[b] = amax / 127.0f;
            qsum[b] = _mm_cvtsi128_si32(s4);
            ssum[b] = scale[b] * (float)qsum[b];
        }
    }
}

/* ------------------------------------------------------------------------- */
/* int8 mode                                                                   */

/* 32 nibbles from 16 bytes: low nibbles in bytes 0-15, high nibbles in 16-31. */
INLINE __m256i unpack32(const uint8_t *p)
{
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)p);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(x, 4), x);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/*
 * y[m0..m0+MR) x [n0..n0+NR) for block sizes that are multiples of 32. BS32
 * and ZP are compile-time constants at every call site, so the common case
 * (block 32, no zero points: each block one chunk, zero point 8) compiles to a
 * straight loop over blocks; larger blocks sum their chunks in int32 first.
 */
INLINE void i8_tile(const krn_mmnb_args *a, size_t m0, size_t n0, const int MR, const int NR,
                    const bool BS32, const bool ZP)
{
    const krn_q4_weights *w = &a->w;
    const size_t bs = BS32 ? 32 : w->block_size, kb = w->k_blocks, blob = bs / 2;
    void *qa = (void *)a->qa;
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *qrow[4];
    const float *sarow[4];
    const uint8_t *wrow[4];
    const float *sbrow[4];
    __m256 acc[4][4];
    __m256i zpv[4];

    UNROLL for (int i = 0; i < MR; i++) {
        qrow[i] = krn_qa_q(qa, m0 + i, kb, bs);
        sarow[i] = krn_qa_scale(qa, m0 + i, kb, bs);
        UNROLL for (int j = 0; j < NR; j++)
            acc[i][j] = _mm256_setzero_ps();
    }
    UNROLL for (int j = 0; j < NR; j++) {
        wrow[j] = w->b_data + (n0 + j) * kb * blob;
        sbrow[j] = w->scales + (n0 + j) * kb;
        zpv[j] = _mm256_set1_epi8(8);
    }

    for (size_t b = 0; b < kb; b++) {
        if (ZP)
            UNROLL for (int j = 0; j < NR; j++)
                zpv[j] = _mm256_set1_epi8((char)krn_q4_zp(w, n0 + j, b));
        __m256i isum[4][4];
        UNROLL for (int i = 0; i < MR; i++)
            UNROLL for (int j = 0; j < NR; j++)
                isum[i][j] = _mm256_setzero_si256();
        for (size_t c = 0; c < bs; c += 32) {
            if (!ZP) {
                /*
                 * Zero point 8 for all: maddubs(q, qa) - maddubs(8, qa) is the exact
                 * int16 pair sum of (q - 8) * qa (|.| <= 3810 + 2032), with the second
                 * term shared by all columns of the tile.
                 */
                __m256i wq[4];
                UNROLL for (int j = 0; j < NR; j++)
                    wq[j] = unpack32(wrow[j] + b * blob + c / 2);
                UNROLL for (int i = 0; i < MR; i++) {
                    __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(qrow[i] + b * bs + c));
                    __m256i corr = _mm256_maddubs_epi16(_mm256_set1_epi8(8), qv);
                    UNROLL for (int j = 0; j < NR; j++) {
                        __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(wq[j], qv), corr);
                        isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_madd_epi16(p, ones));
                    }
                }
                continue;
            }
            __m256i wabs[4], wsgn[4];
            UNROLL for (int j = 0; j < NR; j++) {
                wsgn[j] = _mm256_sub_epi8(unpack32(wrow[j] + b * blob + c / 2), zpv[j]);
                wabs[j] = _mm256_abs_epi8(wsgn[j]);
            }
            UNROLL for (int i = 0; i < MR; i++) {
                __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(qrow[i] + b * bs + c));
                UNROLL for (int j = 0; j < NR; j++) {
                    __m256i p = _mm256_maddubs_epi16(wabs[j], _mm256_sign_epi8(qv, wsgn[j]));
                    isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_madd_epi16(p, ones));
                }
            }
        }
        UNROLL for (int i = 0; i < MR; i++) {
            float sa = sarow[i][b];
            UNROLL for (int j = 0; j < NR; j++)
                acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[i][j]),
                                            _mm256_set1_ps(sa * sbrow[j][b]), acc[i][j]);
        }
    }

    UNROLL for (int i = 0; i < MR; i++)
        UNROLL for (int j = 0; j < NR; j++) {
            float v = krn_avx2_hsum(acc[i][j]);
            if (w->bias)
                v += w->bias[n0 + j];
            a->y[(m0 + i) * a->y_ld + n0 + j] = v;
        }
}

/* block_size 16: one 8-byte weight group per block, done with 128-bit vectors. */
static void i8_bs16(const krn_mmnb_args *a, size_t m, size_t n)
{
    const krn_q4_weights *w = &a->w;
    const size_t kb = w->k_blocks;
    void *qa = (void *)a->qa;
    const int8_t *q = krn_qa_q(qa, m, kb, 16);
    const float *sa = krn_qa_scale(qa, m, kb, 16);
    const uint8_t *wr = w->b_data + n * kb * 8;
    const __m128i mask = _mm_set1_epi8(0x0F), ones = _mm_set1_epi16(1);
    __m128 acc = _mm_setzero_ps();
    for (size_t b = 0; b < kb; b++) {
        __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)(wr + b * 8));
        __m128i wv = _mm_and_si128(_mm_unpacklo_epi64(x, _mm_srli_epi16(x, 4)), mask);
        __m128i ws = _mm_sub_epi8(wv, _mm_set1_epi8((char)krn_q4_zp(w, n, b)));
        __m128i qv = _mm_loadu_si128((const __m128i *)(const void *)(q + b * 16));
        __m128i p = _mm_madd_epi16(_mm_maddubs_epi16(_mm_abs_epi8(ws), _mm_sign_epi8(qv, ws)), ones);
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(p), _mm_set1_ps(sa[b] * w->scales[n * kb + b]), acc);
    }
    acc = _mm_add_ps(acc, _mm_movehl_ps(acc, acc));
    acc = _mm_add_ss(acc, _mm_movehdup_ps(acc));
    float v = _mm_cvtss_f32(acc);
    if (w->bias)
        v += w->bias[n];
    a->y[m * a->y_ld + n] = v;
}

/* The column and row tiling for one (BS32, ZP) specialization. */
INLINE void i8_cols(const krn_mmnb_args *a, size_t n_begin, size_t n_end, const bool BS32, const bool ZP)
{
    size_t n = n_begin;
    if (a->m == 1) {
        for (; n + 4 <= n_end; n += 4)
            i8_tile(a, 0, n, 1, 4, BS32, ZP);
        for (; n < n_end; n++)
            i8_tile(a, 0, n, 1, 1, BS32, ZP);
        return;
    }
    /* A column pair's weights stay in L1 while every row tile passes over them. */
    for (; n + 2 <= n_end; n += 2) {
        size_t m = 0;
        for (; m + 4 <= a->m; m += 4)
            i8_tile(a, m, n, 4, 2, BS32, ZP);
        for (; m < a->m; m++)
            i8_tile(a, m, n, 1, 2, BS32, ZP);
    }
    for (; n < n_end; n++) {
        size_t m = 0;
        for (; m + 4 <= a->m; m += 4)
            i8_tile(a, m, n, 4, 1, BS32, ZP);
        for (; m < a->m; m++)
            i8_tile(a, m, n, 1, 1, BS32, ZP);
    }
}

void krn_avx2_mmnb_i8(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    if (a->w.block_size == 16) {
        for (size_t m = 0; m < a->m; m++)
            for (size_t n = n_begin; n < n_end; n++)
                i8_bs16(a, m, n);
    } else if (a->w.block_size == 32) {
        if (a->w.zero_pts)
            i8_cols(a, n_begin, n_end, true, true);
        else
            i8_cols(a, n_begin, n_end, true, false);
    } else {
        i8_cols(a, n_begin, n_end, false, a->w.zero_pts != NULL);
    }
}

/* ------------------------------------------------------------------------- */
/* fp32 mode                                                                   */

/* 16 weights (8 bytes) in natural k order, minus zero point, as two fp32 vectors. */
INLINE void deq16(const uint8_t *p, __m128i zpv, __m256 *lo, __m256 *hi)
{
    __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)p);
    __m128i v = _mm_and_si128(_mm_unpacklo_epi8(x, _mm_srli_epi16(x, 4)), _mm_set1_epi8(0x0F));
    v = _mm_sub_epi8(v, zpv);
    *lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    *hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
}

/*
 * Full blocks are vectorized with W = (q - zp) * scale formed exactly as the
 * reference forms it; a partial last block (k not a multiple of block_size)
 * is summed in scalar code so nothing past k is read from A.
 */
INLINE void f32_tile(const krn_mmnb_args *a, size_t m0, size_t n0, const int MR, const int NR)
{
    const krn_q4_weights *w = &a->w;
    const size_t bs = w->block_size, kb = w->k_blocks, blob = bs / 2;
    const size_t kb_full = w->k / bs;
    const float *arow[4];
    const uint8_t *wrow[4];
    const float *sbrow[4];
    __m256 acc[4][4][2];
    float tail[4][4];
    __m128i zpv[4];

    UNROLL for (int i = 0; i < MR; i++) {
        arow[i] = a->a + (m0 + i) * a->a_ld;
        UNROLL for (int j = 0; j < NR; j++) {
            acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
            tail[i][j] = 0.0f;
        }
    }
    UNROLL for (int j = 0; j < NR; j++) {
        wrow[j] = w->b_data + (n0 + j) * kb * blob;
        sbrow[j] = w->scales + (n0 + j) * kb;
        zpv[j] = _mm_set1_epi8(8);
    }

    for (size_t b = 0; b < kb_full; b++) {
        __m256 s[4];
        UNROLL for (int j = 0; j < NR; j++) {
            s[j] = _mm256_set1_ps(sbrow[j][b]);
            if (w->zero_pts)
                zpv[j] = _mm_set1_epi8((char)krn_q4_zp(w, n0 + j, b));
        }
        for (size_t c = 0; c < bs; c += 16) {
            __m256 wl[4], wh[4];
            UNROLL for (int j = 0; j < NR; j++) {
                deq16(wrow[j] + b * blob + c / 2, zpv[j], &wl[j], &wh[j]);
                wl[j] = _mm256_mul_ps(wl[j], s[j]);
                wh[j] = _mm256_mul_ps(wh[j], s[j]);
            }
            UNROLL for (int i = 0; i < MR; i++) {
                __m256 al = _mm256_loadu_ps(arow[i] + b * bs + c);
                __m256 ah = _mm256_loadu_ps(arow[i] + b * bs + c + 8);
                UNROLL for (int j = 0; j < NR; j++) {
                    acc[i][j][0] = _mm256_fmadd_ps(al, wl[j], acc[i][j][0]);
                    acc[i][j][1] = _mm256_fmadd_ps(ah, wh[j], acc[i][j][1]);
                }
            }
        }
    }
    if (kb_full < kb) {
        size_t b = kb_full;
        UNROLL for (int j = 0; j < NR; j++) {
            float sc = sbrow[j][b];
            int zp = krn_q4_zp(w, n0 + j, b);
            for (size_t k = b * bs; k < w->k; k++) {
                float wk = (float)((int)krn_q4_get(w, n0 + j, k) - zp) * sc;
                UNROLL for (int i = 0; i < MR; i++)
                    tail[i][j] += arow[i][k] * wk;
            }
        }
    }

    UNROLL for (int i = 0; i < MR; i++)
        UNROLL for (int j = 0; j < NR; j++) {
            float v = krn_avx2_hsum(_mm256_add_ps(acc[i][j][0], acc[i][j][1])) + tail[i][j];
            if (w->bias)
                v += w->bias[n0 + j];
            a->y[(m0 + i) * a->y_ld + n0 + j] = v;
        }
}

void krn_avx2_mmnb_f32(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    size_t n = n_begin;
    if (a->m == 1) {
        for (; n + 4 <= n_end; n += 4)
            f32_tile(a, 0, n, 1, 4);
        for (; n < n_end; n++)
            f32_tile(a, 0, n, 1, 1);
        return;
    }
    for (; n < n_end; n++) {
        size_t m = 0;
        for (; m + 4 <= a->m; m += 4)
            f32_tile(a, m, n, 4, 1);
        for (; m < a->m; m++)
            f32_tile(a, m, n, 1, 1);
    }
}
