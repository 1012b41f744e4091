/*
 * avx512/mmnb_i8.h: body of the AVX-512 int8-mode MatMulNBits, included by
 * avx512/mmnb.c (KRN_VNNI 0: maddubs + madd) and avx512/mmnb_vnni.c
 * (KRN_VNNI 1: VPDPBUSD). KRN_TGT carries the extra target attribute of the
 * VNNI copy so that only functions compiled for VNNI can contain VNNI code, and
 * KRN_I8_FN names the kernel. Not a standalone header.
 *
 * One 512-bit step covers 64 consecutive k: the 32 weight bytes are spread as
 * [lo(0-15) | hi(0-15) | lo(16-31) | hi(16-31)], the order of two quantized
 * activation chunks. AVX-512 has no byte sign instruction, so the activation is
 * negated under the mask of negative weights before the unsigned-by-signed
 * multiply; products stay exact as in the AVX2 kernel. With block_size 32 a
 * step holds two blocks, whose int32 sums sit in lanes 0-7 and 8-15 and get
 * their own scales; larger blocks sum their steps in int32 first. A last lone
 * 32-block (odd k_blocks) or block_size 16 goes through 256-bit code.
 * Packed weights (the plan's copy, krn_q4_pack) take the lane kernel at the
 * end of this file instead, which gives the AVX2 kernel's bits.
 */
#include <immintrin.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline)) KRN_TGT
#define UNROLL _Pragma("GCC unroll 16") /* every row loop of a register tile, whole */

INLINE __m512i unpack64(const uint8_t *p)
{
    __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)p);
    __m512i y = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                                         _mm512_castsi256_si512(x));
    /* Shift the copies in 128-bit lanes 1 and 3 (16-bit elements 8-15, 24-31). */
    y = _mm512_mask_srli_epi16(y, (__mmask32)0xFF00FF00u, y, 4);
    return _mm512_and_si512(y, _mm512_set1_epi8(0x0F));
}

INLINE __m512i dot64(__m512i acc, __m512i wabs, __m512i qs)
{
#if KRN_VNNI
    return _mm512_dpbusd_epi32(acc, wabs, qs);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(wabs, qs), _mm512_set1_epi16(1)));
#endif
}

INLINE __m256i dot32(__m256i acc, __m256i wabs, __m256i qs)
{
#if KRN_VNNI
    return _mm256_dpbusd_epi32(acc, wabs, qs);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, qs), _mm256_set1_epi16(1)));
#endif
}

/* [x0 in lanes 0-7 | x1 in lanes 8-15] */
INLINE __m512 pair_ps(float x0, float x1)
{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(x0)),
                                               _mm256_castps_pd(_mm256_set1_ps(x1)), 1));
}

INLINE __m512i pair_epi8(int x0, int x1)
{
    return _mm512_inserti64x4(_mm512_set1_epi8((char)x0), _mm256_set1_epi8((char)x1), 1);
}

INLINE float hsum512(__m512 v)
{
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Adds the 32-element block b of rows/columns of the tile with 256-bit code. */
INLINE void block32(const krn_mmnb_args *a, size_t b, const int MR, const int NR,
                    const int8_t *const *qrow, const float *const *sarow, const uint8_t *const *wrow,
                    const float *const *sbrow, size_t n0, __m512 (*acc)[4])
{
    const krn_q4_weights *w = &a->w;
    __m256i wabs[4], wsgn[4];
    UNROLL for (int j = 0; j < NR; j++) {
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(wrow[j] + b * 16));
        __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0F));
        wsgn[j] = _mm256_sub_epi8(v, _mm256_set1_epi8((char)krn_q4_zp(w, n0 + j, b)));
        wabs[j] = _mm256_abs_epi8(wsgn[j]);
    }
    UNROLL for (int i = 0; i < MR; i++) {
        __m256i qv = _mm256_loadu_si256((const __m256i *)(const void *)(qrow[i] + b * 32));
        UNROLL for (int j = 0; j < NR; j++) {
            __m256i isum = dot32(_mm256_setzero_si256(), wabs[j], _mm256_sign_epi8(qv, wsgn[j]));
            /* Upper lanes are zero and add nothing. */
            __m512 v = _mm512_cvtepi32_ps(_mm512_inserti64x4(_mm512_setzero_si512(), isum, 0));
            acc[i][j] = _mm512_fmadd_ps(v, _mm512_set1_ps(sarow[i][b] * sbrow[j][b]), acc[i][j]);
        }
    }
}

INLINE void i8_tile(const krn_mmnb_args *a, size_t m0, size_t n0, const int MR, const int NR)
{
    const krn_q4_weights *w = &a->w;
    const size_t bs = w->block_size, kb = w->k_blocks, blob = bs / 2;
    void *qa = (void *)a->qa;
    const int8_t *qrow[4];
    const float *sarow[4];
    const uint8_t *wrow[4];
    const float *sbrow[4];
    __m512 acc[4][4];

    UNROLL for (int i = 0; i < MR; i++) {
        qrow[i] = krn_qa_q(qa, m0 + i, kb, bs);
        sarow[i] = krn_qa_scale(qa, m0 + i, kb, bs);
        UNROLL for (int j = 0; j < NR; j++)
            acc[i][j] = _mm512_setzero_ps();
    }
    UNROLL for (int j = 0; j < NR; j++) {
        wrow[j] = w->b_data + (n0 + j) * kb * blob;
        sbrow[j] = w->scales + (n0 + j) * kb;
    }

    if (bs == 32) {
        size_t b = 0;
        for (; b + 2 <= kb; b += 2) {
            __m512i wabs[4];
            __mmask64 neg[4];
            if (m0 == 0 && b % 4 == 0) /* 64 bytes of each column per two steps (krn_prefetch_onnx_line) */
                UNROLL for (int j = 0; j < NR; j++)
                    krn_prefetch_onnx_line(wrow[j] + b * 16);
            UNROLL for (int j = 0; j < NR; j++) {
                __m512i zp = pair_epi8(krn_q4_zp(w, n0 + j, b), krn_q4_zp(w, n0 + j, b + 1));
                __m512i ws = _mm512_sub_epi8(unpack64(wrow[j] + b * 16), zp);
                wabs[j] = _mm512_abs_epi8(ws);
                neg[j] = _mm512_movepi8_mask(ws);
            }
            UNROLL for (int i = 0; i < MR; i++) {
                __m512i qv = _mm512_loadu_si512((const void *)(qrow[i] + b * 32));
                __m512 sa = pair_ps(sarow[i][b], sarow[i][b + 1]);
                UNROLL for (int j = 0; j < NR; j++) {
                    __m512i qs = _mm512_mask_sub_epi8(qv, neg[j], _mm512_setzero_si512(), qv);
                    __m512i isum = dot64(_mm512_setzero_si512(), wabs[j], qs);
                    __m512 d = _mm512_mul_ps(sa, pair_ps(sbrow[j][b], sbrow[j][b + 1]));
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc[i][j]);
                }
            }
        }
        if (b < kb)
            block32(a, b, MR, NR, qrow, sarow, wrow, sbrow, n0, acc);
    } else {
        for (size_t b = 0; b < kb; b++) {
            __m512i isum[4][4];
            UNROLL for (int i = 0; i < MR; i++)
                UNROLL for (int j = 0; j < NR; j++)
                    isum[i][j] = _mm512_setzero_si512();
            for (size_t c = 0; c < bs; c += 64) {
                __m512i wabs[4];
                __mmask64 neg[4];
                if (m0 == 0 && (b * blob + c / 2) % 64 == 0)
                    UNROLL for (int j = 0; j < NR; j++)
                        krn_prefetch_onnx_line(wrow[j] + b * blob + c / 2);
                UNROLL for (int j = 0; j < NR; j++) {
                    __m512i ws = _mm512_sub_epi8(unpack64(wrow[j] + b * blob + c / 2),
                                                 _mm512_set1_epi8((char)krn_q4_zp(w, n0 + j, b)));
                    wabs[j] = _mm512_abs_epi8(ws);
                    neg[j] = _mm512_movepi8_mask(ws);
                }
                UNROLL for (int i = 0; i < MR; i++) {
                    __m512i qv = _mm512_loadu_si512((const void *)(qrow[i] + b * bs + c));
                    UNROLL for (int j = 0; j < NR; j++)
                        isum[i][j] = dot64(isum[i][j], wabs[j],
                                           _mm512_mask_sub_epi8(qv, neg[j], _mm512_setzero_si512(), qv));
                }
            }
            UNROLL for (int i = 0; i < MR; i++)
                UNROLL for (int j = 0; j < NR; j++)
                    acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[i][j]),
                                                _mm512_set1_ps(sarow[i][b] * sbrow[j][b]), acc[i][j]);
        }
    }

    UNROLL for (int i = 0; i < MR; i++)
        UNROLL for (int j = 0; j < NR; j++) {
            float v = hsum512(acc[i][j]);
            if (w->bias)
                v += w->bias[n0 + j];
            a->y[(m0 + i) * a->y_ld + n0 + j] = v;
        }
}

/* block_size 16: 128-bit code, one block at a time. */
static KRN_TGT void i8_bs16(const krn_mmnb_args *a, size_t m, size_t n)
{
    const krn_q4_weights *w = &a->w;
    const size_t kb = w->k_blocks;
    void *qa = (void *)a->qa;
    const int8_t *q = krn_qa_q(qa, m, kb, 16);
    const float *sa = krn_qa_scale(qa, m, kb, 16);
    const uint8_t *wr = w->b_data + n * kb * 8;
    __m128 acc = _mm_setzero_ps();
    for (size_t b = 0; b < kb; b++) {
        __m128i x = _mm_loadl_epi64((const __m128i *)(const void *)(wr + b * 8));
        __m128i wv = _mm_and_si128(_mm_unpacklo_epi64(x, _mm_srli_epi16(x, 4)), _mm_set1_epi8(0x0F));
        __m128i ws = _mm_sub_epi8(wv, _mm_set1_epi8((char)krn_q4_zp(w, n, b)));
        __m128i qv = _mm_loadu_si128((const __m128i *)(const void *)(q + b * 16));
        __m128i p = _mm_madd_epi16(_mm_maddubs_epi16(_mm_abs_epi8(ws), _mm_sign_epi8(qv, ws)),
                                   _mm_set1_epi16(1));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(p), _mm_set1_ps(sa[b] * w->scales[n * kb + b]), acc);
    }
    acc = _mm_add_ps(acc, _mm_movehl_ps(acc, acc));
    acc = _mm_add_ss(acc, _mm_movehdup_ps(acc));
    float v = _mm_cvtss_f32(acc);
    if (w->bias)
        v += w->bias[n];
    a->y[m * a->y_ld + n] = v;
}

/* ------------------------------------------------------------------------- */
/* Packed weights (krn_q4_pack, krn_internal.h)                                */

/*
 * A packed tile's two records per block side by side: sixteen columns, one
 * per 32-bit lane, the first record's eight in the low half. Per block and
 * row this is the AVX2 lane kernel (avx2/mmnb.c, i8_lanes_tile) twice as
 * wide: vector h holds each column's weight bytes 4h..4h+3, whose low
 * nibbles meet the broadcast activations 4h..4h+3 of the block's even k and
 * whose high nibbles those of the odd k. The block's dot per column is an
 * exact int32 either way (VPDPBUSD adds the four products of a lane
 * directly; without VNNI the int16 pair sums stay below 30480 as in AVX2),
 * and the float steps are the AVX2 kernel's, in its order: t = sA * dot -
 * zp8_sum (with zero points in the records, - zq * zp8_sum), acc += t * sB.
 * So every column comes out
 * bit for bit as the AVX2 kernel computes it, whichever level runs. Rows of a
 * register tile share only the unpacked weight vectors: each row's operations
 * are the same at every tile size, so its output does not depend on the rows
 * computed beside it (batch invariance; tests/test_kernels holds every row of
 * an M-row call to the same row alone).
 */
#define MR_PK 8 /* rows per register tile: acc[8], the 8 unpacked vectors and one row's temporaries */
/*
 * With VNNI, runs of 16 rows take one wider tile: the block's unpacking is
 * shared by twice the rows, and 16 sums, 8 weight vectors and the
 * temporaries still fit the 32 registers. 8% more GMAC/s on the 0.6b
 * projections at M = 104 and 512, one thread, Emerald Rapids (12 rows: 2% less).
 */
#define MR_PK_WIDE 16
/* Wide tiles only while the bytes their rows read (codes, scale and
 * zero-point sum per block) stay this small: 16 rows of the 4b down
 * projection (K = 9728, 190 KiB) ran 6% slower than 8, those of K = 4096
 * (80 KiB) 7% faster. */
#define WIDE_TILE_BYTES (128 * 1024)
#define ROW_BLOCK_PK 64 /* rows whose activations stay in L2 while the range's tiles pass */
#define PF_DIST_PK 4096 /* bytes ahead in each tile's stream, into L1 */
/*
 * Each block also asks L2 for its lines this far ahead: the L1 prefetches
 * then find them there instead of waiting on memory. On Emerald Rapids
 * (2 cores) 0.6b decode steps took 9% (1 thread) and 13% (2 threads) less
 * time, M = 8 products ran 3-5% faster, prompts unchanged; 8-64 KiB ahead
 * measured alike.
 */
#define PF_L2_DIST_PK 16384

/* The 4 int8 activations at p in all sixteen 32-bit lanes. */
INLINE __m512i bcast4_512(const int8_t *p)
{
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* acc + the u8 x s8 dots of w with the 4 int8 at p in every lane, the broadcast folded into the instruction. */
INLINE __m512i dp_bcast(__m512i acc, __m512i w, const int8_t *p)
{
#if KRN_VNNI && !defined(QD_EMU512_IMMINTRIN_H) /* not under the tests' emulation */
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
#else
    return _mm512_dpbusd_epi32(acc, w, bcast4_512(p));
#endif
}

/* The u8 x s8 dots of w with the 4 int8 at p in every lane, from zero (a zeroing idiom, not a register copy). */
INLINE __m512i dp_bcast0(__m512i w, const int8_t *p)
{
#if KRN_VNNI && !defined(QD_EMU512_IMMINTRIN_H)
    __m512i acc;
    __asm__("vpxord %0, %0, %0\n\tvpdpbusd %2%{1to16%}, %1, %0"
            : "=&v"(acc)
            : "v"(w), "m"(*(const int32_t *)(const void *)p));
    return acc;
#else
    return dp_bcast(_mm512_setzero_si512(), w, p);
#endif
}

/* 32 bytes at p0 in the low half, 32 at p1 in the high half. */
INLINE __m512i load_pair(const uint8_t *p0, const uint8_t *p1)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(const void *)p0)),
                              _mm256_loadu_si256((const __m256i *)(const void *)p1), 1);
}

/* The eight scales of each record (fp32, or bfloat16 upper halves) as sixteen floats. */
INLINE __m512 scales_pair(const uint8_t *p0, const uint8_t *p1, const bool BF16)
{
    if (BF16) {
        __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p0)),
                                            _mm_loadu_si128((const __m128i *)(const void *)p1), 1);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(
                                                   _mm256_loadu_ps((const float *)(const void *)p0))),
                                               _mm256_castps_pd(_mm256_loadu_ps((const float *)(const void *)p1)), 1));
}

/* The zero points of both records (packed_zp) over 8, exact (avx2/mmnb_i8.h, zp_over8). */
INLINE __m512 zp_pair_over8(const uint8_t *p0, const uint8_t *p1)
{
    __m128i z = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(const void *)p0),
                                   _mm_loadl_epi64((const __m128i *)(const void *)p1));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(z)), _mm512_set1_ps(0.125f));
}

#if !KRN_VNNI
/* One group's dot per lane without VNNI: maddubs pair sums added in int16 (at most 30480, exact), widened. */
INLINE __m512i group_dot_maddubs(const __m512i lo[4], const __m512i hi[4], const int8_t *qi)
{
    __m512i s16 = _mm512_setzero_si512();
    UNROLL for (int h = 0; h < 4; h++)
        s16 = _mm512_add_epi16(s16, _mm512_add_epi16(_mm512_maddubs_epi16(lo[h], bcast4_512(qi + 4 * h)),
                                                     _mm512_maddubs_epi16(hi[h], bcast4_512(qi + 16 + 4 * h))));
    return _mm512_madd_epi16(s16, _mm512_set1_epi16(1));
}
#endif

/* A row's float steps for one block: t = sA * dot - zq * zp8_sum (zp8_sum without ZP), acc += t * sB. */
INLINE __m512 block_step(__m512 acc, __m512 d, float sai, float zsi, __m512 zq, __m512 sb, const bool ZP)
{
    __m512 z = ZP ? _mm512_mul_ps(zq, _mm512_set1_ps(zsi)) : _mm512_set1_ps(zsi);
    __m512 t = _mm512_fmsub_ps(d, _mm512_set1_ps(sai), z);
    return _mm512_fmadd_ps(t, sb, acc);
}

/*
 * Rows [m0, m0 + MR) times the sixteen columns of the tile at n0 (a multiple
 * of 16): per block its two records, the first eight columns in the low half
 * of the vectors. The tile is one stream, which PF prefetches. Each row's
 * sums, plus the bias, go straight to y in the columns of COLS: a range cut
 * inside a tile computes it whole and stores its own columns. (Through a
 * buffer and a scalar loop the stores cost 4-9% of an 8-row product on a
 * Zen 4 EPYC, and 5% of a one-row decode.)
 * GROUPED: blocks of block_size / 32 > 1 groups of 32 k (krn_q4p_groups).
 * Each row's block dot then runs through every group's products in int32
 * (with VNNI two chains, low and high nibbles, added at the end: exact in
 * any order, as with one group) and the float steps come once per block;
 * MR is at most MR_PK (the sums stay live across the groups). Two chains
 * against one: 12% more GMAC/s at
 * M = 104 and 5-8% at M = 8 (0.6b shapes, block 128, 2 threads, Emerald
 * Rapids).
 */
INLINE void pk_tile(const krn_mmnb_args *a, size_t m0, size_t n0, __mmask16 cols, const int MR, const bool BF16,
                    const bool ZP, const bool GROUPED, unsigned pf)
{
    const krn_q4_weights *w = &a->w;
    const size_t G = GROUPED ? krn_q4p_groups(w) : 1, bs = 32 * G;
    const size_t kb = w->k_blocks, rb = krn_qa_row_bytes(kb, bs), rec = krn_q4p_block_bytes(G, BF16, ZP);
    const size_t pf_lines = GROUPED ? (2 * rec + 63) / 64 : 5;
    const uint8_t *g0 = krn_q4p_half(w->packed, n0, kb, G, BF16, ZP);
    const uint8_t *g1 = g0 + rec;
    const int8_t *q = krn_qa_q((void *)a->qa, m0, kb, bs);
    const float *sa = krn_qa_scale((void *)a->qa, m0, kb, bs);
    const float *zs = krn_qa_zp8_sum((void *)a->qa, m0, kb, bs);
    const __m512i nib = _mm512_set1_epi8(0x0F);
    __m512 acc[MR_PK_WIDE];

    UNROLL for (int i = 0; i < MR; i++)
        acc[i] = _mm512_setzero_ps();
    for (size_t b = 0; b < kb; b++, g0 += 2 * rec, g1 += 2 * rec, q += bs) {
        /* Past the tile's end the stream goes on into the next tile's first lines. */
        if (pf & KRN_PF_L1)
            UNROLL for (size_t l = 0; l < pf_lines; l++)
                _mm_prefetch((const char *)g0 + PF_DIST_PK + 64 * l, _MM_HINT_T0);
        if (pf & KRN_PF_L2)
            UNROLL for (size_t l = 0; l < pf_lines; l++)
                _mm_prefetch((const char *)g0 + PF_L2_DIST_PK + 64 * l, _MM_HINT_T1);
        /* Each row's block scale and zero-point sum sit at the same distance
         * from its codes: one pointer per row, stepped by the row size. */
        const ptrdiff_t to_sa = (const char *)(sa + b) - (const char *)q;
        const ptrdiff_t to_zs = (const char *)(zs + b) - (const char *)q;
        /* GROUPED: each row's block dot so far, low and high nibbles' products apart */
        __m512i dot[MR_PK], dot_hi[MR_PK];
        if (GROUPED)
            UNROLL for (int i = 0; i < MR && i < MR_PK; i++)
                dot[i] = dot_hi[i] = _mm512_setzero_si512();
        for (size_t gi = 0; gi < G; gi++) {
            /* The group's 128 weight bytes, unpacked once for all MR rows. */
            __m512i lo[4], hi[4];
            UNROLL for (int h = 0; h < 4; h++) {
                __m512i v = load_pair(g0 + KRN_Q4P_WEIGHT_BYTES * gi + 32 * h, g1 + KRN_Q4P_WEIGHT_BYTES * gi + 32 * h);
                lo[h] = _mm512_and_si512(v, nib);
                hi[h] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
            }
            const int8_t *qi = q + 32 * gi;
            if (GROUPED) {
                UNROLL for (int i = 0; i < MR && i < MR_PK; i++, qi += rb) {
#if KRN_VNNI
                    __m512i s = dot[i], u = dot_hi[i];
                    UNROLL for (int h = 0; h < 4; h++) {
                        s = dp_bcast(s, lo[h], qi + 4 * h);
                        u = dp_bcast(u, hi[h], qi + 16 + 4 * h);
                    }
                    dot[i] = s;
                    dot_hi[i] = u;
#else
                    dot[i] = _mm512_add_epi32(dot[i], group_dot_maddubs(lo, hi, qi));
#endif
                }
                continue;
            }
            const __m512 sb = scales_pair(g0 + KRN_Q4P_WEIGHT_BYTES, g1 + KRN_Q4P_WEIGHT_BYTES, BF16);
            const __m512 zq = ZP ? zp_pair_over8(g0 + krn_q4p_zp_offset(1, BF16), g1 + krn_q4p_zp_offset(1, BF16))
                                 : _mm512_setzero_ps();
            UNROLL for (int i = 0; i < MR; i++, qi += rb) {
                const float sai = *(const float *)(const void *)((const char *)qi + to_sa);
                const float zsi = *(const float *)(const void *)((const char *)qi + to_zs);
#if KRN_VNNI
                /* Two chains of four (low and high nibbles), added: the sum is an
                 * exact int32 in any order, and half the chain's latency lets more
                 * rows and blocks overlap (3-8% more GMAC/s at M >= 8). */
                __m512i s = dp_bcast0(lo[0], qi);
                __m512i u = dp_bcast0(hi[0], qi + 16);
                UNROLL for (int h = 1; h < 4; h++) {
                    s = dp_bcast(s, lo[h], qi + 4 * h);
                    u = dp_bcast(u, hi[h], qi + 16 + 4 * h);
                }
                __m512 d = _mm512_cvtepi32_ps(_mm512_add_epi32(s, u));
#else
                __m512 d = _mm512_cvtepi32_ps(group_dot_maddubs(lo, hi, qi));
#endif
                acc[i] = block_step(acc[i], d, sai, zsi, zq, sb, ZP);
            }
        }
        if (GROUPED) {
            /* The block's float steps, as with one group. */
            const size_t so = krn_q4p_scales_offset(G), zo = krn_q4p_zp_offset(G, BF16);
            const __m512 sb = scales_pair(g0 + so, g1 + so, BF16);
            const __m512 zq = ZP ? zp_pair_over8(g0 + zo, g1 + zo) : _mm512_setzero_ps();
            const int8_t *qi = q;
            UNROLL for (int i = 0; i < MR && i < MR_PK; i++, qi += rb) {
                const float sai = *(const float *)(const void *)((const char *)qi + to_sa);
                const float zsi = *(const float *)(const void *)((const char *)qi + to_zs);
#if KRN_VNNI
                const __m512i dot_i = _mm512_add_epi32(dot[i], dot_hi[i]);
#else
                const __m512i dot_i = dot[i];
#endif
                acc[i] = block_step(acc[i], _mm512_cvtepi32_ps(dot_i), sai, zsi, zq, sb, ZP);
            }
        }
    }
    /* Adding zeros without a bias keeps the bits of y = sum + 0.0f (-0 becomes +0). */
    const __m512 bias = w->bias ? _mm512_maskz_loadu_ps(cols, w->bias + n0) : _mm512_setzero_ps();
    UNROLL for (int i = 0; i < MR; i++)
        _mm512_mask_storeu_ps(a->y + (m0 + i) * a->y_ld + n0, cols, _mm512_add_ps(acc[i], bias));
}

INLINE void pk_rows(const krn_mmnb_args *a, size_t m0, size_t mr, size_t n0, __mmask16 cols, const bool BF16,
                    const bool ZP, const bool GROUPED, unsigned pf)
{
    switch (mr) {
    case 8: pk_tile(a, m0, n0, cols, 8, BF16, ZP, GROUPED, pf); break;
    case 7: pk_tile(a, m0, n0, cols, 7, BF16, ZP, GROUPED, pf); break;
    case 6: pk_tile(a, m0, n0, cols, 6, BF16, ZP, GROUPED, pf); break;
    case 5: pk_tile(a, m0, n0, cols, 5, BF16, ZP, GROUPED, pf); break;
    case 4: pk_tile(a, m0, n0, cols, 4, BF16, ZP, GROUPED, pf); break;
    case 3: pk_tile(a, m0, n0, cols, 3, BF16, ZP, GROUPED, pf); break;
    case 2: pk_tile(a, m0, n0, cols, 2, BF16, ZP, GROUPED, pf); break;
    default: pk_tile(a, m0, n0, cols, 1, BF16, ZP, GROUPED, pf); break;
    }
}

/* The tiles prefetch ahead (PF_DIST_PK into L1, PF_L2_DIST_PK into L2): the
 * opening lines of a range's first tile, at G, are asked for here. */
INLINE void pk_stream_open(const void *g, unsigned pf)
{
    const char *p = g;
    if (pf & KRN_PF_L1)
        for (size_t o = 0; o < PF_DIST_PK; o += 64)
            _mm_prefetch(p + o, _MM_HINT_T0); /* past the last tile: a prefetch never faults */
    if (pf & KRN_PF_L2)
        for (size_t o = pf & KRN_PF_L1 ? PF_DIST_PK : 0; o < PF_L2_DIST_PK; o += 64)
            _mm_prefetch(p + o, _MM_HINT_T1);
}

/*
 * Columns [n_begin, n_end) of every row: row blocks, then tiles from the
 * one holding n_begin (a range cut inside a tile computes it whole and stores
 * its own columns), then register tiles of MR_PK_WIDE rows (VNNI, one group
 * per block) and MR_PK.
 */
INLINE void pk_cols(const krn_mmnb_args *a, size_t n_begin, size_t n_end, const bool BF16, const bool ZP,
                    const bool GROUPED, const bool WIDE)
{
    size_t first = n_begin / KRN_Q4_PACK_TILE * KRN_Q4_PACK_TILE;
    const unsigned pf = krn_stream_prefetch();
    pk_stream_open(krn_q4p_half(a->w.packed, first, a->w.k_blocks, krn_q4p_groups(&a->w), BF16, ZP), pf);
    for (size_t mb = 0; mb < a->m; mb += ROW_BLOCK_PK) {
        size_t me = a->m - mb < ROW_BLOCK_PK ? a->m : mb + ROW_BLOCK_PK;
        for (size_t n0 = first; n0 < n_end; n0 += KRN_Q4_PACK_TILE) {
            size_t j0 = n0 < n_begin ? n_begin - n0 : 0, j1 = n_end - n0 < 16 ? n_end - n0 : 16;
            __mmask16 cols = (__mmask16)(((1u << j1) - 1) & ~((1u << j0) - 1));
            for (size_t m0 = mb; m0 < me;) {
                if (WIDE && !GROUPED && me - m0 >= MR_PK_WIDE) {
                    pk_tile(a, m0, n0, cols, MR_PK_WIDE, BF16, ZP, false, m0 == mb ? pf : 0);
                    m0 += MR_PK_WIDE;
                    continue;
                }
                size_t mr = me - m0 < MR_PK ? me - m0 : MR_PK;
                pk_rows(a, m0, mr, n0, cols, BF16, ZP, GROUPED, m0 == mb ? pf : 0);
                m0 += mr;
            }
        }
    }
}

/* The packed kernel for one record form: BF16 scales or fp32, zero points in the records (ZP) or 8. */
INLINE void i8_packed_form(const krn_mmnb_args *a, size_t n_begin, size_t n_end, const bool BF16, const bool ZP)
{
    if (krn_q4p_groups(&a->w) > 1) {
        pk_cols(a, n_begin, n_end, BF16, ZP, true, false);
        return;
    }
    const bool wide = KRN_VNNI && MR_PK_WIDE * a->w.k_blocks * (32 + 2 * sizeof(float)) <= WIDE_TILE_BYTES;
    if (wide)
        pk_cols(a, n_begin, n_end, BF16, ZP, false, true);
    else
        pk_cols(a, n_begin, n_end, BF16, ZP, false, false);
}

static KRN_TGT void i8_packed(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    if (a->w.packed_zp && a->w.packed_bf16)
        i8_packed_form(a, n_begin, n_end, true, true);
    else if (a->w.packed_zp)
        i8_packed_form(a, n_begin, n_end, false, true);
    else if (a->w.packed_bf16)
        i8_packed_form(a, n_begin, n_end, true, false);
    else
        i8_packed_form(a, n_begin, n_end, false, false);
}

KRN_TGT void KRN_I8_FN(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    if (n_begin >= n_end)
        return;
    if (krn_q4_reads_packed(&a->w) && krn_q4p_groups(&a->w)) {
        i8_packed(a, n_begin, n_end);
        return;
    }
    if (a->w.block_size == 16) {
        for (size_t m = 0; m < a->m; m++)
            for (size_t n = n_begin; n < n_end; n++)
                i8_bs16(a, m, n);
        return;
    }
    size_t n = n_begin;
    if (a->m == 1) {
        for (; n + 4 <= n_end; n += 4)
            i8_tile(a, 0, n, 1, 4);
        for (; n < n_end; n++)
            i8_tile(a, 0, n, 1, 1);
        return;
    }
    for (; n + 2 <= n_end; n += 2) {
        size_t m = 0;
        for (; m + 4 <= a->m; m += 4)
            i8_tile(a, m, n, 4, 2);
        for (; m < a->m; m++)
            i8_tile(a, m, n, 1, 2);
    }
    for (; n < n_end; n++) {
        size_t m = 0;
        for (; m + 4 <= a->m; m += 4)
            i8_tile(a, m, n, 4, 1);
        for (; m < a->m; m++)
            i8_tile(a, m, n, 1, 1);
    }
}

#undef INLINE
#undef UNROLL
