/*
 * attn_bench: single-thread micro-benchmark of the GroupQueryAttention core
 * on Qwen3 shapes, per kernel level and KV cache type.
 *
 * Usage: bench/attn_bench [--level ref|avx2|avx512|all] [--shapes 0.6b|4b|all]
 *                         [--contexts 1024,4096] [--prefill 512] [--min-ms T] [--hot]
 *                         [--token-major] [--huge-pages] [--capacity N]
 *                         [--kv-types f32,f16,q8]
 *
 * Decode: one new token over a context of C cached tokens, the cache laid
 * out as the session cache and the tensor contract ([kv_head, token,
 * head_dim]; --token-major: [token, kv_head, head_dim], the session layout
 * of earlier versions, for comparison), one layer's worth of
 * heads per call; reported as ms per layer and the rate at which K and V were
 * read (2 * C * kv_heads * head_dim elements of the cache type). Every call
 * uses the next of several caches that together exceed the last-level cache,
 * as a decode step sees 28-36 layers' caches in turn (--hot reuses one, the
 * compute ceiling when it fits in cache). The caches sit on 4 KiB pages, as
 * the session cache does (kvcache/kv.c turns transparent huge pages off for
 * it); --huge-pages maps them on 2 MiB pages instead, to show what page
 * boundaries cost the stream. --capacity N spaces the kv heads N rows apart
 * (the context's rows filled, the rest never touched), as a session cache
 * reserves its capacity per head; without it the heads are packed, so a
 * pass's reads past its last row land in the next head. Prefill: S new tokens
 * attending causally to themselves, ms per layer. Never run by `make check`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench/bench_util.h"
#include "kernels/krn.h"

typedef struct shape {
    const char *model;
    size_t nq, nkv, hd;
} shape;

static const shape shapes[] = {{"0.6b", 16, 8, 128}, {"4b", 32, 8, 128}};

#define COLD_BYTES ((size_t)256 << 20)

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static bool hot;        /* one cache copy: the compute ceiling when it fits in cache */
static bool token_major; /* [token, kv_head, head_dim] instead of [kv_head, token, head_dim] */
static bool huge_pages;  /* caches on transparent huge pages instead of 4 KiB pages */
static size_t capacity;  /* rows reserved per kv head in the head-major layout (0: the context's) */

static float rnd(void)
{
    return (float)(bench_xorshift(&rng_state) >> 40) / 16777216.0f - 0.5f;
}

#define HUGE_PAGE ((size_t)2 << 20)

/* The length mapped for a cache of BYTES: whole huge pages. */
static size_t cache_span(size_t bytes)
{
    return (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
}

/* BYTES of zeroed memory on 4 KiB pages, or on huge pages with --huge-pages. */
static void *cache_alloc(size_t bytes)
{
    size_t huge = HUGE_PAGE, len = cache_span(bytes);
    uint8_t *r = mmap(NULL, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) {
        fprintf(stderr, "attn_bench: cannot map %zu bytes\n", bytes);
        exit(1);
    }
    /* Start on a 2 MiB boundary, so that huge pages cover the whole cache; unmap the rest. */
    uint8_t *p = (uint8_t *)(((uintptr_t)r + huge - 1) & ~(uintptr_t)(huge - 1));
    if (p > r)
        munmap(r, (size_t)(p - r));
    if (r + len + huge > p + len)
        munmap(p + len, (size_t)(r + len + huge - (p + len)));
    madvise(p, len, huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE); /* hints */
    return p;
}

static void cache_free(void *p, size_t bytes)
{
    munmap(p, cache_span(bytes));
}

/*
 * HEADS x FILLED cache rows of HD values in [-0.5, 0.5), as type T, each
 * head's rows STRIDE rows apart (rows past FILLED stay untouched).
 */
static void *make_cache(size_t heads, size_t filled, size_t stride, size_t hd, krn_kv_type t)
{
    size_t row = krn_kv_row_elems(t, hd) * krn_kv_elem_bytes(t);
    uint8_t *c = cache_alloc(heads * stride * row);
    float x[KRN_MAX_HEAD_DIM];
    for (size_t h = 0; h < heads; h++)
        for (size_t r = 0; r < filled; r++) {
            for (size_t d = 0; d < hd; d++)
                x[d] = rnd();
            krn_kv_row_from_f32(t, x, hd, c + (h * stride + r) * row);
        }
    return c;
}

static double run(const krn_table *tab, const shape *sh, size_t ctx, size_t seq, krn_kv_type kt, double min_ms,
                  size_t *bytes_per_call)
{
    size_t T = ctx + seq, rl = krn_kv_row_elems(kt, sh->hd), elems = T * sh->nkv * rl, esz = krn_kv_elem_bytes(kt);
    size_t copies = seq > 1 || hot ? 1 : COLD_BYTES / (2 * elems * esz) + 1;
    /* Head-major: each head's rows, spaced by the capacity; token-major: all rows in one run. */
    size_t heads = token_major ? 1 : sh->nkv, per_head = token_major ? T * sh->nkv : T;
    size_t stride = !token_major && capacity > T ? capacity : per_head, span = heads * stride * rl * esz;
    if (copies > 1024) /* still past the last-level cache at the smallest contexts */
        copies = 1024;
    void **k = calloc(copies, sizeof *k), **v = calloc(copies, sizeof *v);
    for (size_t c = 0; c < copies; c++) {
        k[c] = make_cache(heads, per_head, stride, sh->hd, kt);
        v[c] = make_cache(heads, per_head, stride, sh->hd, kt);
    }
    size_t qn = seq * sh->nq * sh->hd;
    float *q = bench_alloc("attn_bench", qn * sizeof(float)), *out = bench_alloc("attn_bench", qn * sizeof(float));
    for (size_t i = 0; i < qn; i++)
        q[i] = rnd();
    krn_gqa_args a = {.q = q, .q_ld = sh->nq * sh->hd, .kv_head_stride = token_major ? rl : stride * rl,
                      .kv_tok_stride = token_major ? sh->nkv * rl : rl,
                      .out = out, .out_ld = sh->nq * sh->hd, .seq = seq, .past = ctx, .n_heads = sh->nq,
                      .n_kv_heads = sh->nkv, .head_dim = sh->hd, .scale = 0.0883883476f, .local_window = -1,
                      .kv_type = kt};
    double times[400], total = 0;
    int reps = 0;
    while (reps < 400 && (reps < 3 || total < min_ms)) {
        a.k_cache = k[(size_t)reps % copies];
        a.v_cache = v[(size_t)reps % copies];
        double t0 = bench_now_ms();
        tab->gqa.fn(&a, 0, seq * sh->nq);
        times[reps] = bench_now_ms() - t0;
        total += times[reps++];
    }
    qsort(times, (size_t)reps, sizeof times[0], bench_cmp_double);
    for (size_t c = 0; c < copies; c++) {
        cache_free(k[c], span);
        cache_free(v[c], span);
    }
    free(k);
    free(v);
    free(q);
    free(out);
    *bytes_per_call = 2 * elems * esz;
    return times[reps / 2];
}

static void usage(void)
{
    fprintf(stderr, "usage: attn_bench [--level ref|avx2|avx512|all] [--shapes 0.6b|4b|all] "
                    "[--contexts 1024,4096] [--prefill S] [--min-ms T] [--hot] [--token-major] [--huge-pages] [--capacity N] [--kv-types f32,f16,q8]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *level = "all", *which = "all", *ctxs = "1024,4096", *kv_types = "f32,f16,q8";
    size_t prefill = 512;
    double min_ms = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hot")) {
            hot = true;
            continue;
        }
        if (!strcmp(argv[i], "--token-major")) {
            token_major = true;
            continue;
        }
        if (!strcmp(argv[i], "--huge-pages")) {
            huge_pages = true;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--level"))
            level = argv[++i];
        else if (!strcmp(argv[i], "--shapes"))
            which = argv[++i];
        else if (!strcmp(argv[i], "--contexts"))
            ctxs = argv[++i];
        else if (!strcmp(argv[i], "--prefill"))
            prefill = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--min-ms"))
            min_ms = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--kv-types"))
            kv_types = argv[++i];
        else if (!strcmp(argv[i], "--capacity"))
            capacity = (size_t)strtoul(argv[++i], NULL, 10);
        else
            usage();
    }
    krn_init();
    char line[KRN_DESCRIBE_LEN];
    krn_describe(line, sizeof line);
    if (hot)
        printf("# %s; single thread; one cache copy (hot when it fits)", line);
    else
        printf("# %s; single thread; decode caches rotate over >= %zu MiB", line, COLD_BYTES >> 20);
    printf("; cache %s", token_major ? "[token, kv_head, dim]" : "[kv_head, token, dim]");
    if (capacity && !token_major)
        printf(", %zu rows reserved per head", capacity);
    printf("\n");
    for (int l = 0; l < KRN_LEVEL_COUNT; l++) {
        krn_table tab;
        if ((strcmp(level, "all") && strcmp(level, krn_level_name((krn_level)l))) ||
            krn_table_for_level((krn_level)l, &tab) != KRN_OK)
            continue;
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            const shape *sh = &shapes[s];
            if (strcmp(which, "all") && strcmp(which, sh->model))
                continue;
            static const struct {
                krn_kv_type kt;
                const char *name;
            } types[] = {{KRN_KV_F32, "f32"}, {KRN_KV_F16, "f16"}, {KRN_KV_Q8, "q8"}};
            for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
                krn_kv_type kt = types[t].kt;
                const char *tn = types[t].name;
                if (!bench_list_has(kv_types, tn))
                    continue;
                for (const char *c = ctxs; *c;) {
                    size_t ctx = (size_t)strtoul(c, NULL, 10), bytes;
                    double ms = run(&tab, sh, ctx, 1, kt, min_ms, &bytes);
                    printf("%-5s %-9s decode  ctx %6zu  kv %s  %8.3f ms/layer  %6.2f GB/s\n", sh->model, tab.gqa.name,
                           ctx, tn, ms, bytes / ms / 1e6);
                    fflush(stdout);
                    const char *comma = strchr(c, ',');
                    if (!comma)
                        break;
                    c = comma + 1;
                }
                if (prefill) {
                    size_t bytes;
                    double ms = run(&tab, sh, 0, prefill, kt, min_ms, &bytes);
                    printf("%-5s %-9s prefill S %6zu  kv %s  %8.3f ms/layer\n", sh->model, tab.gqa.name, prefill, tn,
                           ms);
                    fflush(stdout);
                }
            }
        }
    }
    return 0;
}
