/*
 * avx2/mmf: MatMul with a constant float weight (krn.h, mm_f) in AVX2, the
 * same bits as the reference: every product is rounded and then added (no
 * FMA), into the eight partial sums of k % 8, combined in the fixed order.
 * The [K, N] layout runs eight columns per vector with one accumulator per
 * partial sum; the [N, K] layout (a transposed tied embedding) one column at
 * a time with the partial sums in the lanes. Called by compute workers with a
 * column range. Compiled with the avx2 flags.
 */
#include <immintrin.h>

#include "kernels/avx2/simd.h"
#include "kernels/krn_internal.h"

/* Eight weights of row k from column n: [K, N] layout. */
static inline __m256 load_w8(const krn_mmf_args *a, size_t i)
{
    if (a->w_bf16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)a->w + i));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)a->w + i);
}

static inline __m256 combine8(const __m256 *p)
{
    return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(p[0], p[1]), _mm256_add_ps(p[2], p[3])),
                         _mm256_add_ps(_mm256_add_ps(p[4], p[5]), _mm256_add_ps(p[6], p[7])));
}

/* One column the reference's way (the tails). */
static float column(const krn_mmf_args *args, const float *a, size_t n)
{
    float p[8] = {0};
    for (size_t k = 0; k < args->k; k++) {
        float t = a[k] * krn_mmf_w(args, k, n);
        p[k % 8] += t;
    }
    return krn_mmf_combine(p);
}

static void kn_rows(const krn_mmf_args *args, size_t n_begin, size_t n_end)
{
    size_t K = args->k;
    for (size_t m = 0; m < args->m; m++) {
        const float *a = args->a + m * args->a_ld;
        float *y = args->y + m * args->y_ld;
        size_t n = n_begin;
        for (; n + 8 <= n_end; n += 8) {
            __m256 p[8];
            for (int j = 0; j < 8; j++)
                p[j] = _mm256_setzero_ps();
            size_t k = 0;
            for (; k + 8 <= K; k += 8)
                for (int j = 0; j < 8; j++)
                    p[j] = _mm256_add_ps(p[j], _mm256_mul_ps(_mm256_set1_ps(a[k + j]),
                                                             load_w8(args, (k + j) * args->w_ld + n)));
            for (int j = 0; k < K; k++, j++)
                p[j] = _mm256_add_ps(p[j], _mm256_mul_ps(_mm256_set1_ps(a[k]), load_w8(args, k * args->w_ld + n)));
            _mm256_storeu_ps(y + n, combine8(p));
        }
        for (; n < n_end; n++)
            y[n] = column(args, a, n);
    }
}

static void nk_rows(const krn_mmf_args *args, size_t n_begin, size_t n_end)
{
    size_t K = args->k;
    for (size_t m = 0; m < args->m; m++) {
        const float *a = args->a + m * args->a_ld;
        float *y = args->y + m * args->y_ld;
        for (size_t n = n_begin; n < n_end; n++) {
            __m256 acc = _mm256_setzero_ps();
            size_t k = 0;
            for (; k + 8 <= K; k += 8)
                acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + k), load_w8(args, n * args->w_ld + k)));
            float p[8];
            _mm256_storeu_ps(p, acc);
            for (; k < K; k++) {
                float t = a[k] * krn_mmf_w(args, k, n);
                p[k % 8] += t;
            }
            y[n] = krn_mmf_combine(p);
        }
    }
}

void krn_avx2_mm_f(const krn_mmf_args *args, size_t n_begin, size_t n_end)
{
    if (args->w_nk)
        nk_rows(args, n_begin, n_end);
    else
        kn_rows(args, n_begin, n_end);
}
