/*
 * test_batch: batch invariance. A request's logits and ids must not depend
 * on what else runs in its steps: one generation, teacher-forced so every
 * step's logits row can be compared, gives bit for bit the rows and ids of
 * its run alone while 1, 3 and 7 other generations of other prompt and
 * output lengths run beside it, join in the middle of it and end before
 * it, with a prompt budget per step that cuts its prefill differently (into
 * chunks of a single id too), and
 * with its rows at different places in the batch. Checked for every kernel
 * level this CPU runs (QWEN3D_KERNELS), on the tiny model; and on the tiny
 * model's standard contracts (int4-qdq with the opset 23 ops and
 * decomposed, float), whose lowered attention must batch the same way, at
 * the CPU's best level, teacher-forced.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "engine/gen.h"
#include "kernels/krn.h"
#include "kvcache/kv.h"
#include "tests/check_main.h"

/* The tiny model in each contract: synth arguments and folder. */
static const char *const contracts[] = {"", "--contract int4-qdq", "--contract int4-qdq --decomposed",
                                        "--contract float"};
#define N_CONTRACTS (sizeof contracts / sizeof contracts[0])
static char model_dirs[N_CONTRACTS][1024];
static const char *model_dir;
static eng_model *model;
static int64_t V;

static void setup_model(void)
{
    qd_tiny_model("batch-tiny", false, model_dirs[0], sizeof model_dirs[0]);
    /* the standard contracts of the same tiny model; qd_tiny_model() checked the environment */
    const char *bd = getenv("QD_BUILDDIR"), *exe = getenv("QWEN3D");
    for (size_t c = 1; c < N_CONTRACTS; c++) {
        snprintf(model_dirs[c], sizeof model_dirs[c], "%s/tests/tmp/batch-tiny-std%zu", bd, c);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "test -f '%s/model.onnx' || '%s' synth --preset tiny %s --out '%s' >/dev/null",
                 model_dirs[c], exe, contracts[c], model_dirs[c]);
        if (system(cmd) != 0) {
            fprintf(stderr, "cannot write the tiny model (%s)\n", contracts[c]);
            exit(1);
        }
    }
    model_dir = model_dirs[0];
}

/* The session caches' element type open_level() gives the model. */
static kv_type model_kv_type = KV_F32;

/* Opens the model with the kernels of LEVEL; false when this CPU lacks it. */
static bool open_level(krn_level level)
{
    krn_table t;
    if (krn_table_for_level(level, &t) != KRN_OK)
        return false;
    setenv("QWEN3D_KERNELS", krn_level_name(level), 1);
    ck_assert_int_eq(krn_init(), KRN_OK);
    ck_assert_int_eq(krn_active()->level, level);
    eng_diag d;
    eng_diag_init(&d);
    eng_model_opts mo = {.threads = 2, .kv_type = model_kv_type};
    ck_assert_msg(eng_model_open(model_dir, &mo, &model, &d) == 0, "%s", d.n_kept ? d.lines[0] : "");
    eng_diag_clear(&d);
    V = eng_model_geometry(model)->vocab;
    return true;
}

static uint64_t rng_state;

static int64_t rnd(int64_t n)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (int64_t)(rng_state % (uint64_t)n);
}

/* A generation's description: prompt and teacher ids drawn from a seed. */
typedef struct req {
    int64_t prompt[64], teacher[32];
    size_t n_prompt;
    int64_t max_tokens;
    int start;         /* the step it joins at */
    bool greedy;       /* sampled greedily instead of teacher-forced */
} req;

static void make_req(req *r, uint64_t seed, size_t n_prompt, int64_t max_tokens, int start, bool greedy)
{
    rng_state = seed;
    r->n_prompt = n_prompt;
    r->max_tokens = max_tokens;
    r->start = start;
    r->greedy = greedy;
    for (size_t i = 0; i < n_prompt; i++)
        r->prompt[i] = rnd(151643);
    for (int64_t i = 0; i < max_tokens; i++)
        r->teacher[i] = rnd(151643);
}

static eng_gen *new_gen(const req *r)
{
    eng_gen_params p = {.prompt = r->prompt, .n_prompt = r->n_prompt, .max_tokens = r->max_tokens,
                        .ignore_eos = true};
    eng_sampling_default(&p.sampling);
    p.sampling.temperature = 0.0f;
    if (!r->greedy) {
        p.teacher = r->teacher;
        p.n_teacher = (size_t)r->max_tokens;
    }
    eng_diag d;
    eng_diag_init(&d);
    eng_gen *g = eng_gen_new(model, &p, &d);
    ck_assert_msg(g != NULL, "%s", d.n_kept ? d.lines[0] : "");
    eng_diag_clear(&d);
    return g;
}

/* What the observed generation produced: its logits rows and ids. */
typedef struct trace {
    float *rows;
    int32_t ids[32];
    size_t n;
} trace;

/*
 * Runs TARGET with the OTHERS (each joining at its start step), with at
 * most BUDGET prompt ids per step (0: none), the target at position POS
 * among the running generations (clamped), and records the target.
 */
#define VARYING ((size_t)-1)

static void run(const req *target, const req *others, size_t n_others, size_t budget, size_t pos, trace *t)
{
    eng_gen *tg = new_gen(target);
    eng_gen *og[8] = {0};
    t->rows = calloc((size_t)target->max_tokens, (size_t)V * sizeof(float));
    t->n = 0;
    eng_gen_budget b = {.prefill_tokens = budget};
    for (int step = 0; eng_gen_state(tg) == ENG_GEN_RUNNING; step++) {
        /* VARYING: a budget of 1 to 9 ids that changes every step, so chunks of one id occur */
        if (budget == VARYING)
            b.prefill_tokens = (size_t)(step * 5 % 9) + 1;
        eng_gen *live[9];
        size_t n = 0;
        for (size_t i = 0; i < n_others; i++) {
            if (others[i].start == step)
                og[i] = new_gen(&others[i]);
            if (og[i] && eng_gen_state(og[i]) == ENG_GEN_RUNNING)
                live[n++] = og[i];
        }
        size_t at = pos < n ? pos : n;
        memmove(live + at + 1, live + at, (n - at) * sizeof *live);
        live[at] = tg;
        n++;
        eng_diag d;
        eng_diag_init(&d);
        ck_assert_msg(eng_gen_step(live, n, &b, &d) == 0, "step: %s", d.n_kept ? d.lines[0] : "");
        eng_diag_clear(&d);
        if (eng_gen_last(tg)->token >= 0) {
            ck_assert_uint_lt(t->n, (size_t)target->max_tokens);
            memcpy(t->rows + t->n * (size_t)V, eng_gen_logits(tg), (size_t)V * sizeof(float));
            t->ids[t->n++] = eng_gen_last(tg)->token;
        }
    }
    ck_assert_int_eq(eng_gen_state(tg), ENG_GEN_LENGTH);
    eng_gen_free(tg);
    for (size_t i = 0; i < n_others; i++)
        eng_gen_free(og[i]);
}

static void same(const trace *a, const trace *b, const char *what)
{
    ck_assert_uint_eq(a->n, b->n);
    for (size_t i = 0; i < a->n; i++) {
        ck_assert_msg(a->ids[i] == b->ids[i], "%s: id %zu differs (%d, %d)", what, i, a->ids[i], b->ids[i]);
        ck_assert_msg(!memcmp(a->rows + i * (size_t)V, b->rows + i * (size_t)V, (size_t)V * sizeof(float)),
                      "%s: logits row %zu differs", what, i);
    }
}

/* Others: prompts of 3 to 60 ids, 2 to 20 outputs, joining from step 0 to 12; some end early. */
static void others_for(req *o, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        rng_state = seed + 7919 * i;
        size_t np = 3 + (size_t)rnd(58);
        int64_t mt = 2 + rnd(19);
        int start = (int)rnd(13);
        make_req(&o[i], seed * 31 + i, np, mt, start, i % 2 == 0);
    }
}

static void check_level(krn_level level, bool greedy)
{
    if (!open_level(level)) {
        fprintf(stderr, "test_batch: level %s not run (this CPU lacks it)\n", krn_level_name(level));
        return;
    }
    req target;
    make_req(&target, 0x5eed + (uint64_t)level, 23, 16, 0, greedy);
    trace solo;
    run(&target, NULL, 0, 0, 0, &solo);
    static const size_t counts[] = {1, 3, 7};
    static const size_t budgets[] = {VARYING, 0, 16};
    /* The scalar reference is slow: one budget for it, all three for the SIMD levels. */
    size_t n_budgets = level == KRN_LEVEL_REF ? 1 : 3;
    for (size_t c = 0; c < 3; c++) {
        req others[8];
        others_for(others, counts[c], 1000 + c);
        for (size_t b = 0; b < n_budgets; b++) {
            trace loaded;
            size_t pos = (c + b) % (counts[c] + 1);
            run(&target, others, counts[c], budgets[b], pos, &loaded);
            char what[160];
            snprintf(what, sizeof what, "%s, %s, %zu others, prompt budget %zd, at %zu", krn_level_name(level),
                     greedy ? "greedy" : "teacher-forced", counts[c], (ssize_t)budgets[b], pos);
            same(&solo, &loaded, what);
            free(loaded.rows);
        }
    }
    free(solo.rows);
    eng_model_free(model);
    model = NULL;
}

START_TEST(teacher_forced_logits)
{
    check_level((krn_level)_i, false);
}
END_TEST

START_TEST(greedy_ids)
{
    check_level((krn_level)_i, true);
}
END_TEST

/* With q8 session caches (their rows quantized as they are stored) too. */
START_TEST(q8_cache_teacher_forced_logits)
{
    model_kv_type = KV_Q8;
    check_level((krn_level)_i, false);
    model_kv_type = KV_F32;
}
END_TEST

/* The standard contracts: the lowered steps (attention included) keep every row's arithmetic. */
START_TEST(standard_contracts)
{
    model_dir = model_dirs[_i];
    check_level(krn_cpu_best_level(), false);
    model_dir = model_dirs[0];
}
END_TEST

int main(void)
{
    setup_model();
    Suite *su = suite_create("batch");
    TCase *tc = tcase_create("batch");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, teacher_forced_logits, 0, KRN_LEVEL_COUNT);
    tcase_add_loop_test(tc, greedy_ids, 0, KRN_LEVEL_COUNT);
    tcase_add_loop_test(tc, q8_cache_teacher_forced_logits, 0, KRN_LEVEL_COUNT);
    tcase_add_loop_test(tc, standard_contracts, 1, (int)N_CONTRACTS);
    suite_add_tcase(su, tc);
    return qd_run_suite(su);
}
