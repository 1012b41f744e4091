/*
 * tests/emu512/immintrin.h: test-only stand-in for <immintrin.h> that lets
 * kernels/avx512/ compile and run on a CPU without AVX-512. It includes the
 * real header, then SIMDe's portable AVX-512 (the Debian package
 * libsimde-dev), whose native aliases turn every _mm512_ call into its
 * emulation. The few intrinsics SIMDe 0.7.4 lacks or aliases wrongly are
 * defined below from their Intel definitions. Only test programs link the
 * objects built this way (test_kernels under other names, and
 * tests/qwen3d-emu512); an intrinsic that neither
 * provides falls through to GCC's own and fails to compile (target
 * mismatch), so nothing can silently run real AVX-512 code.
 */
#ifndef QD_EMU512_IMMINTRIN_H
#define QD_EMU512_IMMINTRIN_H

#include_next <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

/* SIMDe 0.7.4 aliases _mm512_madd_epi16 to the masked form's four arguments. */
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)

/* Lanes of k take a >> imm (16-bit lanes), the others keep src. */
#define _mm512_mask_srli_epi16(src, k, a, imm) simde_mm512_mask_mov_epi16(src, k, simde_mm512_srli_epi16(a, imm))

/*
 * Masked float loads and stores as VMOVUPS does them: only the lanes of k
 * are read or written, so memory outside them is never touched (the
 * hardware suppresses faults there).
 */
static inline simde__m512 qd_emu_mm512_maskz_loadu_ps(simde__mmask16 k, const void *p)
{
    simde__m512_private r;
    for (int i = 0; i < 16; i++) {
        r.f32[i] = 0.0f;
        if (k >> i & 1)
            memcpy(&r.f32[i], (const char *)p + 4 * i, 4);
    }
    return simde__m512_from_private(r);
}
#define _mm512_maskz_loadu_ps(k, p) qd_emu_mm512_maskz_loadu_ps(k, p)

static inline void qd_emu_mm512_mask_storeu_ps(void *p, simde__mmask16 k, simde__m512 a)
{
    simde__m512_private x = simde__m512_to_private(a);
    for (int i = 0; i < 16; i++)
        if (k >> i & 1)
            memcpy((char *)p + 4 * i, &x.f32[i], 4);
}
#define _mm512_mask_storeu_ps(p, k, a) qd_emu_mm512_mask_storeu_ps(p, k, a)

/* Sixteen fp16 values to float, exactly as VCVTPH2PS widens them (F16C on each half). */
static inline simde__m512 qd_emu_mm512_cvtph_ps(__m256i a)
{
    float out[16];
    _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm256_castsi256_si128(a)));
    _mm256_storeu_ps(out + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(a, 1)));
    return simde_mm512_loadu_ps(out);
}
#define _mm512_cvtph_ps(a) qd_emu_mm512_cvtph_ps(a)

/* int32 lanes to float, rounded to nearest as VCVTDQ2PS does. */
static inline simde__m512 qd_emu_mm512_cvtepi32_ps(simde__m512i a)
{
    simde__m512i_private x = simde__m512i_to_private(a);
    simde__m512_private r;
    for (int i = 0; i < 16; i++)
        r.f32[i] = (float)x.i32[i];
    return simde__m512_from_private(r);
}
#define _mm512_cvtepi32_ps(a) qd_emu_mm512_cvtepi32_ps(a)

/*
 * float lanes to int32, rounded as MXCSR says (to nearest even unless changed)
 * as VCVTPS2DQ does; NaN and out-of-range lanes give INT32_MIN, the integer
 * indefinite.
 */
static inline simde__m512i qd_emu_mm512_cvtps_epi32(simde__m512 a)
{
    simde__m512_private x = simde__m512_to_private(a);
    simde__m512i_private r;
    for (int i = 0; i < 16; i++) {
        float v = nearbyintf(x.f32[i]);
        r.i32[i] = v >= -2147483648.0f && v < 2147483648.0f ? (int32_t)v : INT32_MIN;
    }
    return simde__m512i_from_private(r);
}
#define _mm512_cvtps_epi32(a) qd_emu_mm512_cvtps_epi32(a)

/* Sixteen lanes of a narrower vector type widened to int32 lanes, by value. */
#define QD_EMU_WIDEN16(fn, vec, lane)                  \
    static inline simde__m512i fn(simde_##vec a)       \
    {                                                  \
        simde_##vec##_private x = simde_##vec##_to_private(a); \
        simde__m512i_private r;                        \
        for (int i = 0; i < 16; i++)                   \
            r.i32[i] = x.lane[i];                      \
        return simde__m512i_from_private(r);           \
    }
QD_EMU_WIDEN16(qd_emu_mm512_cvtepi8_epi32, _m128i, i8)   /* VPMOVSXBD: sign-extended */
QD_EMU_WIDEN16(qd_emu_mm512_cvtepu8_epi32, _m128i, u8)   /* VPMOVZXBD: zero-extended */
QD_EMU_WIDEN16(qd_emu_mm512_cvtepu16_epi32, _m256i, u16) /* VPMOVZXWD: zero-extended */
#define _mm512_cvtepi8_epi32(a) qd_emu_mm512_cvtepi8_epi32(a)
#define _mm512_cvtepu8_epi32(a) qd_emu_mm512_cvtepu8_epi32(a)
#define _mm512_cvtepu16_epi32(a) qd_emu_mm512_cvtepu16_epi32(a)

#endif
