/*
 * gen: generations and the step that advances them (see gen.h).
 *
 * A step has three phases per generation: choose what it feeds (a prefill
 * chunk within the budget, or its last sampled id) and check that the
 * session can take it; run the model on the feeds; then sample, accept,
 * detokenize, match stop strings and check the limits for every generation
 * whose feed asked for a next id.
 *
 * Threads: see gen.h.
 */
#include "engine/gen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/prefix.h"
#include "engine/stop.h"

struct eng_gen {
    eng_model *m;
    eng_session *sess;
    eng_sampler *samp;
    eng_stop *stop;
    eng_tok_stream *ts;          /* NULL without a tokenizer */
    int64_t *prompt;             /* [n_prompt] */
    size_t n_prompt;
    int64_t *teacher;            /* [n_teacher] or NULL */
    size_t n_teacher;
    int64_t max_tokens;
    size_t chunk;                /* prefill ids per step; 0 = no limit */
    bool stop_at_eos;
    size_t fed;                  /* prompt ids in the session (fed, or reused from the prefix cache) */
    size_t reused;               /* of those, reused from the cache */
    eng_prefix *prefix;
    char *scope;
    bool logprobs;
    int top;                     /* top logprobs per step */
    int32_t *bias_ids;           /* [n_bias] logit_bias, kept for forks */
    float *bias;
    size_t n_bias;
    eng_token_lp *plp;           /* [n_prompt] the prompt's log-probabilities (echo), or NULL */
    double cum_logprob;
    int64_t capacity;
    eng_sampling sampling;
    const eng_tok *tok;
    const char *const *stops;    /* for forks: the caller's, valid while the parent lives */
    size_t n_stops;
    int64_t next;                /* the id the next decode step feeds */
    int32_t *ids;                /* [max_tokens] sampled ids */
    int64_t n_gen;
    bool stopped;                /* a stop string completed: nothing more is released */
    eng_gen_finish finish;
    char error[160];
    const float *logits;         /* the row of the last sample, NULL if none */
    uint64_t logits_run;         /* the model run that wrote it */
    eng_gen_event ev;
    char *text;                  /* the event's text */
    size_t text_len, text_cap;
    const eng_grammar *grammar;  /* constrained decoding, or NULL */
    const eng_gvocab *gvocab;
    eng_gmatch *match;
    bool lazy;                   /* a lazy grammar's matcher still waiting for its trigger id */
    uint64_t *mask;              /* [mask words] the ids the grammar allows next */
    double mask_s;               /* time spent in eng_gmatch_mask */
    int64_t n_masks;
    /* this step's plan */
    size_t feed_n;               /* ids fed by the step; 0: not in it */
};

const char *eng_gen_finish_name(eng_gen_finish f)
{
    switch (f) {
    case ENG_GEN_RUNNING: return "running";
    case ENG_GEN_STOP: return "stop";
    case ENG_GEN_LENGTH: return "length";
    case ENG_GEN_ERROR: return "error";
    case ENG_GEN_ENDED: return "ended";
    }
    return "running";
}

void eng_gen_free(eng_gen *g)
{
    if (!g)
        return;
    /* The prompt rows written so far (also of a generation cut short) serve later prompts. */
    if (g->prefix && g->sess)
        eng_prefix_put(g->prefix, g->scope, g->prompt, g->fed, g->sess);
    else
        eng_session_free(g->sess);
    free(g->scope);
    eng_sampler_free(g->samp);
    eng_stop_free(g->stop);
    eng_tok_stream_free(g->ts);
    eng_gmatch_free(g->match);
    free(g->mask);
    free(g->prompt);
    free(g->teacher);
    free(g->ids);
    free(g->bias_ids);
    free(g->bias);
    free(g->plp);
    free(g->text);
    free(g);
}

eng_gen *eng_gen_new(eng_model *m, const eng_gen_params *p, eng_diag *diag)
{
    int64_t V = eng_model_geometry(m)->vocab, limit = eng_model_max_context(m);
    if (!p->n_prompt) {
        eng_diag_add(diag, "the prompt has no ids");
        return NULL;
    }
    if (p->max_tokens < (p->prompt_logprobs ? 0 : 1)) {
        eng_diag_add(diag, "max_tokens %lld must be at least %d", (long long)p->max_tokens, p->prompt_logprobs ? 0 : 1);
        return NULL;
    }
    for (size_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= V) {
            eng_diag_add(diag, "prompt id %lld is outside the vocabulary [0, %lld)", (long long)p->prompt[i],
                         (long long)V);
            return NULL;
        }
    if (p->teacher && (int64_t)p->n_teacher < p->max_tokens - 1) {
        eng_diag_add(diag, "%zu teacher ids for %lld decode steps", p->n_teacher, (long long)(p->max_tokens - 1));
        return NULL;
    }
    for (size_t i = 0; p->teacher && i < p->n_teacher; i++)
        if (p->teacher[i] < 0 || p->teacher[i] >= V) {
            eng_diag_add(diag, "teacher id %lld is outside the vocabulary [0, %lld)", (long long)p->teacher[i],
                         (long long)V);
            return NULL;
        }
    if (p->grammar && (!p->gvocab || (int64_t)eng_gvocab_n(p->gvocab) != V || p->teacher || p->ignore_eos)) {
        eng_diag_add(diag, "a grammar needs a vocabulary of the model's %lld ids, and no teacher ids or ignore_eos",
                     (long long)V);
        return NULL;
    }
    int64_t cap = p->capacity;
    if (cap <= 0) {
        /* prompt + max_tokens, without overflow: both are far below INT64_MAX / 2 once capped */
        int64_t want = (int64_t)p->n_prompt;
        cap = p->max_tokens > limit - want ? limit : want + p->max_tokens;
    }
    if ((int64_t)p->n_prompt > cap) {
        eng_diag_add(diag, "prompt of %zu ids exceeds the session's %lld tokens", p->n_prompt, (long long)cap);
        return NULL;
    }
    eng_gen *g = calloc(1, sizeof *g);
    if (!g)
        goto oom;
    g->m = m;
    g->n_prompt = p->n_prompt;
    g->max_tokens = p->max_tokens;
    g->chunk = p->prefill_chunk;
    g->logprobs = p->logprobs;
    g->top = p->top_logprobs < 0 ? 0 : p->top_logprobs > ENG_TOP_LOGPROBS_MAX ? ENG_TOP_LOGPROBS_MAX : p->top_logprobs;
    g->capacity = cap;
    g->sampling = p->sampling;
    g->tok = p->tok;
    /* Teacher forcing compares runtimes step by step, so it never stops early. */
    g->stop_at_eos = !p->ignore_eos && !p->teacher;
    g->prompt = malloc(p->n_prompt * sizeof *g->prompt);
    g->ids = malloc((size_t)(p->max_tokens ? p->max_tokens : 1) * sizeof *g->ids);
    int32_t *prompt32 = malloc(p->n_prompt * sizeof *prompt32);
    if (!g->prompt || !g->ids || !prompt32) {
        free(prompt32);
        goto oom;
    }
    memcpy(g->prompt, p->prompt, p->n_prompt * sizeof *g->prompt);
    for (size_t i = 0; i < p->n_prompt; i++)
        prompt32[i] = (int32_t)p->prompt[i];
    if (p->teacher) {
        g->n_teacher = p->n_teacher;
        g->teacher = malloc((p->n_teacher ? p->n_teacher : 1) * sizeof *g->teacher);
        if (!g->teacher) {
            free(prompt32);
            goto oom;
        }
        memcpy(g->teacher, p->teacher, p->n_teacher * sizeof *g->teacher);
    }
    g->samp = eng_sampler_new(&p->sampling, (size_t)V);
    int arc = g->samp ? eng_sampler_accept_prompt(g->samp, prompt32, p->n_prompt) : ENG_SAMP_ENOMEM;
    free(prompt32);
    if (arc != 0)
        goto oom;
    if (p->n_bias) {
        int brc = eng_sampler_set_bias(g->samp, p->bias_ids, p->bias, p->n_bias);
        if (brc != 0) {
            eng_diag_add(diag, "logit_bias: %s", eng_sampler_strerror(brc));
            eng_gen_free(g);
            return NULL;
        }
        g->bias_ids = malloc(p->n_bias * sizeof *g->bias_ids);
        g->bias = malloc(p->n_bias * sizeof *g->bias);
        if (!g->bias_ids || !g->bias)
            goto oom;
        memcpy(g->bias_ids, p->bias_ids, p->n_bias * sizeof *g->bias_ids);
        memcpy(g->bias, p->bias, p->n_bias * sizeof *g->bias);
        g->n_bias = p->n_bias;
    }
    if (p->prompt_logprobs) {
        if (!(g->plp = calloc(p->n_prompt, sizeof *g->plp)))
            goto oom;
        g->plp[0] = (eng_token_lp){.id = (int32_t)p->prompt[0], .logprob = NAN};
    }
    g->stop = eng_stop_new(p->stop, p->n_stop);
    g->stops = p->stop;
    g->n_stops = p->n_stop;
    if (!g->stop)
        goto oom;
    if (p->tok && !(g->ts = eng_tok_stream_new(p->tok, true)))
        goto oom;
    if (p->grammar) {
        g->grammar = p->grammar;
        g->gvocab = p->gvocab;
        g->match = eng_gmatch_new(p->grammar, p->gvocab);
        g->lazy = eng_grammar_trigger(p->grammar) >= 0;
        g->mask = malloc(eng_gvocab_mask_words(p->gvocab) * sizeof *g->mask);
        if (!g->match || !g->mask)
            goto oom;
    }
    if (p->prefix) {
        g->prefix = p->prefix;
        g->reused = 0;
        if (!(g->scope = strdup(p->scope ? p->scope : "")))
            goto oom;
        /* A failed lookup (out of memory for the copy) is a miss: the generation makes its own session. */
        eng_diag quiet;
        eng_diag_init(&quiet);
        if (!g->plp)
            g->sess = eng_prefix_take(p->prefix, g->scope, p->prompt, p->n_prompt, cap, &g->reused, &quiet);
        eng_diag_clear(&quiet);
        g->fed = g->reused;
        if (!g->sess)
            eng_prefix_recycle(p->prefix);
    }
    if (!g->sess)
        g->sess = eng_session_new(m, cap, diag);
    if (!g->sess) {
        eng_gen_free(g);
        return NULL;
    }
    /* The fused argmax sees the whole row; a grammar's mask must come first. */
    eng_session_set_greedy(g->sess, eng_sampler_is_greedy(g->samp) && !g->match);
    g->ev.token = -1;
    return g;
oom:
    eng_diag_add(diag, "out of memory for a generation");
    eng_gen_free(g);
    return NULL;
}

/* Appends N bytes to the step's event text; false on out-of-memory. */
static bool text_add(eng_gen *g, const char *s, size_t n)
{
    if (!n)
        return true;
    if (g->text_len + n > g->text_cap) {
        size_t cap = g->text_cap ? g->text_cap : 64;
        while (cap < g->text_len + n)
            cap *= 2;
        char *t = realloc(g->text, cap);
        if (!t)
            return false;
        g->text = t;
        g->text_cap = cap;
    }
    memcpy(g->text + g->text_len, s, n);
    g->text_len += n;
    return true;
}

static void fail(eng_gen *g, const char *msg)
{
    g->finish = ENG_GEN_ERROR;
    snprintf(g->error, sizeof g->error, "%s", msg);
}

/* Passes a detokenized piece through the stop strings. */
static void release(eng_gen *g, const char *piece, size_t len)
{
    if (g->stopped)
        return;
    const char *out = NULL;
    size_t n = 0;
    int r = eng_stop_feed(g->stop, piece, len, &out, &n);
    if (r < 0 || !text_add(g, out, n)) {
        fail(g, "out of memory for the generated text");
        return;
    }
    if (r == 1)
        g->stopped = true;
}

/* The generation ends on its own (or by a deadline): what was held back goes out. */
static void end_with(eng_gen *g, eng_gen_finish why)
{
    if (g->ts && !g->stopped) {
        const char *t = NULL;
        size_t n = 0;
        if (eng_tok_stream_finish(g->ts, &t, &n) == 0 && n)
            release(g, t, n);
    }
    if (!g->stopped && g->finish == ENG_GEN_RUNNING) {
        const char *t = NULL;
        size_t n = 0;
        eng_stop_finish(g->stop, &t, &n);
        if (!text_add(g, t, n))
            fail(g, "out of memory for the generated text");
    }
    if (g->finish == ENG_GEN_RUNNING)
        g->finish = why;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void grammar_fail(eng_gen *g, int rc)
{
    char msg[160];
    snprintf(msg, sizeof msg, "constrained decoding: %s", eng_grammar_strerror(rc));
    fail(g, msg);
}

/* The next id among those the grammar allows, advancing its matcher; -1 after fail(). */
static int32_t constrained_sample(eng_gen *g, const float *logits)
{
    double t0 = now_s();
    int n = eng_gmatch_mask(g->match, g->mask);
    g->mask_s += now_s() - t0;
    g->n_masks++;
    if (n < 0) {
        grammar_fail(g, n);
        return -1;
    }
    int32_t id = eng_sampler_sample_masked(g->samp, logits, g->mask);
    int rc = id < 0 ? ENG_GRAMMAR_ENOMEM : eng_gmatch_accept(g->match, id);
    if (rc != 0) {
        grammar_fail(g, rc);
        return -1;
    }
    return id;
}

/* Samples after a feed that asked for the next id, and applies the limits. */
static void take_token(eng_gen *g, const float *logits)
{
    g->logits = logits;
    g->logits_run = eng_model_runs(g->m);
    int32_t id;
    if (g->match && !g->lazy) {
        if ((id = constrained_sample(g, logits)) < 0)
            return;
    } else if (g->match) {
        /* Free until the trigger: sampled from the whole row, then it is the grammar's first token. */
        id = eng_sampler_sample_known(g->samp, logits, -1);
        if (id == eng_grammar_trigger(g->grammar)) {
            int rc = eng_gmatch_accept(g->match, id);
            if (rc != 0) {
                grammar_fail(g, rc);
                return;
            }
            g->lazy = false;
        }
    } else {
        id = eng_sampler_sample_known(g->samp, logits, eng_session_argmax(g->sess));
    }
    g->ev.token = id;
    if (g->logprobs) {
        eng_logprobs(logits, (size_t)eng_model_geometry(g->m)->vocab, id, (size_t)g->top, g->ev.top_ids,
                     g->ev.top_lps, &g->ev.logprob);
        g->ev.n_top = g->top;
        g->cum_logprob += g->ev.logprob;
    }
    g->ids[g->n_gen++] = id;
    /* What the next decode step feeds, and so what the penalties count
     * (teacher ids cover every decode step: n_teacher >= max_tokens - 1). */
    if (g->n_gen < g->max_tokens) {
        g->next = g->teacher ? g->teacher[g->n_gen - 1] : id;
        eng_sampler_accept(g->samp, (int32_t)g->next);
    }
    if (g->stop_at_eos && eng_model_is_eos(g->m, id)) {
        end_with(g, ENG_GEN_STOP); /* the end-of-sequence id is not text */
        return;
    }
    if (g->ts) {
        const char *piece = NULL;
        size_t len = 0;
        /* An id the tokenizer does not know (the model's vocabulary is
         * padded past the tokenizer's) decodes to nothing. */
        if (eng_tok_stream_put(g->ts, id, &piece, &len) != 0)
            len = 0;
        release(g, piece, len);
        if (g->stopped) {
            g->finish = g->finish == ENG_GEN_RUNNING ? ENG_GEN_STOP : g->finish;
            return;
        }
    }
    if (g->n_gen >= g->max_tokens)
        end_with(g, ENG_GEN_LENGTH);
}

/* The log-probabilities of the prompt ids that follow the positions of the chunk just fed (ROWS, one per id). */
static void prompt_logprobs(eng_gen *g, const float *rows)
{
    size_t V = (size_t)eng_model_geometry(g->m)->vocab;
    for (size_t j = 0; j < g->feed_n && g->fed + j + 1 < g->n_prompt; j++) {
        eng_token_lp *e = &g->plp[g->fed + j + 1];
        e->id = (int32_t)g->prompt[g->fed + j + 1];
        e->n_top = g->top;
        eng_logprobs(rows + j * V, V, e->id, (size_t)g->top, e->top_ids, e->top_lps, &e->logprob);
    }
}

/* Plans G's feed: a prefill chunk taken from *LEFT when LIMITED, or one decode id (or its end, when full). */
static void plan_feed(eng_gen *g, size_t *left, bool limited)
{
    g->feed_n = 0;
    if (!eng_gen_prefilled(g)) {
        size_t n = g->n_prompt - g->fed;
        if (g->chunk && n > g->chunk)
            n = g->chunk;
        if (limited && n > *left)
            n = *left;
        if (limited)
            *left -= n;
        g->feed_n = n;
        return;
    }
    if (eng_session_length(g->sess) >= eng_session_capacity(g->sess)) {
        end_with(g, ENG_GEN_LENGTH);
        return;
    }
    g->feed_n = 1;
}

int eng_gen_step(eng_gen *const *gens, size_t n, const eng_gen_budget *budget, eng_diag *diag)
{
    size_t left = budget ? budget->prefill_tokens : 0;
    bool limited = budget && budget->prefill_tokens > 0;
    eng_feed stack[16], *feeds = n <= 16 ? stack : calloc(n, sizeof *feeds);
    if (!feeds) {
        eng_diag_add(diag, "out of memory for a step of %zu generations", n);
        return -1;
    }
    size_t k = 0;
    eng_model *m = n ? gens[0]->m : NULL;
    for (size_t i = 0; i < n; i++) {
        eng_gen *g = gens[i];
        g->ev = (eng_gen_event){.token = -1};
        g->text_len = 0;
        g->logits = NULL;
        g->feed_n = 0;
        if (g->finish == ENG_GEN_RUNNING)
            plan_feed(g, &left, limited);
        if (!g->feed_n)
            continue;
        bool prefill = !eng_gen_prefilled(g);
        /* A prompt chunk that does not finish the prompt samples nothing: no logits row. */
        feeds[k++] = (eng_feed){.s = g->sess, .ids = prefill ? g->prompt + g->fed : &g->next, .n = g->feed_n,
                                .prompt = prefill, .logits = !prefill || g->fed + g->feed_n == g->n_prompt,
                                .all_rows = prefill && g->plp};
    }
    int rc = k ? eng_model_feed(m, feeds, k, diag) : 0;
    int failures = 0;
    k = 0;
    for (size_t i = 0; i < n; i++) {
        eng_gen *g = gens[i];
        if (!g->feed_n)
            continue;
        eng_feed *f = &feeds[k++];
        if (rc < 0 || f->error[0]) {
            fail(g, rc < 0 ? "the engine failed" : f->error);
            if (rc >= 0)
                eng_diag_add(diag, "%s", f->error);
            failures++;
            continue;
        }
        if (!eng_gen_prefilled(g)) {
            if (g->plp)
                prompt_logprobs(g, f->rows);
            g->fed += g->feed_n;
            g->ev.prompt_fed = g->feed_n;
            if (g->fed < g->n_prompt)
                continue;
            g->ev.prefilled = true;
            if (!g->max_tokens) {
                end_with(g, ENG_GEN_LENGTH);
                continue;
            }
        }
        take_token(g, f->row);
    }
    if (feeds != stack)
        free(feeds);
    for (size_t i = 0; i < n; i++) {
        eng_gen *g = gens[i];
        g->ev.text = g->text;
        g->ev.len = g->text_len;
        g->ev.finish = g->finish;
    }
    return rc < 0 ? -1 : failures;
}

int eng_gen_prefill(eng_gen *g, size_t max_tokens, eng_diag *diag)
{
    eng_gen_budget b = {.prefill_tokens = max_tokens};
    return eng_gen_step(&g, 1, &b, diag);
}

void eng_gen_end(eng_gen *g)
{
    if (g->finish != ENG_GEN_RUNNING)
        return;
    g->text_len = 0;
    end_with(g, ENG_GEN_ENDED);
    g->ev.text = g->text;
    g->ev.len = g->text_len;
    g->ev.finish = g->finish;
}

eng_gen *eng_gen_fork(const eng_gen *parent, const eng_sampling *sampling, eng_diag *diag)
{
    if (!parent->ev.prefilled || !parent->logits || !parent->sess || parent->logits_run != eng_model_runs(parent->m)) {
        eng_diag_add(diag, "a generation is forked right after the step that ends its prompt");
        return NULL;
    }
    eng_gen_params p = {.prompt = parent->prompt, .n_prompt = parent->n_prompt, .max_tokens = parent->max_tokens,
                        .capacity = parent->capacity, .sampling = *sampling, .stop = parent->stops,
                        .n_stop = parent->n_stops, .tok = parent->tok, .teacher = parent->teacher,
                        .n_teacher = parent->n_teacher, .prefill_chunk = parent->chunk,
                        .ignore_eos = !parent->stop_at_eos && !parent->teacher, .logprobs = parent->logprobs,
                        .top_logprobs = parent->top, .grammar = parent->grammar, .gvocab = parent->gvocab,
                        .bias_ids = parent->bias_ids, .bias = parent->bias, .n_bias = parent->n_bias};
    eng_gen *g = eng_gen_new(parent->m, &p, diag);
    if (!g)
        return NULL;
    if (eng_session_copy_prefix(g->sess, parent->sess, (int64_t)parent->n_prompt, diag) != 0) {
        eng_gen_free(g);
        return NULL;
    }
    g->fed = g->n_prompt;
    g->ev = (eng_gen_event){.token = -1, .prefilled = true};
    g->text_len = 0;
    take_token(g, parent->logits);
    g->ev.text = g->text;
    g->ev.len = g->text_len;
    g->ev.finish = g->finish;
    return g;
}

double eng_gen_cum_logprob(const eng_gen *g) { return g->cum_logprob; }
const eng_token_lp *eng_gen_prompt_logprobs(const eng_gen *g) { return g->plp && eng_gen_prefilled(g) ? g->plp : NULL; }
const eng_gen_event *eng_gen_last(const eng_gen *g) { return &g->ev; }
eng_gen_finish eng_gen_state(const eng_gen *g) { return g->finish; }
const char *eng_gen_error(const eng_gen *g) { return g->finish == ENG_GEN_ERROR ? g->error : ""; }
bool eng_gen_prefilled(const eng_gen *g) { return g->fed == g->n_prompt; }
size_t eng_gen_reused(const eng_gen *g) { return g->reused; }
size_t eng_gen_prompt_fed(const eng_gen *g) { return g->fed; }
int64_t eng_gen_generated(const eng_gen *g) { return g->n_gen; }
const int32_t *eng_gen_ids(const eng_gen *g) { return g->ids; }
const float *eng_gen_logits(const eng_gen *g)
{
    return g->logits && g->logits_run == eng_model_runs(g->m) ? g->logits : NULL;
}
eng_session *eng_gen_session(eng_gen *g) { return g->sess; }
double eng_gen_mask_seconds(const eng_gen *g, int64_t *n_masks)
{
    if (n_masks)
        *n_masks = g->n_masks;
    return g->mask_s;
}
