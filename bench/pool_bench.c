/*
 * pool_bench: what one step of the compute pool costs by itself: the time
 * of eng_pool_run over steps whose items do nothing, so all of it is the
 * hand-off to the workers and the wait for them. A decode step of a model
 * runs a few hundred pool steps (one per matrix product, attention, norm
 * of several rows), so this is its fixed cost per pool step.
 *
 * Usage: bench/pool_bench [--threads 2,4] [--steps N]
 *
 * Per thread count (pinned, as the engine's pool; counts above the physical
 * cores are skipped, as the engine never runs more), two kinds of step: one
 * item per participant (the static split of short steps: decode attention,
 * norms) and 1024 items in grains of 16 (the guided split of a matrix
 * product of 1024 columns: slices taken in shrinking ranges, then stolen).
 * Reports the median and best of 21 runs of N steps (100000 by default), in
 * microseconds per step. Never run by `make check`; it asserts nothing.
 */
#include <stdatomic.h>

#include "bench/bench_util.h"
#include "engine/pool.h"

#define RUNS 21

static atomic_long sink;

static void nothing(void *ctx, size_t b, size_t e)
{
    (void)ctx;
    atomic_fetch_add_explicit(&sink, (long)(e - b), memory_order_relaxed);
}

static void measure(eng_pool *p, int threads, size_t items, size_t grain, long steps, const char *what)
{
    double us[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = bench_now_ms();
        for (long i = 0; i < steps; i++)
            eng_pool_run(p, items, grain, nothing, NULL);
        us[r] = (bench_now_ms() - t0) * 1e3 / (double)steps;
    }
    qsort(us, RUNS, sizeof us[0], bench_cmp_double);
    printf("threads %d  %-22s median %6.3f us/step  best %6.3f\n", threads, what, us[RUNS / 2], us[0]);
}

int main(int argc, char **argv)
{
    const char *threads = "2";
    long steps = 100000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc && atol(argv[i + 1]) > 0)
            steps = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: pool_bench [--threads 2,4] [--steps N]\n");
            return 2;
        }
    }
    const int cores = eng_pool_physical_cores(); /* before a pool pins this thread to one of them */
    for (int t = 2; t <= 64; t++) {
        char name[16];
        snprintf(name, sizeof name, "%d", t);
        if (!bench_list_has(threads, name))
            continue;
        if (t > cores) { /* spinning threads sharing a core wait on each other's time slices */
            printf("threads %d  skipped: %d physical cores here\n", t, cores);
            continue;
        }
        eng_pool *p = eng_pool_new(t, 1);
        if (!p) {
            fprintf(stderr, "pool_bench: cannot start %d threads\n", t);
            return 1;
        }
        measure(p, t, (size_t)t, 1, steps, "one item each");
        measure(p, t, 1024, 16, steps, "64 grains, guided");
        eng_pool_free(p);
    }
    return 0;
}
