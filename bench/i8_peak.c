/*
 * i8_peak: the int8 dot-product peak of this machine, the compute roofline
 * of the prefill GEMM (mmnb_i8 with many rows).
 *
 * Usage: bench/i8_peak [--threads 1,2] [--ms T]
 *
 * Each variant runs a loop of independent u8 x s8 dot instructions on 12
 * register accumulators (24 for vpdpbusd zmm: two issues per cycle times its
 * latency take more than 12), with no loads, pinned to CPUs 0..T-1, and
 * reports the multiply-accumulates per second summed over the threads,
 * median and best of 101 short runs (--ms, 2 ms by default: short runs, as
 * bench/krn_bench times single calls, are the ones a machine shared with
 * other work leaves whole):
 *   vpdpbusd zmm   AVX-512 VNNI, 64 MACs per instruction
 *   pk_tile mix    vpdpbusd zmm as the packed kernel issues it, with its
 *                  per-block float steps (run_vnni512_mix)
 *   vpdpbusd ymm   AVX-VNNI (VEX) or AVX-512 VNNI/VL, 32 MACs
 *   maddubs zmm    AVX-512 BW without VNNI: vpmaddubsw + vpmaddwd + vpaddd
 *   maddubs ymm    AVX2 without VNNI, the same three instructions (6
 *                  accumulators: AVX2 has 16 registers)
 * Variants the CPU lacks are named and skipped. Standalone: it calls no
 * kernel. Never run by `make check`; it asserts nothing.
 */
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>

#include "bench/bench_util.h"

#define ACCS 12
#define ITERS 256
#define SAMPLES 101

typedef struct variant {
    const char *name, *needs;
    int macs; /* per instruction group and accumulator */
    bool (*have)(void);
    int64_t (*run)(int64_t reps);
} variant;

/*
 * The loops are written in assembly so that the compiler can neither merge
 * the identical products nor add register moves: 24 or 12 dots per pass for VNNI,
 * 12 triples for maddubs (each with its own temporary, so the only chains
 * are the accumulators'). Returns the number of dot instructions (triples).
 */
#define REP12(x) x(0) x(1) x(2) x(3) x(4) x(5) x(6) x(7) x(8) x(9) x(10) x(11)
#define REP24(x) REP12(x) x(14) x(15) x(16) x(17) x(18) x(19) x(20) x(21) x(22) x(23) x(24) x(25)
/* Register 12 all ones (its upper half zero in a zmm: the values do not matter), 13 bytes of 1, 14 words of 1. */
#define INPUTS "vpcmpeqd %%ymm12, %%ymm12, %%ymm12\n\tvpabsb %%ymm12, %%ymm13\n\tvpabsw %%ymm12, %%ymm14\n\t"
#define LOOP(body) "1:\n\t" body "dec %0\n\tjnz 1b"
#define CLOBBER_0_14                                                                                            \
    "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", \
        "xmm13", "xmm14", "cc"
/* acc i += the pair sums of temporary t, as int32: the AVX2 int8 dot without VNNI. */
#define MADD3(R, i, t)                                                                                         \
    "vpmaddubsw %%" R "13, %%" R "12, %%" R #t "\n\tvpmaddwd %%" R "14, %%" R #t ", %%" R #t "\n\t"          \
    "vpaddd %%" R #t ", %%" R #i ", %%" R #i "\n\t"

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static int64_t run_vnni512(int64_t reps)
{
    int64_t n = reps * ITERS;
#define D(i) "vpdpbusd %%zmm13, %%zmm12, %%zmm" #i "\n\t"
    __asm__ volatile(INPUTS LOOP(REP24(D))
                     : "+r"(n)
                     :
                     : CLOBBER_0_14, "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23",
                       "xmm24", "xmm25");
#undef D
    return reps * ITERS * 2 * ACCS;
}

/*
 * The packed int8 kernel's mix (kernels/avx512/mmnb_i8.h, pk_tile): per
 * row, 32-k block and 16 columns, eight VPDPBUSD with a broadcast
 * activation from memory, then the block's float steps, one convert, one
 * FMSUB with a broadcast scale and one FMA into the row's sum. Those steps
 * keep every row's bits equal at any batch size and level, and the two FMAs
 * share the VNNI instruction's ports on the CPUs measured, so this is the
 * kernel's ceiling, not vpdpbusd zmm's.
 */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static int64_t run_vnni512_mix(int64_t reps)
{
    int64_t n = reps * ITERS;
    /* Activation bytes, then the scale 0.5f at byte 128 and 1.0f at 132 (normal floats: no denormal stalls). */
    static const int32_t mem[64] __attribute__((aligned(64))) = {[0 ... 31] = 0x01010101, [32] = 0x3f000000,
                                                                  [33] = 0x3f800000};
#define D(i) "vpdpbusd " #i "*4(%1)%{1to16%}, %%zmm12, %%zmm" #i "\n\t"
#define F(a, f)                                                                                                 \
    "vcvtdq2ps %%zmm" #a ", %%zmm26\n\tvfmsub132ps 128(%1)%{1to16%}, %%zmm15, %%zmm26\n\t"                    \
    "vfmadd231ps %%zmm26, %%zmm15, %%zmm" #f "\n\t"
    __asm__ volatile(INPUTS "vbroadcastss 132(%1), %%zmm15\n\t"
                     LOOP(D(0) D(1) D(2) D(3) D(4) D(5) D(6) D(7) F(0, 27)
                          D(8) D(9) D(10) D(11) D(14) D(15) D(16) D(17) F(8, 28)
                          D(18) D(19) D(20) D(21) D(22) D(23) D(24) D(25) F(18, 29))
                     : "+r"(n)
                     : "r"(mem)
                     : CLOBBER_0_14, "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23",
                       "xmm24", "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "memory");
#undef F
#undef D
    return reps * ITERS * 2 * ACCS;
}

__attribute__((target("avx2,avxvnni"))) static int64_t run_vnni256(int64_t reps)
{
    int64_t n = reps * ITERS;
#define D(i) "%{vex%} vpdpbusd %%ymm13, %%ymm12, %%ymm" #i "\n\t"
    __asm__ volatile(INPUTS LOOP(REP12(D)) : "+r"(n) : : CLOBBER_0_14);
#undef D
    return reps * ITERS * ACCS;
}

/* Accumulators 0-11 and temporaries 16-27; the ymm form has 16 registers: 6 of each, twice. */
__attribute__((target("avx512f,avx512bw"))) static int64_t run_madd512(int64_t reps)
{
    int64_t n = reps * ITERS;
#define T(i, t) MADD3("zmm", i, t)
    __asm__ volatile(INPUTS LOOP(T(0, 16) T(1, 17) T(2, 18) T(3, 19) T(4, 20) T(5, 21) T(6, 22) T(7, 23) T(8, 24)
                                     T(9, 25) T(10, 26) T(11, 27))
                     : "+r"(n)
                     :
                     : CLOBBER_0_14, "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",
                       "xmm25", "xmm26", "xmm27");
#undef T
    return reps * ITERS * ACCS;
}

__attribute__((target("avx2"))) static int64_t run_madd256(int64_t reps)
{
    int64_t n = reps * ITERS;
#define T(i, t) MADD3("ymm", i, t)
    __asm__ volatile(INPUTS LOOP(T(0, 6) T(1, 7) T(2, 8) T(3, 9) T(4, 10) T(5, 11) T(0, 6) T(1, 7) T(2, 8) T(3, 9)
                                     T(4, 10) T(5, 11))
                     : "+r"(n)
                     :
                     : CLOBBER_0_14);
#undef T
    return reps * ITERS * ACCS;
}

static bool have_vnni512(void)
{
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
}
static bool have_vnni256(void)
{
    return __builtin_cpu_supports("avxvnni");
}
static bool have_avx512bw(void)
{
    return __builtin_cpu_supports("avx512bw");
}
static bool have_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}

static const variant variants[] = {
    {"vpdpbusd zmm", "avx512vnni", 64, have_vnni512, run_vnni512},
    {"pk_tile mix", "avx512vnni", 64, have_vnni512, run_vnni512_mix},
    {"vpdpbusd ymm", "avxvnni", 32, have_vnni256, run_vnni256},
    {"maddubs zmm", "avx512bw", 64, have_avx512bw, run_madd512},
    {"maddubs ymm", "avx2", 32, have_avx2, run_madd256},
};

typedef struct job {
    const variant *v;
    int cpu;
    int64_t reps, groups;
    pthread_barrier_t *bar;
    double ms;
} job;

static void *worker(void *p)
{
    job *j = p;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    pthread_barrier_wait(j->bar);
    double t0 = bench_now_ms();
    j->groups = j->v->run(j->reps);
    j->ms = bench_now_ms() - t0;
    return NULL;
}

/* GMAC/s of T threads running v for about ms milliseconds each. */
static double measure(const variant *v, int threads, int64_t reps)
{
    pthread_t tid[64];
    job jobs[64];
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job){.v = v, .cpu = t, .reps = reps, .bar = &bar};
        pthread_create(&tid[t], NULL, worker, &jobs[t]);
    }
    double slowest = 0, macs = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        slowest = jobs[t].ms > slowest ? jobs[t].ms : slowest;
        macs += (double)jobs[t].groups * v->macs;
    }
    pthread_barrier_destroy(&bar);
    return macs / slowest / 1e6;
}

int main(int argc, char **argv)
{
    char tlist[64] = "1,2";
    double ms = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            snprintf(tlist, sizeof tlist, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--ms") && i + 1 < argc)
            ms = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: i8_peak [--threads 1,2] [--ms T]\n");
            return 2;
        }
    }
    for (size_t vi = 0; vi < sizeof variants / sizeof variants[0]; vi++) {
        const variant *v = &variants[vi];
        if (!v->have()) {
            printf("%-14s skipped: no %s\n", v->name, v->needs);
            continue;
        }
        /* Calibrate one thread's repetitions to about ms. */
        int64_t reps = 1;
        for (;;) {
            double t0 = bench_now_ms();
            v->run(reps);
            double dt = bench_now_ms() - t0;
            if (dt > ms / 4 || reps > ((int64_t)1 << 40))
                break;
            reps *= 2;
        }
        reps *= 4;
        char buf[64];
        snprintf(buf, sizeof buf, "%s", tlist);
        for (char *s = strtok(buf, ","); s; s = strtok(NULL, ",")) {
            int threads = atoi(s);
            if (threads < 1 || threads > 64) {
                fprintf(stderr, "i8_peak: bad thread count '%s'\n", s);
                return 2;
            }
            double r[SAMPLES];
            for (int k = 0; k < SAMPLES; k++)
                r[k] = measure(v, threads, reps);
            qsort(r, SAMPLES, sizeof r[0], bench_cmp_double);
            printf("%-14s threads %d  median %7.1f GMAC/s  best %7.1f\n", v->name, threads, r[SAMPLES / 2],
                   r[SAMPLES - 1]);
        }
    }
    return 0;
}
