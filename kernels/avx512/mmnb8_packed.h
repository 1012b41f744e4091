/*
 * avx512/mmnb8_packed.h: the int8-mode MatMulNBits for 8-bit weights from
 * their packed copy (krn_q8p_tile), with VPDPBUSD. Included by
 * avx512/mmnb_vnni.c after avx512/mmnb_i8.h, whose helpers it uses; not a
 * standalone header.
 *
 * A register tile is up to eight rows by one tile of sixteen columns. Per
 * block the record's eight code vectors per group go straight into
 * VPDPBUSD against each row's activations broadcast four at a time (the
 * codes sit in the activations' slot order, so nothing is unpacked or
 * reordered), one load per vector, shared by the tile's rows. Each row's
 * block sum of q * qa is exact in int32, and so is its conversion to fp32
 * (|sum| < 2^24 up to blocks of 256); the zero points' term zp * qsum is an
 * exact product in fp32 too, so one FNMADD yields (float)(sum of qa * (q -
 * zp)) exactly. Then the reference's float steps: sA * scale, times the
 * dot, added in block order. The bits are the reference's (krn_ref_mmnb_i8)
 * for every row at any row count.
 */
#define INLINE static inline __attribute__((always_inline)) KRN_TGT
#define UNROLL _Pragma("GCC unroll 16")

#define MR_Q8P 8 /* rows per register tile: 8 sums, 8 block dots and 8 code vectors */

/* The record's sixteen scales: fp32, or bfloat16 upper halves widened exactly. */
INLINE __m512 q8p_scales(const uint8_t *p, const bool BF16)
{
    if (BF16)
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16));
    return _mm512_loadu_ps((const float *)(const void *)p);
}

/* One group's dots for MR rows (activations from Q, a row every RB bytes): DOT set (FIRST) or added to. */
INLINE void q8p_group(__m512i *dot, const uint8_t *gp, const int8_t *q, size_t rb, const int MR, const bool FIRST)
{
    __m512i v[8];
    UNROLL for (int h = 0; h < 8; h++)
        v[h] = _mm512_loadu_si512((const void *)(gp + 64 * h));
    UNROLL for (int i = 0; i < MR; i++, q += rb) {
        /* two chains of four: exact int32 sums in any order */
        __m512i s = dp_bcast0(v[0], q), u = dp_bcast0(v[4], q + 16);
        UNROLL for (int h = 1; h < 4; h++) {
            s = dp_bcast(s, v[h], q + 4 * h);
            u = dp_bcast(u, v[4 + h], q + 16 + 4 * h);
        }
        dot[i] = FIRST ? _mm512_add_epi32(s, u) : _mm512_add_epi32(dot[i], _mm512_add_epi32(s, u));
    }
}

/* Rows [m0, m0 + MR) times the tile at n0: see the header. Columns outside COLS are computed, not stored. */
INLINE void q8p_tile(const krn_mmnb_args *a, size_t m0, size_t n0, __mmask16 cols, const int MR, const bool BF16,
                     const bool ZP, unsigned pf)
{
    const krn_q4_weights *w = &a->w;
    const size_t G = krn_q4p_groups(w), bs = 32 * G, kb = w->k_blocks, rb = krn_qa_row_bytes(kb, bs);
    const size_t rec = krn_q8p_block_bytes(G, BF16, ZP), so = krn_q8p_scales_offset(G), zo = krn_q8p_zp_offset(G, BF16);
    const size_t pf_lines = (rec + 63) / 64;
    const uint8_t *g = krn_q8p_tile(w->packed, n0, kb, G, BF16, ZP);
    void *qa = (void *)a->qa; /* the accessors are shared with the writer; read only here */
    const int8_t *q = krn_qa_q(qa, m0, kb, bs);
    const float *sa = krn_qa_scale(qa, m0, kb, bs);
    const int32_t *qs = krn_qa_qsum(qa, m0, kb, bs);
    __m512 acc[MR_Q8P];

    UNROLL for (int i = 0; i < MR; i++)
        acc[i] = _mm512_setzero_ps();
    for (size_t b = 0; b < kb; b++, g += rec, q += bs) {
        if (pf & KRN_PF_L1)
            for (size_t l = 0; l < pf_lines; l++)
                _mm_prefetch((const char *)g + PF_DIST_PK + 64 * l, _MM_HINT_T0);
        if (pf & KRN_PF_L2)
            for (size_t l = 0; l < pf_lines; l++)
                _mm_prefetch((const char *)g + PF_L2_DIST_PK + 64 * l, _MM_HINT_T1);
        /* Each row's block scale and activation sum sit at the same distance from its codes. */
        const ptrdiff_t to_sa = (const char *)(sa + b) - (const char *)q;
        const ptrdiff_t to_qs = (const char *)(qs + b) - (const char *)q;
        __m512i dot[MR_Q8P];
        q8p_group(dot, g, q, rb, MR, true);
        for (size_t gi = 1; gi < G; gi++)
            q8p_group(dot, g + KRN_Q8P_WEIGHT_BYTES * gi, q + 32 * gi, rb, MR, false);
        const __m512 sb = q8p_scales(g + so, BF16);
        const __m512 zp = ZP ? _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(g + zo))))
                             : _mm512_set1_ps(128.0f);
        const int8_t *qi = q;
        UNROLL for (int i = 0; i < MR; i++, qi += rb) {
            const float sai = *(const float *)(const void *)((const char *)qi + to_sa);
            const int32_t qsi = *(const int32_t *)(const void *)((const char *)qi + to_qs);
            __m512 d = _mm512_fnmadd_ps(zp, _mm512_set1_ps((float)qsi), _mm512_cvtepi32_ps(dot[i]));
            acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(d, _mm512_mul_ps(_mm512_set1_ps(sai), sb)));
        }
    }
    /* The reference adds the bias, when there is one, after the blocks; + 0 changes no sum (never -0 here). */
    const __m512 bias = w->bias ? _mm512_maskz_loadu_ps(cols, w->bias + n0) : _mm512_setzero_ps();
    UNROLL for (int i = 0; i < MR; i++)
        _mm512_mask_storeu_ps(a->y + (m0 + i) * a->y_ld + n0, cols, _mm512_add_ps(acc[i], bias));
}

INLINE void q8p_rows(const krn_mmnb_args *a, size_t m0, size_t mr, size_t n0, __mmask16 cols, const bool BF16,
                     const bool ZP, unsigned pf)
{
#ifdef QD_EMU512_IMMINTRIN_H
    /* Under the tests' emulation every tile size took minutes to compile: full tiles and single rows (each
     * row's bits are the same at any tile size). */
    if (mr == 8) {
        q8p_tile(a, m0, n0, cols, 8, BF16, ZP, pf);
        return;
    }
    for (size_t i = 0; i < mr; i++)
        q8p_tile(a, m0 + i, n0, cols, 1, BF16, ZP, i ? 0 : pf);
    return;
#endif
    switch (mr) {
    case 8: q8p_tile(a, m0, n0, cols, 8, BF16, ZP, pf); break;
    case 7: q8p_tile(a, m0, n0, cols, 7, BF16, ZP, pf); break;
    case 6: q8p_tile(a, m0, n0, cols, 6, BF16, ZP, pf); break;
    case 5: q8p_tile(a, m0, n0, cols, 5, BF16, ZP, pf); break;
    case 4: q8p_tile(a, m0, n0, cols, 4, BF16, ZP, pf); break;
    case 3: q8p_tile(a, m0, n0, cols, 3, BF16, ZP, pf); break;
    case 2: q8p_tile(a, m0, n0, cols, 2, BF16, ZP, pf); break;
    default: q8p_tile(a, m0, n0, cols, 1, BF16, ZP, pf); break;
    }
}

/* Columns [n_begin, n_end) of every row, in row blocks and tiles as pk_cols() walks the 4-bit records. */
INLINE void q8p_cols(const krn_mmnb_args *a, size_t n_begin, size_t n_end, const bool BF16, const bool ZP)
{
    size_t first = n_begin / KRN_Q4_PACK_TILE * KRN_Q4_PACK_TILE;
    const unsigned pf = krn_stream_prefetch();
    pk_stream_open(krn_q8p_tile(a->w.packed, first, a->w.k_blocks, krn_q4p_groups(&a->w), BF16, ZP), pf);
    for (size_t mb = 0; mb < a->m; mb += ROW_BLOCK_PK) {
        size_t me = a->m - mb < ROW_BLOCK_PK ? a->m : mb + ROW_BLOCK_PK;
        for (size_t n0 = first; n0 < n_end; n0 += KRN_Q4_PACK_TILE) {
            size_t j0 = n0 < n_begin ? n_begin - n0 : 0, j1 = n_end - n0 < 16 ? n_end - n0 : 16;
            __mmask16 cols = (__mmask16)(((1u << j1) - 1) & ~((1u << j0) - 1));
            for (size_t m0 = mb; m0 < me;) {
                size_t mr = me - m0 < MR_Q8P ? me - m0 : MR_Q8P;
                q8p_rows(a, m0, mr, n0, cols, BF16, ZP, m0 == mb ? pf : 0);
                m0 += mr;
            }
        }
    }
}

static KRN_TGT void q8p_packed(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    if (a->w.packed_zp && a->w.packed_bf16)
        q8p_cols(a, n_begin, n_end, true, true);
    else if (a->w.packed_zp)
        q8p_cols(a, n_begin, n_end, false, true);
    else if (a->w.packed_bf16)
        q8p_cols(a, n_begin, n_end, true, false);
    else
        q8p_cols(a, n_begin, n_end, false, false);
}

#undef MR_Q8P
#undef INLINE
#undef UNROLL
