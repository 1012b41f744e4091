/*
 * test_pool: engine/pool.c hands out every item exactly once, in ranges that
 * are multiples of the grain, for static and guided steps; a participant that
 * is slow leaves the rest of a guided step to the others; sleeping workers
 * and a sleeping driver are woken. Placement: bad CPU
 * lists and nodes are refused with one line, and a placed process runs its
 * pinned workers and later threads on the CPUs given, memory bound.
 */
#include <check.h>
#include <ctype.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/pool.h"
#include "tests/check_main.h"

typedef struct cover {
    size_t n, grain;
    _Atomic int *hits;        /* per item */
    atomic_int bad_ranges;    /* ranges not starting on a grain or empty */
    atomic_int calls;
    pthread_t slow;           /* this thread sleeps in each call (when slow_set) */
    int slow_set;
    atomic_size_t slow_items; /* items the slow thread did */
} cover;

static void mark(void *ctx, size_t b, size_t e)
{
    cover *c = ctx;
    atomic_fetch_add(&c->calls, 1);
    if (b >= e || b % c->grain || e > c->n || (e % c->grain && e != c->n))
        atomic_fetch_add(&c->bad_ranges, 1);
    for (size_t i = b; i < e && i < c->n; i++)
        atomic_fetch_add(&c->hits[i], 1);
    if (c->slow_set && pthread_equal(pthread_self(), c->slow)) {
        atomic_fetch_add(&c->slow_items, e - b);
        struct timespec t = {0, 20 * 1000 * 1000};
        nanosleep(&t, NULL);
    }
}

static void run_cover(eng_pool *p, size_t n, size_t grain)
{
    cover c = {.n = n, .grain = grain};
    c.hits = calloc(n ? n : 1, sizeof *c.hits);
    ck_assert_ptr_nonnull(c.hits);
    eng_pool_run(p, n, grain, mark, &c);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(atomic_load(&c.hits[i]) == 1, "n=%zu grain=%zu item %zu done %d times", n, grain, i,
                      atomic_load(&c.hits[i]));
    ck_assert_msg(atomic_load(&c.bad_ranges) == 0, "n=%zu grain=%zu: a range off the grain", n, grain);
    free(c.hits);
}

START_TEST(every_item_once)
{
    for (int threads = 1; threads <= 3; threads++) {
        eng_pool *p = eng_pool_new(threads, 0);
        ck_assert_ptr_nonnull(p);
        const size_t ns[] = {0, 1, 2, 7, 16, 17, 63, 64, 65, 1000, 4097, 151936};
        const size_t grains[] = {1, 2, 3, 16, 4096};
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++)
                for (int rep = 0; rep < 3; rep++)
                    run_cover(p, ns[i], grains[g]);
        eng_pool_free(p);
    }
}
END_TEST

START_TEST(slow_participant_does_less)
{
    /* The caller sleeps 20 ms per range it takes: in a guided step the worker
     * takes the ranges that remain, so the caller does far less than half. */
    eng_pool *p = eng_pool_new(2, 0);
    ck_assert_ptr_nonnull(p);
    size_t n = 1024;
    cover c = {.n = n, .grain = 1, .slow = pthread_self(), .slow_set = 1};
    c.hits = calloc(n, sizeof *c.hits);
    ck_assert_ptr_nonnull(c.hits);
    eng_pool_run(p, n, 1, mark, &c);
    for (size_t i = 0; i < n; i++)
        ck_assert(atomic_load(&c.hits[i]) == 1);
    ck_assert_msg(atomic_load(&c.slow_items) < n / 2, "slow caller did %zu of %zu items",
                  (size_t)atomic_load(&c.slow_items), n);
    ck_assert_int_gt(atomic_load(&c.calls), 2);
    free(c.hits);
    eng_pool_free(p);
}
END_TEST

/* Each range a thread other than the caller takes sleeps gap_ns first (a slow worker). */
typedef struct slow_others {
    pthread_t caller;
    long gap_ns;
    _Atomic int *hits;
} slow_others;

static void others_sleep(void *ctx, size_t b, size_t e)
{
    slow_others *o = ctx;
    if (o->gap_ns && !pthread_equal(pthread_self(), o->caller)) {
        struct timespec t = {0, o->gap_ns};
        nanosleep(&t, NULL);
    }
    for (size_t i = b; i < e; i++)
        atomic_fetch_add(&o->hits[i], 1);
}

static void pause_ns(long ns)
{
    struct timespec t = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&t, NULL);
}

START_TEST(sleepers_are_woken)
{
    /* Workers spin about 1 ms for the next step, then sleep; a driver whose
     * workers are slow sleeps too. Steps after pauses around that time, and
     * steps whose workers take 3 ms, must each finish with every item done
     * once: a lost wake-up hangs the test (and check's timeout fails it). */
    for (int threads = 2; threads <= 3; threads++) {
        eng_pool *p = eng_pool_new(threads, 0);
        ck_assert_ptr_nonnull(p);
        _Atomic int hits[3];
        for (int step = 0; step < 120; step++) {
            long pause = step % 3 == 0 ? 3000000L : 900000L + 2000L * (step % 100);
            bool slow = step % 4 == 1;
            slow_others o = {.caller = pthread_self(), .gap_ns = slow ? 3000000L : 0, .hits = hits};
            for (int i = 0; i < threads; i++)
                atomic_store(&hits[i], 0);
            pause_ns(pause);
            eng_pool_run(p, (size_t)threads, 1, others_sleep, &o);
            for (int i = 0; i < threads; i++)
                ck_assert_msg(atomic_load(&hits[i]) == 1, "%d threads, step %d: item %d done %d times", threads,
                              step, i, atomic_load(&hits[i]));
        }
        eng_pool_free(p);
    }
}
END_TEST

START_TEST(place_refuses_bad_input)
{
    eng_placement before, after;
    eng_pool_placement(&before);
    const char *bad[] = {"", "abc", "0-", "-1", "3-1", "0,,1", "0,", ",0", "1 2", "0x1", "1-99999", "99999999999",
                         "65536"};
    char err[512];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(eng_pool_place(bad[i], -1, err, sizeof err) == -1, "'%s' was accepted", bad[i]);
        ck_assert_msg(strstr(err, "--cpus") && !strchr(err, '\n'), "'%s': error '%s'", bad[i], err);
    }
    /* CPU 65535 is a valid number but exists on no machine this runs on */
    ck_assert_int_eq(eng_pool_place("0,65535", -1, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "65535") && strstr(err, "not available"), "%s", err);
    ck_assert_int_eq(eng_pool_place(NULL, 4095, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "--numa-node 4095") && strstr(err, "no such NUMA node"), "%s", err);
    eng_pool_placement(&after);
    ck_assert_str_eq(after.cpus, before.cpus); /* nothing was bound on the way */
    ck_assert_int_eq(after.membind, before.membind);
}
END_TEST

typedef struct seen_cpus {
    atomic_int mask; /* bit per CPU 0..30 a range ran on */
    atomic_int other;
} seen_cpus;

static void note_cpu(void *ctx, size_t b, size_t e)
{
    seen_cpus *s = ctx;
    (void)b, (void)e;
    int c = sched_getcpu();
    if (c >= 0 && c < 31)
        atomic_fetch_or(&s->mask, 1 << c);
    else
        atomic_fetch_add(&s->other, 1);
}

static void *later_thread(void *arg)
{
    eng_pool_placement(arg);
    return NULL;
}

/* check runs each test in its own child process, so this binding ends with it. */
START_TEST(place_binds_threads_and_memory)
{
    cpu_set_t mine;
    ck_assert_int_eq(sched_getaffinity(0, sizeof mine, &mine), 0);
    int last = -1;
    for (int c = 0; c < 31; c++)
        if (CPU_ISSET(c, &mine))
            last = c;
    ck_assert_int_ge(last, 0);
    /* The last CPU, so that pinning from the machine's first core would show. */
    char list[16], err[512] = "";
    snprintf(list, sizeof list, "%d", last);
    ck_assert_msg(eng_pool_place(list, -1, err, sizeof err) == 0, "%s", err);

    eng_placement pl;
    eng_pool_placement(&pl);
    ck_assert_str_eq(pl.cpus, list);
    ck_assert_int_eq(pl.cores, 1);
    ck_assert_int_eq(pl.membind, 1);
    ck_assert_msg(isdigit((unsigned char)pl.mem_nodes[0]), "memory nodes '%s'", pl.mem_nodes); /* the CPU's own */
    ck_assert_int_eq(eng_pool_physical_cores(), 1);

    eng_pool *p = eng_pool_new(2, 1);
    ck_assert_ptr_nonnull(p);
    seen_cpus s = {0};
    for (int rep = 0; rep < 50; rep++)
        eng_pool_run(p, 64, 1, note_cpu, &s);
    ck_assert_int_eq(atomic_load(&s.other), 0);
    ck_assert_int_eq(atomic_load(&s.mask), 1 << last);
    char d[256];
    eng_pool_describe(p, d, sizeof d);
    ck_assert_msg(strstr(d, "1 cores in CPUs") && strstr(d, list), "%s", d);
    eng_pool_free(p);

    /* A thread started afterwards inherits both bindings. */
    pthread_t t;
    eng_placement child;
    ck_assert_int_eq(pthread_create(&t, NULL, later_thread, &child), 0);
    pthread_join(t, NULL);
    ck_assert_str_eq(child.cpus, list);
    ck_assert_int_eq(child.membind, 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_item_once);
    tcase_add_test(tc, slow_participant_does_less);
    tcase_add_test(tc, sleepers_are_woken);
    tcase_add_test(tc, place_refuses_bad_input);
    tcase_add_test(tc, place_binds_threads_and_memory);
    suite_add_tcase(s, tc);
    return qd_run_suite(s);
}
