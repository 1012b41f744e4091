/*
 * gen: one generation from a prompt, and the step that advances many of them.
 *
 * An eng_gen owns everything one request generates with: its session (the
 * KV state), its sampler, its stop-string matcher, its streaming
 * detokenizer, how much of the prompt has been fed, the limits (max_tokens,
 * the session's capacity, end-of-sequence ids) and why it ended. The daemon's
 * scheduler, `qwen3d generate` and `qwen3d bench` all drive generations
 * through eng_gen_step(), so the loop "feed, sample, accept, detokenize,
 * match stop strings, check the limits" exists once.
 *
 * eng_gen_step() advances a set of generations by one step each: a
 * generation whose prompt is not fully fed gets its next prefill chunk, one
 * that is prefilled gets its last sampled id fed; every generation whose
 * feed completed the prompt or decoded a token then samples its next id.
 * What each generation produced in the step is read back with
 * eng_gen_event(). The caller decides which generations step together and
 * how many prompt tokens a step may carry (eng_gen_budget); that is
 * scheduling, and stays outside.
 *
 * Threads: a generation and the step that advances it run on one thread at a
 * time (the thread driving the model's compute pool); distinct generations
 * of one model must not step concurrently, since they share the pool.
 */
#ifndef QWEN3D_ENGINE_GEN_H
#define QWEN3D_ENGINE_GEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/diag.h"
#include "engine/grammar.h"
#include "engine/prefix.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"

typedef struct eng_gen eng_gen;

/* Why a generation ended. */
typedef enum eng_gen_finish {
    ENG_GEN_RUNNING = 0,
    ENG_GEN_STOP,    /* an end-of-sequence id was sampled, or a stop string completed */
    ENG_GEN_LENGTH,  /* max_tokens were generated, or the session is full */
    ENG_GEN_ERROR,   /* the engine failed; eng_gen_error() says why */
    ENG_GEN_ENDED,   /* ended from outside (eng_gen_end: a deadline) */
} eng_gen_finish;

const char *eng_gen_finish_name(eng_gen_finish f);

typedef struct eng_gen_params {
    const int64_t *prompt;   /* copied; at least one id, each inside the vocabulary */
    size_t n_prompt;
    int64_t max_tokens;      /* >= 1 (>= 0 with prompt_logprobs): ids to generate at most */
    int64_t capacity;        /* session tokens; 0 = n_prompt + max_tokens, capped at the model's context */
    eng_sampling sampling;   /* validated by the caller (eng_sampling_validate) */
    const char *const *stop; /* copied; validated by the caller (eng_stop_validate) */
    size_t n_stop;
    const eng_tok *tok;      /* detokenizer; NULL: no text, ids only */
    /*
     * Teacher forcing: decode step i feeds teacher[i] instead of the id
     * sampled before it (n_teacher >= max_tokens - 1 ids), so runtimes can be
     * compared step by step; end-of-sequence ids then do not end the
     * generation. NULL: off. Copied.
     */
    const int64_t *teacher;
    size_t n_teacher;
    size_t prefill_chunk;    /* prompt ids per step at most; 0 = no limit of its own */
    bool ignore_eos;         /* end-of-sequence ids do not end it (benchmarks) */
    /*
     * A prompt-prefix cache (NULL: none): the session starts from the longest
     * prefix of the prompt cached under SCOPE, and when the generation is
     * freed its prompt rows go back to the cache under SCOPE.
     */
    eng_prefix *prefix;
    const char *scope;       /* copied; NULL = "" */
    /*
     * Log-probabilities of the sampled ids (eng_logprobs: the model's own
     * distribution), and of the TOP_LOGPROBS most likely ids at each step
     * (0..ENG_TOP_LOGPROBS_MAX), in each step's event; off when false.
     */
    bool logprobs;
    int top_logprobs;
    /*
     * Constrained decoding (NULL: off): every sampled id is drawn from the
     * ids GRAMMAR allows next (eng_sampler_sample_masked, with every sampler
     * setting), end-of-sequence ids only where its text is complete. GVOCAB
     * must have the model's vocabulary width. Both are only read and must
     * outlive the generation. A grammar that allows nothing (which a
     * compiled grammar never should) ends the generation with ENG_GEN_ERROR
     * before any id is taken, so no text outside the grammar is released.
     * Not with teacher ids or ignore_eos. The greedy argmax fused into the LM
     * head is not used for such a generation (its mask must see the row).
     * A lazy grammar (eng_grammar_set_trigger) leaves the ids free until
     * its trigger id is sampled, and applies from that id on.
     */
    const eng_grammar *grammar;
    const eng_gvocab *gvocab;
    /* logit_bias (eng_sampler_set_bias), N_BIAS pairs; copied, checked by eng_gen_new(). */
    const int32_t *bias_ids;
    const float *bias;
    size_t n_bias;
    /*
     * Echo: the log-probabilities of the prompt's own ids, each with the
     * TOP_LOGPROBS most likely ids (eng_gen_prompt_logprobs). The prefill
     * then has the LM head compute the row of every prompt position, and
     * the session does not start from the prefix cache (whose rows were
     * never computed). max_tokens may then be 0: the generation ends with
     * ENG_GEN_LENGTH once the prompt is fed, having sampled nothing.
     */
    bool prompt_logprobs;
} eng_gen_params;

/*
 * A generation for P on model M, with its own session. Returns NULL with one
 * line in DIAG when the parameters are out of range (an id outside the
 * vocabulary, a capacity beyond the model's context) or on out-of-memory.
 */
eng_gen *eng_gen_new(eng_model *m, const eng_gen_params *p, eng_diag *diag);
void eng_gen_free(eng_gen *g);

/* What the last eng_gen_step() did for one generation. */
typedef struct eng_gen_event {
    size_t prompt_fed;       /* prompt ids fed in the step */
    bool prefilled;          /* the step fed the prompt's last id */
    int32_t token;           /* the id sampled in the step, or -1 */
    /* Text released in the step (stop strings held back or cut; on the
     * generation's end, the held-back rest). Owned by the generation and
     * valid until its next step; not NUL-terminated. */
    const char *text;
    size_t len;
    eng_gen_finish finish;   /* ENG_GEN_RUNNING while it goes on */
    /* with logprobs: of the sampled id, and the step's most likely ids */
    float logprob;
    int n_top;
    int32_t top_ids[ENG_TOP_LOGPROBS_MAX];
    float top_lps[ENG_TOP_LOGPROBS_MAX];
} eng_gen_event;

/* The step's limits, the same for every generation in it. */
typedef struct eng_gen_budget {
    /* Prompt ids the whole step may feed; 0 = no limit. Prefilling
     * generations take from it in the order given, each at most its own
     * prefill_chunk; one that gets nothing waits for a later step. */
    size_t prefill_tokens;
} eng_gen_budget;

/*
 * Advances each of the N generations (distinct, all of model M, none ended)
 * by one step. A generation that fails alone (its session cannot grow)
 * ends with ENG_GEN_ERROR and the others go on; the return value is the
 * count of such failures, or -1 when the step as a whole failed (every
 * generation in it then ended with ENG_GEN_ERROR). BUDGET may be NULL.
 */
int eng_gen_step(eng_gen *const *gens, size_t n, const eng_gen_budget *budget, eng_diag *diag);

/*
 * Prefill only: one step for G alone feeding at most MAX_TOKENS prompt ids
 * (0 = the rest of the prompt, within its prefill_chunk). The same as
 * eng_gen_step() with that budget.
 */
int eng_gen_prefill(eng_gen *g, size_t max_tokens, eng_diag *diag);

const eng_gen_event *eng_gen_last(const eng_gen *g);

/*
 * Ends a running generation from outside (a deadline): the held-back text
 * (an incomplete character, a possible stop-string prefix) is released into
 * the last event, which then reports ENG_GEN_ENDED. No effect on an ended
 * one.
 */
void eng_gen_end(eng_gen *g);

eng_gen_finish eng_gen_state(const eng_gen *g);
/* The message of ENG_GEN_ERROR ("" otherwise). */
const char *eng_gen_error(const eng_gen *g);
bool eng_gen_prefilled(const eng_gen *g);
/* Prompt ids whose KV state came from the prefix cache (not fed by this generation). */
size_t eng_gen_reused(const eng_gen *g);
/* Prompt ids fed so far, and ids generated so far (sampled). */
size_t eng_gen_prompt_fed(const eng_gen *g);
int64_t eng_gen_generated(const eng_gen *g);
/* The ids generated so far (eng_gen_generated() of them). */
const int32_t *eng_gen_ids(const eng_gen *g);

/*
 * The logits row the last sampled id was drawn from (vocab floats), valid
 * until the model's next run; NULL when the last step sampled nothing or
 * the model has run since.
 */
const float *eng_gen_logits(const eng_gen *g);

/*
 * With prompt_logprobs, once the prompt is fed: one entry per prompt id,
 * the log-probability of id i under the row of position i - 1 (entry 0 has
 * logprob NAN and no top ids). NULL before, or without prompt_logprobs.
 */
const eng_token_lp *eng_gen_prompt_logprobs(const eng_gen *g);

/* Sum of the sampled ids' log-probabilities (with logprobs; best_of ranks by it). */
double eng_gen_cum_logprob(const eng_gen *g);

/*
 * A sibling of PARENT for one more choice of the same request (n > 1):
 * valid right after the step that fed PARENT's last prompt id (before any
 * other run of the model), it copies PARENT's prompt rows into a session of
 * its own (one contiguous copy per kv head and layer, never per token) and
 * samples its first id from PARENT's logits row with SAMPLING (its own
 * seed), reported in its last event. It keeps nothing in a prefix cache.
 */
eng_gen *eng_gen_fork(const eng_gen *parent, const eng_sampling *sampling, eng_diag *diag);

/* Seconds spent computing grammar masks so far, and how many (benchmarks). */
double eng_gen_mask_seconds(const eng_gen *g, int64_t *n_masks);

/* The generation's session (KV figures, benchmarks' synthetic fills before the first step). */
eng_session *eng_gen_session(eng_gen *g);

#endif
