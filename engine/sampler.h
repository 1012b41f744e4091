/*
 * sampler: picks the next token id from one row of logits.
 *
 * The request's sampling fields (design.md section 3) arrive as a plain
 * eng_sampling struct; an eng_sampler built from them keeps the token history
 * the penalties need, a seeded random generator and its own scratch, so a
 * row of V logits is never modified and never sorted as a whole.
 *
 * Order of operations, as vLLM documents it:
 *   0. logit_bias (eng_sampler_set_bias): a fixed amount added to the
 *      logits of chosen ids;
 *   1. penalties: repetition (every id of prompt and generated text; positive
 *      logits divided, negative ones multiplied), then frequency and presence
 *      (generated ids only: logit -= frequency * count + presence * [count>0]);
 *   2. temperature 0 means greedy: the argmax, lowest id on ties;
 *   3. otherwise the logits are divided by the temperature and filtered by
 *      top-k, then top-p (the nucleus of the top-k distribution), then min-p
 *      (probability at least min_p times the largest one);
 *   4. softmax over the survivors and one draw.
 * Candidates are ordered by logit, then by ascending id, wherever an order
 * matters (top-k and top-p boundaries).
 *
 * Called by the scheduler once per generated token of a session. Threads: an
 * eng_sampler belongs to one session and is used by one thread at a time;
 * distinct samplers are independent.
 */
#ifndef QWEN3D_ENGINE_SAMPLER_H
#define QWEN3D_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

/* Error codes; eng_sampler_strerror() gives the message. */
#define ENG_SAMP_ERRORS(X)                                                  \
    X(ENG_SAMP_OK, 0, "success")                                            \
    X(ENG_SAMP_ERANGE, -1, "sampling parameter out of range")               \
    X(ENG_SAMP_ENOMEM, -2, "out of memory")                                 \
    X(ENG_SAMP_EBADID, -3, "token id outside the vocabulary")

enum {
#define ENG_SAMP_ENUM(name, value, msg) name = value,
    ENG_SAMP_ERRORS(ENG_SAMP_ENUM)
#undef ENG_SAMP_ENUM
};

const char *eng_sampler_strerror(int err);

/*
 * Sampling parameters, filled by the caller. Field names are the request
 * fields of the HTTP API; eng_sampling_default() gives the neutral values
 * (temperature 1, no filter, no penalty, seed 0).
 */
typedef struct eng_sampling {
    float temperature;        /* [0, 2]; 0 = greedy */
    float top_p;              /* (0, 1]; 1 = off */
    int32_t top_k;            /* >= 0; 0 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float presence_penalty;   /* [-2, 2]; 0 = off */
    float frequency_penalty;  /* [-2, 2]; 0 = off */
    float repetition_penalty; /* (0, 2]; 1 = off */
    uint64_t seed;            /* the same seed and inputs give the same ids */
} eng_sampling;

/* What eng_sampling_validate() found wrong. */
typedef struct eng_sampling_error {
    const char *field;  /* the request field at fault, e.g. "top_p"; NULL if none */
    char message[128];  /* one line naming the field, the range and the value */
} eng_sampling_error;

void eng_sampling_default(eng_sampling *p);

/*
 * Checks every range above (NaN is out of every range). Returns 0, or
 * ENG_SAMP_ERANGE with ERR (may be NULL) naming the first bad field.
 */
int eng_sampling_validate(const eng_sampling *p, eng_sampling_error *err);

typedef struct eng_sampler eng_sampler;

/*
 * A sampler for rows of N_VOCAB logits (1 <= n_vocab <= INT32_MAX). Returns
 * NULL if P does not pass eng_sampling_validate() (call it first for the
 * message) or on out-of-memory. Scratch is about 16 bytes per vocabulary
 * entry, plus 8 bytes per entry when a penalty is active.
 */
eng_sampler *eng_sampler_new(const eng_sampling *p, size_t n_vocab);
void eng_sampler_free(eng_sampler *s);

/*
 * logit_bias: adds BIAS[i] to the logit of IDS[i] before the penalties
 * (copied; an id given twice takes the later bias). Each id must be inside
 * the vocabulary and each bias finite in [-ENG_LOGIT_BIAS_MAX,
 * ENG_LOGIT_BIAS_MAX]: else ENG_SAMP_EBADID or ENG_SAMP_ERANGE and nothing
 * changes. ENG_SAMP_ENOMEM on out-of-memory. A biased sampler is not greedy
 * in the sense of eng_sampler_is_greedy(): the LM head's argmax of the raw
 * row no longer names its pick.
 */
#define ENG_LOGIT_BIAS_MAX 100.0f
int eng_sampler_set_bias(eng_sampler *s, const int32_t *ids, const float *bias, size_t n);

/* Forgets the token history and restarts the random sequence from the seed. */
void eng_sampler_reset(eng_sampler *s);

/*
 * Records the prompt's ids for the repetition penalty. Returns 0, or
 * ENG_SAMP_EBADID if an id is outside the vocabulary (nothing is recorded),
 * or ENG_SAMP_ENOMEM.
 */
int eng_sampler_accept_prompt(eng_sampler *s, const int32_t *ids, size_t n);

/* Records one generated id (all penalties). Same returns as above. */
int eng_sampler_accept(eng_sampler *s, int32_t id);

/*
 * Returns the next id for LOGITS (n_vocab floats, left unchanged). It does
 * not record the id: call eng_sampler_accept() with the id actually used.
 * NaN logits count as -inf. If no id has a positive probability the argmax
 * of the penalized row is returned. Never fails.
 */
int32_t eng_sampler_sample(eng_sampler *s, const float *logits);

/*
 * eng_sampler_sample() restricted to the ids set in MASK (bit i%64 of word
 * i/64; ceil(n_vocab / 64) words, at least one id set): the ids outside it
 * count as -inf logits before every other step, so penalties, temperature
 * and the filters act on the allowed ids alone (constrained decoding). When
 * no allowed id has a logit above -inf, the lowest allowed id is returned.
 * Its own scratch row (4 bytes per vocabulary entry) is allocated on first
 * use; returns -1 when that fails or when MASK allows nothing.
 */
int32_t eng_sampler_sample_masked(eng_sampler *s, const float *logits, const uint64_t *mask);

/*
 * Writes to PROBS (n_vocab floats) the distribution eng_sampler_sample()
 * draws from for LOGITS: after the penalties, temperature and filters,
 * normalized over the survivors, 0 elsewhere; greedy settings give 1 at the
 * argmax. For log-probabilities and tests; the random sequence is not used.
 */
void eng_sampler_probs(eng_sampler *s, const float *logits, float *probs);

/*
 * Log-probabilities of the model's own distribution over a row of N logits:
 * the log-softmax of the raw logits, before temperature, penalties and
 * filters (as OpenAI's logprobs report), NaN counting as -inf. Sets *LP to
 * the log-probability of ID, and fills the TOP (<= 20) most likely entries
 * into TOP_IDS / TOP_LPS, most likely first (ties: lower id first). Returns
 * the log of the softmax's denominator (log-sum-exp of the row).
 */
#define ENG_TOP_LOGPROBS_MAX 20
double eng_logprobs(const float *logits, size_t n, int32_t id, size_t top, int32_t *top_ids, float *top_lps,
                    float *lp);

/* One position's log-probabilities (eng_logprobs): of the id there, and the N_TOP most likely ids. */
typedef struct eng_token_lp {
    int32_t id;
    float logprob;           /* NAN when there is none (a prompt's first id) */
    int n_top;
    int32_t top_ids[ENG_TOP_LOGPROBS_MAX];
    float top_lps[ENG_TOP_LOGPROBS_MAX];
} eng_token_lp;

/* Index of the largest of the N values (NaN never wins), lowest on ties; 0 if none. */
int32_t eng_argmax(const float *logits, size_t n);

/*
 * eng_argmax over parts: eng_argmax_key() summarizes logits[begin, end) (of
 * a row whose index 0 is logits[0]) in one integer such that the largest
 * key over any split of a row into parts names eng_argmax() of the whole
 * row: eng_argmax_key_id(max of the keys). 0 is the key of a part with only
 * NaN, and the identity for max.
 */
uint64_t eng_argmax_key(const float *logits, size_t begin, size_t end);
int32_t eng_argmax_key_id(uint64_t key);

/* True when eng_sampler_sample() is eng_argmax() for every row (greedy, no penalties, no bias). */
bool eng_sampler_is_greedy(const eng_sampler *s);

/*
 * eng_sampler_sample() for a caller that may already know eng_argmax(LOGITS)
 * (ARGMAX >= 0, e.g. from eng_session_argmax()): greedy samplers return it
 * without reading the row again.
 */
int32_t eng_sampler_sample_known(eng_sampler *s, const float *logits, int32_t argmax);

#endif
