/*
 * avx2/attn: AVX2/FMA GroupQueryAttention core for one sequence (batch 1).
 *
 * Single pass over the keys with an online softmax: keys are scored in chunks,
 * and when a chunk raises a head's running maximum the accumulated output and
 * denominator are rescaled by exp(old max - new max). Query heads that share a
 * kv head and a token (up to GMAX of them, consecutive items of the range) are
 * processed together, so each K and V row is fetched from memory once for the
 * whole group; with long contexts that halves the cache traffic of Qwen3's
 * 2:1 grouping. Needs no scratch beyond a few KiB of stack.
 *
 * Numerics versus the reference: the same scores up to summation order, the
 * vector exp (~2 ulp), and normalization by the total at the end instead of
 * per weight. Called by compute workers with an item range. Compiled with the
 * avx2 flags.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/avx2/simd.h"
#include "kernels/krn_internal.h"

#define GMAX 8  /* query heads sharing a kv head processed together */
#define CHUNK 64 /* keys scored per online-softmax step */

static inline float dot(const float *q, const float *k, size_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    size_t d = 0;
    for (; d + 16 <= n; d += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d + 8), _mm256_loadu_ps(k + d + 8), s1);
    }
    for (; d + 8 <= n; d += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(k + d), s0);
    float s = krn_avx2_hsum(_mm256_add_ps(s0, s1));
    for (; d < n; d++)
        s += q[d] * k[d];
    return s;
}

/* acc = acc * c + p * v over n floats (c = 1 skips the rescale). */
static inline void axpy(float *acc, float p, const float *v, size_t n)
{
    __m256 vp = _mm256_set1_ps(p);
    size_t d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(vp, _mm256_loadu_ps(v + d), _mm256_loadu_ps(acc + d)));
    for (; d < n; d++)
        acc[d] += p * v[d];
}

static inline void scale_row(float *acc, float c, size_t n)
{
    __m256 vc = _mm256_set1_ps(c);
    size_t d = 0;
    for (; d + 8 <= n; d += 8)
        _mm256_storeu_ps(acc + d, _mm256_mul_ps(vc, _mm256_loadu_ps(acc + d)));
    for (; d < n; d++)
        acc[d] *= c;
}

/* Token s, query heads [h0, h0 + nh), all sharing one kv head. */
static void attend(const krn_gqa_args *a, size_t s, size_t h0, size_t nh)
{
    const size_t hd = a->head_dim, group = a->n_heads / a->n_kv_heads;
    const float *kc = a->k_cache + (h0 / group) * a->kv_head_stride;
    const float *vc = a->v_cache + (h0 / group) * a->kv_head_stride;
    float acc[GMAX][KRN_MAX_HEAD_DIM] __attribute__((aligned(32)));
    float sc[GMAX][CHUNK] __attribute__((aligned(32)));
    float mx[GMAX], den[GMAX];
    const float *q[GMAX];

    size_t len = a->past + s + 1, j0 = 0;
    if (a->local_window >= 0 && len > (size_t)a->local_window)
        j0 = len - (size_t)a->local_window;
    for (size_t r = 0; r < nh; r++) {
        q[r] = a->q + s * a->q_ld + (h0 + r) * hd;
        memset(acc[r], 0, hd * sizeof(float));
        mx[r] = -INFINITY;
        den[r] = 0.0f;
    }

    for (size_t jc = j0; jc < len; jc += CHUNK) {
        size_t cn = len - jc < CHUNK ? len - jc : CHUNK;
        size_t cn8 = (cn + 7) & ~(size_t)7;
        for (size_t jj = 0; jj < cn; jj++) {
            const float *k = kc + (jc + jj) * a->kv_tok_stride;
            for (size_t r = 0; r < nh; r++) {
                float v = a->scale * dot(q[r], k, hd);
                if (a->softcap > 0.0f)
                    v = a->softcap * tanhf(v / a->softcap);
                sc[r][jj] = v;
            }
        }
        for (size_t r = 0; r < nh; r++) {
            /* Padding lanes score -inf: they take no part in the max and exp to 0. */
            for (size_t jj = cn; jj < cn8; jj++)
                sc[r][jj] = -INFINITY;
            __m256 vm = _mm256_set1_ps(-INFINITY);
            for (size_t jj = 0; jj < cn8; jj += 8)
                vm = _mm256_max_ps(vm, _mm256_load_ps(&sc[r][jj]));
            float m_new = fmaxf(mx[r], krn_avx2_hmax(vm));
            if (m_new > mx[r]) {
                if (den[r] > 0.0f) {
                    float c = expf(mx[r] - m_new);
                    scale_row(acc[r], c, hd);
                    den[r] *= c;
                }
                mx[r] = m_new;
            }
            __m256 vmx = _mm256_set1_ps(mx[r]), vsum = _mm256_setzero_ps();
            for (size_t jj = 0; jj < cn8; jj += 8) {
                __m256 p = krn_avx2_vexp(_mm256_sub_ps(_mm256_load_ps(&sc[r][jj]), vmx));
                _mm256_store_ps(&sc[r][jj], p);
                vsum = _mm256_add_ps(vsum, p);
            }
            den[r] += krn_avx2_hsum(vsum);
        }
        for (size_t jj = 0; jj < cn; jj++) {
            const float *v = vc + (jc + jj) * a->kv_tok_stride;
            for (size_t r = 0; r < nh; r++)
                axpy(acc[r], sc[r][jj], v, hd);
        }
    }

    for (size_t r = 0; r < nh; r++) {
        float *out = a->out + s * a->out_ld + (h0 + r) * hd;
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

void krn_avx2_gqa(const krn_gqa_args *a, size_t i_begin, size_t i_end)
{
    size_t group = a->n_heads / a->n_kv_heads;
    for (size_t i = i_begin; i < i_end;) {
        size_t s = i / a->n_heads, h = i % a->n_heads;
        size_t group_end = (h / group + 1) * group; /* first head of the next kv head */
        size_t nh = group_end - h;
        if (nh > i_end - i)
            nh = i_end - i;
        if (nh > GMAX)
            nh = GMAX;
        attend(a, s, h, nh);
        i += nh;
    }
}
