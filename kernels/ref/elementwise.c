/*
 * ref/elementwise: scalar Sigmoid, Mul, Add, fused SiLU(gate) * up, and the
 * fp32 row gather used for the embedding lookup. Called by compute workers
 * with an element (or index) range.
 */
#include <string.h>

#include "kernels/krn_internal.h"

void krn_ref_sigmoid(const krn_ew_args *a, size_t i_begin, size_t i_end)
{
    for (size_t i = i_begin; i < i_end; i++)
        a->y[i] = krn_sigmoidf(a->a[i]);
}

void krn_ref_mul(const krn_ew_args *a, size_t i_begin, size_t i_end)
{
    for (size_t i = i_begin; i < i_end; i++)
        a->y[i] = a->a[i] * a->b[i];
}

void krn_ref_add(const krn_ew_args *a, size_t i_begin, size_t i_end)
{
    for (size_t i = i_begin; i < i_end; i++)
        a->y[i] = a->a[i] + a->b[i];
}

/* Rounded like the unfused graph: t = g * sigmoid(g), then t * up. */
void krn_ref_silu_mul(const krn_ew_args *a, size_t i_begin, size_t i_end)
{
    for (size_t i = i_begin; i < i_end; i++) {
        float g = a->a[i];
        float t = g * krn_sigmoidf(g);
        a->y[i] = t * a->b[i];
    }
}

int krn_ref_gather(const krn_gather_args *a, size_t i_begin, size_t i_end)
{
    int64_t rows = (int64_t)a->n_rows;
    for (size_t i = i_begin; i < i_end; i++) {
        int64_t ix = a->idx[i];
        if (ix < -rows || ix >= rows)
            return KRN_ERANGE;
        if (ix < 0)
            ix += rows;
        memcpy(a->y + i * a->y_ld, a->table + (size_t)ix * a->table_ld, a->n_cols * sizeof(float));
    }
    return KRN_OK;
}
