/*
 * ref/norm: scalar RMSNorm (SimplifiedLayerNormalization) and SkipRMSNorm
 * (SkipSimplifiedLayerNormalization).
 *
 * Follows ONNX Runtime's CPU kernels: the mean of squares is accumulated in
 * fp32 and the row is divided by sqrt(ms + eps) rather than multiplied by a
 * reciprocal square root. With args->qa set, each output row is also
 * quantized for an int8-mode MatMulNBits (the reference quantizer, so the
 * bytes equal a separate quant_a8 step). Called by compute workers with a row range.
 */
#include <math.h>

#include "kernels/krn_internal.h"

static inline size_t row_off(size_t r, size_t ld, size_t group, size_t n)
{
    return (r / group) * ld + (r % group) * n;
}

void krn_ref_rmsnorm(const krn_norm_args *args, size_t r_begin, size_t r_end)
{
    size_t n = args->n, g = args->group ? args->group : 1;
    for (size_t r = r_begin; r < r_end; r++) {
        const float *x = args->x + row_off(r, args->x_ld, g, n);
        float *y = args->y + row_off(r, args->y_ld, g, n);
        float ss = 0.0f;
        for (size_t i = 0; i < n; i++)
            ss += x[i] * x[i];
        float d = sqrtf(ss / (float)n + args->eps);
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] / d * args->gamma[i];
        if (args->qa)
            krn_ref_quant_row(y, n, args->qa_block, args->qa, r);
    }
}

void krn_ref_skip_rmsnorm(const krn_norm_args *args, size_t r_begin, size_t r_end)
{
    size_t n = args->n, g = args->group ? args->group : 1;
    for (size_t r = r_begin; r < r_end; r++) {
        const float *x = args->x + row_off(r, args->x_ld, g, n);
        const float *skip = args->skip + row_off(r, args->skip_ld, g, n);
        float *y = args->y + row_off(r, args->y_ld, g, n);
        float *sum = args->sum ? args->sum + row_off(r, args->sum_ld, g, n) : NULL;
        /*
         * The sum is needed twice; rather than a scratch row, it is recomputed
         * (bit-identical) in the second pass so y and sum may alias the inputs.
         */
        float ss = 0.0f;
        for (size_t i = 0; i < n; i++) {
            float v = x[i] + skip[i];
            if (args->bias)
                v += args->bias[i];
            ss += v * v;
        }
        float d = sqrtf(ss / (float)n + args->eps);
        for (size_t i = 0; i < n; i++) {
            float v = x[i] + skip[i];
            if (args->bias)
                v += args->bias[i];
            if (sum)
                sum[i] = v;
            y[i] = v / d * args->gamma[i];
        }
        if (args->qa)
            krn_ref_quant_row(y, n, args->qa_block, args->qa, r);
    }
}
