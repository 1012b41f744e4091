/*
 * ref/attn: scalar GroupQueryAttention core for one sequence (batch 1).
 *
 * Computes, per query head and new token, the causal (optionally windowed and
 * soft-capped) softmax over the K cache and the weighted sum of the V cache,
 * literally: max pass, sum-of-exponentials pass, then normalized weights times
 * values. Scores are recomputed in each pass instead of stored, so the kernel
 * needs no scratch memory; being the reference, clarity beats speed here.
 * Called by compute workers with a range of (token, head) items.
 */
#include <math.h>
#include <string.h>

#include "kernels/krn_internal.h"

/* Element d of the cache row at element offset ROW (g * kv_head_stride + j * kv_tok_stride). */
static inline float kv_at(const krn_gqa_args *a, const void *base, size_t row, size_t d)
{
    if (a->kv_type == KRN_KV_Q8)
        return (float)((const int8_t *)base)[row + d] * krn_q8_scale((const int8_t *)base + row, a->head_dim);
    if (a->kv_type == KRN_KV_F16)
        return krn_f16_to_f32(((const uint16_t *)base)[row + d]);
    return ((const float *)base)[row + d];
}

/* Query row q; with a q8 cache its int16 codes qc and their scale qs (krn.h). */
static float score(const krn_gqa_args *a, const float *q, const int16_t *qc, float qs, size_t koff)
{
    float s;
    if (a->kv_type == KRN_KV_Q8) {
        const int8_t *k = (const int8_t *)a->k_cache + koff;
        int32_t dot = 0;
        for (size_t d = 0; d < a->head_dim; d++)
            dot += (int32_t)qc[d] * k[d];
        s = krn_q8_key_score(dot, qs, krn_q8_scale(k, a->head_dim), a->scale);
    } else {
        float dot = 0.0f;
        for (size_t d = 0; d < a->head_dim; d++)
            dot += q[d] * kv_at(a, a->k_cache, koff, d);
        s = a->scale * dot;
    }
    if (a->softcap > 0.0f)
        s = a->softcap * tanhf(s / a->softcap);
    return s;
}

void krn_ref_gqa(const krn_gqa_args *a, size_t i_begin, size_t i_end)
{
    size_t group = a->n_heads / a->n_kv_heads, hd = a->head_dim;
    float acc[KRN_MAX_HEAD_DIM];
    int16_t qc[KRN_MAX_HEAD_DIM];
    for (size_t i = i_begin; i < i_end; i++) {
        /* item = (g * seq + s) * group + (h - g * group), see krn.h */
        size_t g = i / (a->seq * group), s = i / group % a->seq, h = g * group + i % group;
        const float *q = a->q + s * a->q_ld + h * hd;
        float qs = a->kv_type == KRN_KV_Q8 ? krn_q16_row(q, hd, qc) : 0.0f;
        size_t kvo = g * a->kv_head_stride;
        float *out = a->out + s * a->out_ld + h * hd;
        size_t len = a->past + s + 1, j0 = 0;
        if (a->local_window >= 0 && len > (size_t)a->local_window)
            j0 = len - (size_t)a->local_window;
        memset(acc, 0, hd * sizeof(float));
        if (j0 < len) {
            float mx = -INFINITY;
            for (size_t j = j0; j < len; j++)
                mx = fmaxf(mx, score(a, q, qc, qs, kvo + j * a->kv_tok_stride));
            float sum = 0.0f;
            for (size_t j = j0; j < len; j++)
                sum += expf(score(a, q, qc, qs, kvo + j * a->kv_tok_stride) - mx);
            for (size_t j = j0; j < len; j++) {
                float p = expf(score(a, q, qc, qs, kvo + j * a->kv_tok_stride) - mx) / sum;
                for (size_t d = 0; d < hd; d++)
                    acc[d] += p * kv_at(a, a->v_cache, kvo + j * a->kv_tok_stride, d);
            }
        }
        memcpy(out, acc, hd * sizeof(float));
    }
}
