/*
 * grammar: constrained decoding. A grammar, built once per request, decides
 * after each generated token which token ids may come next, so only text
 * that stays a prefix of the grammar's language can be sampled and EOS only
 * where the text is complete.
 *
 * Three objects:
 *   eng_grammar  the compiled grammar: rules, each a deterministic automaton
 *                over bytes whose edges may also call another rule (a
 *                pushdown automaton) or name one vocabulary token. Built
 *                with an eng_gbuild from expressions (literal, byte range,
 *                token, sequence, alternation, bounded repetition, rule
 *                call). Immutable once built: any thread may read it.
 *   eng_gvocab   what one tokenizer contributes, built once per model: each
 *                token's bytes in a byte trie, which ids are byte tokens
 *                (added and special tokens are not: a grammar reaches them
 *                only through a token edge, or as EOS), and the EOS ids.
 *                Immutable once built: any thread may read it.
 *   eng_gmatch   one request's matcher: the set of parse stacks the text
 *                so far leaves (several when the grammar is ambiguous), and
 *                a cache of per-state token sets, filled the first time a
 *                state is met. Owned by one request and used by one thread
 *                at a time.
 *
 * The mask for a step: for each parse stack, the tokens its top state
 * accepts without looking below the top (cached per state, computed by one
 * walk over the trie) are taken whole; the few that leave the top rule
 * before their last byte are run through the full stack one by one (in
 * trie order, sharing common prefixes). Repetition with a counter (a loop
 * rule, used for strings with length bounds) caches once per state and
 * filters the cached tokens by how many iterations each starts.
 *
 * Called by the generation loop (once per step: eng_gmatch_mask(), then
 * eng_gmatch_accept() with the sampled id) and by the API layer, which
 * builds grammars from JSON Schema (api/schema.c).
 */
#ifndef QWEN3D_ENGINE_GRAMMAR_H
#define QWEN3D_ENGINE_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer.h"

#define ENG_GRAMMAR_ERRORS(X)                                                           \
    X(ENG_GRAMMAR_OK, 0, "success")                                                     \
    X(ENG_GRAMMAR_ENOMEM, -1, "out of memory")                                          \
    X(ENG_GRAMMAR_EINVAL, -2, "invalid grammar")                                        \
    X(ENG_GRAMMAR_ETOOBIG, -3, "grammar exceeds a size limit")                          \
    X(ENG_GRAMMAR_EEMPTY, -4, "grammar admits no text")                                 \
    X(ENG_GRAMMAR_EREJECT, -5, "token not allowed by the grammar")                      \
    X(ENG_GRAMMAR_EDEAD, -6, "grammar reached a dead end: no token is allowed")         \
    X(ENG_GRAMMAR_EAMBIG, -7, "grammar too ambiguous: too many parse stacks at once")   \
    X(ENG_GRAMMAR_EVOCAB, -8, "token id not in the vocabulary")

enum {
#define ENG_GRAMMAR_ENUM(name, value, msg) name = value,
    ENG_GRAMMAR_ERRORS(ENG_GRAMMAR_ENUM)
#undef ENG_GRAMMAR_ENUM
};

const char *eng_grammar_strerror(int err);

/* Limits of one grammar; exceeding one fails eng_gbuild_finish() with ENG_GRAMMAR_ETOOBIG. */
#define ENG_GRAMMAR_MAX_RULES 16384
#define ENG_GRAMMAR_MAX_EXPRS (1 << 20)   /* expression nodes in the builder */
#define ENG_GRAMMAR_MAX_NFA (1 << 21)     /* automaton states before determinization */
#define ENG_GRAMMAR_MAX_STATES 65536      /* automaton states of the compiled grammar */
/*
 * Parse stacks one byte may leave (ENG_GRAMMAR_EAMBIG beyond), and eight
 * times as many configurations visited to find them.
 */
#define ENG_GRAMMAR_MAX_STACKS 4096
/* Unbounded repetition. */
#define ENG_GRAMMAR_INF UINT32_MAX

typedef struct eng_grammar eng_grammar;
typedef struct eng_gbuild eng_gbuild;
typedef struct eng_gvocab eng_gvocab;
typedef struct eng_gmatch eng_gmatch;

/* An expression of a builder; negative when the call that made it failed. */
typedef int32_t eng_gexpr;

/*
 * The builder. Every constructor returns a handle (>= 0), or -1 when it
 * fails, and the first failure is kept: later calls given a negative handle
 * fail too, and eng_gbuild_finish() reports it. So a caller may build a whole
 * grammar and check once.
 */
eng_gbuild *eng_gbuild_new(void);
void eng_gbuild_free(eng_gbuild *b);

/* A new rule, defined later (so rules may call each other, recursion included). */
int32_t eng_gb_rule(eng_gbuild *b);
/* The empty text. */
eng_gexpr eng_gb_empty(eng_gbuild *b);
/* The LEN bytes of S. */
eng_gexpr eng_gb_bytes(eng_gbuild *b, const char *s, size_t len);
eng_gexpr eng_gb_str(eng_gbuild *b, const char *s);
/* One byte in [LO, HI]. */
eng_gexpr eng_gb_range(eng_gbuild *b, uint8_t lo, uint8_t hi);
/* The vocabulary token ID itself (an added token such as <tool_call>), never its bytes. */
eng_gexpr eng_gb_token(eng_gbuild *b, int32_t id);
/* A call of RULE. */
eng_gexpr eng_gb_ref(eng_gbuild *b, int32_t rule);
eng_gexpr eng_gb_seq(eng_gbuild *b, const eng_gexpr *e, size_t n);
eng_gexpr eng_gb_alt(eng_gbuild *b, const eng_gexpr *e, size_t n);
/* E repeated MIN to MAX times (MAX may be ENG_GRAMMAR_INF); unrolled into the rule. */
eng_gexpr eng_gb_repeat(eng_gbuild *b, eng_gexpr e, uint32_t min, uint32_t max);
/*
 * Items joined by SEP in order, where item i may be left out when
 * optional[i] is true (a JSON object's members in schema order). Its size
 * grows linearly with N.
 */
eng_gexpr eng_gb_list(eng_gbuild *b, const eng_gexpr *items, const bool *optional, size_t n, eng_gexpr sep);
/*
 * Any valid UTF-8 text that does not contain the ASCII string AVOID (free
 * text before a tool call); LEN >= 1.
 */
eng_gexpr eng_gb_avoid(eng_gbuild *b, const char *avoid, size_t len);

/* Sets RULE's body. */
int eng_gb_define(eng_gbuild *b, int32_t rule, eng_gexpr body);
/*
 * Sets RULE to BODY repeated MIN to MAX times with a counter instead of
 * unrolling (a JSON string's characters between length bounds). BODY must
 * use bytes only (no rule calls, no tokens), must not match the empty text,
 * and no text it matches may be a proper prefix of another.
 */
int eng_gb_define_loop(eng_gbuild *b, int32_t rule, eng_gexpr body, uint32_t min, uint32_t max);

/*
 * Compiles the grammar whose text is one ROOT. Fails with ENG_GRAMMAR_EINVAL
 * (an undefined rule, left recursion, a bad loop body), ENG_GRAMMAR_ETOOBIG,
 * ENG_GRAMMAR_EEMPTY (ROOT matches no text) or a builder failure; MSG (may be
 * NULL) gets one line. Rules that match no text are dropped from the
 * alternatives that call them, and so are automaton states from which the
 * text cannot be completed: every prefix the grammar allows can be finished.
 */
int eng_gbuild_finish(eng_gbuild *b, int32_t root, eng_grammar **out, char *msg, size_t msg_len);

void eng_grammar_free(eng_grammar *g);
/* Automaton states and rules of G (for logs and limits). */
size_t eng_grammar_n_states(const eng_grammar *g);
size_t eng_grammar_n_rules(const eng_grammar *g);
/*
 * A lazy grammar: generation is free until the token ID is sampled, and
 * from that token on (the grammar's text starts with it) the grammar
 * applies. Qwen3's tool calls in auto mode: the model writes what it likes
 * until it opens <tool_call>, then the call follows the tool's schema.
 * Set once, before the grammar is shared; -1 (the default) is none.
 */
void eng_grammar_set_trigger(eng_grammar *g, int32_t id);
int32_t eng_grammar_trigger(const eng_grammar *g);

/*
 * The vocabulary of TOK for masks of N_VOCAB ids (the model's logits width,
 * which may exceed the tokenizer's ids: the rest are never allowed). EOS
 * lists the end-of-sequence ids, allowed where the text is complete. Added
 * tokens (special or not) are no byte tokens. NULL on out-of-memory or when
 * N_VOCAB is 0.
 */
eng_gvocab *eng_gvocab_new(const eng_tok *tok, size_t n_vocab, const int32_t *eos, size_t n_eos);
/*
 * A vocabulary from byte strings (tests, tools): id i is a byte token with
 * the LENS[i] bytes of TOKENS[i] (LENS[i] >= 1), or no byte token when
 * TOKENS[i] is NULL.
 */
eng_gvocab *eng_gvocab_new_bytes(const char *const *tokens, const size_t *lens, size_t n_vocab,
                                 const int32_t *eos, size_t n_eos);
void eng_gvocab_free(eng_gvocab *v);
size_t eng_gvocab_n(const eng_gvocab *v);
/* 64-bit words of a mask: ceil(n_vocab / 64). */
size_t eng_gvocab_mask_words(const eng_gvocab *v);
bool eng_gvocab_is_eos(const eng_gvocab *v, int32_t id);

/*
 * A matcher at the start of G's text. G and V must outlive it; token edges
 * of G must name ids below eng_gvocab_n(V). NULL on out-of-memory, a token
 * edge outside V, or more than ENG_GRAMMAR_MAX_STACKS stacks at the start.
 */
eng_gmatch *eng_gmatch_new(const eng_grammar *g, const eng_gvocab *v);
void eng_gmatch_free(eng_gmatch *m);
/* Back to the start of the text (the state cache is kept). */
void eng_gmatch_reset(eng_gmatch *m);

/*
 * Writes the ids allowed next to MASK (eng_gvocab_mask_words() words, bit
 * i%64 of word i/64). Returns how many are allowed (>= 1), or
 * ENG_GRAMMAR_EDEAD when none is (the request must end with an error),
 * ENG_GRAMMAR_ENOMEM or ENG_GRAMMAR_EAMBIG.
 */
int eng_gmatch_mask(eng_gmatch *m, uint64_t *mask);
/*
 * Advances past token ID. Returns 0, ENG_GRAMMAR_EREJECT when the grammar
 * does not allow it (the matcher is unchanged), ENG_GRAMMAR_ENOMEM or
 * ENG_GRAMMAR_EAMBIG. An EOS id is allowed only where the text is complete;
 * after it nothing is.
 */
int eng_gmatch_accept(eng_gmatch *m, int32_t id);
/*
 * Advances past the LEN bytes of S as if they were byte tokens (tests, and
 * the reference for masks). Same returns.
 */
int eng_gmatch_accept_bytes(eng_gmatch *m, const char *s, size_t len);
/*
 * True when token ID may come next, decided by running its bytes through
 * the whole parse stack: the slow reference eng_gmatch_mask() must equal.
 */
bool eng_gmatch_allows(eng_gmatch *m, int32_t id);
/* True where the text so far is complete (EOS allowed). */
bool eng_gmatch_complete(const eng_gmatch *m);
/* True after EOS was accepted. */
bool eng_gmatch_ended(const eng_gmatch *m);

#endif
