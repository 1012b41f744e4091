/*
 * avx2/mmnb8_i8.h: body of the int8-mode MatMulNBits for 8-bit weights,
 * read in place in the ONNX layout (one byte per weight). Included by
 * avx2/mmnb.c (no KRN8_DPBUSD: maddubs on the codes recentred to signed),
 * and by avx2/mmnb_avxvnni.c and avx512/mmnb_vnni.c with KRN8_DPBUSD(acc, w,
 * q), VPDPBUSD on 256-bit vectors (VEX or EVEX). KRN8_FN names the kernel;
 * KRN8_TGT is its target attribute, which INLINE carries too. Not a
 * standalone header.
 *
 * Columns go eight at a time. Per block and row, each column's exact int32
 * dot of its codes with the row's quantized activations, one lane vector per
 * column; a transposing sum turns the eight into one vector of eight dots,
 * which the zero points' term (zp times the block's activation sum) makes
 * the reference's sum of qa * (q - zp). Then the reference's float steps,
 * for eight columns at once: sA * scale, times the dot, added in block order.
 * Every step is exact or the reference's own rounding, so the bits are its.
 */

INLINE __m256i krn8_load_w(const uint8_t *p, bool lo16)
{
    if (lo16)
        return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(const void *)p)),
                                       _mm_setzero_si128(), 1);
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}

/* Per 128-bit half: its eight even-k bytes then its eight odd-k bytes, interleaved back to k order. */
INLINE __m256i krn8_interleave(__m256i x)
{
    const __m256i m = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15, 0, 8, 1, 9, 2, 10, 3,
                                       11, 4, 12, 5, 13, 6, 14, 7, 15);
    return _mm256_shuffle_epi8(x, m);
}

/* The 32 quantized activations of one chunk, from slot order (k = 0, 2, ..., 30, 1, 3, ..., 31) to k order. */
INLINE __m256i krn8_q_natural(const int8_t *p)
{
    return krn8_interleave(_mm256_permute4x64_epi64(_mm256_loadu_si256((const __m256i *)(const void *)p), 0xD8));
}

/* Two blocks of 16 (slot order per block: its eight even k, then its eight odd k) to k order; lo16 only: one. */
INLINE __m256i krn8_q_natural16(const int8_t *p, bool lo16)
{
    return krn8_interleave(krn8_load_w((const uint8_t *)(const void *)p, lo16));
}

/*
 * acc + the dot of each 32-bit lane's four codes with the activations: with
 * VPDPBUSD the codes as they are (unsigned), so the sum is of q * qa; without,
 * maddubs on |q - 128| and qa carrying the sign of q - 128 (each pair's sum
 * is at most 2 * 128 * 127, no saturation), so the sum is of (q - 128) * qa.
 */
INLINE __m256i krn8_dot(__m256i acc, __m256i w, __m256i q)
{
#ifdef KRN8_DPBUSD
    return KRN8_DPBUSD(acc, w, q);
#else
    __m256i ws = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80));
    __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(ws), _mm256_sign_epi8(q, ws));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
#endif
}

/* What krn8_dot's sum lacks of sum qa * (q - zp): zp8 is zp (VPDPBUSD) or zp - 128, per column. */
#ifdef KRN8_DPBUSD
#define KRN8_ZP_BIAS 0
#else
#define KRN8_ZP_BIAS 128
#endif

/* The eight lane vectors' sums per 128-bit half: half 0 in lo, half 1 in hi, column c in lane c of each. */
INLINE void krn8_transpose_sum(const __m256i d[8], __m256i *lo, __m256i *hi)
{
    __m256i h01 = _mm256_hadd_epi32(d[0], d[1]), h23 = _mm256_hadd_epi32(d[2], d[3]);
    __m256i h45 = _mm256_hadd_epi32(d[4], d[5]), h67 = _mm256_hadd_epi32(d[6], d[7]);
    __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    *lo = _mm256_permute2x128_si256(a, b, 0x20);
    *hi = _mm256_permute2x128_si256(a, b, 0x31);
}

/* One block's float step for eight columns: acc + (float)(dot - zp8 * qsum) * (sa * scale). */
INLINE __m256 krn8_block_step(__m256 acc, __m256i dot, __m256i zp8, int32_t qsum, float sa, __m256 sc)
{
    __m256i isum = _mm256_sub_epi32(dot, _mm256_mullo_epi32(zp8, _mm256_set1_epi32(qsum)));
    return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(_mm256_set1_ps(sa), sc)));
}

/* r[c] lane j -> v[j] lane c: an 8 x 8 transpose of 32-bit elements. */
INLINE void krn8_transpose8(const __m256 r[8], __m256 v[8])
{
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    v[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    v[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/*
 * Scales and zero-point terms of blocks b0 .. b0 + 7 for the eight columns
 * cn[]: sc[j] and zp[j] lane c are column cn[c]'s for block b0 + j. Each
 * column's eight are contiguous, read as one vector and transposed (a
 * gather per block cost more than the block's dots); past kb, zeros.
 */
INLINE void krn8_chunk(const krn_q4_weights *w, const size_t cn[8], size_t kb, size_t b0, __m256 sc[8],
                       __m256i zp[8])
{
    __m256 r[8], z[8];
    if (b0 + 8 <= kb) {
        for (size_t c = 0; c < 8; c++) {
            r[c] = _mm256_loadu_ps(w->scales + cn[c] * kb + b0);
            if (w->zero_pts)
                z[c] = _mm256_castsi256_ps(_mm256_cvtepu8_epi32(
                    _mm_loadl_epi64((const __m128i *)(const void *)(w->zero_pts + cn[c] * kb + b0))));
        }
    } else {
        float fs[8][8] = {{0}};
        int32_t fz[8][8] = {{0}};
        for (size_t c = 0; c < 8; c++) {
            for (size_t j = 0; b0 + j < kb; j++) {
                fs[c][j] = w->scales[cn[c] * kb + b0 + j];
                fz[c][j] = w->zero_pts ? w->zero_pts[cn[c] * kb + b0 + j] : 0;
            }
            r[c] = _mm256_loadu_ps(fs[c]);
            z[c] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(const void *)fz[c]));
        }
    }
    krn8_transpose8(r, sc);
    if (w->zero_pts) {
        __m256 t[8];
        krn8_transpose8(z, t);
        for (size_t j = 0; j < 8; j++)
            zp[j] = _mm256_sub_epi32(_mm256_castps_si256(t[j]), _mm256_set1_epi32(KRN8_ZP_BIAS));
    } else {
        for (size_t j = 0; j < 8; j++)
            zp[j] = _mm256_set1_epi32(128 - KRN8_ZP_BIAS);
    }
}

#define KRN8_MR 4 /* rows per pass over a block of the eight columns (their float sums stay in registers) */
/* Blocks per column whose transposed scales and zero points one tile keeps for all its row passes (16 KiB). */
#define KRN8_KEEP_BLOCKS 256

KRN8_TGT void KRN8_FN(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    const krn_q4_weights *w = &a->w;
    const size_t bs = w->block_size, kb = w->k_blocks, stride = kb * bs;
    void *qa = (void *)a->qa; /* the accessors are shared with the writer; read only here */
    /* a tile's scales and zero points, transposed once for all its row passes when they fit; else per pass */
    const bool keep = kb <= KRN8_KEEP_BLOCKS;
    __m256 sct[KRN8_KEEP_BLOCKS];
    __m256i zpt[KRN8_KEEP_BLOCKS];
    for (size_t n0 = n_begin; n0 < n_end; n0 += 8) {
        const size_t nc = n_end - n0 < 8 ? n_end - n0 : 8;
        const uint8_t *col[8];
        size_t cn[8]; /* the column each lane reads: past nc, the tile's first again (its result is dropped) */
        for (size_t c = 0; c < 8; c++) {
            cn[c] = n0 + (c < nc ? c : 0);
            col[c] = w->b_data + cn[c] * stride;
        }
        for (size_t m0 = 0; m0 < a->m; m0 += KRN8_MR) {
            const size_t mr = a->m - m0 < KRN8_MR ? a->m - m0 : KRN8_MR;
            __m256 acc[KRN8_MR];
            for (size_t r = 0; r < KRN8_MR; r++)
                acc[r] = _mm256_setzero_ps();
            for (size_t b = 0; b < kb; b += bs == 16 ? 2 : 1) {
                const size_t nb = bs == 16 && b + 1 < kb ? 2 : 1; /* blocks this step covers */
                const size_t at = keep ? b : b % 8, at1 = nb == 2 ? at + 1 : at; /* b is even when nb is 2 */
                if (b % 8 == 0 && (m0 == 0 || !keep))
                    krn8_chunk(w, cn, kb, b, sct + (at - b % 8), zpt + (at - b % 8));
                const __m256 scv[2] = {sct[at], sct[at1]};
                const __m256i zpv[2] = {zpt[at], zpt[at1]};
                if (m0 == 0 && (b * bs) % 64 == 0) /* a line per column; the later row passes find them in cache */
                    for (size_t c = 0; c < 8; c++)
                        for (size_t o = 0; o < (bs < 64 ? 64 : bs); o += 64)
                            krn_prefetch_onnx_line(col[c] + b * bs + o);
                for (size_t r = 0; r < mr; r++) {
                    const size_t m = m0 + r;
                    const int8_t *q = krn_qa_q(qa, m, kb, bs);
                    const float *sa = krn_qa_scale(qa, m, kb, bs);
                    const int32_t *qs = krn_qa_qsum(qa, m, kb, bs);
                    __m256i d[8], lo, hi;
                    for (size_t c = 0; c < 8; c++)
                        d[c] = _mm256_setzero_si256();
                    if (bs == 16) {
                        bool one = nb == 1;
                        __m256i qv = krn8_q_natural16(q + b * 16, one);
                        for (size_t c = 0; c < 8; c++)
                            d[c] = krn8_dot(d[c], krn8_load_w(col[c] + b * 16, one), qv);
                        krn8_transpose_sum(d, &lo, &hi);
                        acc[r] = krn8_block_step(acc[r], lo, zpv[0], qs[b], sa[b], scv[0]);
                        if (!one)
                            acc[r] = krn8_block_step(acc[r], hi, zpv[1], qs[b + 1], sa[b + 1], scv[1]);
                        continue;
                    }
                    for (size_t g = 0; g < bs; g += 32) {
                        __m256i qv = krn8_q_natural(q + b * bs + g);
                        for (size_t c = 0; c < 8; c++)
                            d[c] = krn8_dot(d[c], krn8_load_w(col[c] + b * bs + g, false), qv);
                    }
                    krn8_transpose_sum(d, &lo, &hi);
                    acc[r] = krn8_block_step(acc[r], _mm256_add_epi32(lo, hi), zpv[0], qs[b], sa[b], scv[0]);
                }
            }
            for (size_t r = 0; r < mr; r++) {
                float out[8];
                __m256 v = acc[r];
                if (w->bias) {
                    float bv[8];
                    for (size_t c = 0; c < 8; c++)
                        bv[c] = w->bias[cn[c]];
                    v = _mm256_add_ps(v, _mm256_loadu_ps(bv));
                }
                _mm256_storeu_ps(out, v);
                memcpy(a->y + (m0 + r) * a->y_ld + n0, out, nc * sizeof *out);
            }
        }
    }
}

#undef KRN8_MR
#undef KRN8_KEEP_BLOCKS
#undef KRN8_ZP_BIAS
