/*
 * krn_internal: what the kernel levels share and nobody else sees.
 *
 * Holds the layout of the quantized-activation buffer (every level reads and
 * writes the same one, so a buffer quantized by one level can feed another's
 * matmul), the exact rounding used for it, nibble access into the ONNX weight
 * layout, and the prototypes of each level's kernels for the dispatch table in
 * krn.c. Included by kernels/ files only; pure helpers, any thread.
 */
#ifndef QWEN3D_KERNELS_KRN_INTERNAL_H
#define QWEN3D_KERNELS_KRN_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/krn.h"

/*
 * Quantized activations, one record per row of A, each record padded to 64
 * bytes so rows start on cache lines when the buffer does:
 *   int8_t  q[k_blocks * block_size]   values, zero past k
 *   float   scale[k_blocks]            sA = amax / 127 of the block
 *   int32_t qsum[k_blocks]             sum of the block's q values
 *   float   scaled_sum[k_blocks]       scale * qsum (as float product)
 * Within each block the q values are stored in chunks of min(block_size, 32)
 * logical elements, each chunk holding its even-indexed elements first and then
 * its odd-indexed ones. That is the order of the low nibbles and then the high
 * nibbles of the chunk's 16 weight bytes, so SIMD code pairs a weight vector with
 * activations without shuffling; the dot product itself is order-free.
 */
static inline size_t krn_qa_row_bytes(size_t k_blocks, size_t block_size)
{
    size_t bytes = k_blocks * block_size + 3 * 4 * k_blocks;
    return (bytes + 63) & ~(size_t)63;
}

static inline int8_t *krn_qa_q(void *qa, size_t row, size_t k_blocks, size_t block_size)
{
    return (int8_t *)qa + row * krn_qa_row_bytes(k_blocks, block_size);
}

static inline float *krn_qa_scale(void *qa, size_t row, size_t k_blocks, size_t block_size)
{
    return (float *)(void *)(krn_qa_q(qa, row, k_blocks, block_size) + k_blocks * block_size);
}

static inline int32_t *krn_qa_qsum(void *qa, size_t row, size_t k_blocks, size_t block_size)
{
    return (int32_t *)(void *)(krn_qa_scale(qa, row, k_blocks, block_size) + k_blocks);
}

static inline float *krn_qa_scaled_sum(void *qa, size_t row, size_t k_blocks, size_t block_size)
{
    return (float *)(void *)(krn_qa_qsum(qa, row, k_blocks, block_size) + k_blocks);
}

/* Storage slot of logical element j (0 <= j < block_size) inside its block. */
static inline size_t krn_qa_slot(size_t j, size_t block_size)
{
    size_t chunk = block_size < 32 ? block_size : 32;
    size_t base = j & ~(chunk - 1), r = j & (chunk - 1);
    return base + ((r & 1) ? chunk / 2 + r / 2 : r / 2);
}

/*
 * Round half to even without depending on the FP environment's rounding mode;
 * the SIMD quantizers use an explicit nearest-even rounding, so all levels agree
 * bit for bit. Valid for |x| < 2^23, which holds for |x| <= 127.5 here.
 */
static inline float krn_round_half_even(float x)
{
    float r = floorf(x);
    float d = x - r; /* exact for |x| < 2^23 */
    if (d > 0.5f || (d == 0.5f && fmodf(r, 2.0f) != 0.0f))
        r += 1.0f;
    return r;
}

/*
 * The per-block multiplier 127 / amax overflows for amax below ~3.7e-37. Such
 * blocks are first scaled up by this power of two, which is exact, so their
 * values quantize as if the multiplier were representable.
 */
#define KRN_QA_TINY 0x1p-100f
#define KRN_QA_UPSCALE 0x1p100f

/* 4-bit value of element (row n, k) of the ONNX weight layout. */
static inline unsigned krn_q4_get(const krn_q4_weights *w, size_t n, size_t k)
{
    size_t b = k / w->block_size;
    uint8_t byte = w->b_data[(n * w->k_blocks + b) * (w->block_size / 2) + (k % w->block_size) / 2];
    return (k & 1) ? (unsigned)(byte >> 4) : (unsigned)(byte & 0x0F);
}

/* Zero point of block b of row n: 8 when the graph gives none. */
static inline int krn_q4_zp(const krn_q4_weights *w, size_t n, size_t b)
{
    if (!w->zero_pts)
        return 8;
    uint8_t byte = w->zero_pts[n * ((w->k_blocks + 1) / 2) + b / 2];
    return (b & 1) ? (byte >> 4) : (byte & 0x0F);
}

/* Numerically safe logistic function shared by the scalar kernels. */
static inline float krn_sigmoidf(float x)
{
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/* Prototypes of every level's kernels, by level. */
#define KRN_DECLARE_LEVEL(lvl)                                                            \
    void krn_##lvl##_quant_a8(const krn_quant_args *a, size_t b, size_t e);              \
    void krn_##lvl##_mmnb_f32(const krn_mmnb_args *a, size_t b, size_t e);               \
    void krn_##lvl##_mmnb_i8(const krn_mmnb_args *a, size_t b, size_t e);                \
    void krn_##lvl##_rmsnorm(const krn_norm_args *a, size_t b, size_t e);                \
    void krn_##lvl##_skip_rmsnorm(const krn_norm_args *a, size_t b, size_t e);           \
    void krn_##lvl##_rotary(const krn_rotary_args *a, size_t b, size_t e);               \
    void krn_##lvl##_gqa(const krn_gqa_args *a, size_t b, size_t e);                     \
    void krn_##lvl##_sigmoid(const krn_ew_args *a, size_t b, size_t e);                  \
    void krn_##lvl##_mul(const krn_ew_args *a, size_t b, size_t e);                      \
    void krn_##lvl##_add(const krn_ew_args *a, size_t b, size_t e);                      \
    void krn_##lvl##_silu_mul(const krn_ew_args *a, size_t b, size_t e);                 \
    int krn_##lvl##_gather(const krn_gather_args *a, size_t b, size_t e);

KRN_DECLARE_LEVEL(ref)

/* The SIMD levels implement the ops where they pay off; krn.c fills the rest from below. */
void krn_avx2_quant_a8(const krn_quant_args *a, size_t b, size_t e);
void krn_avx2_mmnb_f32(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx2_mmnb_i8(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx2_rmsnorm(const krn_norm_args *a, size_t b, size_t e);
void krn_avx2_skip_rmsnorm(const krn_norm_args *a, size_t b, size_t e);
void krn_avx2_gqa(const krn_gqa_args *a, size_t b, size_t e);
void krn_avx2_sigmoid(const krn_ew_args *a, size_t b, size_t e);
void krn_avx2_mul(const krn_ew_args *a, size_t b, size_t e);
void krn_avx2_add(const krn_ew_args *a, size_t b, size_t e);
void krn_avx2_silu_mul(const krn_ew_args *a, size_t b, size_t e);

void krn_avx512_mmnb_i8(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx512_mmnb_i8_vnni(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx512_mmnb_f32(const krn_mmnb_args *a, size_t b, size_t e);

#endif
