/*
 * avx512/mmnb: AVX-512 (F/BW/VL) MatMulNBits in both numeric modes. The
 * int8 mode without VNNI comes from avx512/mmnb_i8.h; the fp32 mode is below.
 * Called by compute workers with a column range through the dispatch table,
 * only when krn_init() found AVX-512 F/BW/VL. Compiled with the avx512 flags.
 */
#include <immintrin.h>

#include "kernels/krn_internal.h"

#define KRN_VNNI 0
#define KRN_TGT
#define KRN_I8_FN krn_avx512_mmnb_i8
#include "kernels/avx512/mmnb_i8.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

/* 16 weights (8 bytes) in natural k order, minus zero point, as one fp32 vector. */
INLINE __m512 deq16(const uint8_t *p, int zp)
{
    __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)p);
    __m128i v = _mm_and_si128(_mm_unpacklo_epi8(x, _mm_srli_epi16(x, 4)), _mm_set1_epi8(0x0F));
    v = _mm_sub_epi8(v, _mm_set1_epi8((char)zp));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v));
}

INLINE float hsum(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* As the AVX2 fp32 tile: W = (q - zp) * scale, full blocks vectorized, a partial last block scalar. */
INLINE void f32_tile(const krn_mmnb_args *a, size_t m0, size_t n0, const int MR, const int NR)
{
    const krn_q4_weights *w = &a->w;
    const size_t bs = w->block_size, kb = w->k_blocks, blob = bs / 2, kb_full = w->k / bs;
    const float *arow[4];
    const uint8_t *wrow[4];
    const float *sbrow[4];
    __m512 acc[4][4];
    float tail[4][4];

    UNROLL for (int i = 0; i < MR; i++) {
        arow[i] = a->a + (m0 + i) * a->a_ld;
        UNROLL for (int j = 0; j < NR; j++) {
            acc[i][j] = _mm512_setzero_ps();
            tail[i][j] = 0.0f;
        }
    }
    UNROLL for (int j = 0; j < NR; j++) {
        wrow[j] = w->b_data + (n0 + j) * kb * blob;
        sbrow[j] = w->scales + (n0 + j) * kb;
    }
    for (size_t b = 0; b < kb_full; b++) {
        __m512 s[4];
        int zp[4];
        UNROLL for (int j = 0; j < NR; j++) {
            s[j] = _mm512_set1_ps(sbrow[j][b]);
            zp[j] = krn_q4_zp(w, n0 + j, b);
        }
        for (size_t c = 0; c < bs; c += 16) {
            __m512 wv[4];
            UNROLL for (int j = 0; j < NR; j++)
                wv[j] = _mm512_mul_ps(deq16(wrow[j] + b * blob + c / 2, zp[j]), s[j]);
            UNROLL for (int i = 0; i < MR; i++) {
                __m512 av = _mm512_loadu_ps(arow[i] + b * bs + c);
                UNROLL for (int j = 0; j < NR; j++)
                    acc[i][j] = _mm512_fmadd_ps(av, wv[j], acc[i][j]);
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
            float v = hsum(acc[i][j]) + tail[i][j];
            if (w->bias)
                v += w->bias[n0 + j];
            a->y[(m0 + i) * a->y_ld + n0 + j] = v;
        }
}

void krn_avx512_mmnb_f32(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
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
