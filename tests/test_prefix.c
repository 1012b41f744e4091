/*
 * test_prefix: the prompt-prefix cache (engine/prefix.h) on the tiny model.
 * A generation that starts from a cached prefix gives bit for bit the logits
 * and ids of a cold prefill of the same prompt, whether the entry's storage
 * was handed over or its rows copied, from an idle entry or from a running
 * generation's storage; a cancelled request's partial prefill
 * is reused; entries stay within the byte budget, least recently used first
 * out; scopes do not see each other's entries; short prompts are not kept;
 * a longer prompt replaces the entry it extends; idle entries feed an
 * empty KV pool, the recent half of the budget kept while lookups hit.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gen.h"
#include "engine/prefix.h"
#include "kernels/krn.h"
#include "tests/check_main.h"

static char model_dir[1024];
static eng_model *model;
static int64_t V;

static void setup_model(void)
{
    qd_tiny_model("prefix-tiny", false, model_dir, sizeof model_dir);
}

static void open_model(void)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_model_opts mo = {.threads = 2};
    ck_assert_msg(eng_model_open(model_dir, &mo, &model, &d) == 0, "%s", d.n_kept ? d.lines[0] : "");
    eng_diag_clear(&d);
    V = eng_model_geometry(model)->vocab;
}

static void close_model(void)
{
    eng_model_free(model);
    model = NULL;
}

/* A conversation-like prompt: ids drawn from SEED. */
static void ids_from(int64_t *ids, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        ids[i] = (int64_t)(seed % 151643);
    }
}

static const int64_t teacher[] = {11, 12, 13, 14, 15, 16, 17, 18};
#define STEPS 6

typedef struct result {
    float *rows; /* [STEPS][V] */
    int32_t ids[STEPS];
    size_t reused;
} result;

/* Runs PROMPT to its end (teacher-forced), from CACHE when given, with at most CHUNK prompt ids per step. */
static void run(const int64_t *prompt, size_t n, eng_prefix *cache, const char *scope, size_t chunk, result *r)
{
    /* one capacity for all, so an entry's storage can serve a longer prompt */
    eng_gen_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = STEPS, .capacity = 128, .teacher = teacher,
                        .n_teacher = STEPS, .prefix = cache, .scope = scope};
    eng_sampling_default(&p.sampling);
    p.sampling.temperature = 0.0f;
    eng_diag d;
    eng_diag_init(&d);
    eng_gen *g = eng_gen_new(model, &p, &d);
    ck_assert_msg(g != NULL, "%s", d.n_kept ? d.lines[0] : "");
    r->reused = eng_gen_reused(g);
    r->rows = malloc((size_t)STEPS * (size_t)V * sizeof(float));
    eng_gen_budget b = {.prefill_tokens = chunk};
    size_t k = 0;
    while (eng_gen_state(g) == ENG_GEN_RUNNING) {
        ck_assert_int_eq(eng_gen_step(&g, 1, &b, &d), 0);
        if (eng_gen_last(g)->token >= 0) {
            memcpy(r->rows + k * (size_t)V, eng_gen_logits(g), (size_t)V * sizeof(float));
            r->ids[k++] = eng_gen_last(g)->token;
        }
    }
    ck_assert_uint_eq(k, STEPS);
    eng_gen_free(g);
    eng_diag_clear(&d);
}

static void same(const result *a, const result *b, const char *what)
{
    for (size_t i = 0; i < STEPS; i++) {
        ck_assert_msg(a->ids[i] == b->ids[i], "%s: id %zu differs", what, i);
        ck_assert_msg(!memcmp(a->rows + i * (size_t)V, b->rows + i * (size_t)V, (size_t)V * sizeof(float)),
                      "%s: logits row %zu differs", what, i);
    }
}

static eng_prefix_stats stats(const eng_prefix *c)
{
    eng_prefix_stats st;
    eng_prefix_get_stats(c, &st);
    return st;
}

/*
 * Reused prefixes give a cold prefill's bits however they were reused: the
 * entry's storage handed over (the prompt extends all of it, or shares at
 * least half of it), its rows copied (it shares less), or copied from a
 * running generation's handed-over storage (a lent entry).
 */
START_TEST(reuse_is_bit_identical)
{
    int64_t a[64], b[64], c[64], e[88], f[88];
    ids_from(a, 64, 1);
    memcpy(c, a, 25 * sizeof *a); /* c diverges from a after 25 ids */
    ids_from(c + 25, 39, 3);
    memcpy(b, a, 40 * sizeof *a); /* b shares 25 ids with c, 40 with a */
    ids_from(b + 40, 24, 2);
    memcpy(e, b, 64 * sizeof *b); /* e extends all of b */
    ids_from(e + 64, 24, 4);
    memcpy(f, e, 70 * sizeof *e); /* f shares 70 ids with e */
    ids_from(f + 70, 18, 5);
    eng_prefix *cache = eng_prefix_new(model, (uint64_t)1 << 30, 4);
    ck_assert_ptr_nonnull(cache);
    result cold_b, cold_c, cold_e, cold_f, warm_a, warm_b, warm_c, warm_e, warm_f;
    run(b, 64, NULL, NULL, 0, &cold_b);
    run(c, 64, NULL, NULL, 0, &cold_c);
    run(e, 88, NULL, NULL, 0, &cold_e);
    run(f, 88, NULL, NULL, 0, &cold_f);

    run(a, 40, cache, "", 16, &warm_a); /* prefilled in chunks, then kept */
    ck_assert_uint_eq(warm_a.reused, 0);
    ck_assert_uint_eq(stats(cache).entries, 1);
    ck_assert_uint_eq(stats(cache).misses, 1);

    /* c shares 25 of the entry's 40 ids: its storage is handed over (trimmed), nothing copied */
    run(c, 64, cache, "", 0, &warm_c);
    ck_assert_uint_eq(warm_c.reused, 25);
    same(&cold_c, &warm_c, "handed-over shared part");
    ck_assert_uint_eq(stats(cache).copied_bytes, 0);
    ck_assert_uint_eq(stats(cache).entries, 1); /* c's 64 ids replaced a */

    /* b shares 25 of c's 64 ids, less than half: copied, c stays */
    run(b, 64, cache, "", 7, &warm_b);
    ck_assert_uint_eq(warm_b.reused, 25);
    same(&cold_b, &warm_b, "copied prefix");
    uint64_t copied = stats(cache).copied_bytes;
    ck_assert_uint_gt(copied, 0);
    ck_assert_uint_eq(stats(cache).entries, 2);

    /* e extends all of b: handed over, with a larger capacity than b's session had */
    eng_gen_params p = {.prompt = e, .n_prompt = 88, .max_tokens = STEPS, .capacity = 200, .teacher = teacher,
                        .n_teacher = STEPS, .prefix = cache, .scope = ""};
    eng_sampling_default(&p.sampling);
    p.sampling.temperature = 0.0f;
    eng_diag d;
    eng_diag_init(&d);
    eng_gen *g = eng_gen_new(model, &p, &d);
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_eq(eng_gen_reused(g), 64);
    ck_assert_uint_eq(stats(cache).copied_bytes, copied);
    size_t k = 0;
    warm_e.rows = malloc((size_t)STEPS * (size_t)V * sizeof(float));
    warm_e.reused = 64;
    for (bool f_ran = false; eng_gen_state(g) == ENG_GEN_RUNNING;) {
        ck_assert_int_eq(eng_gen_step(&g, 1, NULL, &d), 0);
        if (eng_gen_last(g)->token >= 0) {
            memcpy(warm_e.rows + k * (size_t)V, eng_gen_logits(g), (size_t)V * sizeof(float));
            warm_e.ids[k++] = eng_gen_last(g)->token;
        }
        if (!f_ran) {
            /* while e runs (its prompt's rows 64.. written), f shares 70 of its ids: 64 are copied from
             * e's lent storage */
            run(f, 88, cache, "", 0, &warm_f);
            f_ran = true;
            ck_assert_uint_eq(warm_f.reused, 64);
            same(&cold_f, &warm_f, "prefix copied from a running generation");
            ck_assert_uint_gt(stats(cache).copied_bytes, copied);
        }
    }
    ck_assert_uint_eq(k, STEPS);
    same(&cold_e, &warm_e, "handed-over prefix, capacity raised");
    eng_gen_free(g); /* e comes back: its lent entry goes, its own one replaces it */
    eng_diag_clear(&d);
    eng_prefix_stats st = stats(cache);
    ck_assert_uint_eq(st.hits, 4);
    ck_assert_uint_eq(st.tokens, 25 + 25 + 64 + 64);
    ck_assert_uint_eq(st.entries, 3); /* c, e and f: b was extended by e */
    result *all[] = {&cold_b, &cold_c, &cold_e, &cold_f, &warm_a, &warm_b, &warm_c, &warm_e, &warm_f};
    for (size_t i = 0; i < 9; i++)
        free(all[i]->rows);
    eng_prefix_free(cache);
}
END_TEST

/* A request cut short in its prefill leaves the rows it wrote for the next one. */
START_TEST(cancelled_prefix_is_reused)
{
    int64_t p[48];
    ids_from(p, 48, 9);
    eng_prefix *cache = eng_prefix_new(model, (uint64_t)1 << 30, 4);
    eng_gen_params gp = {.prompt = p, .n_prompt = 48, .max_tokens = 4, .prefix = cache, .scope = "k"};
    eng_sampling_default(&gp.sampling);
    eng_diag d;
    eng_diag_init(&d);
    eng_gen *g = eng_gen_new(model, &gp, &d);
    ck_assert_ptr_nonnull(g);
    eng_gen_budget b = {.prefill_tokens = 20};
    ck_assert_int_eq(eng_gen_step(&g, 1, &b, &d), 0);
    ck_assert_int_eq(eng_gen_step(&g, 1, &b, &d), 0);
    ck_assert_uint_eq(eng_gen_prompt_fed(g), 40);
    eng_gen_free(g); /* cancelled after 40 of 48 prompt ids */
    result cold, warm;
    run(p, 48, NULL, NULL, 0, &cold);
    run(p, 48, cache, "k", 0, &warm);
    ck_assert_uint_eq(warm.reused, 40);
    same(&cold, &warm, "cancelled request's prefix");
    free(cold.rows);
    free(warm.rows);
    eng_diag_clear(&d);
    eng_prefix_free(cache);
}
END_TEST

/* Scopes are apart; short prompts are not kept; the budget evicts the least recently used. */
START_TEST(scopes_budget_and_minimum)
{
    int64_t p[40], q[40];
    ids_from(p, 40, 21);
    ids_from(q, 40, 22);
    result r;
    /* the budget holds about one entry of 40 tokens */
    eng_prefix *probe = eng_prefix_new(model, (uint64_t)1 << 30, 4);
    run(p, 40, probe, "", 0, &r);
    free(r.rows);
    uint64_t one = stats(probe).bytes;
    ck_assert_uint_gt(one, 0);
    eng_prefix_free(probe);

    eng_prefix *cache = eng_prefix_new(model, one + one / 2, 8);
    run(p, 40, cache, "alice", 0, &r);
    free(r.rows);
    run(p, 40, cache, "bob", 0, &r); /* another scope: a miss */
    ck_assert_uint_eq(r.reused, 0);
    free(r.rows);
    eng_prefix_stats st = stats(cache);
    ck_assert_uint_eq(st.hits, 0);
    ck_assert_uint_eq(st.misses, 2);
    ck_assert_uint_eq(st.evictions, 1); /* alice's entry made room for bob's */
    ck_assert_uint_le(st.bytes, eng_prefix_budget(cache));
    run(p, 40, cache, "alice", 0, &r);
    ck_assert_uint_eq(r.reused, 0);
    free(r.rows);
    run(q, 40, cache, "bob", 0, &r); /* q shares nothing with p */
    ck_assert_uint_eq(r.reused, 0);
    free(r.rows);
    /* a prompt shorter than the minimum is not kept */
    eng_prefix_free(cache);
    cache = eng_prefix_new(model, (uint64_t)1 << 30, 8);
    run(p, 6, cache, "", 0, &r);
    free(r.rows);
    ck_assert_uint_eq(stats(cache).entries, 0);
    eng_prefix_free(cache);
}
END_TEST

/*
 * A new session takes an idle entry's touched pages before fresh ones when
 * the KV pool is empty: any entry after 16 misses in a row, only the older
 * half of the budget while lookups hit. A new cache keeps its first entries.
 */
START_TEST(entries_feed_an_empty_pool)
{
    int64_t p[40], q[40], u[40];
    ids_from(p, 40, 31);
    ids_from(u, 40, 33);
    result r;
    eng_prefix *cache = eng_prefix_new(model, (uint64_t)1 << 30, 8);
    run(p, 40, cache, "", 0, &r);
    free(r.rows);
    ck_assert_uint_eq(eng_model_kv_pool_bytes(model), 0); /* p's session went to the cache */
    for (uint64_t k = 0; k < 14; k++) {                    /* 15 misses: every entry stays */
        ids_from(q, 40, 100 + k);
        run(q, 40, cache, "", 0, &r);
        free(r.rows);
    }
    eng_prefix_stats st = stats(cache);
    ck_assert_uint_eq(st.entries, 15);
    ck_assert_uint_eq(st.evictions, 0);
    ids_from(q, 40, 200);
    run(q, 40, cache, "", 0, &r); /* the 16th miss in a row: p's entry, the oldest, feeds it */
    free(r.rows);
    st = stats(cache);
    ck_assert_uint_eq(st.entries, 15);
    ck_assert_uint_eq(st.evictions, 1);
    run(p, 40, cache, "", 0, &r);
    ck_assert_uint_eq(r.reused, 0);
    free(r.rows);
    run(p, 40, cache, "", 0, &r); /* a hit: from now on half the budget is kept for hits */
    ck_assert_uint_gt(r.reused, 0);
    free(r.rows);
    uint64_t ev = stats(cache).evictions;
    run(u, 40, cache, "", 0, &r);
    free(r.rows);
    st = stats(cache);
    ck_assert_uint_eq(st.evictions, ev);
    ck_assert_uint_eq(st.entries, 16);
    run(p, 40, cache, "", 0, &r); /* p's entry stayed */
    ck_assert_uint_gt(r.reused, 0);
    free(r.rows);
    eng_prefix_free(cache);
}
END_TEST

int main(void)
{
    krn_init(); /* as main.c does: the best kernels, before any thread */
    setup_model();
    Suite *su = suite_create("prefix");
    TCase *tc = tcase_create("prefix");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, open_model, close_model);
    tcase_add_test(tc, reuse_is_bit_identical);
    tcase_add_test(tc, cancelled_prefix_is_reused);
    tcase_add_test(tc, scopes_budget_and_minimum);
    tcase_add_test(tc, entries_feed_an_empty_pool);
    suite_add_tcase(su, tc);
    return qd_run_suite(su);
}
