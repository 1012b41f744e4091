/*
 * test_gen: generations (engine/gen.h) on the tiny model with the real
 * Qwen3 tokenizer. The ids and logits of a generation equal a plain loop of
 * session feeds with the same sampler; prefill chunks and step budgets do
 * not change a generation's results; stop strings cut the text across token
 * boundaries; max_tokens, the session's capacity, end-of-sequence ids,
 * teacher forcing and an outside end each end it as documented.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/gen.h"
#include "kernels/krn.h"
#include "tests/check_main.h"

static char model_dir[1024];
static eng_model *model;
static eng_tok *tok;
static int64_t V;

static void setup(void)
{
    qd_tiny_model("gen-tiny", true, model_dir, sizeof model_dir);
}

/* Per test (check forks each into its own process, where the pool's threads must start anew). */
static void open_model(void)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_model_opts mo = {.threads = 2};
    ck_assert_msg(eng_model_open(model_dir, &mo, &model, &d) == 0 && eng_tok_load(model_dir, &tok, &d) == 0,
                  "%s", d.n_kept ? d.lines[0] : "");
    eng_diag_clear(&d);
    V = eng_model_geometry(model)->vocab;
}

static void close_model(void)
{
    eng_tok_free(tok);
    eng_model_free(model);
    tok = NULL;
    model = NULL;
}

static const int64_t prompt[] = {9707, 11, 1879, 0, 5, 3555, 30, 42, 7, 7, 9, 1234, 17};
#define N_PROMPT (sizeof prompt / sizeof prompt[0])

static eng_gen_params params(int64_t max_tokens)
{
    eng_gen_params p = {.prompt = prompt, .n_prompt = N_PROMPT, .max_tokens = max_tokens, .tok = tok,
                        .ignore_eos = true};
    eng_sampling_default(&p.sampling);
    p.sampling.temperature = 0.0f;
    return p;
}

static eng_gen *new_gen(const eng_gen_params *p)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_gen *g = eng_gen_new(model, p, &d);
    ck_assert_msg(g != NULL, "eng_gen_new: %s", d.n_kept ? d.lines[0] : "");
    eng_diag_clear(&d);
    return g;
}

static void step(eng_gen *const *g, size_t n, const eng_gen_budget *b)
{
    eng_diag d;
    eng_diag_init(&d);
    int rc = eng_gen_step(g, n, b, &d);
    ck_assert_msg(rc == 0, "eng_gen_step: %s", d.n_kept ? d.lines[0] : "");
    eng_diag_clear(&d);
}

/* Every logits row a generation samples from, concatenated, and its text. */
typedef struct trace {
    float *rows;
    size_t n_rows;
    char text[4096];
    size_t len;
} trace;

static void record(eng_gen *g, trace *t)
{
    const float *l = eng_gen_logits(g);
    if (l) {
        t->rows = realloc(t->rows, (t->n_rows + 1) * (size_t)V * sizeof(float));
        ck_assert_ptr_nonnull(t->rows);
        memcpy(t->rows + t->n_rows * (size_t)V, l, (size_t)V * sizeof(float));
        t->n_rows++;
    }
    const eng_gen_event *ev = eng_gen_last(g);
    ck_assert_uint_lt(t->len + ev->len, sizeof t->text);
    memcpy(t->text + t->len, ev->text, ev->len);
    t->len += ev->len;
    t->text[t->len] = '\0';
}

/* Runs G alone to its end, with at most CHUNK prompt ids per step. */
static void run_alone(eng_gen *g, size_t chunk, trace *t)
{
    eng_gen_budget b = {.prefill_tokens = chunk};
    while (eng_gen_state(g) == ENG_GEN_RUNNING) {
        step(&g, 1, &b);
        record(g, t);
    }
}

/* The ids and every logits row equal a loop of session feeds and greedy argmaxes. */
START_TEST(matches_session_loop)
{
    const int64_t max_tokens = 10;
    eng_gen_params p = params(max_tokens);
    eng_gen *g = new_gen(&p);
    trace t = {0};
    run_alone(g, 0, &t);
    ck_assert_int_eq(eng_gen_state(g), ENG_GEN_LENGTH);
    ck_assert_int_eq(eng_gen_generated(g), max_tokens);
    ck_assert_uint_eq(t.n_rows, (size_t)max_tokens);

    eng_diag d;
    eng_diag_init(&d);
    eng_session *s = eng_session_new(model, N_PROMPT + max_tokens, &d);
    ck_assert_ptr_nonnull(s);
    const float *logits;
    ck_assert_int_eq(eng_session_feed(s, prompt, N_PROMPT, &logits, &d), 0);
    for (int64_t i = 0; i < max_tokens; i++) {
        ck_assert_msg(memcmp(logits, t.rows + (size_t)i * (size_t)V, (size_t)V * sizeof(float)) == 0,
                      "logits row %lld differs", (long long)i);
        int64_t id = eng_argmax(logits, (size_t)V);
        ck_assert_int_eq(id, eng_gen_ids(g)[i]);
        if (i + 1 < max_tokens)
            ck_assert_int_eq(eng_session_feed(s, &id, 1, &logits, &d), 0);
    }
    /* The text is the detokenized ids. */
    eng_tok_text want = {0};
    ck_assert_int_eq(eng_tok_decode(tok, eng_gen_ids(g), (size_t)max_tokens, true, &want), 0);
    ck_assert_str_eq(t.text, want.s ? want.s : "");
    eng_tok_text_free(&want);
    eng_session_free(s);
    eng_diag_clear(&d);
    eng_gen_free(g);
    free(t.rows);
}
END_TEST

/* Prefill in chunks of several ids gives the whole prompt's results. */
START_TEST(prefill_chunks_do_not_change_results)
{
    eng_gen_params p = params(6);
    eng_gen *whole = new_gen(&p);
    trace tw = {0};
    run_alone(whole, 0, &tw);
    const size_t chunks[] = {2, 3, 5, 12};
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        eng_gen *g = new_gen(&p);
        trace t = {0};
        size_t steps = 0;
        eng_gen_budget b = {.prefill_tokens = chunks[c]};
        while (!eng_gen_prefilled(g)) {
            step(&g, 1, &b);
            ck_assert_uint_le(eng_gen_last(g)->prompt_fed, chunks[c]);
            record(g, &t);
            steps++;
        }
        ck_assert_uint_eq(steps, (N_PROMPT + chunks[c] - 1) / chunks[c]);
        run_alone(g, 0, &t);
        ck_assert_uint_eq(t.n_rows, tw.n_rows);
        ck_assert_msg(memcmp(t.rows, tw.rows, t.n_rows * (size_t)V * sizeof(float)) == 0,
                      "prefill in chunks of %zu changed the logits", chunks[c]);
        ck_assert_str_eq(t.text, tw.text);
        eng_gen_free(g);
        free(t.rows);
    }
    eng_gen_free(whole);
    free(tw.rows);
}
END_TEST

/* Two generations stepping together share the step's prompt budget in order and keep their results. */
START_TEST(steps_of_several_generations)
{
    eng_gen_params p = params(5);
    eng_gen *alone = new_gen(&p);
    trace ta = {0};
    run_alone(alone, 0, &ta);
    eng_gen *g[2] = {new_gen(&p), new_gen(&p)};
    trace t[2] = {{0}, {0}};
    eng_gen_budget b = {.prefill_tokens = N_PROMPT + 4};
    step(g, 2, &b);
    ck_assert_uint_eq(eng_gen_last(g[0])->prompt_fed, N_PROMPT);
    ck_assert(eng_gen_last(g[0])->prefilled);
    ck_assert_uint_eq(eng_gen_last(g[1])->prompt_fed, 4);
    ck_assert_int_eq(eng_gen_last(g[1])->token, -1);
    for (int i = 0; i < 2; i++)
        record(g[i], &t[i]);
    while (eng_gen_state(g[0]) == ENG_GEN_RUNNING || eng_gen_state(g[1]) == ENG_GEN_RUNNING) {
        eng_gen *live[2];
        trace *lt[2];
        size_t n = 0;
        for (int i = 0; i < 2; i++)
            if (eng_gen_state(g[i]) == ENG_GEN_RUNNING) {
                lt[n] = &t[i];
                live[n++] = g[i];
            }
        step(live, n, NULL);
        for (size_t i = 0; i < n; i++)
            record(live[i], lt[i]);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_uint_eq(t[i].n_rows, ta.n_rows);
        ck_assert_msg(memcmp(t[i].rows, ta.rows, ta.n_rows * (size_t)V * sizeof(float)) == 0,
                      "generation %d differs from its run alone", i);
        eng_gen_free(g[i]);
        free(t[i].rows);
    }
    eng_gen_free(alone);
    free(ta.rows);
}
END_TEST

/* A stop string that spans tokens ends the generation before it, with nothing of it released. */
START_TEST(stop_strings)
{
    eng_gen_params p = params(24);
    eng_gen *g = new_gen(&p);
    trace t = {0};
    run_alone(g, 0, &t);
    eng_gen_free(g);
    ck_assert_uint_ge(t.len, 8);
    /* a stop string from the middle of the text, spanning at least two tokens' pieces */
    char stop[8];
    size_t at = t.len / 2 - 3;
    memcpy(stop, t.text + at, 6);
    stop[6] = '\0';
    const char *first = strstr(t.text, stop);
    size_t keep = (size_t)(first - t.text);
    const char *stops[] = {stop};
    p.stop = stops;
    p.n_stop = 1;
    g = new_gen(&p);
    trace ts = {0};
    run_alone(g, 0, &ts);
    ck_assert_int_eq(eng_gen_state(g), ENG_GEN_STOP);
    ck_assert_uint_eq(ts.len, keep);
    ck_assert_int_eq(memcmp(ts.text, t.text, keep), 0);
    eng_gen_free(g);
    free(t.rows);
    free(ts.rows);
}
END_TEST

/* A full session ends with LENGTH before max_tokens; end-of-sequence ids end it unless ignored. */
START_TEST(capacity_and_eos)
{
    eng_gen_params p = params(50);
    p.capacity = N_PROMPT + 3;
    eng_gen *g = new_gen(&p);
    trace t = {0};
    run_alone(g, 0, &t);
    ck_assert_int_eq(eng_gen_state(g), ENG_GEN_LENGTH);
    /* prompt + 3 fed ids fill the session; the fourth sampled id could not be fed */
    ck_assert_int_eq(eng_gen_generated(g), 4);
    eng_gen_free(g);
    free(t.rows);

    /* Teacher forcing with an end-of-sequence id in the middle goes on past it. */
    const int64_t eos = eng_model_config(model)->eos_token_id[0];
    const int64_t teacher[] = {11, eos, 13, 14};
    p = params(5);
    p.teacher = teacher;
    p.n_teacher = 4;
    p.ignore_eos = false;
    g = new_gen(&p);
    trace tt = {0};
    run_alone(g, 0, &tt);
    ck_assert_int_eq(eng_gen_generated(g), 5);
    eng_gen_free(g);
    free(tt.rows);
}
END_TEST

/* Bad parameters are refused with a message; an outside end releases held-back text once. */
START_TEST(refusals_and_outside_end)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_gen_params p = params(4);
    const int64_t bad[] = {1, 151936};
    p.prompt = bad;
    p.n_prompt = 2;
    ck_assert_ptr_null(eng_gen_new(model, &p, &d));
    ck_assert_ptr_nonnull(strstr(d.lines[0], "outside the vocabulary"));
    p = params(0);
    ck_assert_ptr_null(eng_gen_new(model, &p, &d));
    p = params(4);
    p.capacity = 3;
    ck_assert_ptr_null(eng_gen_new(model, &p, &d));
    eng_diag_clear(&d);

    p = params(8);
    eng_gen *g = new_gen(&p);
    step(&g, 1, NULL);
    eng_gen_end(g);
    ck_assert_int_eq(eng_gen_state(g), ENG_GEN_ENDED);
    ck_assert_int_eq(eng_gen_last(g)->finish, ENG_GEN_ENDED);
    eng_gen_end(g); /* no effect */
    ck_assert_int_eq(eng_gen_state(g), ENG_GEN_ENDED);
    eng_gen_free(g);
    eng_gen_free(NULL);
}
END_TEST

/* Logprobs: the log-softmax of the raw row at the sampled id, and the most likely ids in order. */
START_TEST(logprobs_of_the_model_distribution)
{
    eng_gen_params p = params(4);
    p.logprobs = true;
    p.top_logprobs = 5;
    p.sampling.temperature = 0.7f; /* the reported distribution is the raw one, whatever the sampler does */
    p.sampling.seed = 3;
    eng_gen *g = new_gen(&p);
    double cum = 0;
    while (eng_gen_state(g) == ENG_GEN_RUNNING) {
        step(&g, 1, NULL);
        const eng_gen_event *ev = eng_gen_last(g);
        if (ev->token < 0)
            continue;
        const float *l = eng_gen_logits(g);
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < V; i++)
            mx = l[i] > mx ? l[i] : mx;
        for (int64_t i = 0; i < V; i++)
            sum += exp((double)l[i] - mx);
        double lse = mx + log(sum);
        ck_assert_double_eq_tol(ev->logprob, (double)l[ev->token] - lse, 1e-4);
        cum += ev->logprob;
        ck_assert_int_eq(ev->n_top, 5);
        for (int k = 0; k < 5; k++) {
            ck_assert_double_eq_tol(ev->top_lps[k], (double)l[ev->top_ids[k]] - lse, 1e-4);
            /* every other id is no more likely than the k-th (and an equal one has a higher id) */
            for (int64_t i = 0; i < V; i++) {
                bool listed = false;
                for (int j = 0; j <= k; j++)
                    listed |= ev->top_ids[j] == i;
                if (!listed)
                    ck_assert(l[i] < l[ev->top_ids[k]] || (l[i] == l[ev->top_ids[k]] && i > ev->top_ids[k]));
            }
        }
    }
    ck_assert_double_eq_tol(eng_gen_cum_logprob(g), cum, 1e-6);
    eng_gen_free(g);
}
END_TEST

/*
 * Echo: the prompt's log-probabilities, row i - 1 for id i, equal the rows
 * of a session fed the prompt one id at a time (each a prompt chunk, whose
 * bits do not depend on the chunking), whether the prefill runs whole, in
 * chunks, or batched beside another generation; max_tokens 0 samples
 * nothing, and a sampled first id is the one a generation without echo
 * samples.
 */
static void check_prompt_logprobs(void)
{
    eng_diag d;
    eng_diag_init(&d);
    eng_session *ref = eng_session_new(model, (int64_t)N_PROMPT, &d);
    ck_assert_ptr_nonnull(ref);
    eng_token_lp want[N_PROMPT];
    for (size_t i = 0; i + 1 < N_PROMPT; i++) {
        const float *row = NULL;
        ck_assert_int_eq(eng_session_feed_prompt(ref, &prompt[i], 1, &row, &d), 0);
        want[i + 1].id = (int32_t)prompt[i + 1];
        eng_logprobs(row, (size_t)V, want[i + 1].id, 3, want[i + 1].top_ids, want[i + 1].top_lps, &want[i + 1].logprob);
    }
    eng_session_free(ref);
    eng_diag_clear(&d);

    eng_gen_params plain = params(2);
    eng_gen *base = new_gen(&plain);
    trace tb = {0};
    run_alone(base, 0, &tb);
    size_t chunks[] = {0, 1, 4};
    for (size_t c = 0; c < 4; c++) {
        eng_gen_params p = params(c == 3 ? 0 : 2);
        p.prompt_logprobs = true;
        p.top_logprobs = 3;
        eng_gen *g = new_gen(&p), *other = NULL;
        ck_assert_ptr_null(eng_gen_prompt_logprobs(g));
        if (c == 2) {
            /* beside a generation that decodes */
            eng_gen_params q = params(8);
            other = new_gen(&q);
            step(&other, 1, NULL);
        }
        eng_gen_budget b = {.prefill_tokens = c < 3 ? chunks[c] : 5};
        while (eng_gen_state(g) == ENG_GEN_RUNNING) {
            eng_gen *both[2] = {g, other};
            step(both, other ? 2 : 1, &b);
            if (other && eng_gen_state(other) != ENG_GEN_RUNNING) {
                eng_gen_free(other);
                other = NULL;
            }
            if (eng_gen_prefilled(g) && c != 3) {
                ck_assert_int_eq(eng_gen_last(g)->token, eng_gen_ids(base)[0]);
                eng_gen_end(g);
            }
        }
        eng_gen_free(other);
        const eng_token_lp *lp = eng_gen_prompt_logprobs(g);
        ck_assert_ptr_nonnull(lp);
        ck_assert_int_eq(lp[0].id, (int32_t)prompt[0]);
        ck_assert(isnan(lp[0].logprob));
        for (size_t i = 1; i < N_PROMPT; i++) {
            ck_assert_int_eq(lp[i].id, want[i].id);
            ck_assert_msg(lp[i].logprob == want[i].logprob, "case %zu position %zu: %g != %g", c, i,
                          (double)lp[i].logprob, (double)want[i].logprob);
            ck_assert_int_eq(lp[i].n_top, 3);
            for (int k = 0; k < 3; k++) {
                ck_assert_int_eq(lp[i].top_ids[k], want[i].top_ids[k]);
                ck_assert(lp[i].top_lps[k] == want[i].top_lps[k]);
            }
        }
        if (c == 3) {
            ck_assert_int_eq(eng_gen_state(g), ENG_GEN_LENGTH);
            ck_assert_int_eq(eng_gen_generated(g), 0);
        }
        eng_gen_free(g);
    }
    eng_gen_free(base);
    free(tb.rows);
}

START_TEST(prompt_logprobs_of_every_position)
{
    check_prompt_logprobs();
}
END_TEST

/* The same in the tensor KV mode, whose LM head leaves its last-row-only mode for such a prefill. */
START_TEST(prompt_logprobs_tensor_kv)
{
    eng_model *persistent = model, *tensor = NULL;
    eng_diag d;
    eng_diag_init(&d);
    eng_model_opts mo = {.threads = 2, .kv_mode = ENG_KV_TENSOR};
    ck_assert_msg(eng_model_open(model_dir, &mo, &tensor, &d) == 0, "%s", d.n_kept ? d.lines[0] : "");
    eng_diag_clear(&d);
    model = tensor;
    check_prompt_logprobs();
    model = persistent;
    eng_model_free(tensor);
}
END_TEST

/* A fork after the prefill is a generation of its own: the same rows and ids as one made from scratch. */
START_TEST(forks_after_the_prefill)
{
    eng_gen_params p = params(6);
    p.sampling.temperature = 0.9f;
    p.sampling.seed = 11;
    eng_gen *parent = new_gen(&p);
    step(&parent, 1, NULL);
    ck_assert(eng_gen_last(parent)->prefilled);
    eng_diag d;
    eng_diag_init(&d);
    /* the forks are made before any other run: the parent's logits row is then still valid */
    eng_gen *child[3];
    for (int c = 0; c < 3; c++) {
        eng_sampling sm = p.sampling;
        sm.seed = 20 + (uint64_t)c;
        child[c] = eng_gen_fork(parent, &sm, &d);
        ck_assert_msg(child[c] != NULL, "%s", d.n_kept ? d.lines[0] : "");
        ck_assert(eng_gen_last(child[c])->prefilled);
        ck_assert_int_ge(eng_gen_last(child[c])->token, 0);
    }
    trace tc[3] = {{0}, {0}, {0}};
    for (int c = 0; c < 3; c++)
        record(child[c], &tc[c]);
    for (int c = 0; c < 3; c++) {
        run_alone(child[c], 0, &tc[c]);
        /* the same choice made from scratch */
        eng_gen_params q = p;
        q.sampling.seed = 20 + (uint64_t)c;
        eng_gen *fresh = new_gen(&q);
        trace tf = {0};
        run_alone(fresh, 0, &tf);
        ck_assert_uint_eq(tc[c].n_rows, tf.n_rows);
        ck_assert_msg(!memcmp(tc[c].rows, tf.rows, tf.n_rows * (size_t)V * sizeof(float)), "fork %d differs", c);
        ck_assert_str_eq(tc[c].text, tf.text);
        eng_gen_free(child[c]);
        eng_gen_free(fresh);
        free(tc[c].rows);
        free(tf.rows);
    }
    /* too late: the parent has moved on */
    step(&parent, 1, NULL);
    ck_assert_ptr_null(eng_gen_fork(parent, &p.sampling, &d));
    eng_diag_clear(&d);
    eng_gen_free(parent);
}
END_TEST

/* ---- constrained decoding ------------------------------------------------- */

/* {"n": D, "s": "L"} with 1-6 digits D and 0-8 letters L: every text ends within a few tokens. */
static eng_grammar *small_grammar(void)
{
    eng_gbuild *b = eng_gbuild_new();
    ck_assert_ptr_nonnull(b);
    int32_t root = eng_gb_rule(b);
    eng_gexpr parts[] = {eng_gb_str(b, "{\"n\": "), eng_gb_repeat(b, eng_gb_range(b, '0', '9'), 1, 6),
                         eng_gb_str(b, ", \"s\": \""), eng_gb_repeat(b, eng_gb_range(b, 'a', 'z'), 0, 8),
                         eng_gb_str(b, "\"}")};
    eng_gb_define(b, root, eng_gb_seq(b, parts, sizeof parts / sizeof *parts));
    eng_grammar *g = NULL;
    char msg[160];
    ck_assert_msg(eng_gbuild_finish(b, root, &g, msg, sizeof msg) == 0, "%s", msg);
    eng_gbuild_free(b);
    return g;
}

static eng_gvocab *model_gvocab(void)
{
    const eng_genai_config *cfg = eng_model_config(model);
    int32_t eos[ENG_MAX_EOS];
    for (int i = 0; i < cfg->n_eos; i++)
        eos[i] = (int32_t)cfg->eos_token_id[i];
    eng_gvocab *v = eng_gvocab_new(tok, (size_t)V, eos, (size_t)cfg->n_eos);
    ck_assert_ptr_nonnull(v);
    return v;
}

/*
 * Each sampled id is one the grammar allows at its point (checked by a
 * matcher of the test's own), the text ends complete with an
 * end-of-sequence id, and greedy picks the largest logit among the allowed
 * ids of the row it sampled from; for every sampler setting.
 */
START_TEST(constrained_generation)
{
    eng_grammar *gr = small_grammar();
    eng_gvocab *gv = model_gvocab();
    eng_gmatch *ref = eng_gmatch_new(gr, gv);
    uint64_t *mask = malloc(eng_gvocab_mask_words(gv) * sizeof *mask);
    ck_assert(ref && mask);
    static const eng_sampling settings[] = {
        {.temperature = 0.0f, .top_p = 1.0f, .repetition_penalty = 1.0f},
        {.temperature = 0.8f, .top_p = 1.0f, .repetition_penalty = 1.0f, .seed = 7},
        {.temperature = 1.0f, .top_p = 0.9f, .top_k = 40, .min_p = 0.05f, .repetition_penalty = 1.0f, .seed = 8},
        {.temperature = 0.0f, .top_p = 1.0f, .repetition_penalty = 1.3f, .frequency_penalty = 0.5f},
    };
    for (size_t si = 0; si < sizeof settings / sizeof *settings; si++) {
        eng_gen_params p = params(64);
        p.ignore_eos = false;
        p.sampling = settings[si];
        p.grammar = gr;
        p.gvocab = gv;
        eng_gen *g = new_gen(&p);
        eng_gmatch_reset(ref);
        char text[512];
        size_t len = 0;
        while (eng_gen_state(g) == ENG_GEN_RUNNING) {
            ck_assert_int_gt(eng_gmatch_mask(ref, mask), 0);
            step(&g, 1, NULL);
            const eng_gen_event *ev = eng_gen_last(g);
            ck_assert_uint_lt(len + ev->len, sizeof text);
            memcpy(text + len, ev->text, ev->len);
            len += ev->len;
            if (ev->token < 0)
                continue;
            ck_assert_msg(mask[ev->token / 64] >> (ev->token % 64) & 1, "setting %zu: id %d is not allowed", si,
                          ev->token);
            if (settings[si].temperature == 0.0f && settings[si].repetition_penalty == 1.0f) {
                const float *row = eng_gen_logits(g);
                ck_assert_ptr_nonnull(row);
                for (int64_t i = 0; i < V; i++)
                    if (mask[i / 64] >> (i % 64) & 1)
                        ck_assert_msg(row[i] < row[ev->token] || (row[i] == row[ev->token] && i >= ev->token),
                                      "greedy took %d over the allowed %lld", ev->token, (long long)i);
            }
            ck_assert_int_eq(eng_gmatch_accept(ref, ev->token), 0);
        }
        ck_assert_msg(eng_gen_state(g) == ENG_GEN_STOP, "setting %zu ended %s: %s", si,
                      eng_gen_finish_name(eng_gen_state(g)), eng_gen_error(g));
        ck_assert(eng_gmatch_ended(ref));
        text[len] = '\0';
        ck_assert_msg(!strncmp(text, "{\"n\": ", 6) && len >= 16 && !strcmp(text + len - 2, "\"}"), "text %s", text);
        int64_t n_masks = 0;
        ck_assert(eng_gen_mask_seconds(g, &n_masks) >= 0.0);
        ck_assert_int_eq(n_masks, eng_gen_generated(g));
        eng_gen_free(g);
    }
    eng_gmatch_free(ref);
    free(mask);
    eng_gvocab_free(gv);
    eng_grammar_free(gr);
}
END_TEST

/*
 * A constrained and an unconstrained greedy generation stepping together
 * give what each gives alone (the unconstrained one keeps the fused argmax).
 */
START_TEST(constrained_in_a_batch)
{
    eng_grammar *gr = small_grammar();
    eng_gvocab *gv = model_gvocab();
    eng_gen_params pc = params(40), pf = params(12);
    pc.ignore_eos = false;
    pc.grammar = gr;
    pc.gvocab = gv;
    trace alone[2] = {{0}, {0}}, both[2] = {{0}, {0}};
    eng_gen *g[2] = {new_gen(&pc), new_gen(&pf)};
    for (int i = 0; i < 2; i++) {
        run_alone(g[i], 0, &alone[i]);
        eng_gen_free(g[i]);
    }
    g[0] = new_gen(&pc);
    g[1] = new_gen(&pf);
    while (eng_gen_state(g[0]) == ENG_GEN_RUNNING || eng_gen_state(g[1]) == ENG_GEN_RUNNING) {
        eng_gen *live[2];
        int idx[2];
        size_t n = 0;
        for (int i = 0; i < 2; i++)
            if (eng_gen_state(g[i]) == ENG_GEN_RUNNING) {
                idx[n] = i;
                live[n++] = g[i];
            }
        step(live, n, NULL);
        for (size_t i = 0; i < n; i++)
            record(live[i], &both[idx[i]]);
    }
    for (int i = 0; i < 2; i++) {
        ck_assert_str_eq(both[i].text, alone[i].text);
        ck_assert_uint_eq(both[i].n_rows, alone[i].n_rows);
        ck_assert(memcmp(both[i].rows, alone[i].rows, alone[i].n_rows * (size_t)V * sizeof(float)) == 0);
        free(both[i].rows);
        free(alone[i].rows);
        eng_gen_free(g[i]);
    }
    eng_gvocab_free(gv);
    eng_grammar_free(gr);
}
END_TEST

/*
 * A grammar the vocabulary cannot spell (a dead end at the first step) ends
 * the generation with an error before any id or text; a grammar with
 * teacher ids or ignore_eos is refused.
 */
START_TEST(constrained_dead_end)
{
    eng_gbuild *b = eng_gbuild_new();
    int32_t root = eng_gb_rule(b);
    eng_gb_define(b, root, eng_gb_str(b, "b"));
    eng_grammar *gr = NULL;
    ck_assert_int_eq(eng_gbuild_finish(b, root, &gr, NULL, 0), 0);
    eng_gbuild_free(b);
    const char **toks = calloc((size_t)V, sizeof *toks);
    size_t *lens = calloc((size_t)V, sizeof *lens);
    toks[0] = "a";
    lens[0] = 1;
    int32_t eos = 1;
    eng_gvocab *gv = eng_gvocab_new_bytes(toks, lens, (size_t)V, &eos, 1);
    ck_assert_ptr_nonnull(gv);
    eng_gen_params p = params(8);
    p.ignore_eos = false;
    p.grammar = gr;
    p.gvocab = gv;
    eng_gen *g = new_gen(&p);
    eng_diag d;
    eng_diag_init(&d);
    eng_gen_step(&g, 1, NULL, &d);
    eng_diag_clear(&d);
    ck_assert_int_eq(eng_gen_state(g), ENG_GEN_ERROR);
    ck_assert_int_eq(eng_gen_last(g)->token, -1);
    ck_assert_uint_eq(eng_gen_last(g)->len, 0);
    ck_assert_int_eq(eng_gen_generated(g), 0);
    ck_assert_msg(strstr(eng_gen_error(g), "dead end") != NULL, "%s", eng_gen_error(g));
    eng_gen_free(g);
    p.ignore_eos = true;
    eng_diag_init(&d);
    ck_assert_ptr_null(eng_gen_new(model, &p, &d));
    eng_diag_clear(&d);
    free(toks);
    free(lens);
    eng_gvocab_free(gv);
    eng_grammar_free(gr);
}
END_TEST

/*
 * A lazy grammar leaves the ids free until its trigger: without the
 * trigger the text is the unconstrained one, id for id; with the trigger
 * pushed by logit_bias it is sampled first and the grammar's text follows
 * to a complete end.
 */
START_TEST(constrained_lazy_trigger)
{
    eng_gvocab *gv = model_gvocab();
    /* A trigger the unconstrained greedy text does not contain: one past its largest id. */
    eng_gen_params pf = params(24);
    eng_gen *free_g = new_gen(&pf);
    int32_t trigger = 0;
    size_t n_free = 0;
    int32_t free_ids[24];
    while (eng_gen_state(free_g) == ENG_GEN_RUNNING) {
        step(&free_g, 1, NULL);
        int32_t id = eng_gen_last(free_g)->token;
        if (id >= 0) {
            free_ids[n_free++] = id;
            trigger = id >= trigger ? id + 1 : trigger;
        }
    }
    eng_gen_free(free_g);
    ck_assert_int_lt(trigger, V);
    eng_gbuild *b = eng_gbuild_new();
    int32_t root = eng_gb_rule(b);
    eng_gexpr parts[] = {eng_gb_token(b, trigger), eng_gb_str(b, "{\"n\": "), eng_gb_repeat(b, eng_gb_range(b, '0', '9'), 1, 4),
                         eng_gb_str(b, "}")};
    eng_gb_define(b, root, eng_gb_seq(b, parts, 4));
    eng_grammar *gr = NULL;
    ck_assert_int_eq(eng_gbuild_finish(b, root, &gr, NULL, 0), 0);
    eng_gbuild_free(b);
    eng_grammar_set_trigger(gr, trigger);
    ck_assert_int_eq(eng_grammar_trigger(gr), trigger);

    eng_gen_params p = params(24);
    p.grammar = gr;
    p.gvocab = gv;
    p.ignore_eos = false;
    eng_gen *g = new_gen(&p);
    size_t n = 0;
    while (eng_gen_state(g) == ENG_GEN_RUNNING) {
        step(&g, 1, NULL);
        int32_t id = eng_gen_last(g)->token;
        if (id >= 0) {
            ck_assert_uint_lt(n, n_free);
            ck_assert_int_eq(id, free_ids[n]);
            n++;
        }
    }
    ck_assert_uint_gt(n, 0);
    eng_gen_free(g);

    int32_t bias_id = trigger;
    float bias = 100.0f;
    p.bias_ids = &bias_id;
    p.bias = &bias;
    p.n_bias = 1;
    p.max_tokens = 64;
    g = new_gen(&p);
    char text[512];
    size_t len = 0;
    int32_t first = -1;
    while (eng_gen_state(g) == ENG_GEN_RUNNING) {
        step(&g, 1, NULL);
        const eng_gen_event *ev = eng_gen_last(g);
        if (first < 0)
            first = ev->token;
        ck_assert_uint_lt(len + ev->len, sizeof text);
        memcpy(text + len, ev->text, ev->len);
        len += ev->len;
    }
    ck_assert_msg(eng_gen_state(g) == ENG_GEN_STOP, "ended %s: %s", eng_gen_finish_name(eng_gen_state(g)),
                  eng_gen_error(g));
    ck_assert_int_eq(first, trigger);
    text[len] = '\0';
    const char *body = strstr(text, "{\"n\": ");
    ck_assert_msg(body && text[len - 1] == '}' && len - (size_t)(body - text) <= 12, "text %s", text);
    eng_gen_free(g);
    eng_grammar_free(gr);
    eng_gvocab_free(gv);
}
END_TEST

int main(void)
{
    krn_init(); /* as main.c does: the best kernels, before any thread */
    setup();
    Suite *su = suite_create("gen");
    TCase *tc = tcase_create("gen");
    tcase_set_timeout(tc, 300);
    tcase_add_checked_fixture(tc, open_model, close_model);
    tcase_add_test(tc, matches_session_loop);
    tcase_add_test(tc, prefill_chunks_do_not_change_results);
    tcase_add_test(tc, steps_of_several_generations);
    tcase_add_test(tc, stop_strings);
    tcase_add_test(tc, capacity_and_eos);
    tcase_add_test(tc, refusals_and_outside_end);
    tcase_add_test(tc, logprobs_of_the_model_distribution);
    tcase_add_test(tc, forks_after_the_prefill);
    tcase_add_test(tc, constrained_generation);
    tcase_add_test(tc, constrained_in_a_batch);
    tcase_add_test(tc, constrained_dead_end);
    tcase_add_test(tc, constrained_lazy_trigger);
    tcase_add_test(tc, prompt_logprobs_of_every_position);
    tcase_add_test(tc, prompt_logprobs_tensor_kv);
    suite_add_tcase(su, tc);
    return qd_run_suite(su);
}
