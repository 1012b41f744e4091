/*
 * avx2/elementwise: AVX2/FMA Sigmoid, Mul, Add and fused SiLU(gate) * up.
 *
 * Mul and Add are bit-identical to the reference; Sigmoid and SiLU differ
 * from it only by the vector exp (a few ulp). Tails use masked loads and
 * stores, so any element range is valid. Called by compute workers with an
 * element range. Compiled with the avx2 flags.
 */
#include <immintrin.h>

#include "kernels/avx2/simd.h"
#include "kernels/krn_internal.h"

/* Applies OP to lanes [i, i + cnt) of a (and b), storing into y. */
#define EW_LOOP(args, i_begin, i_end, OP)                                                 \
    do {                                                                                  \
        const float *pa = (args)->a, *pb = (args)->b;                                     \
        float *py = (args)->y;                                                            \
        size_t i = (i_begin);                                                             \
        for (; i + 8 <= (i_end); i += 8) {                                                \
            __m256 va = _mm256_loadu_ps(pa + i);                                          \
            __m256 vb = pb ? _mm256_loadu_ps(pb + i) : va;                                \
            _mm256_storeu_ps(py + i, OP(va, vb));                                         \
        }                                                                                 \
        if (i < (i_end)) {                                                                \
            __m256i mask = krn_avx2_tail_mask((i_end) - i);                               \
            __m256 va = _mm256_maskload_ps(pa + i, mask);                                 \
            __m256 vb = pb ? _mm256_maskload_ps(pb + i, mask) : va;                       \
            _mm256_maskstore_ps(py + i, mask, OP(va, vb));                                \
        }                                                                                 \
    } while (0)

static inline __m256 op_sigmoid(__m256 a, __m256 b)
{
    (void)b;
    return krn_avx2_vsigmoid(a);
}

static inline __m256 op_silu_mul(__m256 g, __m256 up)
{
    return _mm256_mul_ps(_mm256_mul_ps(g, krn_avx2_vsigmoid(g)), up);
}

void krn_avx2_sigmoid(const krn_ew_args *args, size_t i_begin, size_t i_end)
{
    krn_ew_args un = *args;
    un.b = NULL; /* unary: never read b */
    EW_LOOP(&un, i_begin, i_end, op_sigmoid);
}

void krn_avx2_mul(const krn_ew_args *args, size_t i_begin, size_t i_end)
{
    EW_LOOP(args, i_begin, i_end, _mm256_mul_ps);
}

void krn_avx2_add(const krn_ew_args *args, size_t i_begin, size_t i_end)
{
    EW_LOOP(args, i_begin, i_end, _mm256_add_ps);
}

void krn_avx2_silu_mul(const krn_ew_args *args, size_t i_begin, size_t i_end)
{
    EW_LOOP(args, i_begin, i_end, op_silu_mul);
}
