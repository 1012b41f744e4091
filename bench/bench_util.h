/*
 * bench_util: what the C benchmarks share: a monotonic clock in
 * milliseconds, a qsort comparator for medians, an xorshift generator, and
 * allocations that get transparent huge pages when large (as the engine's
 * packed weights do: long streams then take far fewer TLB misses), and a
 * comma-separated list's membership test for options.
 */
#ifndef QWEN3D_BENCH_UTIL_H
#define QWEN3D_BENCH_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static inline double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline uint64_t bench_xorshift(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/*
 * n bytes, 64-byte aligned; from 1 MiB up 2 MiB-aligned in huge pages, as the
 * engine's packed weights are (a 0.6b layer's projections are 1-2.5 MiB each,
 * and on 4 KiB pages their TLB misses would be measured as kernel time).
 * Exits on failure naming PROG.
 */
static inline void *bench_alloc(const char *prog, size_t n)
{
    size_t align = n >= ((size_t)1 << 20) ? (size_t)2 << 20 : 64;
    size_t sz = (n + align - 1) & ~(align - 1);
    void *p = aligned_alloc(align, sz ? sz : align);
    if (!p) {
        fprintf(stderr, "%s: out of memory allocating %zu bytes\n", prog, n);
        exit(1);
    }
    if (align > 64)
        madvise(p, sz, MADV_HUGEPAGE); /* a hint; failure only costs speed */
    return p;
}

/* Whether the comma-separated LIST names WORD. */
static inline int bench_list_has(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && !strncmp(p, word, n))
            return 1;
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

#endif
