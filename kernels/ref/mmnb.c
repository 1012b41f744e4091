/*
 * ref/mmnb: scalar reference MatMulNBits (4-bit) and its activation quantizer.
 *
 * These define the numbers every SIMD level is tested against, so they follow
 * the op's definition as literally as possible: dequantize then multiply in
 * fp32 for accuracy levels 0/1, and the int8-activation scheme of ONNX Runtime's
 * accuracy level 4. Called through the dispatch table by compute workers, each
 * with its own column (or row) range.
 */
#include <math.h>
#include <string.h>

#include "kernels/krn_internal.h"

/* Quantizes one row of k values into the shared layout (see krn_internal.h). */
static void quant_row(const float *a, size_t k, size_t block_size, size_t k_blocks,
                      int8_t *q, float *scale, int32_t *qsum, float *zp8_sum)
{
    for (size_t b = 0; b < k_blocks; b++) {
        size_t k0 = b * block_size;
        size_t len = k - k0 < block_size ? k - k0 : block_size;
        int8_t *qb = q + k0;
        float amax = 0.0f;
        for (size_t j = 0; j < len; j++)
            amax = fmaxf(amax, fabsf(a[k0 + j]));
        memset(qb, 0, block_size);
        /* Pre-scale tiny blocks so 127 / amax stays finite (exact power of two). */
        float pre = amax < KRN_QA_TINY ? KRN_QA_UPSCALE : 1.0f;
        float inv = amax != 0.0f ? 127.0f / (amax * pre) : 0.0f;
        int32_t sum = 0;
        for (size_t j = 0; j < len; j++) {
            float v = krn_round_half_even((a[k0 + j] * pre) * inv);
            v = fminf(fmaxf(v, -127.0f), 127.0f);
            qb[krn_qa_slot(j, block_size)] = (int8_t)v;
            sum += (int32_t)v;
        }
        scale[b] = amax / 127.0f;
        qsum[b] = sum;
        zp8_sum[b] = 8.0f * (scale[b] * (float)sum); /* times 8 is exact */
    }
}

void krn_ref_quant_row(const float *a, size_t k, size_t bs, void *qa, size_t m)
{
    size_t kb = (k + bs - 1) / bs;
    quant_row(a, k, bs, kb, krn_qa_q(qa, m, kb, bs), krn_qa_scale(qa, m, kb, bs), krn_qa_qsum(qa, m, kb, bs),
              krn_qa_zp8_sum(qa, m, kb, bs));
    krn_qa_fill_ext(qa, m, kb, bs);
}

void krn_ref_quant_a8(const krn_quant_args *args, size_t m_begin, size_t m_end)
{
    for (size_t m = m_begin; m < m_end; m++)
        krn_ref_quant_row(args->a + m * args->a_ld, args->k, args->block_size, args->qa, m);
}

/*
 * fp32 mode: W[n][k] = (q - zp) * scale as a float, y = sum a*W accumulated in
 * order of k in one fp32 accumulator, plus bias.
 */
void krn_ref_mmnb_f32(const krn_mmnb_args *args, size_t n_begin, size_t n_end)
{
    const krn_q4_weights *w = &args->w;
    for (size_t m = 0; m < args->m; m++) {
        const float *a = args->a + m * args->a_ld;
        for (size_t n = n_begin; n < n_end; n++) {
            float acc = 0.0f;
            for (size_t b = 0; b < w->k_blocks; b++) {
                float s = w->scales[n * w->k_blocks + b];
                int zp = krn_q4_zp(w, n, b);
                size_t k_end = (b + 1) * w->block_size < w->k ? (b + 1) * w->block_size : w->k;
                for (size_t k = b * w->block_size; k < k_end; k++) {
                    float wk = (float)((int)krn_q4_get(w, n, k) - zp) * s;
                    acc += a[k] * wk;
                }
            }
            if (w->bias)
                acc += w->bias[n];
            args->y[m * args->y_ld + n] = acc;
        }
    }
}

/*
 * int8 mode: per block the exact int32 dot of the quantized activations with
 * (q - zp), scaled by sA * scale (a float product) and accumulated in fp32 in
 * block order. Elements past k are zero in qa, so the weights' padding drops out.
 */
void krn_ref_mmnb_i8(const krn_mmnb_args *args, size_t n_begin, size_t n_end)
{
    const krn_q4_weights *w = &args->w;
    size_t bs = w->block_size, kb = w->k_blocks;
    void *qa = (void *)args->qa; /* the accessors are shared with the writer; read only here */
    for (size_t m = 0; m < args->m; m++) {
        const int8_t *q = krn_qa_q(qa, m, kb, bs);
        const float *sa = krn_qa_scale(qa, m, kb, bs);
        for (size_t n = n_begin; n < n_end; n++) {
            float acc = 0.0f;
            for (size_t b = 0; b < kb; b++) {
                int zp = krn_q4_zp(w, n, b);
                size_t k_end = (b + 1) * bs < w->k ? (b + 1) * bs : w->k;
                int32_t isum = 0;
                for (size_t k = b * bs; k < k_end; k++)
                    isum += (int32_t)q[b * bs + krn_qa_slot(k - b * bs, bs)] *
                            ((int32_t)krn_q4_get(w, n, k) - zp);
                acc += (float)isum * (sa[b] * w->scales[n * kb + b]);
            }
            if (w->bias)
                acc += w->bias[n];
            args->y[m * args->y_ld + n] = acc;
        }
    }
}
