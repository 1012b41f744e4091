/*
 * avx512/mmnb_vnni: the AVX-512 int8-mode MatMulNBits using VPDPBUSD. Only
 * this file's functions carry the avx512vnni target, so no VNNI instruction
 * can reach a CPU without it; krn_init() selects this kernel only when CPUID
 * reports AVX512-VNNI. Body in avx512/mmnb_i8.h. Compiled with the avx512 flags.
 */
#include "kernels/krn_internal.h"

#define KRN_VNNI 1
#ifndef KRN_TGT
#define KRN_TGT __attribute__((target("avx512vnni")))
#endif
#define KRN_I8_FN krn_avx512_mmnb_i8_vnni
#include "kernels/avx512/mmnb_i8.h"

/* 8-bit weights from their packed copy: avx512/mmnb8_packed.h. */
#include "kernels/avx512/mmnb8_packed.h"

/* 8-bit weights in place: VPDPBUSD on 256-bit vectors (EVEX, AVX512-VL), the AVX2 kernel's bits. */
#define INLINE static inline __attribute__((always_inline)) KRN_TGT
#define KRN8_TGT static KRN_TGT
#define KRN8_FN mmnb8_i8_in_place
#define KRN8_DPBUSD _mm256_dpbusd_epi32
#include "kernels/avx2/mmnb8_i8.h"
#undef INLINE

/* Both give the reference's bits. */
KRN_TGT void krn_avx512_mmnb8_i8_vnni(const krn_mmnb_args *a, size_t n_begin, size_t n_end)
{
    if (n_begin >= n_end)
        return;
    if (krn_q4_reads_packed(&a->w) && krn_q4p_groups(&a->w))
        q8p_packed(a, n_begin, n_end);
    else
        mmnb8_i8_in_place(a, n_begin, n_end);
}
