/*
 * avx2/simd: small AVX2/FMA building blocks shared by the avx2 kernels
 * (horizontal sums, a vector exp, the overflow-safe vector sigmoid, masked
 * tail loads). Only for files compiled with the avx2 flags; pure, any thread.
 */
#ifndef QWEN3D_KERNELS_AVX2_SIMD_H
#define QWEN3D_KERNELS_AVX2_SIMD_H

#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

static inline float krn_avx2_hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float krn_avx2_hmax(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lane mask selecting the first n (0..8) lanes, for maskload/maskstore. */
static inline __m256i krn_avx2_tail_mask(size_t n)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx);
}

/*
 * e^x for x <= 88, to about 2 ulp: x = n ln2 + r with |r| <= ln2/2, e^r by its
 * degree-7 Taylor polynomial (truncation below 1e-8 relative), and 2^n added
 * to the exponent bits. Below ln(FLT_MIN) the true result is subnormal and 0
 * is returned; above 88 the result is +inf. The kernels only call it with
 * x <= 0 (softmax after max subtraction, sigmoid of -|x|).
 */
static inline __m256 krn_avx2_vexp(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33654475f), hi = _mm256_set1_ps(88.0f);
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    /* ln2 split so n * ln2_hi is exact for |n| <= 128. */
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n in [-126, 127] and p in [0.7, 1.5) keep the biased exponent in [1, 254]. */
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    __m256 res = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    res = _mm256_and_ps(res, _mm256_cmp_ps(x, lo, _CMP_GE_OQ));
    return _mm256_blendv_ps(res, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
}

/*
 * 1 / (1 + e^-x) without overflow: with e = e^-|x| <= 1, sigmoid is 1 / (1 + e)
 * for x >= 0 and e / (1 + e) for x < 0, the scalar reference's formula.
 */
static inline __m256 krn_avx2_vsigmoid(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 ax = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
    __m256 e = krn_avx2_vexp(_mm256_sub_ps(_mm256_setzero_ps(), ax));
    __m256 num = _mm256_blendv_ps(one, e, _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_div_ps(num, _mm256_add_ps(one, e));
}

#endif
