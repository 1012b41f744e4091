/*
 * ref/rotary: scalar rotary position embedding from cos/sin cache rows, in
 * the half-split form Qwen3's GroupQueryAttention uses and the interleaved
 * form for completeness. Called by compute workers with a (token, head) range;
 * the output may be the input itself or a KV-cache row.
 */
#include "kernels/krn_internal.h"

void krn_ref_rotary(const krn_rotary_args *args, size_t i_begin, size_t i_end)
{
    size_t half = args->rot_dim / 2;
    for (size_t i = i_begin; i < i_end; i++) {
        size_t t = i / args->n_heads, h = i % args->n_heads;
        const float *x = args->x + t * args->x_tok_stride + h * args->x_head_stride;
        float *y = args->y + t * args->y_tok_stride + h * args->y_head_stride;
        const float *c = args->cos_cache + (size_t)args->pos[t] * args->cache_ld;
        const float *s = args->sin_cache + (size_t)args->pos[t] * args->cache_ld;
        /* Both inputs of a pair are read before either output is written: y may be x. */
        for (size_t j = 0; j < half; j++) {
            size_t i0 = args->interleaved ? 2 * j : j;
            size_t i1 = args->interleaved ? 2 * j + 1 : j + half;
            float x0 = x[i0], x1 = x[i1];
            y[i0] = x0 * c[j] - x1 * s[j];
            y[i1] = x1 * c[j] + x0 * s[j];
        }
        if (y != x)
            for (size_t j = args->rot_dim; j < args->head_dim; j++)
                y[j] = x[j];
    }
}
