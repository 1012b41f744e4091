/*
 * avx2/mmnb_i8.h: body of the AVX2 int8-mode MatMulNBits (see avx2/mmnb.c
 * for the method), included by avx2/mmnb.c (KRN_AVXVNNI 0) and by
 * avx2/mmnb_avxvnni.c (KRN_AVXVNNI 1), KRN_I8_FN naming the kernel and
 * KRN_AVX2_TGT the target attribute of its functions (INLINE carries it too). With
 * AVX-VNNI the packed lane kernel's per-block dot is VPDPBUSD (VEX, 256-bit)
 * into an int32 per lane instead of maddubs pair sums added in int16 and
 * widened: both are the exact int32 dot, so the two give the same bits, and
 * the float steps after it are the same. The in-place and generic paths are
 * the same code in both. Not a standalone header.
 */

#if KRN_AVXVNNI
/* acc + the u8 x s8 dot of each 32-bit lane's four bytes. */
INLINE __m256i dpbusd8(__m256i acc, __m256i w, __m256i q)
{
#ifdef KRN_EMULATED_AVXVNNI
    return simde_mm256_dpbusd_epi32(acc, w, q); /* the tests' SIMDe build (tests/emu512) */
#else
    return _mm256_dpbusd_avx_epi32(acc, w, q);
#endif
}
#endif

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
 * The int16 pair sums of q * qa over one q64 chunk. Each maddubs pair sum is
 * at most 2 * 15 * 127 = 3810 in magnitude, the two added in int16 at most
 * 7620: no saturation, the sums are exact.
 */
INLINE __m256i dot64_16(__m256i lo, __m256i hi, __m256i qe, __m256i qo)
{
    return _mm256_add_epi16(_mm256_maddubs_epi16(lo, qe), _mm256_maddubs_epi16(hi, qo));
}

/* dot64_16 widened: int32 lane sums, lane i covering k in [8i, 8i+8). */
INLINE __m256i dot64(__m256i lo, __m256i hi, __m256i qe, __m256i qo)
{
    return _mm256_madd_epi16(dot64_16(lo, hi, qe, qo), _mm256_set1_epi16(1));
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
 * Reads the ONNX rows in place (weights that were not repacked); an odd
 * last block goes through 128-bit code. MR and ZP are constants at every
 * call site; PF (the first row tile of a row block) prefetches the columns.
 */
INLINE void i8_tile32(const krn_mmnb_args *a, size_t m0, size_t n0, float *out, const int MR, const bool ZP,
                      bool pf)
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
        /* Each column's stream ahead, a line per two steps (krn_prefetch_onnx_line). */
        if (pf && p % 2 == 0)
            UNROLL for (int j = 0; j < 4; j++)
                krn_prefetch_onnx_line(wr[j] + 32 * p);
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
static KRN_AVX2_TGT void store_tile(const krn_mmnb_args *a, size_t m0, size_t mr, size_t n0, size_t n_begin, size_t n_end,
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

/* Software prefetch distance in the packed weight stream (bytes), into L1. */
#define PF_DIST 2048
/*
 * The same stream asked of L2 this far ahead, so that the L1 prefetches find
 * their lines there. At the AVX2 level (AVX-VNNI kernel) of an Emerald Rapids
 * Xeon, 0.6b decode steps took 20% less time on 1 and on 2 threads.
 */
#define PF_L2_DIST 16384

/* Eight bfloat16 values at p as floats: each is the upper half of its float. */
INLINE __m256 bf16x8(const uint8_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/*
 * A record's eight zero points (packed_zp) over 8, exact, as floats: zq * zp8_sum
 * is then zp * (sA * qsum) with one rounding, 8 * (sA * qsum) exactly when zp = 8.
 */
INLINE __m256 zp_over8(const uint8_t *p)
{
    __m128i z = _mm_loadl_epi64((const __m128i *)(const void *)p);
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(z)), _mm256_set1_ps(0.125f));
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
 * acc += t * sB (another). With zero points in the records (ZP) the
 * subtrahend is zq * zp8_sum, zq the column's zero point over 8 (zp_over8):
 * one multiply more per row, the same bits where zp is 8. The weights of a
 * block are unpacked once for all MR rows. PF prefetches the stream ahead
 * (the first row tile of a row block is the one that reads it from memory).
 */
INLINE void i8_lanes_tile(const krn_mmnb_args *a, size_t m0, size_t n0, float *out, const int MR, const int NH,
                          const bool BF16, const bool ZP, const bool GROUPED, unsigned pf)
{
    const krn_q4_weights *w = &a->w;
    const size_t G = GROUPED ? krn_q4p_groups(w) : 1, bs = 32 * G;
    const size_t kb = w->k_blocks, rb = krn_qa_row_bytes(kb, bs), rec = krn_q4p_block_bytes(G, BF16, ZP);
    const size_t pf_lines = GROUPED ? (2 * rec + 63) / 64 : 5;
    const size_t so = krn_q4p_scales_offset(G), zo = krn_q4p_zp_offset(G, BF16);
    const uint8_t *g = krn_q4p_half(w->packed, n0, kb, G, BF16, ZP);
    const int8_t *q = krn_qa_q((void *)a->qa, m0, kb, bs);
    const float *sa = krn_qa_scale((void *)a->qa, m0, kb, bs);
    const float *zs = krn_qa_zp8_sum((void *)a->qa, m0, kb, bs);
#if !KRN_AVXVNNI
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    __m256 acc[2][MR_TILE];

    UNROLL for (int e = 0; e < NH; e++)
        UNROLL for (int i = 0; i < MR; i++)
            acc[e][i] = _mm256_setzero_ps();
    for (size_t b = 0; b < kb; b++, g += 2 * rec, q += bs) {
        /*
         * The hardware prefetcher alone leaves the stream at ~13 GB/s on the
         * machines measured; asking for the lines 2 KiB ahead (prefetches
         * never fault, also past the end) brings it to ~16-19 GB/s, and
         * asking L2 for them PF_L2_DIST ahead further still. A block's
         * two records are asked for together: with NH = 1 the pass over the
         * tile's other eight columns then reads them from cache.
         */
        if (pf & KRN_PF_L1)
            UNROLL for (size_t l = 0; l < pf_lines; l++)
                _mm_prefetch((const char *)g + PF_DIST + 64 * l, _MM_HINT_T0);
        if (pf & KRN_PF_L2)
            UNROLL for (size_t l = 0; l < pf_lines; l++)
                _mm_prefetch((const char *)g + PF_L2_DIST + 64 * l, _MM_HINT_T1);
        /* The block's record of these eight columns, then with NH = 2 the tile's other eight. */
        UNROLL for (int e = 0; e < NH; e++) {
            const uint8_t *ge = g + (size_t)e * rec;
            /* Per row, the block's partial dots: with VNNI int32 sums of the low
             * nibbles' products in dot and of the high nibbles' in dot_hi (two
             * chains, added at the end); without, int16 pair sums of all of a
             * group's products in dot (and with GROUPED the groups' int32 sums
             * in dot_hi). */
            __m256i dot[MR_TILE], dot_hi[MR_TILE];
            if (GROUPED)
                UNROLL for (int i = 0; i < MR; i++)
                    dot[i] = dot_hi[i] = _mm256_setzero_si256();
            for (size_t gi = 0; gi < G; gi++) {
                const uint8_t *gw = ge + KRN_Q4P_WEIGHT_BYTES * gi;
                UNROLL for (int h = 0; h < 4; h++) {
                    __m256i lo, hi;
                    unpack64(_mm256_loadu_si256((const __m256i *)(const void *)(gw + 32 * h)), &lo, &hi);
                    UNROLL for (int i = 0; i < MR; i++) {
                        const int8_t *qi = q + (size_t)i * rb + 32 * gi;
#if KRN_AVXVNNI
                        dot[i] = dpbusd8(GROUPED || h ? dot[i] : _mm256_setzero_si256(), lo, bcast4(qi + 4 * h));
                        dot_hi[i] = dpbusd8(GROUPED || h ? dot_hi[i] : _mm256_setzero_si256(), hi,
                                            bcast4(qi + 16 + 4 * h));
#else
                        __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, bcast4(qi + 4 * h)),
                                                     _mm256_maddubs_epi16(hi, bcast4(qi + 16 + 4 * h)));
                        dot[i] = h ? _mm256_add_epi16(dot[i], p) : p;
#endif
                    }
                }
#if !KRN_AVXVNNI
                if (GROUPED) /* the group's int16 sums widened before the next group's */
                    UNROLL for (int i = 0; i < MR; i++) {
                        dot_hi[i] = _mm256_add_epi32(dot_hi[i], _mm256_madd_epi16(dot[i], ones));
                    }
#endif
            }
            const __m256 sb = BF16 ? bf16x8(ge + so) : _mm256_loadu_ps((const float *)(const void *)(ge + so));
            const __m256 zq = ZP ? zp_over8(ge + zo) : _mm256_setzero_ps();
            UNROLL for (int i = 0; i < MR; i++) {
                const size_t ro = (size_t)i * rb; /* the next row's statistics, in bytes */
                const float *sai = (const float *)(const void *)((const char *)sa + ro);
                const float *zsi = (const float *)(const void *)((const char *)zs + ro);
#if KRN_AVXVNNI
                __m256 d = _mm256_cvtepi32_ps(_mm256_add_epi32(dot[i], dot_hi[i]));
#else
                __m256 d = _mm256_cvtepi32_ps(GROUPED ? dot_hi[i] : _mm256_madd_epi16(dot[i], ones));
#endif
                __m256 z = ZP ? _mm256_mul_ps(zq, _mm256_broadcast_ss(zsi + b)) : _mm256_broadcast_ss(zsi + b);
                __m256 t = _mm256_fmsub_ps(d, _mm256_broadcast_ss(sai + b), z);
                acc[e][i] = _mm256_fmadd_ps(t, sb, acc[e][i]);
            }
        }
    }
    UNROLL for (int i = 0; i < MR; i++)
        UNROLL for (int e = 0; e < NH; e++)
            _mm256_storeu_ps(out + 8 * (NH * i + e), acc[e][i]);
}

/*
 * Rows [m0, m0 + mr) of one tile, mr in 1..4, with the row count as a
 * constant: the lane kernel on packed weights (NH records of eight columns
 * per block: 2 only for mr <= 2, which the registers hold), else the in-place
 * one.
 */
INLINE void i8_tile_rows(const krn_mmnb_args *a, size_t m0, size_t mr, size_t n0, float *out, const bool PACKED,
                         const int NH, const bool ZP, const bool BF16, const bool GROUPED, unsigned pf)
{
    switch (mr) {
    case 4:
        PACKED ? i8_lanes_tile(a, m0, n0, out, 4, 1, BF16, ZP, GROUPED, pf) : i8_tile32(a, m0, n0, out, 4, ZP, pf);
        break;
    case 3:
        PACKED ? i8_lanes_tile(a, m0, n0, out, 3, 1, BF16, ZP, GROUPED, pf) : i8_tile32(a, m0, n0, out, 3, ZP, pf);
        break;
    case 2:
        PACKED ? i8_lanes_tile(a, m0, n0, out, 2, NH, BF16, ZP, GROUPED, pf) : i8_tile32(a, m0, n0, out, 2, ZP, pf);
        break;
    default:
        PACKED ? i8_lanes_tile(a, m0, n0, out, 1, NH, BF16, ZP, GROUPED, pf) : i8_tile32(a, m0, n0, out, 1, ZP, pf);
        break;
    }
}

/*
 * Columns [n_begin, n_end) of every row, block_size 32 (or packed with
 * GROUPED, block_size 64 to 256): row blocks, column tiles (packed: eight
 * columns from a multiple of 8, or with at most two rows the whole
 * sixteen-column tile, one stream, from a multiple of 16; a range cut inside
 * a tile computes it whole; in place: four from wherever the range starts),
 * register tiles of MR_TILE rows. PACKED, ZP, BF16 and GROUPED are
 * constants at every call.
 */
INLINE void i8_cols32(const krn_mmnb_args *a, size_t n_begin, size_t n_end, const bool PACKED, const bool ZP,
                      const bool BF16, const bool GROUPED)
{
    const int nh = PACKED && a->m <= 2 ? 2 : 1;
    const size_t nt = PACKED ? KRN_Q4P_NR * (size_t)nh : 4;
    /* The packed stream's prefetches as krn_stream_prefetch() chooses; the in-place tiles' own (any bit set). */
    const unsigned pf = PACKED ? krn_stream_prefetch() : KRN_PF_L1 | KRN_PF_L2;
    float out[MR_TILE * KRN_Q4_PACK_TILE] __attribute__((aligned(32)));
    size_t first = PACKED ? n_begin / nt * nt : n_begin;
    for (size_t mb = 0; mb < a->m; mb += ROW_BLOCK) {
        size_t me = a->m - mb < ROW_BLOCK ? a->m : mb + ROW_BLOCK;
        for (size_t n0 = first; n0 < n_end; n0 += nt)
            for (size_t m0 = mb; m0 < me; m0 += MR_TILE) {
                size_t mr = me - m0 < MR_TILE ? me - m0 : MR_TILE;
                if (nh == 2) /* NH a constant in each call: it sizes the register tile */
                    i8_tile_rows(a, m0, mr, n0, out, PACKED, 2, ZP, BF16, GROUPED, m0 == mb ? pf : 0);
                else
                    i8_tile_rows(a, m0, mr, n0, out, PACKED, 1, ZP, BF16, GROUPED, m0 == mb ? pf : 0);
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
static KRN_AVX2_TGT float i8_generic(const krn_mmnb_args *a, size_t m, size_t n)
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

/* The packed kernel for one record form: BF16 scales or fp32, zero points in the records (ZP) or 8. */
INLINE void i8_packed_form(const krn_mmnb_args *a, size_t n_begin, size_t n_end, const bool BF16, const bool ZP)
{
    if (krn_q4p_groups(&a->w) > 1)
        i8_cols32(a, n_begin, n_end, true, ZP, BF16, true);
    else
        i8_cols32(a, n_begin, n_end, true, ZP, BF16, false);
}

KRN_AVX2_TGT void KRN_I8_FN(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    const krn_q4_weights *w = &a->w;
    if (n_begin >= n_end)
        return;
    if (krn_q4_reads_packed(w) && krn_q4p_groups(w)) {
        if (w->packed_zp && w->packed_bf16)
            i8_packed_form(a, n_begin, n_end, true, true);
        else if (w->packed_zp)
            i8_packed_form(a, n_begin, n_end, false, true);
        else if (w->packed_bf16)
            i8_packed_form(a, n_begin, n_end, true, false);
        else
            i8_packed_form(a, n_begin, n_end, false, false);
    } else if (w->block_size == 32 && w->zero_pts) {
        i8_cols32(a, n_begin, n_end, false, true, false, false);
    } else if (w->block_size == 32) {
        i8_cols32(a, n_begin, n_end, false, false, false, false);
    } else {
        for (size_t m = 0; m < a->m; m++)
            for (size_t n = n_begin; n < n_end; n++)
                a->y[m * a->y_ld + n] = i8_generic(a, m, n);
    }
}
