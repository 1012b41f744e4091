/*
 * grammar_int: the compiled form of an eng_grammar, shared by the compiler
 * (engine/grammar.c) and the matcher (engine/grammar_match.c) only.
 *
 * States of all rules live in one array. Each has a row of next states, one
 * per byte class (-1: no edge), and lists of rule calls and token edges. A
 * call edge (rule R, state T) means: run R, then go on at T. Edges trimmed
 * away by the compiler keep their place with T = -1.
 */
#ifndef QWEN3D_ENGINE_GRAMMAR_INT_H
#define QWEN3D_ENGINE_GRAMMAR_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

enum {
    GS_FINAL = 1,  /* the rule may end here */
    GS_BYTES = 2,  /* some byte edge leaves */
    GS_LOOP = 4,   /* the loop point of a loop rule: final once the counter reaches min */
};

typedef struct gstate {
    int32_t rule;
    uint8_t flags;
    int32_t ref0, n_ref;  /* call edges refs[ref0 .. ref0 + n_ref) */
    int32_t tok0, n_tok;  /* token edges toks[tok0 .. tok0 + n_tok) */
    int32_t slot;         /* mask cache slot */
} gstate;

typedef struct gedge {
    int32_t a;   /* called rule, or token id */
    int32_t to;  /* next state, -1 when trimmed */
} gedge;

typedef struct grule {
    int32_t start, first, n_states;  /* states first .. first + n_states; start == first */
    bool loop;                       /* counted repetition of a body (the loop point is start) */
    bool leaf;                       /* no live call or token edge */
    uint32_t min, max;               /* loop bounds */
} grule;

struct eng_grammar {
    gstate *st;
    size_t n_states;
    int32_t *next;        /* [n_states][n_cls] */
    gedge *refs, *toks;
    size_t n_refs, n_toks;
    grule *rules;
    size_t n_rules;
    int32_t root;
    uint8_t cls[256];     /* byte -> class */
    uint8_t cls_lo[256];  /* class -> its first byte */
    int n_cls;
    size_t n_slots;
    int32_t trigger;      /* eng_grammar_set_trigger(); -1: none */
};

/* Grows *P (elements of SZ bytes, capacity *CAP) to hold NEED; false on out-of-memory. */
static inline bool eng_g_grow(void **p, size_t *cap, size_t need, size_t sz)
{
    if (need <= *cap)
        return true;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * sz);
    if (!q)
        return false;
    *p = q;
    *cap = c;
    return true;
}

#endif
