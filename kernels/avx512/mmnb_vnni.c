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

/* 8-bit weights: VPDPBUSD on 256-bit vectors (EVEX, AVX512-VL), the AVX2 kernel's bits. */
#define INLINE static inline __attribute__((always_inline)) KRN_TGT
#define KRN8_TGT KRN_TGT
#define KRN8_FN krn_avx512_mmnb8_i8_vnni
#define KRN8_DPBUSD _mm256_dpbusd_epi32
#include "kernels/avx2/mmnb8_i8.h"
#undef INLINE
