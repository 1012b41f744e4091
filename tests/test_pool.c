/*
 * test_pool: engine/pool.c hands out every item exactly once, in ranges that
 * are multiples of the grain, for static and guided steps; a participant that
 * is slow leaves the rest of a guided step to the others.
 */
#include <check.h>
#include <pthread.h>
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

int main(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, every_item_once);
    tcase_add_test(tc, slow_participant_does_less);
    suite_add_tcase(s, tc);
    return qd_run_suite(s);
}
