/*
 * bw_probe: the memory-read roofline of decode on this machine.
 *
 * Usage: bench/bw_probe [--mib N] [--threads 1,2] [--reps R] [--row BYTES] [--huge 0|1]
 *
 * Decode streams every weight once per token from DRAM, so the best a GEMV can
 * do is the rate at which a core (or all cores together) can read a buffer far
 * larger than the last-level cache. This program measures that rate with a few
 * read patterns, each as the median over R passes:
 *   seq        one sequential stream of 32-byte loads (AVX2 when the CPU has it)
 *   seq+pf     the same with software prefetch of every line 2 KiB ahead
 *   seq+l2pf   the same with every line also asked of L2 16 KiB ahead (what
 *              the int8 GEMV does on its packed weights)
 *   4 streams  four interleaved sequential streams, the access pattern of a
 *              kernel that reads four weight rows side by side (rows of
 *              --row bytes, default 512: K = 1024 in int4)
 *   memset     a write stream, for reference
 * With several threads, each reads its own contiguous slice (as the compute
 * pool splits a matrix by columns) and the rate is the total bytes over the
 * slowest thread's time. --huge 1 asks for transparent huge pages (fewer TLB
 * misses on long streams). Threads are pinned to CPUs 0..T-1. Never run by
 * `make check`; it asserts nothing.
 */
#include <pthread.h>
#include <sys/mman.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define BW_X86 1
#else
#define BW_X86 0
#endif

typedef enum { PAT_SEQ, PAT_SEQ_PF, PAT_SEQ_L2PF, PAT_STREAMS4, PAT_MEMSET, PAT_COUNT } pattern;
static const char *const pat_names[PAT_COUNT] = {"seq", "seq+pf", "seq+l2pf", "4 streams", "memset"};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The loops only need to keep the loads alive; an OR of everything read does. */
#if BW_X86
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n, int pf, int l2pf)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        if (pf) { /* every line, 2 KiB ahead */
            _mm_prefetch((const char *)p + i + 2048, _MM_HINT_T0);
            _mm_prefetch((const char *)p + i + 2048 + 64, _MM_HINT_T0);
        }
        if (l2pf) { /* and into L2, 16 KiB ahead */
            _mm_prefetch((const char *)p + i + 16384, _MM_HINT_T1);
            _mm_prefetch((const char *)p + i + 16384 + 64, _MM_HINT_T1);
        }
        a0 = _mm256_or_si256(a0, _mm256_load_si256((const __m256i *)(const void *)(p + i)));
        a1 = _mm256_or_si256(a1, _mm256_load_si256((const __m256i *)(const void *)(p + i + 32)));
        a2 = _mm256_or_si256(a2, _mm256_load_si256((const __m256i *)(const void *)(p + i + 64)));
        a3 = _mm256_or_si256(a3, _mm256_load_si256((const __m256i *)(const void *)(p + i + 96)));
    }
    __m256i a = _mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a, 0) | (uint64_t)_mm256_extract_epi64(a, 3);
}

/* Rows of `row` bytes, four at a time side by side, 32 bytes of each per step. */
__attribute__((target("avx2"))) static uint64_t read4_avx2(const uint8_t *p, size_t n, size_t row)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t t = 0; t + 4 * row <= n; t += 4 * row)
        for (size_t i = 0; i < row; i += 32) {
            const uint8_t *q = p + t + i;
            a0 = _mm256_or_si256(a0, _mm256_load_si256((const __m256i *)(const void *)q));
            a1 = _mm256_or_si256(a1, _mm256_load_si256((const __m256i *)(const void *)(q + row)));
            a2 = _mm256_or_si256(a2, _mm256_load_si256((const __m256i *)(const void *)(q + 2 * row)));
            a3 = _mm256_or_si256(a3, _mm256_load_si256((const __m256i *)(const void *)(q + 3 * row)));
        }
    __m256i a = _mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(a, 0) | (uint64_t)_mm256_extract_epi64(a, 3);
}
#endif

static uint64_t read_scalar(const uint8_t *p, size_t n)
{
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t a = 0, b = 0;
    for (size_t i = 0; i + 2 <= n / 8; i += 2) {
        a |= q[i];
        b |= q[i + 1];
    }
    return a | b;
}

static int have_avx2;
static size_t stream_row = 512; /* bytes per row of "4 streams": K = 1024 in int4 */

static uint64_t run_pattern(pattern pat, uint8_t *p, size_t n)
{
    switch (pat) {
    case PAT_MEMSET:
        memset(p, 1, n);
        return p[n / 2];
#if BW_X86
    case PAT_SEQ:
    case PAT_SEQ_PF:
    case PAT_SEQ_L2PF:
        if (have_avx2)
            return read_avx2(p, n, pat != PAT_SEQ, pat == PAT_SEQ_L2PF);
        return read_scalar(p, n);
    case PAT_STREAMS4:
        if (have_avx2)
            return read4_avx2(p, n, stream_row);
        return read_scalar(p, n);
#endif
    default:
        return read_scalar(p, n);
    }
}

typedef struct shared {
    uint8_t *buf;
    size_t bytes;
    int threads, reps;
    pattern pat;
    pthread_barrier_t bar;
    double *times; /* [reps][threads] */
    volatile uint64_t sink;
} shared;

typedef struct targ {
    shared *sh;
    int index;
} targ;

static void *worker(void *v)
{
    targ *t = v;
    shared *sh = t->sh;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t->index, &set);
    sched_setaffinity(0, sizeof set, &set); /* best effort */
    size_t slice = (sh->bytes / (size_t)sh->threads) & ~(size_t)4095;
    uint8_t *p = sh->buf + (size_t)t->index * slice;
    for (int r = 0; r < sh->reps; r++) {
        pthread_barrier_wait(&sh->bar);
        double t0 = now_s();
        uint64_t x = run_pattern(sh->pat, p, slice);
        sh->times[r * sh->threads + t->index] = now_s() - t0;
        sh->sink += x;
    }
    return NULL;
}

static double measure(shared *sh, pattern pat, int threads)
{
    sh->pat = pat;
    sh->threads = threads;
    pthread_barrier_init(&sh->bar, NULL, (unsigned)threads);
    pthread_t tid[64];
    targ args[64];
    for (int i = 0; i < threads; i++) {
        args[i] = (targ){sh, i};
        pthread_create(&tid[i], NULL, worker, &args[i]);
    }
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&sh->bar);
    double per[256];
    size_t slice = (sh->bytes / (size_t)threads) & ~(size_t)4095;
    for (int r = 0; r < sh->reps; r++) {
        double worst = 0;
        for (int i = 0; i < threads; i++)
            if (sh->times[r * threads + i] > worst)
                worst = sh->times[r * threads + i];
        per[r] = (double)slice * threads / worst / 1e9;
    }
    qsort(per, (size_t)sh->reps, sizeof per[0], bench_cmp_double);
    return per[sh->reps / 2];
}

int main(int argc, char **argv)
{
    size_t mib = 512;
    int reps = 9;
    const char *tlist = "1,2";
    int huge = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mib"))
            mib = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads"))
            tlist = argv[i + 1];
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--huge"))
            huge = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--row"))
            stream_row = strtoul(argv[i + 1], NULL, 10);
        else {
            fprintf(stderr, "usage: bw_probe [--mib N] [--threads 1,2] [--reps R] [--row BYTES] [--huge 0|1]\n");
            return 2;
        }
    }
    if (argc % 2 == 0 || reps < 1 || reps > 256 || mib < 16 || stream_row < 32 || stream_row % 32) {
        fprintf(stderr, "usage: bw_probe [--mib N >= 16] [--threads 1,2] [--reps 1..256] [--row 32k]\n");
        return 2;
    }
#if BW_X86
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2");
#endif
    shared sh = {0};
    sh.bytes = mib << 20;
    sh.reps = reps;
    sh.buf = aligned_alloc(2u << 20, sh.bytes);
    if (sh.buf && huge)
        madvise(sh.buf, sh.bytes, MADV_HUGEPAGE); /* best effort: THP may be off */
    sh.times = calloc((size_t)reps * 64, sizeof(double));
    if (!sh.buf || !sh.times) {
        fprintf(stderr, "bw_probe: out of memory\n");
        return 1;
    }
    memset(sh.buf, 0x5A, sh.bytes); /* fault every page in before timing */
    printf("# buffer %zu MiB%s, %s loads, median of %d passes, GB/s = 1e9 bytes/s\n", mib,
           huge ? " (transparent huge pages requested)" : "", have_avx2 ? "32-byte AVX2" : "8-byte scalar", reps);
    printf("%-8s", "threads");
    for (int p = 0; p < PAT_COUNT; p++)
        printf("  %10s", pat_names[p]);
    printf("\n");
    for (const char *s = tlist; *s;) {
        int t = atoi(s);
        if (t >= 1 && t <= 64) {
            printf("%-8d", t);
            for (int p = 0; p < PAT_COUNT; p++) {
                printf("  %10.2f", measure(&sh, (pattern)p, t));
                fflush(stdout);
            }
            printf("\n");
        }
        const char *c = strchr(s, ',');
        if (!c)
            break;
        s = c + 1;
    }
    free(sh.buf);
    free(sh.times);
    return 0;
}
