/*
 * ref/rotary: scalar rotary position embedding from cos/sin cache rows, in
 * the half-split form Qwen3's GroupQueryAttention uses and the interleaved
 * form for completeness, plus the KV-cache row store (fp32 copy, fp16
 * conversion or q8 quantization). Called by compute workers with a (token, head) range; the
 * rotary output may be the input itself or a KV-cache row of any type.
 */
#include "kernels/krn_internal.h"

static void krn_ref_q8_row(const float *x, size_t n, void *row) { krn_q8_row(x, n, row); }

void krn_ref_rotary(const krn_rotary_args *args, size_t i_begin, size_t i_end)
{
    if (args->y_type == KRN_KV_Q8) {
        krn_rotary_into_q8(krn_ref_rotary, krn_ref_q8_row, args, i_begin, i_end);
        return;
    }
    size_t half = args->rot_dim / 2;
    bool f16 = args->y_type == KRN_KV_F16;
    for (size_t i = i_begin; i < i_end; i++) {
        size_t t = i / args->n_heads, h = i % args->n_heads;
        const float *x = args->x + t * args->x_tok_stride + h * args->x_head_stride;
        size_t yo = t * args->y_tok_stride + h * args->y_head_stride;
        float *y = f16 ? NULL : (float *)args->y + yo;
        uint16_t *y16 = f16 ? (uint16_t *)args->y + yo : NULL;
        const float *c = args->cos_cache + (size_t)args->pos[t] * args->cache_ld;
        const float *s = args->sin_cache + (size_t)args->pos[t] * args->cache_ld;
        /* Both inputs of a pair are read before either output is written: y may be x. */
        for (size_t j = 0; j < half; j++) {
            size_t i0 = args->interleaved ? 2 * j : j;
            size_t i1 = args->interleaved ? 2 * j + 1 : j + half;
            float x0 = x[i0], x1 = x[i1];
            float o0 = x0 * c[j] - x1 * s[j], o1 = x1 * c[j] + x0 * s[j];
            if (f16) {
                y16[i0] = krn_f32_to_f16(o0);
                y16[i1] = krn_f32_to_f16(o1);
            } else {
                y[i0] = o0;
                y[i1] = o1;
            }
        }
        if (f16)
            for (size_t j = args->rot_dim; j < args->head_dim; j++)
                y16[j] = krn_f32_to_f16(x[j]);
        else if (y != x)
            for (size_t j = args->rot_dim; j < args->head_dim; j++)
                y[j] = x[j];
    }
}

void krn_ref_kv_store(const krn_rows_args *args, size_t i_begin, size_t i_end)
{
    for (size_t i = i_begin; i < i_end; i++) {
        size_t t = i / args->n_heads, h = i % args->n_heads;
        const float *x = args->x + t * args->x_tok_stride + h * args->x_head_stride;
        size_t yo = t * args->y_tok_stride + h * args->y_head_stride;
        krn_kv_row_from_f32(args->y_type, x, args->n, (uint8_t *)args->y + yo * krn_kv_elem_bytes(args->y_type));
    }
}
