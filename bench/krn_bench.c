/*
 * krn_bench: micro-benchmark of the MatMulNBits kernels on the
 * Qwen3 projection shapes, for every kernel level this CPU has.
 *
 * Usage: bench/krn_bench [--level ref|avx2|avx512|all] [--shapes 0.6b|4b|all]
 *                        [--mode i8|f32|both] [--m M] [--min-ms T] [--hot] [--packed]
 *                        [--zero-points] [--block-size B] [--bits 4|8] [--threads N] [--roofline]
 *
 * For each shape (N x K, block 32, no zero points, as the exported graph) it
 * reports the median time of one call over the whole column range and the
 * rate at which the weights (4-bit data plus fp32 scales) were streamed. To
 * measure what decode sees (each matrix read once per token, from DRAM rather
 * than cache) every call uses the next of several weight copies that together
 * exceed the last-level cache (--hot reuses one copy instead, which shows the
 * compute ceiling for matrices that fit in cache). --packed gives the int8 kernels of levels
 * that read repacked weights (krn_q4_pack) the packed copy; the GB/s figure always counts the
 * ONNX bytes (int4 data plus scales), which the packed copy matches. --zero-points gives the
 * weights random 4-bit zero points (an asymmetric export; the packed copy then holds them
 * too, one byte per column and block, which the GB/s figure does not count). --block-size B (a
 * power of 2 from 16 to 256) quantizes the weights in blocks of B along K instead of 32, as
 * exports made with another int4_block_size are. --bits 8 times the 8-bit weights' kernels
 * (mmnb8_*: one byte per weight, read in place, or with --packed from the packed copy on
 * levels that read one; zero points one byte per block, and the GB/s figure counts the 8-bit
 * data plus scales). Activation quantization
 * (int8 mode) is timed separately; it is O(K) per row. --threads N splits each call's columns
 * over N pinned threads as the engine's pool does; --roofline adds, per shape, the rate at
 * which the same threads read memory at that moment and the kernel's share of it (see
 * also bench/bw_probe). Never run by `make check`.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bench/bench_util.h"
#include "kernels/krn.h"

typedef struct shape {
    const char *model, *what;
    size_t n, k;
} shape;

static const shape shapes[] = {
    {"0.6b", "qkv", 4096, 1024},     {"0.6b", "o_proj", 1024, 2048}, {"0.6b", "gate/up", 3072, 1024},
    {"0.6b", "down", 1024, 3072},    {"0.6b", "lm_head", 151936, 1024},
    {"4b", "qkv", 6144, 2560},       {"4b", "o_proj", 2560, 4096},   {"4b", "gate/up", 9728, 2560},
    {"4b", "down", 2560, 9728},      {"4b", "lm_head", 151936, 2560},
};

/* Weight copies rotate until they span this many bytes: several times any L3. */
#define COLD_BYTES ((size_t)256 << 20)

static uint64_t rng_state = 88172645463325252ull;

static uint64_t rnext(void)
{
    return bench_xorshift(&rng_state);
}

/*
 * --threads N: the column range is split as the engine's pool splits it
 * (16-column units, contiguous per thread) over N spinning pinned threads, the
 * caller included, so a call's time is that of the slowest slice with no
 * sleep/wake latency in it.
 */
typedef struct team {
    int n;
    pthread_t tid[16];
    atomic_uint gen;
    atomic_int done;
    atomic_bool quit;
    const krn_mmnb_args *args;
    krn_mmnb_fn fn;
} team;

static team tm;

static void team_slice(int i, size_t n, size_t *b, size_t *e)
{
    size_t units = (n + 15) / 16, per = units / (size_t)tm.n, extra = units % (size_t)tm.n;
    size_t ub = (size_t)i * per + ((size_t)i < extra ? (size_t)i : extra);
    size_t ue = ub + per + ((size_t)i < extra ? 1 : 0);
    *b = ub * 16 < n ? ub * 16 : n;
    *e = ue * 16 < n ? ue * 16 : n;
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set); /* best effort */
}

static void *team_worker(void *v)
{
    int i = (int)(intptr_t)v;
    pin(i);
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        while ((g = atomic_load(&tm.gen)) == seen && !atomic_load(&tm.quit))
            ;
        if (atomic_load(&tm.quit))
            return NULL;
        seen = g;
        size_t b, e;
        team_slice(i, tm.args->w.n, &b, &e);
        if (b < e)
            tm.fn(tm.args, b, e);
        atomic_fetch_add(&tm.done, 1);
    }
}

static void team_start(int n)
{
    tm.n = n;
    pin(0);
    for (int i = 1; i < n; i++)
        pthread_create(&tm.tid[i], NULL, team_worker, (void *)(intptr_t)i);
}

static void team_stop(void)
{
    atomic_store(&tm.quit, true);
    for (int i = 1; i < tm.n; i++)
        pthread_join(tm.tid[i], NULL);
}

static void team_run(krn_mmnb_fn fn, const krn_mmnb_args *args)
{
    if (tm.n <= 1) {
        fn(args, 0, args->w.n);
        return;
    }
    tm.fn = fn;
    tm.args = args;
    atomic_store(&tm.done, 0);
    atomic_fetch_add(&tm.gen, 1);
    size_t b, e;
    team_slice(0, args->w.n, &b, &e);
    if (b < e)
        fn(args, b, e);
    while (atomic_load(&tm.done) < tm.n - 1)
        ;
}

/*
 * --roofline: the rate at which the same threads read a 256 MiB buffer
 * (32-byte loads) right before each shape's timing, so the kernel's GB/s can
 * be set against the memory system as it is at that moment (on a shared
 * machine it varies by a factor of several). Posed as a "kernel" over
 * 4 KiB "columns" so the team splits it as it splits a matrix.
 */
#define RL_BYTES ((size_t)256 << 20)
static uint8_t *rl_buf;

#if defined(__x86_64__)
__attribute__((target("avx2"))) static void rl_read(const krn_mmnb_args *a, size_t b, size_t e)
{
    const uint8_t *p = a->w.b_data + b * 4096, *end = a->w.b_data + e * 4096;
    __m256i x0 = _mm256_setzero_si256(), x1 = x0;
    for (; p < end; p += 64) {
        x0 = _mm256_or_si256(x0, _mm256_load_si256((const __m256i *)(const void *)p));
        x1 = _mm256_or_si256(x1, _mm256_load_si256((const __m256i *)(const void *)(p + 32)));
    }
    volatile uint64_t sink = (uint64_t)_mm256_extract_epi64(_mm256_or_si256(x0, x1), 0);
    (void)sink;
}
#else
static void rl_read(const krn_mmnb_args *a, size_t b, size_t e)
{
    const uint64_t *p = (const uint64_t *)(const void *)(a->w.b_data + b * 4096);
    uint64_t x = 0;
    for (size_t i = 0; i < (e - b) * 512; i++)
        x |= p[i];
    volatile uint64_t sink = x;
    (void)sink;
}
#endif

static double roofline_gbs(void)
{
    krn_mmnb_args a = {.w = {.b_data = rl_buf, .n = RL_BYTES / 4096}};
    double t[5];
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now_ms();
        team_run(rl_read, &a);
        t[r] = bench_now_ms() - t0;
    }
    qsort(t, 5, sizeof t[0], bench_cmp_double);
    return RL_BYTES / t[2] / 1e6;
}

typedef struct wcopy {
    uint8_t *b;
    float *scales;
    uint8_t *zp;  /* zero points (4-bit packed, or a byte each at 8 bits), when requested */
    void *packed; /* krn_q4_pack of b and scales, when requested */
} wcopy;

static void bench_shape(const shape *sh, const krn_table *tabs, int n_tabs, size_t m, int mode_mask,
                        double min_ms, bool hot, bool pack, bool zp, size_t bs, bool bits8)
{
    const size_t kb = (sh->k + bs - 1) / bs;
    const size_t b_bytes = sh->n * kb * (bits8 ? bs : bs / 2), s_bytes = sh->n * kb * sizeof(float);
    const size_t w_bytes = b_bytes + s_bytes;
    size_t copies = COLD_BYTES / w_bytes + 1;
    if (copies > 64)
        copies = 64;
    if (hot)
        copies = 1;
    wcopy *w = calloc(copies, sizeof *w);
    for (size_t c = 0; c < copies; c++) {
        w[c].b = bench_alloc("krn_bench", b_bytes);
        w[c].scales = bench_alloc("krn_bench", s_bytes);
        for (size_t i = 0; i < b_bytes; i += 8) {
            uint64_t v = rnext();
            memcpy(w[c].b + i, &v, b_bytes - i < 8 ? b_bytes - i : 8);
        }
        for (size_t i = 0; i < sh->n * kb; i++)
            w[c].scales[i] = ((float)(rnext() >> 40) / 16777216.0f - 0.5f) * 0.02f;
        if (zp) {
            size_t zb = sh->n * (bits8 ? kb : (kb + 1) / 2);
            w[c].zp = bench_alloc("krn_bench", zb);
            for (size_t i = 0; i < zb; i++)
                w[c].zp[i] = (uint8_t)rnext();
        }
        if (pack) {
            krn_q4_weights qw = {.b_data = w[c].b, .scales = w[c].scales, .zero_pts = w[c].zp, .n = sh->n,
                                 .k = sh->k, .block_size = bs, .k_blocks = kb, .packed_zp = zp, .bits8 = bits8};
            w[c].packed = bench_alloc("krn_bench", krn_q4_pack_size(&qw));
            krn_q4_pack(&qw, w[c].packed);
        }
    }
    float *a = bench_alloc("krn_bench", m * sh->k * sizeof(float)), *y = bench_alloc("krn_bench", m * sh->n * sizeof(float));
    for (size_t i = 0; i < m * sh->k; i++)
        a[i] = (float)(rnext() >> 40) / 16777216.0f - 0.5f;
    void *qa = bench_alloc("krn_bench", krn_quant_a8_size(m, sh->k, bs));

    for (int t = 0; t < n_tabs; t++)
        for (int mode = 0; mode < 2; mode++) {
            if (!(mode_mask & (1 << mode)))
                continue;
            const krn_table *tab = &tabs[t];
            krn_quant_args qargs = {.a = a, .a_ld = sh->k, .m = m, .k = sh->k, .block_size = bs, .qa = qa};
            /* The first call takes the page faults of the scratch; the best of five is reported. */
            double tq = 1e30;
            for (int rep = 0; rep < 6; rep++) {
                double t0 = bench_now_ms();
                tab->quant_a8.fn(&qargs, 0, m);
                if (rep && bench_now_ms() - t0 < tq)
                    tq = bench_now_ms() - t0;
            }
            krn_mmnb_args args = {.w = {.n = sh->n, .k = sh->k, .block_size = bs, .k_blocks = kb, .bits8 = bits8},
                                  .m = m, .a = a, .a_ld = sh->k, .qa = qa, .y = y, .y_ld = sh->n};
            krn_mmnb_fn fn = bits8 ? (mode ? tab->mmnb8_i8.fn : tab->mmnb8_f32.fn)
                                   : (mode ? tab->mmnb_i8.fn : tab->mmnb_f32.fn);
            const char *name = bits8 ? (mode ? tab->mmnb8_i8.name : tab->mmnb8_f32.name)
                                     : (mode ? tab->mmnb_i8.name : tab->mmnb_f32.name);
            double times[200];
            int reps = 0;
            double total = 0;
            /* Page faults were taken when the copies were filled; every call is timed. */
            while (reps < 200 && (reps < 3 || total < min_ms)) {
                wcopy *c = &w[(size_t)reps % copies];
                args.w.b_data = c->b;
                args.w.scales = c->scales;
                args.w.zero_pts = c->zp;
                args.w.packed_zp = zp;
                args.w.packed = mode && (bits8 ? tab->q8_packed : tab->q4_packed) ? c->packed : NULL;
                double t0 = bench_now_ms();
                team_run(fn, &args);
                double dt = bench_now_ms() - t0;
                times[reps++] = dt;
                total += dt;
            }
            qsort(times, (size_t)reps, sizeof times[0], bench_cmp_double);
            double med = times[reps / 2];
            double roof = rl_buf ? roofline_gbs() : 0.0;
            char blocks[16] = ""; /* named only when not the exported graphs' 32 */
            if (bs != 32 || bits8)
                snprintf(blocks, sizeof blocks, " bs%zu%s", bs, bits8 ? " 8b" : "");
            printf("%-5s %-8s N=%6zu K=%5zu M=%3zu%s  %-20s %-6s %9.3f ms  %6.2f GB/s  %7.2f GMAC/s",
                   sh->model, sh->what, sh->n, sh->k, m, blocks, name,
                   args.w.packed ? (zp ? "pk+zp" : "packed") : (zp ? "onnx+zp" : "onnx"), med,
                   w_bytes / med / 1e6,
                   (double)m * sh->n * sh->k / med / 1e6);
            if (mode)
                printf("  (quant %.3f ms)", tq);
            if (roof > 0)
                printf("  [read %.2f GB/s: %.0f%%]", roof, 100.0 * w_bytes / med / 1e6 / roof);
            printf("\n");
            fflush(stdout);
        }
    for (size_t c = 0; c < copies; c++) {
        free(w[c].b);
        free(w[c].scales);
        free(w[c].packed);
        free(w[c].zp);
    }
    free(w);
    free(a);
    free(y);
    free(qa);
}

static void usage(void)
{
    fprintf(stderr, "usage: krn_bench [--level ref|avx2|avx512|all] [--shapes 0.6b|4b|all] "
                    "[--mode i8|f32|both] [--m M] [--min-ms T] [--hot] [--packed] [--zero-points] [--block-size B] "
                    "[--bits 4|8] [--threads N] [--roofline]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *level = "all", *which = "all", *mode = "both";
    size_t m = 1, bs = 32;
    double min_ms = 300;
    bool hot = false, pack = false, zp = false;
    int threads = 1, bits = 4;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--hot")) {
            hot = true;
            continue;
        }
        if (!strcmp(argv[i], "--packed")) {
            pack = true;
            continue;
        }
        if (!strcmp(argv[i], "--zero-points")) {
            zp = true;
            continue;
        }
        if (!strcmp(argv[i], "--roofline")) {
            rl_buf = bench_alloc("krn_bench", RL_BYTES);
            memset(rl_buf, 1, RL_BYTES);
            continue;
        }
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--level"))
            level = argv[++i];
        else if (!strcmp(argv[i], "--shapes"))
            which = argv[++i];
        else if (!strcmp(argv[i], "--mode"))
            mode = argv[++i];
        else if (!strcmp(argv[i], "--m"))
            m = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--min-ms"))
            min_ms = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--threads"))
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--block-size"))
            bs = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--bits"))
            bits = atoi(argv[++i]);
        else
            usage();
    }
    if (m < 1 || m > 4096 || threads < 1 || threads > 16 || bs < 16 || bs > 256 || (bs & (bs - 1)) ||
        (bits != 4 && bits != 8))
        usage();
    int mode_mask = !strcmp(mode, "both") ? 3 : !strcmp(mode, "i8") ? 2 : !strcmp(mode, "f32") ? 1 : 0;
    if (!mode_mask)
        usage();

    krn_table tabs[KRN_LEVEL_COUNT];
    int n_tabs = 0;
    for (int l = 0; l < KRN_LEVEL_COUNT; l++) {
        if (strcmp(level, "all") && strcmp(level, krn_level_name((krn_level)l)))
            continue;
        if (krn_table_for_level((krn_level)l, &tabs[n_tabs]) == KRN_OK)
            n_tabs++;
        else if (strcmp(level, "all"))
            fprintf(stderr, "krn_bench: level %s not supported here\n", level);
    }
    if (!n_tabs)
        return 1;
    krn_init();
    char line[KRN_DESCRIBE_LEN];
    krn_describe(line, sizeof line);
    if (hot)
        printf("# %s; %d thread(s); one weight copy (hot in cache when it fits)\n", line, threads);
    else
        printf("# %s; %d thread(s); weights streamed cold (rotating copies >= %zu MiB)\n", line, threads,
               COLD_BYTES >> 20);
    team_start(threads);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        if (!strcmp(which, "all") || !strcmp(which, shapes[s].model))
            bench_shape(&shapes[s], tabs, n_tabs, m, mode_mask, min_ms, hot, pack, zp, bs, bits == 8);
    team_stop();
    return 0;
}
