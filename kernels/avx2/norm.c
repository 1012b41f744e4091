/*
 * avx2/norm: AVX2/FMA RMSNorm and SkipRMSNorm over rows of any length.
 *
 * Same formula and per-element operations as the reference (v / d * gamma with
 * d = sqrt(ms + eps)); only the mean of squares is summed in eight lanes
 * instead of one, which changes it by a few ulp at most. The skip sum is
 * recomputed in the second pass, as in the reference, so outputs may alias
 * inputs. With args->qa set, each output row is then quantized for an
 * int8-mode MatMulNBits by the avx2 quantizer (same bytes as quant_a8).
 * Called by compute workers with a row range. Compiled with the avx2 flags.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/avx2/simd.h"
#include "kernels/krn_internal.h"

static inline size_t row_off(size_t r, size_t ld, size_t group, size_t n)
{
    return (r / group) * ld + (r % group) * n;
}

/* v = x (+ skip) (+ bias) for lanes [i, i + cnt). */
static inline __m256 load_sum(const float *x, const float *skip, const float *bias, size_t i, size_t cnt)
{
    if (cnt == 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (skip)
            v = _mm256_add_ps(v, _mm256_loadu_ps(skip + i));
        if (bias)
            v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
        return v;
    }
    __m256i mask = krn_avx2_tail_mask(cnt);
    __m256 v = _mm256_maskload_ps(x + i, mask);
    if (skip)
        v = _mm256_add_ps(v, _mm256_maskload_ps(skip + i, mask));
    if (bias)
        v = _mm256_add_ps(v, _mm256_maskload_ps(bias + i, mask));
    return v;
}

static void norm_rows(const krn_norm_args *args, size_t r_begin, size_t r_end, bool with_skip)
{
    size_t n = args->n, g = args->group ? args->group : 1;
    const float *bias = with_skip ? args->bias : NULL;
    for (size_t r = r_begin; r < r_end; r++) {
        const float *x = args->x + row_off(r, args->x_ld, g, n);
        const float *skip = with_skip ? args->skip + row_off(r, args->skip_ld, g, n) : NULL;
        float *y = args->y + row_off(r, args->y_ld, g, n);
        float *sum = with_skip && args->sum ? args->sum + row_off(r, args->sum_ld, g, n) : NULL;

        __m256 ss0 = _mm256_setzero_ps(), ss1 = _mm256_setzero_ps();
        size_t i = 0;
        for (; i + 16 <= n; i += 16) {
            __m256 v0 = load_sum(x, skip, bias, i, 8), v1 = load_sum(x, skip, bias, i + 8, 8);
            ss0 = _mm256_fmadd_ps(v0, v0, ss0);
            ss1 = _mm256_fmadd_ps(v1, v1, ss1);
        }
        for (; i < n; i += 8) {
            __m256 v = load_sum(x, skip, bias, i, n - i < 8 ? n - i : 8);
            ss0 = _mm256_fmadd_ps(v, v, ss0);
        }
        float ms = krn_avx2_hsum(_mm256_add_ps(ss0, ss1)) / (float)n;
        __m256 d = _mm256_set1_ps(sqrtf(ms + args->eps));

        for (i = 0; i < n; i += 8) {
            size_t cnt = n - i < 8 ? n - i : 8;
            __m256 v = load_sum(x, skip, bias, i, cnt);
            if (cnt == 8) {
                __m256 out = _mm256_mul_ps(_mm256_div_ps(v, d), _mm256_loadu_ps(args->gamma + i));
                if (sum)
                    _mm256_storeu_ps(sum + i, v);
                _mm256_storeu_ps(y + i, out);
            } else {
                __m256i mask = krn_avx2_tail_mask(cnt);
                __m256 out = _mm256_mul_ps(_mm256_div_ps(v, d), _mm256_maskload_ps(args->gamma + i, mask));
                if (sum)
                    _mm256_maskstore_ps(sum + i, mask, v);
                _mm256_maskstore_ps(y + i, mask, out);
            }
        }
        /* Fused quantization of the finished row, still in L1. */
        if (args->qa)
            krn_avx2_quant_row(y, n, args->qa_block, args->qa, r);
    }
}

void krn_avx2_rmsnorm(const krn_norm_args *args, size_t r_begin, size_t r_end)
{
    norm_rows(args, r_begin, r_end, false);
}

void krn_avx2_skip_rmsnorm(const krn_norm_args *args, size_t r_begin, size_t r_end)
{
    norm_rows(args, r_begin, r_end, true);
}
