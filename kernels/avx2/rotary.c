/*
 * avx2/rotary: AVX2 rotary embedding (half-split form), KV-cache row stores
 * (fp32 copy, F16C conversion to fp16, or q8 rows with the portable
 * quantization's bytes, computed eight values at a time) and the embedding
 * row gather.
 *
 * The rotation uses the reference's operations in the same order (two
 * products, then a difference or sum; no FMA), so its fp32 results are
 * bit-identical to the reference and an fp32 KV cache holds exactly what the
 * scalar path would write. The interleaved form, which no exported Qwen3
 * graph uses, is a scalar loop. fp16 outputs round to nearest even
 * like the reference's portable conversion. Called by compute workers with a
 * (token, head) or row range. Compiled with the avx2 flags.
 */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/avx2/simd.h"
#include "kernels/krn_internal.h"

/*
 * krn_code_row() eight values at a time. Every step is exact or correctly
 * rounded as in the scalar code: the maximum of magnitudes (any order), one
 * IEEE division per value, and VCVTPS2DQ rounds to nearest even as lrintf()
 * does in the default rounding mode. The codes are clamped before the
 * saturating packs, so those never act. The scalar loop took 3-6% of a
 * batch-8 decode step with a q8 cache (the cache rows and the queries'
 * int16 codes).
 */
float krn_avx2_code_row(const float *x, size_t n, long limit, int8_t *c8, int16_t *c16)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 fmax = _mm256_set1_ps(FLT_MAX);
    __m256 va = _mm256_setzero_ps();
    __m256 vfin = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    size_t d = 0;
    for (; d + 8 <= n; d += 8) {
        __m256 m = _mm256_and_ps(_mm256_loadu_ps(x + d), absmask);
        vfin = _mm256_and_ps(vfin, _mm256_cmp_ps(m, fmax, _CMP_LE_OQ));
        va = _mm256_max_ps(m, va);
    }
    float a = krn_avx2_hmax(va);
    bool finite = _mm256_movemask_ps(vfin) == 0xFF;
    for (size_t t = d; t < n; t++) {
        float m = fabsf(x[t]);
        finite &= m <= FLT_MAX;
        a = m > a ? m : a;
    }
    float s = finite ? a / (float)limit : NAN;
    if (!(finite && s > 0.0f)) {
        krn_code_zero(n, c8, c16);
        return s;
    }
    const __m256 vs = _mm256_set1_ps(s);
    const __m256i hi = _mm256_set1_epi32((int)limit), lo = _mm256_set1_epi32((int)-limit);
    for (d = 0; d + 8 <= n; d += 8) {
        __m256i c = _mm256_cvtps_epi32(_mm256_div_ps(_mm256_loadu_ps(x + d), vs));
        c = _mm256_max_epi32(_mm256_min_epi32(c, hi), lo);
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
        if (c8)
            _mm_storel_epi64((__m128i *)(void *)(c8 + d), _mm_packs_epi16(w, w));
        else
            _mm_storeu_si128((__m128i *)(void *)(c16 + d), w);
    }
    krn_code_values(x, d, n, s, limit, c8, c16);
    return s;
}

void krn_avx2_q8_row(const float *x, size_t n, void *row)
{
    float s = krn_avx2_code_row(x, n, 127, row, NULL);
    memcpy((int8_t *)row + n, &s, sizeof s);
}

/* 8 floats to y (fp32) or to 8 halves. */
static inline void store8(void *y, size_t off, __m256 v, bool f16)
{
    if (f16)
        _mm_storeu_si128((__m128i *)(void *)((uint16_t *)y + off), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    else
        _mm256_storeu_ps((float *)y + off, v);
}

static inline void store1(void *y, size_t off, float v, bool f16)
{
    if (f16)
        ((uint16_t *)y)[off] = krn_f32_to_f16(v);
    else
        ((float *)y)[off] = v;
}

void krn_avx2_rotary(const krn_rotary_args *args, size_t i_begin, size_t i_end)
{
    if (args->y_type == KRN_KV_Q8) {
        krn_rotary_into_q8(krn_avx2_rotary, krn_avx2_q8_row, args, i_begin, i_end);
        return;
    }
    const size_t half = args->rot_dim / 2;
    const bool f16 = args->y_type == KRN_KV_F16;
    for (size_t i = i_begin; i < i_end; i++) {
        size_t t = i / args->n_heads, h = i % args->n_heads;
        const float *x = args->x + t * args->x_tok_stride + h * args->x_head_stride;
        size_t yo = t * args->y_tok_stride + h * args->y_head_stride;
        const float *c = args->cos_cache + (size_t)args->pos[t] * args->cache_ld;
        const float *s = args->sin_cache + (size_t)args->pos[t] * args->cache_ld;
        size_t j = 0;
        if (args->interleaved) {
            for (; j < half; j++) {
                float x0 = x[2 * j], x1 = x[2 * j + 1];
                store1(args->y, yo + 2 * j, x0 * c[j] - x1 * s[j], f16);
                store1(args->y, yo + 2 * j + 1, x1 * c[j] + x0 * s[j], f16);
            }
            j = half; /* the vector loop below has nothing left to do */
        }
        /* Both halves are loaded before either is stored: y may be x. */
        for (; !args->interleaved && j + 8 <= half; j += 8) {
            __m256 x0 = _mm256_loadu_ps(x + j), x1 = _mm256_loadu_ps(x + half + j);
            __m256 cv = _mm256_loadu_ps(c + j), sv = _mm256_loadu_ps(s + j);
            __m256 o0 = _mm256_sub_ps(_mm256_mul_ps(x0, cv), _mm256_mul_ps(x1, sv));
            __m256 o1 = _mm256_add_ps(_mm256_mul_ps(x1, cv), _mm256_mul_ps(x0, sv));
            store8(args->y, yo + j, o0, f16);
            store8(args->y, yo + half + j, o1, f16);
        }
        for (; !args->interleaved && j < half; j++) {
            float x0 = x[j], x1 = x[j + half];
            store1(args->y, yo + j, x0 * c[j] - x1 * s[j], f16);
            store1(args->y, yo + j + half, x1 * c[j] + x0 * s[j], f16);
        }
        if (f16 || (const void *)((float *)args->y + yo) != (const void *)x)
            for (j = args->rot_dim; j < args->head_dim; j++)
                store1(args->y, yo + j, x[j], f16);
    }
}

void krn_avx2_kv_store(const krn_rows_args *args, size_t i_begin, size_t i_end)
{
    const bool f16 = args->y_type == KRN_KV_F16;
    for (size_t i = i_begin; i < i_end; i++) {
        size_t t = i / args->n_heads, h = i % args->n_heads;
        const float *x = args->x + t * args->x_tok_stride + h * args->x_head_stride;
        size_t yo = t * args->y_tok_stride + h * args->y_head_stride;
        if (args->y_type == KRN_KV_Q8) {
            krn_avx2_q8_row(x, args->n, (int8_t *)args->y + yo);
            continue;
        }
        if (!f16) {
            memcpy((float *)args->y + yo, x, args->n * sizeof(float));
            continue;
        }
        size_t j = 0;
        for (; j + 8 <= args->n; j += 8)
            store8(args->y, yo + j, _mm256_loadu_ps(x + j), true);
        for (; j < args->n; j++)
            store1(args->y, yo + j, x[j], true);
    }
}

int krn_avx2_gather(const krn_gather_args *a, size_t i_begin, size_t i_end)
{
    int64_t rows = (int64_t)a->n_rows;
    for (size_t i = i_begin; i < i_end; i++) {
        int64_t ix = a->idx[i];
        if (ix < -rows || ix >= rows)
            return KRN_ERANGE;
        if (ix < 0)
            ix += rows;
        const float *src = a->table + (size_t)ix * a->table_ld;
        float *dst = a->y + i * a->y_ld;
        size_t j = 0;
        for (; j + 32 <= a->n_cols; j += 32) {
            __m256 v0 = _mm256_loadu_ps(src + j), v1 = _mm256_loadu_ps(src + j + 8);
            __m256 v2 = _mm256_loadu_ps(src + j + 16), v3 = _mm256_loadu_ps(src + j + 24);
            _mm256_storeu_ps(dst + j, v0);
            _mm256_storeu_ps(dst + j + 8, v1);
            _mm256_storeu_ps(dst + j + 16, v2);
            _mm256_storeu_ps(dst + j + 24, v3);
        }
        memcpy(dst + j, src + j, (a->n_cols - j) * sizeof(float));
    }
    return KRN_OK;
}
