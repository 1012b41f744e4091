/*
 * avx2/mmnb_avxvnni: the AVX2 level's int8 MatMulNBits with AVX-VNNI
 * (VPDPBUSD on 256-bit vectors, VEX-encoded: CPUs with AVX2 and AVX-VNNI but
 * without AVX-512, such as Intel's Alder Lake and later cores and Sierra
 * Forest). krn.c picks it on the avx2 level where the CPU has AVX-VNNI; it
 * gives the AVX2 kernel's bits (avx2/mmnb_i8.h); likewise its 8-bit weights'
 * kernel (avx2/mmnb8_i8.h). Its functions are compiled
 * for AVX-VNNI; the tests also build it over SIMDe (KRN_EMULATED_AVXVNNI).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/avx2/simd.h"
#include "kernels/krn_internal.h"

/* Per function (GCC and clang alike), not for the file: the tests' build over SIMDe must not get it. */
#ifdef KRN_EMULATED_AVXVNNI
#define KRN_AVX2_TGT
#else
#define KRN_AVX2_TGT __attribute__((target("avxvnni")))
#endif
#define UNROLL _Pragma("GCC unroll 8")
#define INLINE static inline __attribute__((always_inline)) KRN_AVX2_TGT

#define KRN_AVXVNNI 1
#define KRN_I8_FN krn_avx2_mmnb_i8_avxvnni
#include "kernels/avx2/mmnb_i8.h"

#define KRN8_TGT KRN_AVX2_TGT
#define KRN8_FN krn_avx2_mmnb8_i8_avxvnni
#define KRN8_DPBUSD dpbusd8
#include "kernels/avx2/mmnb8_i8.h"
