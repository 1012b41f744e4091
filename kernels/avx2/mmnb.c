/*
 * avx2/mmnb: AVX2/FMA MatMulNBits (4-bit weights) in both numeric modes, plus
 * the activation quantizer of the int8 mode.
 *
 * int8 mode (ONNX Runtime's accuracy_level 4 numerics). Weights repacked at
 * load (krn_q4_pack, block_size 32: the exported Qwen3 graphs; with zero
 * points too) are read eight columns (one record of a sixteen-column tile) at a
 * time, one column per 32-bit lane:
 * per block, four 32-byte vectors whose low and high nibbles meet broadcasts
 * of the quantizer's even and odd activations in _mm256_maddubs_epi16 (the
 * unsigned 4-bit q times the int8 activations), the products summed in int16
 * across the block and widened once, so no horizontal reduction is needed;
 * each block's int32 dot of the unsigned q is exact, and per block and row
 * one FMA takes off the zero point's share in floating point (sA * dot -
 * 8 * sA * qsum, the second term from the quantizer, as ONNX Runtime's
 * block-sum form does; zp / 8 times it with zero points) and one more applies sB to all eight columns (read
 * as fp32, or widened from the bfloat16 record of scales that fit it); an
 * integer correction cost three more instructions per row, among them a
 * transfer from a general register. Register tiles are MR rows x 8
 * columns: each block's weights are unpacked once for all MR rows, so prefill
 * (M > 1) amortizes the unpacking, and rows are blocked so their activations
 * stay in L2. Decode (M <= 2) takes both records of a block in one pass, so
 * each tile is one stream, prefetched 2 KiB ahead; reading one record of
 * each block per pass made a single-thread decode step 25% slower.
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
 * The q64/sa8/qs8 part of a record (krn_internal.h) for block_size 32 or
 * more: chunk p of q64 is [evens | odds] of k = 64p .. 64p + 63, i.e. the
 * 128-bit halves of the two 32-k storage chunks at 64p regrouped (two blocks
 * with block_size 32, one block's pair of chunks with more). Same bytes as
 * the portable krn_qa_fill_ext.
 */
static void fill_ext(void *qa, size_t m, size_t kb, size_t bs)
{
    int8_t *rec = krn_qa_q(qa, m, kb, bs);
    const float *sa = krn_qa_scale(qa, m, kb, bs);
    const int32_t *qs = krn_qa_qsum(qa, m, kb, bs);
    int8_t *q64 = krn_qa_q64(qa, m, kb, bs);
    float *sa8 = krn_qa_sa8(qa, m, kb, bs);
    int32_t *qs8 = krn_qa_qs8(qa, m, kb, bs);
    const size_t values = kb * bs;
    memset(rec + values + 12 * kb, 0, krn_qa_ext_offset(kb, bs) - values - 12 * kb);
    for (size_t c = 0; c < krn_qa_chunks(kb, bs); c++) {
        bool second = 64 * c + 32 < values;
        __m256i b0 = _mm256_loadu_si256((const __m256i *)(const void *)(rec + 64 * c));
        __m256i b1 = second ? _mm256_loadu_si256((const __m256i *)(const void *)(rec + 64 * c + 32))
                            : _mm256_setzero_si256();
        _mm256_storeu_si256((__m256i *)(void *)(q64 + 64 * c), _mm256_permute2x128_si256(b0, b1, 0x20));
        _mm256_storeu_si256((__m256i *)(void *)(q64 + 64 * c + 32), _mm256_permute2x128_si256(b0, b1, 0x31));
    }
    for (size_t p = 0; p < krn_qa_pairs(kb); p++) {
        bool second = 2 * p + 1 < kb;
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
        if (bs >= 32)
            fill_ext(qa, m, kb, bs);
        else
            krn_qa_fill_ext(qa, m, kb, bs);
    }
}

/* ------------------------------------------------------------------------- */
/* int8 mode: mmnb_i8.h (also compiled with AVX-VNNI by mmnb_avxvnni.c)        */

#define KRN_AVXVNNI 0
#define KRN_AVX2_TGT
#define KRN_I8_FN krn_avx2_mmnb_i8
#include "kernels/avx2/mmnb_i8.h"

/* 8-bit weights (also compiled with AVX-VNNI by mmnb_avxvnni.c and AVX-512 VNNI by avx512/mmnb_vnni.c) */
#define KRN8_TGT
#define KRN8_FN krn_avx2_mmnb8_i8
#include "kernels/avx2/mmnb8_i8.h"

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
