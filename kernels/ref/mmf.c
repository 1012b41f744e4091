/*
 * ref/mmf: scalar reference of MatMul with a constant float weight (krn.h,
 * mm_f): the standard contracts' MatMul on BF16 or FP32 weights read in
 * place, in the summation order every level follows. Called by compute
 * workers with a column range.
 */
#include "kernels/krn_internal.h"

void krn_ref_mm_f(const krn_mmf_args *args, size_t n_begin, size_t n_end)
{
    for (size_t m = 0; m < args->m; m++) {
        const float *a = args->a + m * args->a_ld;
        for (size_t n = n_begin; n < n_end; n++) {
            float p[8] = {0};
            for (size_t k = 0; k < args->k; k++) {
                float t = a[k] * krn_mmf_w(args, k, n);
                p[k % 8] += t;
            }
            args->y[m * args->y_ld + n] = krn_mmf_combine(p);
        }
    }
}
