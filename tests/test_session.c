/*
 * test_session: sessions of one loaded model are isolated. Two sessions whose
 * steps interleave produce exactly the logits each produces alone, in both
 * KV modes; reset reuses a session; a freed session gives its committed KV
 * memory back to the system; the KV bytes a session will reserve are known
 * before it is made.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/runner.h"
#include "kernels/krn.h"
#include "tests/check_main.h"

static char model_dir[1024];

static void setup_model(void)
{
    qd_tiny_model("session-tiny", false, model_dir, sizeof model_dir);
}

#define STEPS 12

/* Greedy continuation of PROMPT; rows[i] receives a copy of each logits row. */
typedef struct run {
    eng_session *s;
    int64_t next;
    int step;
    float *rows;      /* [STEPS + 1][V] */
    bool greedy;      /* the session fuses the argmax into its LM head */
} run;

static int64_t argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static void run_step(run *r, const int64_t *prompt, size_t n_prompt, int64_t V)
{
    eng_diag d;
    eng_diag_init(&d);
    const float *logits;
    int rc = r->step == 0 ? eng_session_feed(r->s, prompt, n_prompt, &logits, &d)
                          : eng_session_feed(r->s, &r->next, 1, &logits, &d);
    ck_assert_msg(rc == 0, "feed failed: %s", d.n_kept ? d.lines[0] : "");
    memcpy(r->rows + (size_t)r->step * (size_t)V, logits, (size_t)V * sizeof(float));
    r->next = argmax(logits, V);
    /* The argmax fused into the LM head (greedy sessions) is the row's argmax. */
    ck_assert_int_eq(eng_session_argmax(r->s), r->greedy ? r->next : -1);
    r->step++;
    eng_diag_clear(&d);
}

static void check_interleaving(eng_kv_mode mode)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_model *m = NULL;
    eng_model_opts mo = {.threads = 2, .kv_mode = mode};
    ck_assert_msg(eng_model_open(model_dir, &mo, &m, &d) == 0, "open: %s", d.n_kept ? d.lines[0] : "");
    int64_t V = eng_model_geometry(m)->vocab;
    const int64_t pa[] = {9707, 11, 1879, 0, 5}, pb[] = {3555, 30, 151643, 42, 7, 7, 9};
    size_t bytes = (size_t)(STEPS + 1) * (size_t)V * sizeof(float);
    run alone_a = {.rows = malloc(bytes)}, alone_b = {.rows = malloc(bytes)};
    run mix_a = {.rows = malloc(bytes)}, mix_b = {.rows = malloc(bytes)};

    /* A greedy session (argmax fused into the LM head) must give the same rows as a plain one. */
    alone_a.s = eng_session_new(m, 64, &d);
    ck_assert_ptr_nonnull(alone_a.s);
    eng_session_set_greedy(alone_a.s, true);
    alone_a.greedy = true;
    for (int i = 0; i <= STEPS; i++)
        run_step(&alone_a, pa, 5, V);
    eng_session_free(alone_a.s);
    alone_b.s = eng_session_new(m, 64, &d);
    for (int i = 0; i <= STEPS; i++)
        run_step(&alone_b, pb, 7, V);
    /* reset reuses the session's storage for a new sequence */
    eng_session_reset(alone_b.s);
    ck_assert_int_eq(eng_session_length(alone_b.s), 0);
    mix_b.s = alone_b.s;

    mix_a.s = eng_session_new(m, 64, &d);
    ck_assert_ptr_nonnull(mix_a.s);
    for (int i = 0; i <= STEPS; i++) {
        run_step(&mix_a, pa, 5, V);
        run_step(&mix_b, pb, 7, V);
    }
    ck_assert_msg(memcmp(alone_a.rows, mix_a.rows, bytes) == 0, "session A differs when interleaved (%s mode)",
                  eng_kv_mode_name(mode));
    ck_assert_msg(memcmp(alone_b.rows, mix_b.rows, bytes) == 0, "session B differs when interleaved or reset (%s mode)",
                  eng_kv_mode_name(mode));
    ck_assert_int_eq(eng_session_length(mix_a.s), 5 + STEPS);
    eng_session_free(mix_a.s);
    eng_session_free(mix_b.s);
    free(alone_a.rows);
    free(alone_b.rows);
    free(mix_a.rows);
    free(mix_b.rows);
    eng_model_free(m);
    eng_diag_clear(&d);
}

START_TEST(interleaved_sessions_persistent)
{
    check_interleaving(ENG_KV_PERSISTENT);
}
END_TEST

START_TEST(interleaved_sessions_tensor)
{
    check_interleaving(ENG_KV_TENSOR);
}
END_TEST

static uint64_t rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, res = 0;
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%llu %llu", &size, &res), 2);
    fclose(f);
    return res * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* RSS fell from BEFORE to AFTER by at least 90% of BYTES, once WHAT was done. */
static void check_returned(uint64_t before, uint64_t after, uint64_t bytes, const char *what)
{
    ck_assert_msg(before > after && before - after >= bytes * 9 / 10, "%s returned only %lld of %llu bytes", what,
                  (long long)before - (long long)after, (unsigned long long)bytes);
}

START_TEST(freed_session_returns_memory)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_model *m = NULL;
    eng_model_opts mo = {.threads = 1, .kv_pool_bytes = -1}; /* no pool: freed pages go back at once */
    ck_assert(eng_model_open(model_dir, &mo, &m, &d) == 0);
    const int64_t ctx = 16384;
    eng_session *s = eng_session_new(m, ctx, &d);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(eng_session_kv_bytes_committed(s), 0);
    uint64_t before = rss();
    ck_assert_int_eq(eng_session_fill_synthetic(s, ctx - 8, &d), 0);
    uint64_t committed = eng_session_kv_bytes_committed(s);
    const eng_geometry *g = eng_model_geometry(m);
    uint64_t data = (uint64_t)(g->layers * 2 * g->kv_heads * g->head_size * (ctx - 8)) * sizeof(float);
    ck_assert_uint_ge(committed, data);
    ck_assert_uint_le(committed, eng_session_kv_bytes_reserved(s));
    uint64_t during = rss();
    ck_assert_msg(during - before >= data * 9 / 10, "filling %llu bytes of cache raised RSS by only %llu",
                  (unsigned long long)data, (unsigned long long)(during - before));
    eng_session_free(s);
    check_returned(during, rss(), data, "freeing the session");
    eng_model_free(m);
    eng_diag_clear(&d);
}
END_TEST

/* With a pool, a freed session's pages stay resident and the next session writes into them. */
START_TEST(pooled_pages_serve_the_next_session)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_model *m = NULL;
    eng_model_opts mo = {.threads = 1, .kv_pool_bytes = (int64_t)1 << 30};
    ck_assert(eng_model_open(model_dir, &mo, &m, &d) == 0);
    const int64_t ctx = 4096;
    eng_session *s = eng_session_new(m, ctx, &d);
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(eng_session_fill_synthetic(s, ctx - 8, &d), 0);
    uint64_t committed = eng_session_kv_bytes_committed(s);
    eng_session_free(s);
    ck_assert_uint_eq(eng_model_kv_pool_bytes(m), committed);
    uint64_t idle = rss();
    /* a smaller session takes the pooled cache: already committed, length 0 */
    s = eng_session_new(m, ctx / 2, &d);
    ck_assert_ptr_nonnull(s);
    ck_assert_uint_eq(eng_model_kv_pool_bytes(m), 0);
    ck_assert_uint_eq(eng_session_kv_bytes_committed(s), committed);
    ck_assert_int_eq(eng_session_length(s), 0);
    ck_assert_int_eq(eng_session_fill_synthetic(s, ctx / 2 - 8, &d), 0);
    uint64_t grown = rss() > idle ? rss() - idle : 0;
    ck_assert_msg(grown < committed / 10, "writing into pooled pages raised RSS by %llu bytes",
                  (unsigned long long)grown);
    /* its capacity can rise within the range the cache reserved (the model's context) */
    ck_assert_int_eq(eng_session_set_capacity(s, ctx), 0);
    ck_assert_int_eq(eng_session_capacity(s), ctx);
    ck_assert_int_ne(eng_session_set_capacity(s, eng_model_max_context(m) + 1), 0);
    eng_session_free(s);
    /* a budget of 0 gives the pages back */
    uint64_t before = rss();
    eng_model_set_kv_pool_budget(m, 0);
    ck_assert_uint_eq(eng_model_kv_pool_bytes(m), 0);
    check_returned(before, rss(), committed, "emptying the pool");
    eng_model_free(m);
    eng_diag_clear(&d);
}
END_TEST

/* A synthetic context (bench's long-context cases) fills f16 and q8 caches too, and decoding goes on from it. */
START_TEST(synthetic_fill_narrow_types)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_model *m = NULL;
    eng_model_opts mo = {.threads = 1, .kv_type = _i ? KV_Q8 : KV_F16};
    ck_assert(eng_model_open(model_dir, &mo, &m, &d) == 0);
    eng_session *s = eng_session_new(m, 300, &d);
    ck_assert_ptr_nonnull(s);
    ck_assert_msg(eng_session_fill_synthetic(s, 256, &d) == 0, "%s", d.n_kept ? d.lines[0] : "");
    ck_assert_int_eq(eng_session_length(s), 256);
    const int64_t id = 7;
    const float *logits = NULL;
    ck_assert_msg(eng_session_feed(s, &id, 1, &logits, &d) == 0, "%s", d.n_kept ? d.lines[0] : "");
    ck_assert_int_eq(eng_session_length(s), 257);
    int64_t V = eng_model_geometry(m)->vocab;
    for (int64_t i = 0; i < V; i++)
        ck_assert_msg(isfinite(logits[i]), "logit %lld is not finite after an %s synthetic context", (long long)i,
                      kv_type_name(mo.kv_type));
    eng_session_free(s);
    eng_model_free(m);
    eng_diag_clear(&d);
}
END_TEST

START_TEST(context_limit_is_an_error)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_model *m = NULL;
    ck_assert(eng_model_open(model_dir, NULL, &m, &d) == 0);
    eng_session *s = eng_session_new(m, 4, &d);
    ck_assert_ptr_nonnull(s);
    const int64_t ids[5] = {1, 2, 3, 4, 5};
    const float *logits;
    ck_assert_int_eq(eng_session_feed(s, ids, 5, &logits, &d), -1);
    ck_assert_ptr_nonnull(strstr(d.lines[0], "exceed the session's context"));
    ck_assert_int_eq(eng_session_length(s), 0);
    ck_assert_int_eq(eng_session_feed(s, ids, 4, &logits, &d), 0);
    ck_assert_int_eq(eng_session_feed(s, ids, 1, &logits, &d), -1);
    /* a count past INT64_MAX is refused before any id is read, not wrapped negative */
    eng_session_reset(s);
    eng_diag_clear(&d);
    ck_assert_int_eq(eng_session_feed(s, ids, SIZE_MAX, &logits, &d), -1);
    ck_assert_ptr_nonnull(strstr(d.lines[0], "exceed the session's context"));
    const int64_t bad = 151936;
    eng_session_reset(s);
    ck_assert_int_eq(eng_session_feed(s, &bad, 1, &logits, &d), -1);
    ck_assert_ptr_null(eng_session_new(m, eng_model_max_context(m) + 1, &d));
    eng_session_free(s);
    eng_model_free(m);
    eng_diag_clear(&d);
}
END_TEST

/* The tensor contract's past is FLOAT: a narrower cache type with it is refused, not ignored. */
START_TEST(narrow_kv_type_needs_persistent_mode)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_model *m = NULL;
    eng_model_opts mo = {.threads = 1, .kv_mode = ENG_KV_TENSOR, .kv_type = _i ? KV_Q8 : KV_F16};
    ck_assert_int_eq(eng_model_open(model_dir, &mo, &m, &d), -1);
    ck_assert_ptr_null(m);
    ck_assert_msg(d.n_kept && strstr(d.lines[0], "needs the persistent KV mode"), "%s", d.n_kept ? d.lines[0] : "");
    eng_diag_clear(&d);
}
END_TEST

/* What the server's KV budget counts before a session exists is what the session reserves. */
START_TEST(kv_bytes_known_before_the_session)
{
    eng_diag d;
    eng_diag_init(&d);
    static const struct {
        eng_kv_mode mode;
        kv_type type;
    } modes[] = {{ENG_KV_PERSISTENT, KV_F32}, {ENG_KV_PERSISTENT, KV_F16}, {ENG_KV_PERSISTENT, KV_Q8},
                 {ENG_KV_TENSOR, KV_F32}};
    for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++) {
        eng_model *m = NULL;
        eng_model_opts mo = {.threads = 1, .kv_mode = modes[k].mode, .kv_type = modes[k].type};
        ck_assert(eng_model_open(model_dir, &mo, &m, &d) == 0);
        const int64_t caps[] = {1, 7, 64, 1000};
        for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
            eng_session *s = eng_session_new(m, caps[i], &d);
            ck_assert_ptr_nonnull(s);
            ck_assert_uint_eq(eng_model_kv_bytes(m, caps[i]), eng_session_kv_bytes_reserved(s));
            eng_session_free(s);
        }
        ck_assert_uint_lt(eng_model_kv_bytes(m, 64), eng_model_kv_bytes(m, 1000));
        eng_model_free(m);
    }
    eng_diag_clear(&d);
}
END_TEST

int main(void)
{
    krn_init(); /* as main.c does: the best kernels, before any thread */
    setup_model();
    Suite *su = suite_create("session");
    TCase *tc = tcase_create("session");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, interleaved_sessions_persistent);
    tcase_add_test(tc, interleaved_sessions_tensor);
    tcase_add_test(tc, freed_session_returns_memory);
    tcase_add_test(tc, pooled_pages_serve_the_next_session);
    tcase_add_loop_test(tc, synthetic_fill_narrow_types, 0, 2);
    tcase_add_loop_test(tc, narrow_kv_type_needs_persistent_mode, 0, 2);
    tcase_add_test(tc, context_limit_is_an_error);
    tcase_add_test(tc, kv_bytes_known_before_the_session);
    suite_add_tcase(su, tc);
    return qd_run_suite(su);
}
