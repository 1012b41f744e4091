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

#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <xmmintrin.h> /* _mm_prefetch: SSE, part of x86-64 */

#include "kernels/krn.h"

/*
 * Quantized activations, one record per row of A, each record padded to 64
 * bytes so rows start on cache lines when the buffer does. The record has a
 * per-block part (read by the reference and the AVX-512 kernels) and, after
 * it, a copy arranged for kernels that take 64 consecutive k at a time:
 *   int8_t  q[k_blocks * block_size]   values, zero past k
 *   float   scale[k_blocks]            sA = amax / 127 of the block
 *   int32_t qsum[k_blocks]             sum of the block's q values
 *   float   zp8_sum[k_blocks]          8 * (scale * qsum): the default zero
 *                                      point's share of the block's scaled dot
 *   (zeros up to a 32-byte boundary)
 *   int8_t  q64[n_chunks * 64]         the same values in chunks of 64 k
 *   float   sa8[n_pairs * 8]           per block pair: [sA(2p) x4 | sA(2p+1) x4]
 *   int32_t qs8[n_pairs * 8]           per block pair: [qsum(2p) x4 | qsum(2p+1) x4]
 * with n_chunks = ceil(k_blocks * block_size / 64), n_pairs = ceil(k_blocks / 2)
 * and zeros for the values and statistics of blocks past the last.
 * Within each block of q the values are stored in chunks of min(block_size,
 * 32) logical elements, each chunk holding its even-indexed elements first and
 * then its odd-indexed ones. That is the order of the low nibbles and then the
 * high nibbles of the chunk's 16 weight bytes, so SIMD code pairs a weight
 * vector with activations without shuffling; the dot product itself is
 * order-free. q64 does the same for chunks of 64: 32 weight bytes (any block
 * size, as the weights of one output column are contiguous along k) give 32
 * low nibbles for k = 0, 2, ..., 62 and 32 high nibbles for k = 1, 3, ..., 63,
 * which q64 holds as [evens | odds]. With block_size 32 one chunk is a pair of
 * blocks, whose int32 sums land in 32-bit lanes 0-3 and 4-7 of a 256-bit
 * multiply-add; sa8 and qs8 are the matching per-lane block statistics.
 */
static inline size_t krn_qa_chunks(size_t k_blocks, size_t block_size)
{
    return (k_blocks * block_size + 63) / 64;
}

static inline size_t krn_qa_pairs(size_t k_blocks)
{
    return (k_blocks + 1) / 2;
}

/* Offset of q64 in a record: the per-block part rounded up to 32 bytes. */
static inline size_t krn_qa_ext_offset(size_t k_blocks, size_t block_size)
{
    size_t bytes = k_blocks * block_size + 3 * 4 * k_blocks;
    return (bytes + 31) & ~(size_t)31;
}

/* Bytes of a record that the quantizers write (everything but the tail padding). */
static inline size_t krn_qa_used_bytes(size_t k_blocks, size_t block_size)
{
    return krn_qa_ext_offset(k_blocks, block_size) + krn_qa_chunks(k_blocks, block_size) * 64 +
           krn_qa_pairs(k_blocks) * 64;
}

static inline size_t krn_qa_row_bytes(size_t k_blocks, size_t block_size)
{
    return (krn_qa_used_bytes(k_blocks, block_size) + 63) & ~(size_t)63;
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

static inline float *krn_qa_zp8_sum(void *qa, size_t row, size_t k_blocks, size_t block_size)
{
    return (float *)(void *)(krn_qa_qsum(qa, row, k_blocks, block_size) + k_blocks);
}

static inline int8_t *krn_qa_q64(void *qa, size_t row, size_t k_blocks, size_t block_size)
{
    return krn_qa_q(qa, row, k_blocks, block_size) + krn_qa_ext_offset(k_blocks, block_size);
}

static inline float *krn_qa_sa8(void *qa, size_t row, size_t k_blocks, size_t block_size)
{
    return (float *)(void *)(krn_qa_q64(qa, row, k_blocks, block_size) +
                             krn_qa_chunks(k_blocks, block_size) * 64);
}

static inline int32_t *krn_qa_qs8(void *qa, size_t row, size_t k_blocks, size_t block_size)
{
    return (int32_t *)(void *)(krn_qa_sa8(qa, row, k_blocks, block_size) + krn_qa_pairs(k_blocks) * 8);
}

/* Storage slot of logical element j (0 <= j < 64) inside its q64 chunk. */
static inline size_t krn_qa_slot64(size_t j)
{
    return (j & 1) ? 32 + j / 2 : j / 2;
}

/* Storage slot of logical element j (0 <= j < block_size) inside its block. */
static inline size_t krn_qa_slot(size_t j, size_t block_size)
{
    size_t chunk = block_size < 32 ? block_size : 32;
    size_t base = j & ~(chunk - 1), r = j & (chunk - 1);
    return base + ((r & 1) ? chunk / 2 + r / 2 : r / 2);
}

/*
 * Fills the q64/sa8/qs8 part of a record from its per-block part (portable;
 * the SIMD quantizers have faster paths for block_size 32 that write the same
 * bytes). Also zeroes the gap between the two parts.
 */
static inline void krn_qa_fill_ext(void *qa, size_t row, size_t k_blocks, size_t block_size)
{
    int8_t *q = krn_qa_q(qa, row, k_blocks, block_size);
    int8_t *q64 = krn_qa_q64(qa, row, k_blocks, block_size);
    const float *sa = krn_qa_scale(qa, row, k_blocks, block_size);
    const int32_t *qs = krn_qa_qsum(qa, row, k_blocks, block_size);
    float *sa8 = krn_qa_sa8(qa, row, k_blocks, block_size);
    int32_t *qs8 = krn_qa_qs8(qa, row, k_blocks, block_size);
    size_t per_block = k_blocks * block_size + 3 * 4 * k_blocks;
    for (size_t i = per_block; i < krn_qa_ext_offset(k_blocks, block_size); i++)
        q[i] = 0;
    size_t nk = krn_qa_chunks(k_blocks, block_size) * 64;
    for (size_t j = 0; j < nk; j++) {
        int8_t v = 0;
        if (j < k_blocks * block_size)
            v = q[(j / block_size) * block_size + krn_qa_slot(j % block_size, block_size)];
        q64[(j / 64) * 64 + krn_qa_slot64(j % 64)] = v;
    }
    for (size_t p = 0; p < krn_qa_pairs(k_blocks); p++)
        for (size_t h = 0; h < 2; h++) {
            size_t b = 2 * p + h;
            for (size_t l = 0; l < 4; l++) {
                sa8[p * 8 + h * 4 + l] = b < k_blocks ? sa[b] : 0.0f;
                qs8[p * 8 + h * 4 + l] = b < k_blocks ? qs[b] : 0;
            }
        }
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

/* Code of element (row n, k) of the ONNX weight layout: 4 bits, or 8 with bits8. */
static inline unsigned krn_q4_get(const krn_q4_weights *w, size_t n, size_t k)
{
    size_t b = k / w->block_size;
    if (w->bits8)
        return w->b_data[(n * w->k_blocks + b) * w->block_size + k % w->block_size];
    uint8_t byte = w->b_data[(n * w->k_blocks + b) * (w->block_size / 2) + (k % w->block_size) / 2];
    return (k & 1) ? (unsigned)(byte >> 4) : (unsigned)(byte & 0x0F);
}

/*
 * The int8 kernels that read ONNX-layout weights in place (zero points
 * without a packed copy, block sizes other than 32) read one stream per
 * column of their tile. Each line of them is asked of L1 2 KiB ahead and of
 * L2 8 KiB ahead; the hardware prefetchers alone left a one-row product
 * (decode) at 7-8 GB/s on one thread and 12-17 on two of an Emerald Rapids
 * Xeon, these reach 11-13 and 22-26 (bench/krn_bench without --packed).
 * Only a tile's first rows ask: the later row tiles of the same columns find
 * the lines in cache.
 */
#define KRN_PF_DIST_ONNX 2048
#define KRN_PF_L2_DIST_ONNX 8192

/* Always inlined: as a call inside the kernels' unrolled loops (every vector
 * register is caller-saved) it halved their one-row rate. */
static inline __attribute__((always_inline)) void krn_prefetch_onnx_line(const void *p)
{
    _mm_prefetch((const char *)p + KRN_PF_DIST_ONNX, _MM_HINT_T0);
    _mm_prefetch((const char *)p + KRN_PF_L2_DIST_ONNX, _MM_HINT_T1);
}

/* Zero point of block b of row n: 8 (bits8: 128) when the graph gives none. */
static inline int krn_q4_zp(const krn_q4_weights *w, size_t n, size_t b)
{
    if (w->bits8)
        return w->zero_pts ? w->zero_pts[n * w->k_blocks + b] : 128;
    if (!w->zero_pts)
        return 8;
    uint8_t byte = w->zero_pts[n * ((w->k_blocks + 1) / 2) + b / 2];
    return (b & 1) ? (byte >> 4) : (byte & 0x0F);
}

/*
 * Packed weights (krn_q4_pack): columns in tiles of KRN_Q4_PACK_TILE = 16,
 * each tile one contiguous run of k_blocks pairs of records. Record (b, e)
 * of tile t, half e of its block b, at packed + t * krn_q4p_tile_bytes() +
 * (2b + e) * krn_q4p_block_bytes(), covers the eight columns 16t + 8e + c:
 * G = block_size / 32 groups of 128 weight bytes, group s covering the
 * block's k = 32s .. 32s + 31 as four 32-byte vectors h = 0..3 whose 32-bit
 * lane c is the ONNX weight bytes 16s + 4h .. 16s + 4h + 3 of block b of
 * that column (low nibbles k = 32s + 8h + 2j, high nibbles k = 32s + 8h +
 * 2j + 1 for byte j), then the eight scales: fp32 or, with packed_bf16,
 * their upper halves; with packed_zp the eight zero points follow, one byte
 * each. With block_size 32 (G = 1) that is 160 / 144 bytes, 168 / 152 with
 * zero points. Columns past n are zero bytes with scale 0 (and zero point
 * 0), which add exact zeros. An AVX-512 kernel reads a block's two records
 * as one sixteen-lane record, so a tile is one stream; layout 1 (tiles of
 * eight, two adjacent tiles read side by side as two streams) decoded 15-25%
 * slower on a Zen 5 server. An AVX2 kernel reads both records of a block in
 * one pass (decode) or one record every other record (the other eight
 * columns' pass then reads them from cache).
 */
#define KRN_Q4P_NR 8 /* columns per record: a tile holds two side by side */
#define KRN_Q4P_WEIGHT_BYTES 128 /* per group of 32 k */
#define KRN_Q4P_MAX_GROUPS 8     /* block_size 256 */
#define KRN_Q4P_BLOCK_BYTES_F32 (KRN_Q4P_WEIGHT_BYTES + KRN_Q4P_NR * 4)
#define KRN_Q4P_BLOCK_BYTES_BF16 (KRN_Q4P_WEIGHT_BYTES + KRN_Q4P_NR * 2)

/* The two record forms at block_size 32, as the packer writes and the kernels read them. */
typedef struct krn_q4p_record_f32 {
    uint8_t weights[4][32];           /* vector h, lane c (4 bytes): column 8t + c, bytes 4h..4h+3 */
    float scales[KRN_Q4P_NR];
} krn_q4p_record_f32;

typedef struct krn_q4p_record_bf16 {
    uint8_t weights[4][32];
    uint16_t scales[KRN_Q4P_NR];      /* the upper halves of the fp32 scales */
} krn_q4p_record_bf16;

_Static_assert(KRN_Q4P_WEIGHT_BYTES == KRN_Q4P_NR * 32 / 2, "a group holds 32 k of eight columns");
_Static_assert(KRN_Q4_PACK_TILE == 2 * KRN_Q4P_NR, "a tile is two records wide");
_Static_assert(sizeof(krn_q4p_record_f32) == KRN_Q4P_BLOCK_BYTES_F32, "fp32 records are unpadded");
_Static_assert(sizeof(krn_q4p_record_bf16) == KRN_Q4P_BLOCK_BYTES_BF16, "bf16 records are unpadded");
_Static_assert(offsetof(krn_q4p_record_f32, scales) == KRN_Q4P_WEIGHT_BYTES, "scales follow the weights");
_Static_assert(offsetof(krn_q4p_record_bf16, scales) == KRN_Q4P_WEIGHT_BYTES, "scales follow the weights");

/* Groups of 32 k per block of W's packed records (block_size 32..256), else 0: not packed. */
static inline size_t krn_q4p_groups(const krn_q4_weights *w)
{
    size_t bs = w->block_size;
    return bs >= 32 && bs <= 32 * KRN_Q4P_MAX_GROUPS && (bs & (bs - 1)) == 0 ? bs / 32 : 0;
}

/* Whether W's packed copy holds everything a product needs (zero points, if any, in its records). */
static inline bool krn_q4_reads_packed(const krn_q4_weights *w)
{
    return w->packed && (w->packed_zp || !w->zero_pts);
}

/* Offset of a record's scales: after its G groups of weights. */
static inline size_t krn_q4p_scales_offset(size_t groups)
{
    return groups * KRN_Q4P_WEIGHT_BYTES;
}

/* Offset of a record's zero points (packed_zp), right after its scales. */
static inline size_t krn_q4p_zp_offset(size_t groups, bool bf16)
{
    return krn_q4p_scales_offset(groups) + KRN_Q4P_NR * (bf16 ? 2 : 4);
}

static inline size_t krn_q4p_block_bytes(size_t groups, bool bf16, bool zp)
{
    return krn_q4p_zp_offset(groups, bf16) + (zp ? KRN_Q4P_NR : 0);
}

/* Bytes of a tile of sixteen columns: two records per block. */
static inline size_t krn_q4p_tile_bytes(size_t k_blocks, size_t groups, bool bf16, bool zp)
{
    return 2 * k_blocks * krn_q4p_block_bytes(groups, bf16, zp);
}

/* The first record of the eight columns from n0 (a multiple of 8); the next block's is two records on. */
static inline const uint8_t *krn_q4p_half(const void *packed, size_t n0, size_t k_blocks, size_t groups, bool bf16,
                                          bool zp)
{
    return (const uint8_t *)packed + n0 / KRN_Q4_PACK_TILE * krn_q4p_tile_bytes(k_blocks, groups, bf16, zp) +
           (n0 / KRN_Q4P_NR % 2) * krn_q4p_block_bytes(groups, bf16, zp);
}

/*
 * Packed 8-bit weights (bits8, krn_q4_pack on a table with q8_packed): the
 * same tiles of sixteen columns, each one contiguous run of k_blocks
 * records, but a record spans all sixteen columns, since only AVX-512
 * kernels read it: G = block_size / 32 groups of eight 64-byte vectors, the
 * 32-bit lane c of vector h holding column 16t + c's four codes in the
 * quantized activations' slots 4h .. 4h + 3 of the group (krn_qa_slot), so
 * each vector meets four activation bytes broadcast; then the sixteen
 * scales (fp32, or bfloat16 upper halves with packed_bf16) and, with
 * packed_zp, the sixteen zero points, one byte each. At block_size 32 that
 * is 576 bytes (544 with bfloat16 scales), 16 more with zero points: the
 * bytes of the ONNX layout. Columns past n and k past K are zero codes with
 * scale 0 and zero point 0.
 */
#define KRN_Q8P_WEIGHT_BYTES 512 /* per group of 32 k: eight vectors of sixteen lanes */

/* Offset of a packed 8-bit record's scales, after its G groups of codes. */
static inline size_t krn_q8p_scales_offset(size_t groups)
{
    return groups * KRN_Q8P_WEIGHT_BYTES;
}

/* Offset of a packed 8-bit record's zero points (packed_zp), after its scales. */
static inline size_t krn_q8p_zp_offset(size_t groups, bool bf16)
{
    return krn_q8p_scales_offset(groups) + KRN_Q4_PACK_TILE * (bf16 ? 2 : 4);
}

static inline size_t krn_q8p_block_bytes(size_t groups, bool bf16, bool zp)
{
    return krn_q8p_zp_offset(groups, bf16) + (zp ? KRN_Q4_PACK_TILE : 0);
}

/* The first record of the tile holding column n0 (a multiple of 16); the next block's is one record on. */
static inline const uint8_t *krn_q8p_tile(const void *packed, size_t n0, size_t k_blocks, size_t groups, bool bf16,
                                          bool zp)
{
    return (const uint8_t *)packed + n0 / KRN_Q4_PACK_TILE * k_blocks * krn_q8p_block_bytes(groups, bf16, zp);
}

/* Where column c's code at group slot s (0..31) sits in its group's 512 bytes. */
static inline size_t krn_q8p_code_at(size_t c, size_t s)
{
    return 64 * (s / 4) + 4 * c + s % 4;
}

/* A bfloat16 (its bits) widened to fp32, exactly. */
static inline float krn_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The combination of the eight partial sums of mm_f, in its fixed order. */
static inline float krn_mmf_combine(const float *p)
{
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

/* Weight (k, n) of an mm_f call as fp32. */
static inline float krn_mmf_w(const krn_mmf_args *a, size_t k, size_t n)
{
    size_t i = a->w_nk ? n * a->w_ld + k : k * a->w_ld + n;
    if (a->w_bf16) {
        uint16_t h;
        memcpy(&h, (const uint16_t *)a->w + i, sizeof h);
        return krn_bf16_to_f32(h);
    }
    return ((const float *)a->w)[i];
}

/* Numerically safe logistic function shared by the scalar kernels. */
static inline float krn_sigmoidf(float x)
{
    if (x >= 0.0f)
        return 1.0f / (1.0f + expf(-x));
    float e = expf(x);
    return e / (1.0f + e);
}

/*
 * IEEE binary16 conversions with the semantics of F16C (VCVTPS2PH with
 * round-to-nearest-even, VCVTPH2PS): overflow rounds to inf, NaN keeps its
 * sign and top payload bits and becomes quiet, subnormals are exact both ways.
 */
static inline uint16_t krn_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u) /* inf, NaN */
        return (uint16_t)(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u | ((ax >> 13) & 0x3FFu) : 0));
    if (ax >= 0x47800000u) /* >= 65536: beyond the tie with inf */
        return (uint16_t)(sign | 0x7C00u);
    if (ax < 0x38800000u) { /* below 2^-14: a subnormal half, units of 2^-24 */
        if (ax <= 0x33000000u) /* <= 2^-25: rounds (ties to even) to zero */
            return (uint16_t)sign;
        uint32_t m = (ax & 0x7FFFFFu) | 0x800000u;
        unsigned shift = 126u - (ax >> 23); /* 14..24 */
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    /* Normal: rebias the exponent, round the 13 dropped mantissa bits (a carry may reach inf). */
    uint32_t h = ((((ax >> 23) - 112u) << 10) | ((ax & 0x7FFFFFu) >> 13));
    uint32_t rem = ax & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++;
    return (uint16_t)(sign | h);
}

/* A q8 row's scale: the 4 bytes after its N codes. */
static inline float krn_q8_scale(const void *row, size_t n)
{
    float s;
    memcpy(&s, (const uint8_t *)row + n, sizeof s);
    return s;
}

/* Values [d0, n) of X as codes of scale S > 0 (krn_code_row's second pass), into C8 or C16. */
static inline void krn_code_values(const float *x, size_t d0, size_t n, float s, long limit, int8_t *c8, int16_t *c16)
{
    for (size_t d = d0; d < n; d++) {
        long c = lrintf(x[d] / s);
        c = c > limit ? limit : c < -limit ? -limit : c;
        if (c8)
            c8[d] = (int8_t)c;
        else
            c16[d] = (int16_t)c;
    }
}

/* N zero codes into C8 (int8) or, without it, C16 (int16): a row that codes to nothing (krn_code_row). */
static inline void krn_code_zero(size_t n, int8_t *c8, int16_t *c16)
{
    for (size_t d = 0; d < n; d++)
        if (c8)
            c8[d] = 0;
        else
            c16[d] = 0;
}

/*
 * Symmetric codes of the N floats of X with LIMIT = 127 (int8, into C8) or
 * 32767 (int16, into C16): with a = max |x_d|, scale a / LIMIT and codes
 * x_d / scale rounded to nearest even, clamped (which only acts when the
 * scale is subnormal, rounded far from a / LIMIT); zeros, or a scale that
 * underflows, give codes 0 and scale 0; inf or NaN codes 0 and a NaN scale.
 * A division per value rather than a product by LIMIT / a, which overflows
 * for tiny a. Portable C, which krn_avx2_code_row() matches bit for bit.
 * Returns the scale.
 */
static inline float krn_code_row(const float *x, size_t n, long limit, int8_t *c8, int16_t *c16)
{
    float a = 0.0f;
    bool finite = true;
    for (size_t d = 0; d < n; d++) {
        float m = fabsf(x[d]);
        finite &= m <= FLT_MAX;
        a = m > a ? m : a;
    }
    float s = finite ? a / (float)limit : NAN;
    if (finite && s > 0.0f)
        krn_code_values(x, 0, n, s, limit, c8, c16);
    else
        krn_code_zero(n, c8, c16);
    return s;
}

/* One q8 row from the N floats of X (krn_kv_type): the same bytes on every level. */
static inline void krn_q8_row(const float *x, size_t n, void *row)
{
    float s = krn_code_row(x, n, 127, row, NULL);
    memcpy((int8_t *)row + n, &s, sizeof s);
}

/*
 * A query row as int16 codes for its dots with q8 keys (krn_code_row with
 * limit 32767). A key dot is then exact integer
 * arithmetic (|code| <= 32767 and 127, at most 512 of them: within int32),
 * the same on every level; krn_q8_key_score() scales it. Returns the scale.
 */
static inline float krn_q16_row(const float *x, size_t n, int16_t *code)
{
    return krn_code_row(x, n, 32767, NULL, code);
}

/* The attention score of a query (int16 codes, scale qs) and a q8 key (scale ks) from their integer dot. */
static inline float krn_q8_key_score(int32_t dot, float qs, float ks, float scale)
{
    return (float)dot * (qs * ks) * scale;
}

/* Writes one q8 row (krn_q8_row's bytes) from N floats; each level may bring its own. */
typedef void (*krn_q8_row_fn)(const float *x, size_t n, void *row);

/*
 * A rotary kernel's q8 output: each head rotated by ROTATE (the level's own
 * fp32 rotation, bit-identical on every level) into a row on the stack, then
 * quantized by Q8_ROW (krn_q8_row's bytes).
 */
static inline void krn_rotary_into_q8(krn_rotary_fn rotate, krn_q8_row_fn q8_row, const krn_rotary_args *args,
                                      size_t i_begin, size_t i_end)
{
    float tmp[KRN_MAX_HEAD_DIM];
    krn_rotary_args one = *args;
    one.y = tmp;
    one.y_type = KRN_KV_F32;
    one.y_tok_stride = one.y_head_stride = 0;
    for (size_t i = i_begin; i < i_end; i++) {
        size_t t = i / args->n_heads, h = i % args->n_heads;
        rotate(&one, i, i + 1);
        q8_row(tmp, args->head_dim, (int8_t *)args->y + t * args->y_tok_stride + h * args->y_head_stride);
    }
}

static inline float krn_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu, x;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* exact */
        memcpy(&x, &v, sizeof x);
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0);
    } else {
        x = sign | ((e + 112u) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

/* Prototypes of every level's kernels, by level. */
#define KRN_DECLARE_LEVEL(lvl)                                                            \
    void krn_##lvl##_quant_a8(const krn_quant_args *a, size_t b, size_t e);              \
    void krn_##lvl##_mmnb_f32(const krn_mmnb_args *a, size_t b, size_t e);               \
    void krn_##lvl##_mmnb_i8(const krn_mmnb_args *a, size_t b, size_t e);                \
    void krn_##lvl##_mm_f(const krn_mmf_args *a, size_t b, size_t e);                    \
    void krn_##lvl##_rmsnorm(const krn_norm_args *a, size_t b, size_t e);                \
    void krn_##lvl##_skip_rmsnorm(const krn_norm_args *a, size_t b, size_t e);           \
    void krn_##lvl##_rotary(const krn_rotary_args *a, size_t b, size_t e);               \
    void krn_##lvl##_kv_store(const krn_rows_args *a, size_t b, size_t e);               \
    void krn_##lvl##_gqa(const krn_gqa_args *a, size_t b, size_t e);                     \
    void krn_##lvl##_sigmoid(const krn_ew_args *a, size_t b, size_t e);                  \
    void krn_##lvl##_mul(const krn_ew_args *a, size_t b, size_t e);                      \
    void krn_##lvl##_add(const krn_ew_args *a, size_t b, size_t e);                      \
    void krn_##lvl##_silu_mul(const krn_ew_args *a, size_t b, size_t e);                 \
    int krn_##lvl##_gather(const krn_gather_args *a, size_t b, size_t e);

KRN_DECLARE_LEVEL(ref)

/* Quantizes one row of k values into record m of qa (what quant_a8 does per row). */
void krn_ref_quant_row(const float *a, size_t k, size_t block_size, void *qa, size_t m);
void krn_avx2_quant_row(const float *a, size_t k, size_t block_size, void *qa, size_t m);

/* The SIMD levels implement the ops where they pay off; krn.c fills the rest from below. */
void krn_avx2_quant_a8(const krn_quant_args *a, size_t b, size_t e);
void krn_avx2_mmnb_f32(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx2_mmnb_i8(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx2_mmnb_i8_avxvnni(const krn_mmnb_args *a, size_t b, size_t e); /* the same bits, with AVX-VNNI */
void krn_avx2_mmnb8_i8(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx2_mmnb8_i8_avxvnni(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx2_mm_f(const krn_mmf_args *a, size_t b, size_t e);
void krn_avx2_rmsnorm(const krn_norm_args *a, size_t b, size_t e);
void krn_avx2_skip_rmsnorm(const krn_norm_args *a, size_t b, size_t e);
void krn_avx2_gqa(const krn_gqa_args *a, size_t b, size_t e);
void krn_avx2_rotary(const krn_rotary_args *a, size_t b, size_t e);
void krn_avx2_kv_store(const krn_rows_args *a, size_t b, size_t e);
/* krn_code_row() and krn_q8_row() with AVX2: the same codes and scale, bit for bit (avx2/rotary.c). */
float krn_avx2_code_row(const float *x, size_t n, long limit, int8_t *c8, int16_t *c16);
void krn_avx2_q8_row(const float *x, size_t n, void *row);
int krn_avx2_gather(const krn_gather_args *a, size_t b, size_t e);
void krn_avx2_sigmoid(const krn_ew_args *a, size_t b, size_t e);
void krn_avx2_mul(const krn_ew_args *a, size_t b, size_t e);
void krn_avx2_add(const krn_ew_args *a, size_t b, size_t e);
void krn_avx2_silu_mul(const krn_ew_args *a, size_t b, size_t e);

void krn_avx512_mmnb_i8(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx512_mmnb_i8_vnni(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx512_mmnb8_i8_vnni(const krn_mmnb_args *a, size_t b, size_t e); /* 256-bit EVEX VPDPBUSD */
void krn_avx512_mmnb_f32(const krn_mmnb_args *a, size_t b, size_t e);
void krn_avx512_gqa(const krn_gqa_args *a, size_t b, size_t e);
void krn_avx512_gqa_vnni(const krn_gqa_args *a, size_t b, size_t e); /* AVX512-VNNI CPUs only */

/*
 * The avx512 table with the given matmul kernels (VNNI or not, for the name;
 * mmnb8_i8 NULL: the AVX2 one) and attention core: krn.c's own, or the tests'
 * copies of them built over an emulation.
 */
void krn_table_avx512(krn_table *t, krn_mmnb_fn mmnb_f32, krn_mmnb_fn mmnb_i8, krn_mmnb_fn mmnb8_i8, bool vnni,
                      krn_gqa_fn gqa);

#endif
