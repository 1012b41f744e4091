/*
 * avx2/mmnb: AVX2/FMA MatMulNBits (4-bit weights) in both numeric modes, plus
 * the activation quantizer of the int8 mode.
 *
 * int8 mode (ONNX Runtime's accuracy_level 4 numerics). Weights repacked at
 * load (krn_q4_pack, block_size 32 without zero points: the exported Qwen3
 * graphs) are read in tiles of eight columns, one column per 32-bit lane:
 * per block, four 32-byte vectors whose low and high nibbles meet broadcasts
 * of the quantizer's even and odd activations in _mm256_maddubs_epi16 (the
 * unsigned 4-bit q times the int8 activations), the products summed in int16
 * across the block and widened once, so no horizontal reduction is needed;
 * each block's int32 dot of the unsigned q is exact, and per block and row
 * one FMA takes off the zero point's share in floating point (sA * dot -
 * 8 * sA * qsum, the second term from the quantizer, as ONNX Runtime's
 * block-sum form does) and one more applies sB to all eight columns (read
 * as fp32, or widened from the bfloat16 record of scales that fit it); an
 * integer correction cost three more instructions per row, among them a
 * transfer from a general register. Register tiles are MR rows x 8
 * columns: each block's weights are unpacked once for all MR rows, so prefill
 * (M > 1) amortizes the unpacking, and rows are blocked so their activations
 * stay in L2. Decode (M = 1) streams each tile once, prefetched 2 KiB ahead.
 *
 * Weights in the ONNX layout (zero points, or not repacked) are read in
 * place: 64 consecutive k of a column are its 32 weight bytes, split into
 * low nibbles (even k) and high nibbles (odd k) that meet the quantizer's q64
 * copy of the activations ([evens | odds] per 64 k, krn_internal.h); four
 * columns' 16-bit pair sums are reduced with horizontal adds into one vector
 * [c0..c3 of block 2p | c0..c3 of block 2p+1], converted once and
 * accumulated with one FMA against sA * sB. Other block sizes, and odd
 * leftovers, go through a generic per-column loop on the same q64
 * activations.
 *
 * fp32 mode (accuracy levels 0/1): weights dequantized exactly as the
 * reference forms them, 16 at a time, FMA against fp32 activations.
 *
 * Called by compute workers through the dispatch table, each with its own
 * column range. Compiled with -mavx2 -mfma -mf16c only.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/avx2/simd.h"
#include "kernels/krn_internal.h"

#define UNROLL _Pragma("GCC unroll 8")
#define INLINE static inline __attribute__((always_inline))

/* ------------------------------------------------------------------------- */
/* Activation quantization                                                     */

/* Up to 8 floats of a block from offset j of a row segment of len values; zero past len. */
static inline __m256 load_upto8(const float *a, size_t j, size_t len)
{
    if (j + 8 <= len)
        return _mm256_loadu_ps(a + j);
    if (j >= len)
        return _mm256_setzero_ps();
    return _mm256_maskload_ps(a + j, krn_avx2_tail_mask(len - j));
}

/*
 * Stores 32 quantized values (4 x 8 int32, natural k order, all in [-127, 127])
 * as int8 in the chunk order of krn_internal.h: evens, then odds.
 */
static inline void store_chunk32(int8_t *dst, __m256i v0, __m256i v1, __m256i v2, __m256i v3)
{
    /* Saturating packs work per 128-bit lane; the dword permute restores k order. */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v0, v1), _mm256_packs_epi32(v2, v3));
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    /* Per lane: 8 evens then 8 odds; then quads (even0, odd0, even1, odd1) -> (e0, e1, o0, o1). */
    const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                           0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    p = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(p, split), 0xD8);
    _mm256_storeu_si256((__m256i *)(void *)dst, p);
}

/*
 * The q64/sa8/qs8 part of a block-32 record (krn_internal.h): chunk p is
 * [evens of 2p | evens of 2p+1 | odds of 2p | odds of 2p+1], i.e. the 128-bit
 * halves of the two blocks' per-block storage regrouped. Same bytes as the
 * portable krn_qa_fill_ext.
 */
static void fill_ext32(void *qa, size_t m, size_t kb)
{
    int8_t *rec = krn_qa_q(qa, m, kb, 32);
    const float *sa = krn_qa_scale(qa, m, kb, 32);
    const int32_t *qs = krn_qa_qsum(qa, m, kb, 32);
    int8_t *q64 = krn_qa_q64(qa, m, kb, 32);
    float *sa8 = krn_qa_sa8(qa, m, kb, 32);
    int32_t *qs8 = krn_qa_qs8(qa, m, kb, 32);
    memset(rec + kb * 32 + 12 * kb, 0, krn_qa_ext_offset(kb, 32) - kb * 32 - 12 * kb);
    for (size_t p = 0; p < krn_qa_pairs(kb); p++) {
        bool second = 2 * p + 1 < kb;
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(const void *)(rec + 64 * p));
        __m256i b1 = second ? _mm256_loadu_si256((const __m256i *)(const void *)(rec + 64 * p + 32))
                            : _mm256_setzero_si256();
        _mm256_storeu_si256((__m256i *)(void *)(q64 + 64 * p), _mm256_permute2x128_si256(b0, b1, 0x20));
        _mm256_storeu_si256((__m256i *)(void *)(q64 + 64 * p + 32), _mm256_permute2x128_si256(b0, b1, 0x31));
        float s1 = second ? sa[2 * p + 1] : 0.0f;
        int32_t c1 = second ? qs[2 * p + 1] : 0;
        _mm256_storeu_ps(sa8 + 8 * p, _mm256_set_m128(_mm_set1_ps(s1), _mm_set1_ps(sa[2 * p])));
        _mm256_storeu_si256((__m256i *)(void *)(qs8 + 8 * p),
                           _mm256_set_m128i(_mm_set1_epi32(c1), _mm_set1_epi32(qs[2 * p])));
    }
}

void krn_avx2_quant_a8(const krn_quant_args *args, size_t m_begin, size_t m_end)
{
    for (size_t m = m_begin; m < m_end; m++)
        krn_avx2_quant_row(args->a + m * args->a_ld, args->k, args->block_size, args->qa, m);
}

void krn_avx2_quant_row(const float *a, size_t k, size_t bs, void *qa, size_t m)
{
    size_t kb = (k + bs - 1) / bs;
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 lim = _mm256_set1_ps(127.0f), nlim = _mm256_set1_ps(-127.0f);
    {
        int8_t *q = krn_qa_q(qa, m, kb, bs);
        float *scale = krn_qa_scale(qa, m, kb, bs);
        int32_t *qsum = krn_qa_qsum(qa, m, kb, bs);
        float *zp8 = krn_qa_zp8_sum(qa, m, kb, bs);
        for (size_t b = 0; b < kb; b++) {
            size_t k0 = b * bs, len = k - k0 < bs ? k - k0 : bs;
            const float *ab = a + k0;
            __m256 vmax = _mm256_setzero_ps();
            for (size_t j = 0; j < len; j += 8)
                vmax = _mm256_max_ps(vmax, _mm256_and_ps(load_upto8(ab, j, len), absmask));
            float amax = krn_avx2_hmax(vmax);
            float pre = amax < KRN_QA_TINY ? KRN_QA_UPSCALE : 1.0f;
            float inv = amax != 0.0f ? 127.0f / (amax * pre) : 0.0f;
            const __m256 vpre = _mm256_set1_ps(pre), vinv = _mm256_set1_ps(inv);
            int8_t *qb = q + k0;
            __m256i vsum = _mm256_setzero_si256();
            /* Same operations as the reference, in the same order: bit-identical values. */
#define QUANT8(j)                                                                            \
    _mm256_cvtps_epi32(_mm256_min_ps(                                                        \
        _mm256_max_ps(_mm256_round_ps(_mm256_mul_ps(_mm256_mul_ps(load_upto8(ab, j, len), vpre), vinv), \
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),       \
                      nlim),                                                                 \
        lim))
            if (bs >= 32) {
                for (size_t c = 0; c < bs; c += 32) {
                    __m256i v0 = QUANT8(c), v1 = QUANT8(c + 8), v2 = QUANT8(c + 16), v3 = QUANT8(c + 24);
                    store_chunk32(qb + c, v0, v1, v2, v3);
                    vsum = _mm256_add_epi32(vsum, _mm256_add_epi32(_mm256_add_epi32(v0, v1),
                                                                   _mm256_add_epi32(v2, v3)));
                }
            } else {
                /* block_size 16: one 16-value chunk, reordered through a small array. */
                int32_t tmp[16];
                __m256i v0 = QUANT8(0), v1 = QUANT8(8);
                _mm256_storeu_si256((__m256i *)(void *)tmp, v0);
                _mm256_storeu_si256((__m256i *)(void *)(tmp + 8), v1);
                for (size_t t = 0; t < 16; t++)
                    qb[krn_qa_slot(t, 16)] = (int8_t)tmp[t];
                vsum = _mm256_add_epi32(v0, v1);
            }
#undef QUANT8
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(vsum), _mm256_extracti128_si256(vsum, 1));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
            scale[b] = amax / 127.0f;
            qsum[b] = _mm_cvtsi128_si32(s4);
            zp8[b] = 8.0f * (scale[b] * (float)qsum[b]);
        }
        if (bs == 32)
            fill_ext32(qa, m, kb);
        else
            krn_qa_fill_ext(qa, m, kb, bs);
    }
}

/* ------------------------------------------------------------------------- */
/* int8 mode                                                                   */

/*
 * The 32 weight bytes of one column over 64 consecutive k, as unsigned 4-bit
 * values: lo holds k = 0, 2, ..., 62 (low nibbles), hi k = 1, 3, ..., 63.
 */
INLINE void unpack64(__m256i v, __m256i *lo, __m256i *hi)
{
    const __m256i m = _mm256_set1_epi8(0x0F);
    *lo = _mm256_and_si256(v, m);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m);
}

/*
 * Int32 lane sums of q * qa over one q64 chunk: lane i covers k in [8i, 8i+8).
 * Each maddubs pair sum is at most 2 * 15 * 127 = 3810 in magnitude, the two
 * added in int16 at most 7620: no saturation, the sums are exact.
 */
INLINE __m256i dot64(__m256i lo, __m256i hi, __m256i qe, __m256i qo)
{
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, qe), _mm256_maddubs_epi16(hi, qo));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* The int16 pair sums of dot64 before widening: each at most 7620 in magnitude. */
INLINE __m256i dot64_16(__m256i lo, __m256i hi, __m256i qe, __m256i qo)
{
    return _mm256_add_epi16(_mm256_maddubs_epi16(lo, qe), _mm256_maddubs_epi16(hi, qo));
}

/*
 * Four columns' dot64_16 sums to int32 [c0 c1 c2 c3 of the low 128-bit half |
 * c0 c1 c2 c3 of the high half]: with block_size 32 the dots of blocks 2p and
 * 2p+1 per column. Two rounds of 16-bit horizontal adds first (sums of at most
 * 4 * 7620 = 30480, still exact in int16), then one widening multiply-add:
 * three fewer multiplies per tile than widening each column.
 */
INLINE __m256i reduce4(__m256i p0, __m256i p1, __m256i p2, __m256i p3)
{
    __m256i h = _mm256_hadd_epi16(_mm256_hadd_epi16(p0, p1), _mm256_hadd_epi16(p2, p3));
    return _mm256_madd_epi16(h, _mm256_set1_epi16(1));
}

/* Scales of blocks b, b+1 of four ONNX rows as [s0(b)..s3(b) | s0(b+1)..s3(b+1)]. */
INLINE __m256 scales4x2(const float *s0, const float *s1, const float *s2, const float *s3)
{
    __m128 x0 = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)s0));
    __m128 x1 = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)s1));
    __m128 x2 = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)s2));
    __m128 x3 = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(const void *)s3));
    __m128 u01 = _mm_unpacklo_ps(x0, x1), u23 = _mm_unpacklo_ps(x2, x3);
    return _mm256_set_m128(_mm_movehl_ps(u23, u01), _mm_movelh_ps(u01, u23));
}

/*
 * y for rows [m0, m0 + MR) and the four columns [n0, n0 + 4), block_size 32,
 * into out[4 * row + col] (columns past n computed from duplicates and ignored by
 * the caller). Per block pair: each column's 32 weight bytes are unpacked once
 * for all MR rows; the four columns' pair sums are reduced to one vector of
 * block dots; the zero point comes in as zp * qsum(block) (zp = 8 is a shift),
 * so the int32 dot is exact as in the reference; then one conversion and one
 * FMA with the products sA * sB for all eight (column, block) pairs.
 * Reads the ONNX rows in place (weights that were not repacked, e.g. with
 * zero points); an odd last block goes through 128-bit code. MR and ZP are
 * constants at every call site.
 */
INLINE void i8_tile32(const krn_mmnb_args *a, size_t m0, size_t n0, float *out, const int MR, const bool ZP)
{
    const krn_q4_weights *w = &a->w;
    const size_t kb = w->k_blocks;
    void *qa = (void *)a->qa;
    const int8_t *q64[4];
    const float *sa8[4];
    const int32_t *qs8[4];
    const uint8_t *wr[4];
    const float *sr[4];
    size_t col[4];
    __m256 acc[4];

    UNROLL for (int i = 0; i < MR; i++) {
        q64[i] = krn_qa_q64(qa, m0 + i, kb, 32);
        sa8[i] = krn_qa_sa8(qa, m0 + i, kb, 32);
        qs8[i] = krn_qa_qs8(qa, m0 + i, kb, 32);
        acc[i] = _mm256_setzero_ps();
    }
    UNROLL for (int j = 0; j < 4; j++)
        col[j] = n0 + (size_t)j < w->n ? n0 + (size_t)j : w->n - 1;
    UNROLL for (int j = 0; j < 4; j++) {
        wr[j] = w->b_data + col[j] * kb * 16;
        sr[j] = w->scales + col[j] * kb;
    }

    const size_t np = kb / 2;
    for (size_t p = 0; p < np; p++) {
        __m256i lo[4], hi[4];
        UNROLL for (int j = 0; j < 4; j++)
            unpack64(_mm256_loadu_si256((const __m256i *)(const void *)(wr[j] + 32 * p)), &lo[j], &hi[j]);
        __m256 sb = scales4x2(sr[0] + 2 * p, sr[1] + 2 * p, sr[2] + 2 * p, sr[3] + 2 * p);
        __m256i zpv = _mm256_setzero_si256();
        if (ZP)
            zpv = _mm256_setr_epi32(krn_q4_zp(w, col[0], 2 * p), krn_q4_zp(w, col[1], 2 * p),
                                    krn_q4_zp(w, col[2], 2 * p), krn_q4_zp(w, col[3], 2 * p),
                                    krn_q4_zp(w, col[0], 2 * p + 1), krn_q4_zp(w, col[1], 2 * p + 1),
                                    krn_q4_zp(w, col[2], 2 * p + 1), krn_q4_zp(w, col[3], 2 * p + 1));
        UNROLL for (int i = 0; i < MR; i++) {
            __m256i qe = _mm256_loadu_si256((const __m256i *)(const void *)(q64[i] + 64 * p));
            __m256i qo = _mm256_loadu_si256((const __m256i *)(const void *)(q64[i] + 64 * p + 32));
            __m256i r = reduce4(dot64_16(lo[0], hi[0], qe, qo), dot64_16(lo[1], hi[1], qe, qo),
                                dot64_16(lo[2], hi[2], qe, qo), dot64_16(lo[3], hi[3], qe, qo));
            __m256i qs = _mm256_loadu_si256((const __m256i *)(const void *)(qs8[i] + 8 * p));
            r = _mm256_sub_epi32(r, ZP ? _mm256_mullo_epi32(zpv, qs) : _mm256_slli_epi32(qs, 3));
            __m256 d = _mm256_mul_ps(sb, _mm256_loadu_ps(sa8[i] + 8 * p));
            acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(r), d, acc[i]);
        }
    }

    if (kb & 1) {
        /* The last block alone: 16 bytes per column, the first half of its q64 chunk. */
        const size_t b = kb - 1, p = kb / 2;
        const __m128i m = _mm_set1_epi8(0x0F), ones = _mm_set1_epi16(1);
        __m128i lo[4], hi[4];
        UNROLL for (int j = 0; j < 4; j++) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(wr[j] + 16 * b));
            lo[j] = _mm_and_si128(x, m);
            hi[j] = _mm_and_si128(_mm_srli_epi16(x, 4), m);
        }
        __m128 sb = _mm_setr_ps(sr[0][b], sr[1][b], sr[2][b], sr[3][b]);
        __m128i zpv = _mm_setzero_si128();
        if (ZP)
            zpv = _mm_setr_epi32(krn_q4_zp(w, col[0], b), krn_q4_zp(w, col[1], b), krn_q4_zp(w, col[2], b),
                                 krn_q4_zp(w, col[3], b));
        UNROLL for (int i = 0; i < MR; i++) {
            __m128i qe = _mm_loadu_si128((const __m128i *)(const void *)(q64[i] + 64 * p));
            __m128i qo = _mm_loadu_si128((const __m128i *)(const void *)(q64[i] + 64 * p + 32));
            __m128i d[4];
            UNROLL for (int j = 0; j < 4; j++)
                d[j] = _mm_add_epi16(_mm_maddubs_epi16(lo[j], qe), _mm_maddubs_epi16(hi[j], qo));
            __m128i r = _mm_madd_epi16(_mm_hadd_epi16(_mm_hadd_epi16(d[0], d[1]), _mm_hadd_epi16(d[2], d[3])), ones);
            __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)(qs8[i] + 8 * p));
            r = _mm_sub_epi32(r, ZP ? _mm_mullo_epi32(zpv, qs) : _mm_slli_epi32(qs, 3));
            __m128 v = _mm_mul_ps(_mm_cvtepi32_ps(r), _mm_mul_ps(sb, _mm_loadu_ps(sa8[i] + 8 * p)));
            acc[i] = _mm256_add_ps(acc[i], _mm256_set_m128(_mm_setzero_ps(), v));
        }
    }

    UNROLL for (int i = 0; i < MR; i++)
        _mm_storeu_ps(out + 4 * i, _mm_add_ps(_mm256_castps256_ps128(acc[i]), _mm256_extractf128_ps(acc[i], 1)));
}

/*
 * Stores the columns [n0, n0 + NT) of an mr-row tile (row stride NT in out)
 * that fall in [n_begin, n_end), plus bias.
 */
static void store_tile(const krn_mmnb_args *a, size_t m0, size_t mr, size_t n0, size_t n_begin, size_t n_end,
                       const float *out, size_t nt)
{
    const float *bias = a->w.bias;
    size_t j0 = n0 < n_begin ? n_begin - n0 : 0, j1 = n_end - n0 < nt ? n_end - n0 : nt;
    for (size_t i = 0; i < mr; i++) {
        float *y = a->y + (m0 + i) * a->y_ld + n0;
        const float *o = out + i * nt;
        size_t j = j0;
        if (j0 == 0)
            for (; j + 4 <= j1; j += 4) {
                __m128 v = _mm_loadu_ps(o + j);
                if (bias)
                    v = _mm_add_ps(v, _mm_loadu_ps(bias + n0 + j));
                _mm_storeu_ps(y + j, v);
            }
        for (; j < j1; j++)
            y[j] = o[j] + (bias ? bias[n0 + j] : 0.0f);
    }
}

/*
 * Rows per block of the GEMM case: their quantized activations (about 1.2 K
 * bytes per row for k = 1024) stay in L2 while every column tile of the range
 * passes over them, and each weight tile stays in L1 while the block's rows
 * pass over it.
 */
#define ROW_BLOCK 64
#define MR_TILE 4 /* rows per register tile in the GEMM case */

/* Software prefetch distance in the packed weight stream (bytes). */
#define PF_DIST 2048

/* Eight bfloat16 values at p as floats: each is the upper half of its float. */
INLINE __m256 bf16x8(const uint8_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* The 4 int8 activations at p in all eight 32-bit lanes. */
INLINE __m256i bcast4(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/*
 * Packed weights (krn_q4_pack, krn_internal.h), rows [m0, m0 + MR) times the
 * eight columns of tile n0 / 8, into out[row][col]. The columns sit in the
 * eight 32-bit lanes: per block, vector h holds each column's ONNX weight
 * bytes 4h..4h+3, whose low nibbles are k = 8h, 8h+2, 8h+4, 8h+6 and high
 * nibbles the odd k after each; those are exactly the 4-byte groups h of the
 * block's even and odd activations in the quantizer's chunk order, so one
 * broadcast of each feeds a multiply-add for all eight columns and no
 * horizontal reduction is needed. Per row and block, the eight maddubs pair
 * sums per lane (each at most 2 * 15 * 127 = 3810 in magnitude) add up in
 * int16 to at most 30480, exact; one widening multiply-add gives the block's
 * int32 dot per column (at most 32 * 15 * 127 in magnitude, exact as a
 * float), then t = sA * dot - zp8_sum (the zero point, one FMA) and
 * acc += t * sB (another). The weights of a
 * block are unpacked once for all MR rows. PF prefetches the stream ahead
 * (the first row tile of a row block is the one that reads it from memory).
 */
INLINE void i8_lanes_tile(const krn_mmnb_args *a, size_t m0, size_t n0, float *out, const int MR, const bool BF16,
                          bool pf)
{
    const krn_q4_weights *w = &a->w;
    const size_t kb = w->k_blocks, rb = krn_qa_row_bytes(kb, 32), rec = krn_q4p_block_bytes(BF16);
    const uint8_t *g = (const uint8_t *)w->packed + (n0 / KRN_Q4P_NR) * krn_q4p_tile_bytes(kb, BF16);
    const int8_t *q = krn_qa_q((void *)a->qa, m0, kb, 32);
    const float *sa = krn_qa_scale((void *)a->qa, m0, kb, 32);
    const float *zs = krn_qa_zp8_sum((void *)a->qa, m0, kb, 32);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[MR_TILE];

    UNROLL for (int i = 0; i < MR; i++)
        acc[i] = _mm256_setzero_ps();
    for (size_t b = 0; b < kb; b++, g += rec, q += 32) {
        /*
         * The hardware prefetcher alone leaves the stream at ~13 GB/s on the
         * machines measured; asking for the lines 2 KiB ahead (prefetches
         * never fault, also past the end) brings it to ~16-19 GB/s.
         */
        if (pf) {
            _mm_prefetch((const char *)g + PF_DIST, _MM_HINT_T0);
            _mm_prefetch((const char *)g + PF_DIST + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)g + PF_DIST + 128, _MM_HINT_T0);
        }
        __m256i s16[MR_TILE];
        UNROLL for (int h = 0; h < 4; h++) {
            __m256i lo, hi;
            unpack64(_mm256_loadu_si256((const __m256i *)(const void *)(g + 32 * h)), &lo, &hi);
            UNROLL for (int i = 0; i < MR; i++) {
                const int8_t *qi = q + (size_t)i * rb;
                __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(qi + 4 * h)),
                                             _mm256_maddubs_epi16(hi, bcast4(qi + 16 + 4 * h)));
                s16[i] = h ? _mm256_add_epi16(s16[i], p) : p;
            }
        }
        const __m256 sb = BF16 ? bf16x8(g + KRN_Q4P_WEIGHT_BYTES)
                               : _mm256_loadu_ps((const float *)(const void *)(g + KRN_Q4P_WEIGHT_BYTES));
        UNROLL for (int i = 0; i < MR; i++) {
            const size_t ro = (size_t)i * rb; /* the next row's statistics, in bytes */
            const float *sai = (const float *)(const void *)((const char *)sa + ro);
            const float *zsi = (const float *)(const void *)((const char *)zs + ro);
            __m256 d = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[i], ones));
            __m256 t = _mm256_fmsub_ps(d, _mm256_broadcast_ss(sai + b), _mm256_broadcast_ss(zsi + b));
            acc[i] = _mm256_fmadd_ps(t, sb, acc[i]);
        }
    }
    UNROLL for (int i = 0; i < MR; i++)
        _mm256_storeu_ps(out + 8 * i, acc[i]);
}

/*
 * Rows [m0, m0 + mr) of one tile, mr in 1..4, with the row count as a
 * constant: the lane kernel on packed weights, else the in-place one.
 */
INLINE void i8_tile_rows(const krn_mmnb_args *a, size_t m0, size_t mr, size_t n0, float *out, const bool PACKED,
                         const bool ZP, const bool BF16, bool pf)
{
    switch (mr) {
    case 4: PACKED ? i8_lanes_tile(a, m0, n0, out, 4, BF16, pf) : i8_tile32(a, m0, n0, out, 4, ZP); break;
    case 3: PACKED ? i8_lanes_tile(a, m0, n0, out, 3, BF16, pf) : i8_tile32(a, m0, n0, out, 3, ZP); break;
    case 2: PACKED ? i8_lanes_tile(a, m0, n0, out, 2, BF16, pf) : i8_tile32(a, m0, n0, out, 2, ZP); break;
    default: PACKED ? i8_lanes_tile(a, m0, n0, out, 1, BF16, pf) : i8_tile32(a, m0, n0, out, 1, ZP); break;
    }
}

/*
 * Columns [n_begin, n_end) of every row, block_size 32: row blocks, column
 * tiles (packed: eight columns from a multiple of 8, so a range cut inside a
 * tile computes it whole; in place: four from wherever the range starts),
 * register tiles of MR_TILE rows. PACKED and ZP are constants at every call.
 */
INLINE void i8_cols32(const krn_mmnb_args *a, size_t n_begin, size_t n_end, const bool PACKED, const bool ZP,
                      const bool BF16)
{
    const size_t nt = PACKED ? KRN_Q4P_NR : 4;
    float out[MR_TILE * KRN_Q4P_NR] __attribute__((aligned(32)));
    size_t first = PACKED ? n_begin / nt * nt : n_begin;
    for (size_t mb = 0; mb < a->m; mb += ROW_BLOCK) {
        size_t me = a->m - mb < ROW_BLOCK ? a->m : mb + ROW_BLOCK;
        for (size_t n0 = first; n0 < n_end; n0 += nt)
            for (size_t m0 = mb; m0 < me; m0 += MR_TILE) {
                size_t mr = me - m0 < MR_TILE ? me - m0 : MR_TILE;
                i8_tile_rows(a, m0, mr, n0, out, PACKED, ZP, BF16, m0 == mb);
                store_tile(a, m0, mr, n0, n_begin, n_end, out, nt);
            }
    }
}

/*
 * Any block size, with or without zero points, one row and one column: 64 k
 * per step, the lane sums of each step added to their block's int32 sum and
 * each block flushed in block order with the reference's float operations.
 * A last partial step (the row's bytes are not a multiple of 32) is read
 * through a zero-padded copy so nothing past the row is touched.
 */
static float i8_generic(const krn_mmnb_args *a, size_t m, size_t n)
{
    const krn_q4_weights *w = &a->w;
    const size_t bs = w->block_size, kb = w->k_blocks, row_bytes = kb * bs / 2;
    const size_t nc = krn_qa_chunks(kb, bs), kend = kb * bs;
    void *qa = (void *)a->qa;
    const int8_t *q64 = krn_qa_q64(qa, m, kb, bs);
    const float *sa = krn_qa_scale(qa, m, kb, bs);
    const int32_t *qs = krn_qa_qsum(qa, m, kb, bs);
    const uint8_t *wr = w->b_data + n * row_bytes;
    const float *sb = w->scales + n * kb;
    int32_t lanes[8] __attribute__((aligned(32)));
    float acc = 0.0f;
    int32_t isum = 0;
    size_t cur = 0;
    for (size_t c = 0; c < nc; c++) {
        __m256i v, lo, hi;
        size_t avail = row_bytes - 32 * c;
        if (avail >= 32) {
            v = _mm256_loadu_si256((const __m256i *)(const void *)(wr + 32 * c));
        } else {
            uint8_t tmp[32] = {0};
            memcpy(tmp, wr + 32 * c, avail);
            v = _mm256_loadu_si256((const __m256i *)(const void *)tmp);
        }
        unpack64(v, &lo, &hi);
        __m256i qe = _mm256_loadu_si256((const __m256i *)(const void *)(q64 + 64 * c));
        __m256i qo = _mm256_loadu_si256((const __m256i *)(const void *)(q64 + 64 * c + 32));
        _mm256_store_si256((__m256i *)(void *)lanes, dot64(lo, hi, qe, qo));
        for (size_t l = 0; l < 8 && 64 * c + 8 * l < kend; l++) {
            size_t b = (64 * c + 8 * l) / bs;
            if (b != cur) {
                acc += (float)(isum - krn_q4_zp(w, n, cur) * qs[cur]) * (sa[cur] * sb[cur]);
                cur = b;
                isum = 0;
            }
            isum += lanes[l];
        }
    }
    acc += (float)(isum - krn_q4_zp(w, n, cur) * qs[cur]) * (sa[cur] * sb[cur]);
    if (w->bias)
        acc += w->bias[n];
    return acc;
}

void krn_avx2_mmnb_i8(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    const krn_q4_weights *w = &a->w;
    if (n_begin >= n_end)
        return;
    bool packed = w->packed && !w->zero_pts;
    if (w->block_size == 32 && packed && w->packed_bf16)
        i8_cols32(a, n_begin, n_end, true, false, true);
    else if (w->block_size == 32 && packed)
        i8_cols32(a, n_begin, n_end, true, false, false);
    else if (w->block_size == 32 && w->zero_pts)
        i8_cols32(a, n_begin, n_end, false, true, false);
    else if (w->block_size == 32)
        i8_cols32(a, n_begin, n_end, false, false, false);
    else
        for (size_t m = 0; m < a->m; m++)
            for (size_t n = n_begin; n < n_end; n++)
                a->y[m * a->y_ld + n] = i8_generic(a, m, n);
}

/* ------------------------------------------------------------------------- */
/* fp32 mode                                                                   */

/* 16 weights (8 bytes) in natural k order, minus zero point, as two fp32 vectors. */
INLINE void deq16(const uint8_t *p, __m128i zpv, __m256 *lo, __m256 *hi)
{
    __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)p);
    __m128i v = _mm_and_si128(_mm_unpacklo_epi8(x, _mm_srli_epi16(x, 4)), _mm_set1_epi8(0x0F));
    v = _mm_sub_epi8(v, zpv);
    *lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
    *hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v, 8)));
}

/*
 * Full blocks are vectorized with W = (q - zp) * scale formed exactly as the
 * reference forms it; a partial last block (k not a multiple of block_size)
 * is summed in scalar code so nothing past k is read from A.
 */
INLINE void f32_tile(const krn_mmnb_args *a, size_t m0, size_t n0, const int MR, const int NR)
{
    const krn_q4_weights *w = &a->w;
    const size_t bs = w->block_size, kb = w->k_blocks, blob = bs / 2;
    const size_t kb_full = w->k / bs;
    const float *arow[4];
    const uint8_t *wrow[4];
    const float *sbrow[4];
    __m256 acc[4][4][2];
    float tail[4][4];
    __m128i zpv[4];

    UNROLL for (int i = 0; i < MR; i++) {
        arow[i] = a->a + (m0 + i) * a->a_ld;
        UNROLL for (int j = 0; j < NR; j++) {
            acc[i][j][0] = acc[i][j][1] = _mm256_setzero_ps();
            tail[i][j] = 0.0f;
        }
    }
    UNROLL for (int j = 0; j < NR; j++) {
        wrow[j] = w->b_data + (n0 + j) * kb * blob;
        sbrow[j] = w->scales + (n0 + j) * kb;
        zpv[j] = _mm_set1_epi8(8);
    }

    for (size_t b = 0; b < kb_full; b++) {
        __m256 s[4];
        UNROLL for (int j = 0; j < NR; j++) {
            s[j] = _mm256_set1_ps(sbrow[j][b]);
            if (w->zero_pts)
                zpv[j] = _mm_set1_epi8((char)krn_q4_zp(w, n0 + j, b));
        }
        for (size_t c = 0; c < bs; c += 16) {
            __m256 wl[4], wh[4];
            UNROLL for (int j = 0; j < NR; j++) {
                deq16(wrow[j] + b * blob + c / 2, zpv[j], &wl[j], &wh[j]);
                wl[j] = _mm256_mul_ps(wl[j], s[j]);
                wh[j] = _mm256_mul_ps(wh[j], s[j]);
            }
            UNROLL for (int i = 0; i < MR; i++) {
                __m256 al = _mm256_loadu_ps(arow[i] + b * bs + c);
                __m256 ah = _mm256_loadu_ps(arow[i] + b * bs + c + 8);
                UNROLL for (int j = 0; j < NR; j++) {
                    acc[i][j][0] = _mm256_fmadd_ps(al, wl[j], acc[i][j][0]);
                    acc[i][j][1] = _mm256_fmadd_ps(ah, wh[j], acc[i][j][1]);
                }
            }
        }
    }
    if (kb_full < kb) {
        size_t b = kb_full;
        UNROLL for (int j = 0; j < NR; j++) {
            float sc = sbrow[j][b];
            int zp = krn_q4_zp(w, n0 + j, b);
            for (size_t k = b * bs; k < w->k; k++) {
                float wk = (float)((int)krn_q4_get(w, n0 + j, k) - zp) * sc;
                UNROLL for (int i = 0; i < MR; i++)
                    tail[i][j] += arow[i][k] * wk;
            }
        }
    }

    UNROLL for (int i = 0; i < MR; i++)
        UNROLL for (int j = 0; j < NR; j++) {
            float v = krn_avx2_hsum(_mm256_add_ps(acc[i][j][0], acc[i][j][1])) + tail[i][j];
            if (w->bias)
                v += w->bias[n0 + j];
            a->y[(m0 + i) * a->y_ld + n0 + j] = v;
        }
}

void krn_avx2_mmnb_f32(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    size_t n = n_begin;
    if (a->m == 1) {
        for (; n + 4 <= n_end; n += 4)
            f32_tile(a, 0, n, 1, 4);
        for (; n < n_end; n++)
            f32_tile(a, 0, n, 1, 1);
        return;
    }
    for (; n < n_end; n++) {
        size_t m = 0;
        for (; m + 4 <= a->m; m += 4)
            f32_tile(a, m, n, 4, 1);
        for (; m < a->m; m++)
            f32_tile(a, m, n, 1, 1);
    }
}
