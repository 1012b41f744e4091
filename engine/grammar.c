/*
 * grammar: the builder and compiler of eng_grammar (engine/grammar.h).
 *
 * A builder holds expression trees and rules. eng_gbuild_finish() turns
 * each rule into a nondeterministic automaton (Thompson construction, with
 * bounded repetition unrolled), determinizes it over byte classes (the
 * coarsest partition of 0..255 that every byte range of the grammar
 * respects), rule calls and tokens, and then simplifies the whole: rules
 * that match no text are cut off, states from which a rule cannot finish
 * are removed, and left recursion (which a stack machine cannot run) is an
 * error. The matcher (engine/grammar_match.c) reads the result.
 *
 * Threads: a builder is used by one thread; a finished grammar is
 * immutable.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "engine/grammar_int.h"

static const char *const grammar_msgs[] = {
#define ENG_GRAMMAR_MSG(name, value, msg) [-(value)] = msg,
    ENG_GRAMMAR_ERRORS(ENG_GRAMMAR_MSG)
#undef ENG_GRAMMAR_MSG
};

const char *eng_grammar_strerror(int err)
{
    if (err > 0 || (size_t)-err >= sizeof grammar_msgs / sizeof grammar_msgs[0] || !grammar_msgs[-err])
        return "unknown grammar error";
    return grammar_msgs[-err];
}

/* ---- builder ---- */

enum { EX_EMPTY, EX_BYTES, EX_RANGE, EX_TOKEN, EX_REF, EX_SEQ, EX_ALT, EX_REPEAT, EX_LIST, EX_AVOID };

typedef struct expr {
    uint8_t kind;
    uint8_t lo, hi;   /* EX_RANGE */
    int32_t a;        /* token id, rule, repeated expression, list separator */
    uint32_t min, max;
    int32_t off, n;   /* children in kids[] (lists: items then flags), or bytes in pool[] */
} expr;

typedef struct rule_def {
    int32_t body;     /* -1 until defined */
    bool loop;
    uint32_t min, max;
} rule_def;

struct eng_gbuild {
    expr *ex;
    size_t n_ex, cap_ex;
    int32_t *kids;
    size_t n_kids, cap_kids;
    char *pool;
    size_t n_pool, cap_pool;
    rule_def *rules;
    size_t n_rules, cap_rules;
    int err;
    char msg[160];
};

static void gb_fail(eng_gbuild *b, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void gb_fail(eng_gbuild *b, int err, const char *fmt, ...)
{
    if (b->err)
        return;
    b->err = err;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
}

/* Grows a builder array; on out-of-memory records the failure. */
static bool gb_grow(eng_gbuild *b, void **p, size_t *cap, size_t need, size_t sz)
{
    if (eng_g_grow(p, cap, need, sz))
        return true;
    gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
    return false;
}
#define GB_GROW(b, arr, cap, need) gb_grow((b), (void **)&(arr), &(cap), (need), sizeof *(arr))

eng_gbuild *eng_gbuild_new(void)
{
    return calloc(1, sizeof(eng_gbuild));
}

void eng_gbuild_free(eng_gbuild *b)
{
    if (!b)
        return;
    free(b->ex);
    free(b->kids);
    free(b->pool);
    free(b->rules);
    free(b);
}

static eng_gexpr gb_new(eng_gbuild *b, uint8_t kind)
{
    if (b->err)
        return -1;
    if (b->n_ex >= ENG_GRAMMAR_MAX_EXPRS) {
        gb_fail(b, ENG_GRAMMAR_ETOOBIG, "more than %d grammar expressions", ENG_GRAMMAR_MAX_EXPRS);
        return -1;
    }
    if (!GB_GROW(b, b->ex, b->cap_ex, b->n_ex + 1))
        return -1;
    expr *e = &b->ex[b->n_ex];
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->a = -1;
    return (eng_gexpr)b->n_ex++;
}

static bool gb_valid(eng_gbuild *b, eng_gexpr e)
{
    if (e < 0 || (size_t)e >= b->n_ex) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "bad expression handle %d", (int)e);
        return false;
    }
    return true;
}

/* Appends N child handles (and, for lists, N flags) to kids[]; the offset or -1. */
static int32_t gb_kids(eng_gbuild *b, const int32_t *k, size_t n)
{
    if (b->err)
        return -1;
    if (!GB_GROW(b, b->kids, b->cap_kids, b->n_kids + n + 1))
        return -1;
    int32_t off = (int32_t)b->n_kids;
    if (n)
        memcpy(b->kids + off, k, n * sizeof *k);
    b->n_kids += n;
    return off;
}

static int32_t gb_pool(eng_gbuild *b, const char *s, size_t len)
{
    if (b->err)
        return -1;
    if (!GB_GROW(b, b->pool, b->cap_pool, b->n_pool + len + 1))
        return -1;
    int32_t off = (int32_t)b->n_pool;
    memcpy(b->pool + off, s, len);
    b->n_pool += len;
    return off;
}

int32_t eng_gb_rule(eng_gbuild *b)
{
    if (b->err)
        return -1;
    if (b->n_rules >= ENG_GRAMMAR_MAX_RULES) {
        gb_fail(b, ENG_GRAMMAR_ETOOBIG, "more than %d grammar rules", ENG_GRAMMAR_MAX_RULES);
        return -1;
    }
    if (!GB_GROW(b, b->rules, b->cap_rules, b->n_rules + 1))
        return -1;
    b->rules[b->n_rules] = (rule_def){.body = -1};
    return (int32_t)b->n_rules++;
}

eng_gexpr eng_gb_empty(eng_gbuild *b)
{
    return gb_new(b, EX_EMPTY);
}

eng_gexpr eng_gb_bytes(eng_gbuild *b, const char *s, size_t len)
{
    if (len > ENG_GRAMMAR_MAX_NFA) {
        gb_fail(b, ENG_GRAMMAR_ETOOBIG, "literal of %zu bytes", len);
        return -1;
    }
    int32_t off = gb_pool(b, s, len);
    eng_gexpr e = gb_new(b, EX_BYTES);
    if (e < 0 || off < 0)
        return -1;
    b->ex[e].off = off;
    b->ex[e].n = (int32_t)len;
    return e;
}

eng_gexpr eng_gb_str(eng_gbuild *b, const char *s)
{
    return eng_gb_bytes(b, s, strlen(s));
}

eng_gexpr eng_gb_range(eng_gbuild *b, uint8_t lo, uint8_t hi)
{
    if (lo > hi) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "empty byte range [%u, %u]", lo, hi);
        return -1;
    }
    eng_gexpr e = gb_new(b, EX_RANGE);
    if (e < 0)
        return -1;
    b->ex[e].lo = lo;
    b->ex[e].hi = hi;
    return e;
}

eng_gexpr eng_gb_token(eng_gbuild *b, int32_t id)
{
    if (id < 0) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "negative token id %d", (int)id);
        return -1;
    }
    eng_gexpr e = gb_new(b, EX_TOKEN);
    if (e >= 0)
        b->ex[e].a = id;
    return e;
}

eng_gexpr eng_gb_ref(eng_gbuild *b, int32_t rule)
{
    if (!b->err && (rule < 0 || (size_t)rule >= b->n_rules)) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "call of unknown rule %d", (int)rule);
        return -1;
    }
    eng_gexpr e = gb_new(b, EX_REF);
    if (e >= 0)
        b->ex[e].a = rule;
    return e;
}

static eng_gexpr gb_nary(eng_gbuild *b, uint8_t kind, const eng_gexpr *k, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!gb_valid(b, k[i]))
            return -1;
    int32_t off = gb_kids(b, k, n);
    eng_gexpr e = gb_new(b, kind);
    if (e < 0 || off < 0)
        return -1;
    b->ex[e].off = off;
    b->ex[e].n = (int32_t)n;
    return e;
}

eng_gexpr eng_gb_seq(eng_gbuild *b, const eng_gexpr *e, size_t n)
{
    return gb_nary(b, EX_SEQ, e, n);
}

eng_gexpr eng_gb_alt(eng_gbuild *b, const eng_gexpr *e, size_t n)
{
    if (!b->err && n == 0) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "alternation of nothing");
        return -1;
    }
    return gb_nary(b, EX_ALT, e, n);
}

eng_gexpr eng_gb_repeat(eng_gbuild *b, eng_gexpr x, uint32_t min, uint32_t max)
{
    if (!gb_valid(b, x))
        return -1;
    if (min > max) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "repetition %u..%u is empty", min, max);
        return -1;
    }
    if (min > ENG_GRAMMAR_MAX_NFA || (max != ENG_GRAMMAR_INF && max > ENG_GRAMMAR_MAX_NFA)) {
        gb_fail(b, ENG_GRAMMAR_ETOOBIG, "repetition bound %u too large", max == ENG_GRAMMAR_INF ? min : max);
        return -1;
    }
    eng_gexpr e = gb_new(b, EX_REPEAT);
    if (e < 0)
        return -1;
    b->ex[e].a = x;
    b->ex[e].min = min;
    b->ex[e].max = max;
    return e;
}

eng_gexpr eng_gb_list(eng_gbuild *b, const eng_gexpr *items, const bool *optional, size_t n, eng_gexpr sep)
{
    if (!gb_valid(b, sep))
        return -1;
    for (size_t i = 0; i < n; i++)
        if (!gb_valid(b, items[i]))
            return -1;
    int32_t off = gb_kids(b, items, n);
    for (size_t i = 0; i < n; i++) {
        int32_t f = optional[i] ? 1 : 0;
        gb_kids(b, &f, 1);
    }
    eng_gexpr e = gb_new(b, EX_LIST);
    if (e < 0 || off < 0)
        return -1;
    b->ex[e].off = off;
    b->ex[e].n = (int32_t)n;
    b->ex[e].a = sep;
    return e;
}

eng_gexpr eng_gb_avoid(eng_gbuild *b, const char *avoid, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)avoid[i] == 0 || (unsigned char)avoid[i] >= 0x80) {
            gb_fail(b, ENG_GRAMMAR_EINVAL, "avoided text must be ASCII without NUL");
            return -1;
        }
    if (!b->err && (len == 0 || len > 256)) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "avoided text of %zu bytes (1 to 256)", len);
        return -1;
    }
    int32_t off = gb_pool(b, avoid, len);
    eng_gexpr e = gb_new(b, EX_AVOID);
    if (e < 0 || off < 0)
        return -1;
    b->ex[e].off = off;
    b->ex[e].n = (int32_t)len;
    return e;
}

static int gb_set(eng_gbuild *b, int32_t rule, eng_gexpr body, bool loop, uint32_t min, uint32_t max)
{
    if (b->err)
        return b->err;
    if (rule < 0 || (size_t)rule >= b->n_rules) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "definition of unknown rule %d", (int)rule);
        return b->err;
    }
    if (!gb_valid(b, body))
        return b->err;
    if (b->rules[rule].body >= 0) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "rule %d defined twice", (int)rule);
        return b->err;
    }
    if (loop && min > max) {
        gb_fail(b, ENG_GRAMMAR_EINVAL, "loop rule %d repeats %u..%u times", (int)rule, min, max);
        return b->err;
    }
    b->rules[rule] = (rule_def){.body = body, .loop = loop, .min = min, .max = max};
    return 0;
}

int eng_gb_define(eng_gbuild *b, int32_t rule, eng_gexpr body)
{
    return gb_set(b, rule, body, false, 0, 0);
}

int eng_gb_define_loop(eng_gbuild *b, int32_t rule, eng_gexpr body, uint32_t min, uint32_t max)
{
    return gb_set(b, rule, body, true, min, max);
}

/* ---- compiler: expressions to automata ---- */

enum { NE_EPS, NE_RANGE, NE_REF, NE_TOKEN };

typedef struct nedge {
    uint8_t kind, lo, hi;
    int32_t a;     /* rule or token */
    int32_t to;
    int32_t next;  /* next edge of the same state, or -1 */
} nedge;

/* The compiler's working state for one eng_gbuild_finish(). */
typedef struct comp {
    eng_gbuild *b;
    /* the NFA of the rule being compiled */
    int32_t *first;  /* first edge per NFA state */
    size_t n_nfa, cap_nfa;
    nedge *edges;
    size_t n_edges, cap_edges;
    /* the grammar being written */
    eng_grammar *g;
    size_t cap_states, cap_refs, cap_toks;
} comp;

static int32_t nfa_state(comp *c)
{
    eng_gbuild *b = c->b;
    if (b->err)
        return -1;
    if (c->n_nfa >= ENG_GRAMMAR_MAX_NFA) {
        gb_fail(b, ENG_GRAMMAR_ETOOBIG, "a rule needs more than %d automaton states before determinization",
                ENG_GRAMMAR_MAX_NFA);
        return -1;
    }
    if (!GB_GROW(b, c->first, c->cap_nfa, c->n_nfa + 1))
        return -1;
    c->first[c->n_nfa] = -1;
    return (int32_t)c->n_nfa++;
}

static void nfa_edge(comp *c, int32_t from, uint8_t kind, uint8_t lo, uint8_t hi, int32_t a, int32_t to)
{
    if (c->b->err || from < 0 || to < 0)
        return;
    if (!GB_GROW(c->b, c->edges, c->cap_edges, c->n_edges + 1))
        return;
    c->edges[c->n_edges] = (nedge){.kind = kind, .lo = lo, .hi = hi, .a = a, .to = to, .next = c->first[from]};
    c->first[from] = (int32_t)c->n_edges++;
}

static int32_t nfa_byte(comp *c, int32_t from, uint8_t lo, uint8_t hi)
{
    int32_t t = nfa_state(c);
    nfa_edge(c, from, NE_RANGE, lo, hi, -1, t);
    return t;
}

/*
 * Text that avoids the ASCII string S: a Knuth-Morris-Pratt automaton over
 * ASCII bytes (state j: the last j bytes are S's first j), where a
 * multi-byte UTF-8 character resets the match. Every state is final.
 */
static int32_t nfa_avoid(comp *c, int32_t from, const uint8_t *s, size_t n)
{
    int32_t *fail = calloc(n + 1, sizeof *fail);
    int32_t *k = calloc(n, sizeof *k);
    if (!fail || !k) {
        free(fail);
        free(k);
        gb_fail(c->b, ENG_GRAMMAR_ENOMEM, "out of memory");
        return -1;
    }
    for (size_t i = 1, j = 0; i < n; i++) {
        while (j > 0 && s[i] != s[j])
            j = (size_t)fail[j];
        if (s[i] == s[j])
            j++;
        fail[i + 1] = (int32_t)j;
    }
    k[0] = from;
    for (size_t j = 1; j < n; j++)
        k[j] = nfa_state(c);
    int32_t end = nfa_state(c);
    /* the UTF-8 continuation states: one, two (E1-EC, EE-EF), three (F1-F3) more bytes */
    int32_t m1 = nfa_state(c), m2 = nfa_state(c), m2a = nfa_state(c), m2b = nfa_state(c);
    int32_t m3 = nfa_state(c), m3a = nfa_state(c), m3b = nfa_state(c);
    nfa_edge(c, m1, NE_RANGE, 0x80, 0xBF, -1, k[0]);
    nfa_edge(c, m2, NE_RANGE, 0x80, 0xBF, -1, m1);
    nfa_edge(c, m2a, NE_RANGE, 0xA0, 0xBF, -1, m1);
    nfa_edge(c, m2b, NE_RANGE, 0x80, 0x9F, -1, m1);
    nfa_edge(c, m3, NE_RANGE, 0x80, 0xBF, -1, m2);
    nfa_edge(c, m3a, NE_RANGE, 0x90, 0xBF, -1, m2);
    nfa_edge(c, m3b, NE_RANGE, 0x80, 0x8F, -1, m2);
    for (size_t j = 0; j < n && !c->b->err; j++) {
        nfa_edge(c, k[j], NE_EPS, 0, 0, -1, end);
        /* ASCII bytes, in runs with the same next state */
        int run_lo = -1, run_to = -1;
        for (int byte = 1; byte <= 0x80; byte++) {
            int to = -2;
            if (byte < 0x80) {
                size_t q = j;
                while (q > 0 && s[q] != byte)
                    q = (size_t)fail[q];
                if (s[q] == byte)
                    q++;
                to = q == n ? -1 : (int)q;
            }
            if (run_lo >= 0 && to != run_to) {
                if (run_to >= 0)
                    nfa_edge(c, k[j], NE_RANGE, (uint8_t)run_lo, (uint8_t)(byte - 1), -1, k[run_to]);
                run_lo = -1;
            }
            if (run_lo < 0 && byte < 0x80) {
                run_lo = byte;
                run_to = to;
            }
        }
        nfa_edge(c, k[j], NE_RANGE, 0xC2, 0xDF, -1, m1);
        nfa_edge(c, k[j], NE_RANGE, 0xE0, 0xE0, -1, m2a);
        nfa_edge(c, k[j], NE_RANGE, 0xE1, 0xEC, -1, m2);
        nfa_edge(c, k[j], NE_RANGE, 0xED, 0xED, -1, m2b);
        nfa_edge(c, k[j], NE_RANGE, 0xEE, 0xEF, -1, m2);
        nfa_edge(c, k[j], NE_RANGE, 0xF0, 0xF0, -1, m3a);
        nfa_edge(c, k[j], NE_RANGE, 0xF1, 0xF3, -1, m3);
        nfa_edge(c, k[j], NE_RANGE, 0xF4, 0xF4, -1, m3b);
    }
    free(fail);
    free(k);
    return end;
}

/*
 * Adds expression E to the NFA starting at FROM and returns its end state.
 * It only adds edges leaving FROM, never entering it, so alternatives may
 * share their start state.
 */
static int32_t nfa_expr(comp *c, eng_gexpr ei, int32_t from)
{
    eng_gbuild *b = c->b;
    if (b->err || from < 0)
        return -1;
    const expr e = b->ex[ei];
    switch (e.kind) {
    case EX_EMPTY:
        return from;
    case EX_BYTES: {
        int32_t s = from;
        for (int32_t i = 0; i < e.n; i++) {
            uint8_t byte = (uint8_t)b->pool[e.off + i];
            s = nfa_byte(c, s, byte, byte);
        }
        return s;
    }
    case EX_RANGE:
        return nfa_byte(c, from, e.lo, e.hi);
    case EX_TOKEN:
    case EX_REF: {
        int32_t t = nfa_state(c);
        nfa_edge(c, from, e.kind == EX_TOKEN ? NE_TOKEN : NE_REF, 0, 0, e.a, t);
        return t;
    }
    case EX_SEQ: {
        int32_t s = from;
        for (int32_t i = 0; i < e.n; i++)
            s = nfa_expr(c, b->kids[e.off + i], s);
        return s;
    }
    case EX_ALT: {
        int32_t end = nfa_state(c);
        for (int32_t i = 0; i < e.n; i++)
            nfa_edge(c, nfa_expr(c, b->kids[e.off + i], from), NE_EPS, 0, 0, -1, end);
        return end;
    }
    case EX_REPEAT: {
        int32_t s = from;
        for (uint32_t i = 0; i < e.min && !b->err; i++)
            s = nfa_expr(c, e.a, s);
        if (e.max == ENG_GRAMMAR_INF) {
            int32_t loop = nfa_state(c);
            nfa_edge(c, s, NE_EPS, 0, 0, -1, loop);
            nfa_edge(c, nfa_expr(c, e.a, loop), NE_EPS, 0, 0, -1, loop);
            return loop;
        }
        /* x{0,k}: each further copy optional, and each copy only after the previous */
        int32_t end = nfa_state(c);
        for (uint32_t i = e.min; i < e.max && !b->err; i++) {
            nfa_edge(c, s, NE_EPS, 0, 0, -1, end);
            int32_t t = nfa_state(c);
            nfa_edge(c, s, NE_EPS, 0, 0, -1, t);
            s = nfa_expr(c, e.a, t);
        }
        nfa_edge(c, s, NE_EPS, 0, 0, -1, end);
        return end;
    }
    case EX_LIST: {
        /* q0: nothing emitted yet (exists while every earlier item was optional); q1: something was */
        int32_t q0 = from, q1 = -1;
        for (int32_t i = 0; i < e.n && !b->err; i++) {
            eng_gexpr item = b->kids[e.off + i];
            bool opt = b->kids[e.off + e.n + i] != 0;
            int32_t n1 = nfa_state(c);
            if (q0 >= 0)
                nfa_edge(c, nfa_expr(c, item, q0), NE_EPS, 0, 0, -1, n1);
            if (q1 >= 0) {
                int32_t t = nfa_state(c);
                nfa_edge(c, q1, NE_EPS, 0, 0, -1, t);
                nfa_edge(c, nfa_expr(c, item, nfa_expr(c, e.a, t)), NE_EPS, 0, 0, -1, n1);
                if (opt)
                    nfa_edge(c, q1, NE_EPS, 0, 0, -1, n1);
            }
            int32_t n0 = -1;
            if (opt && q0 >= 0) {
                n0 = nfa_state(c);
                nfa_edge(c, q0, NE_EPS, 0, 0, -1, n0);
            }
            q0 = n0;
            q1 = n1;
        }
        int32_t end = nfa_state(c);
        if (q0 >= 0)
            nfa_edge(c, q0, NE_EPS, 0, 0, -1, end);
        if (q1 >= 0)
            nfa_edge(c, q1, NE_EPS, 0, 0, -1, end);
        return end;
    }
    case EX_AVOID: {
        int32_t t = nfa_state(c);
        nfa_edge(c, from, NE_EPS, 0, 0, -1, t);
        return nfa_avoid(c, t, (const uint8_t *)b->pool + e.off, (size_t)e.n);
    }
    }
    gb_fail(b, ENG_GRAMMAR_EINVAL, "unknown expression kind %d", e.kind);
    return -1;
}

/* Marks the byte-class boundaries of every byte range the grammar's expressions use. */
static void mark_bounds(const eng_gbuild *b, bool cut[257])
{
    for (size_t i = 0; i < b->n_ex; i++) {
        const expr *e = &b->ex[i];
        if (e->kind == EX_RANGE) {
            cut[e->lo] = cut[e->hi + 1] = true;
        } else if (e->kind == EX_BYTES || e->kind == EX_AVOID) {
            for (int32_t k = 0; k < e->n; k++) {
                uint8_t byte = (uint8_t)b->pool[e->off + k];
                cut[byte] = cut[byte + 1] = true;
            }
        }
        if (e->kind == EX_AVOID) {
            static const uint8_t utf8_cuts[] = {0x01, 0x80, 0x90, 0xA0, 0xC0, 0xC2, 0xE0, 0xE1, 0xED, 0xEE, 0xF0, 0xF1, 0xF4, 0xF5};
            for (size_t k = 0; k < sizeof utf8_cuts; k++)
                cut[utf8_cuts[k]] = true;
        }
    }
}

/* ---- determinization ---- */

/* Sorted NFA state sets, hashed, numbering the DFA states of one rule. */
typedef struct sets {
    int32_t *data;     /* all sets, concatenated */
    size_t n_data, cap_data;
    size_t *off;       /* set i is data[off[i] .. off[i+1]) */
    size_t n, cap;
    int32_t *table;    /* open addressing, -1 empty */
    size_t table_cap;
} sets;

static uint64_t hash_ints(const int32_t *v, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint32_t)v[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static void sets_free(sets *s)
{
    free(s->data);
    free(s->off);
    free(s->table);
    memset(s, 0, sizeof *s);
}

/* The index of set V (sorted, N states), added when new; -1 on out-of-memory; *added says which. */
static int32_t sets_find(sets *s, const int32_t *v, size_t n, bool *added)
{
    if ((s->n + 1) * 2 > s->table_cap) {
        size_t cap = s->table_cap ? s->table_cap * 2 : 64;
        int32_t *t = malloc(cap * sizeof *t);
        if (!t)
            return -1;
        for (size_t i = 0; i < cap; i++)
            t[i] = -1;
        for (size_t i = 0; i < s->n; i++) {
            uint64_t h = hash_ints(s->data + s->off[i], s->off[i + 1] - s->off[i]) & (cap - 1);
            while (t[h] >= 0)
                h = (h + 1) & (cap - 1);
            t[h] = (int32_t)i;
        }
        free(s->table);
        s->table = t;
        s->table_cap = cap;
    }
    uint64_t h = hash_ints(v, n) & (s->table_cap - 1);
    while (s->table[h] >= 0) {
        size_t i = (size_t)s->table[h];
        size_t len = s->off[i + 1] - s->off[i];
        if (len == n && !memcmp(s->data + s->off[i], v, n * sizeof *v)) {
            *added = false;
            return (int32_t)i;
        }
        h = (h + 1) & (s->table_cap - 1);
    }
    if (!eng_g_grow((void **)&s->data, &s->cap_data, s->n_data + n, sizeof *s->data) ||
        !eng_g_grow((void **)&s->off, &s->cap, s->n + 2, sizeof *s->off))
        return -1;
    if (s->n == 0)
        s->off[0] = 0;
    memcpy(s->data + s->n_data, v, n * sizeof *v);
    s->n_data += n;
    s->off[s->n + 1] = s->n_data;
    s->table[h] = (int32_t)s->n;
    *added = true;
    return (int32_t)s->n++;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Work arrays of the subset construction. */
typedef struct dwork {
    int32_t *stack, *buf;
    uint32_t *mark;   /* per NFA state: the stamp of the last closure that took it */
    uint32_t stamp;
    size_t cap;
} dwork;

/* Epsilon closure of the N states in V, sorted, into W->buf; its size. */
static size_t eps_closure(const comp *c, dwork *w, const int32_t *v, size_t n)
{
    w->stamp++;
    size_t sp = 0, out = 0;
    for (size_t i = 0; i < n; i++)
        if (w->mark[v[i]] != w->stamp) {
            w->mark[v[i]] = w->stamp;
            w->stack[sp++] = v[i];
        }
    while (sp) {
        int32_t s = w->stack[--sp];
        w->buf[out++] = s;
        for (int32_t e = c->first[s]; e >= 0; e = c->edges[e].next)
            if (c->edges[e].kind == NE_EPS && w->mark[c->edges[e].to] != w->stamp) {
                w->mark[c->edges[e].to] = w->stamp;
                w->stack[sp++] = c->edges[e].to;
            }
    }
    qsort(w->buf, out, sizeof *w->buf, cmp_i32);
    return out;
}

static bool g_reserve(comp *c, size_t states, size_t refs, size_t toks)
{
    eng_grammar *g = c->g;
    if (g->n_states + states > ENG_GRAMMAR_MAX_STATES) {
        gb_fail(c->b, ENG_GRAMMAR_ETOOBIG, "more than %d grammar states", ENG_GRAMMAR_MAX_STATES);
        return false;
    }
    size_t old_cap = c->cap_states;
    if (!eng_g_grow((void **)&g->st, &c->cap_states, g->n_states + states, sizeof *g->st) ||
        !eng_g_grow((void **)&g->refs, &c->cap_refs, g->n_refs + refs, sizeof *g->refs) ||
        !eng_g_grow((void **)&g->toks, &c->cap_toks, g->n_toks + toks, sizeof *g->toks)) {
        gb_fail(c->b, ENG_GRAMMAR_ENOMEM, "out of memory");
        return false;
    }
    if (c->cap_states != old_cap) {
        int32_t *nx = realloc(g->next, c->cap_states * g->n_cls * sizeof *nx);
        if (!nx) {
            gb_fail(c->b, ENG_GRAMMAR_ENOMEM, "out of memory");
            return false;
        }
        g->next = nx;
    }
    return true;
}

typedef struct symtarget {
    int32_t key;     /* rule or token */
    int32_t nfa;     /* an NFA state reached */
} symtarget;

static int cmp_symtarget(const void *a, const void *b)
{
    const symtarget *x = a, *y = b;
    if (x->key != y->key)
        return (x->key > y->key) - (x->key < y->key);
    return (x->nfa > y->nfa) - (x->nfa < y->nfa);
}

/*
 * Determinizes the NFA (start START, accepting ACCEPT) into rule R's states,
 * appended to the grammar. A loop rule's accepting subsets are its loop
 * point (the start) again.
 */
static void determinize(comp *c, int32_t r, int32_t start, int32_t accept)
{
    eng_grammar *g = c->g;
    eng_gbuild *b = c->b;
    const int ncls = g->n_cls;
    grule *rl = &g->rules[r];
    sets ss = {0};
    dwork w = {0};
    symtarget *sym = NULL;
    size_t cap_sym = 0;
    int32_t *tgt = NULL;
    size_t cap_tgt = 0;
    w.cap = c->n_nfa;
    w.stack = malloc(w.cap * sizeof *w.stack);
    w.buf = malloc(w.cap * sizeof *w.buf);
    w.mark = calloc(w.cap, sizeof *w.mark);
    if (!w.stack || !w.buf || !w.mark) {
        gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
        goto out;
    }
    bool added;
    size_t n0 = eps_closure(c, &w, &start, 1);
    if (sets_find(&ss, w.buf, n0, &added) < 0) {
        gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
        goto out;
    }
    int32_t base = (int32_t)g->n_states;
    rl->first = base;
    rl->start = base;
    for (size_t d = 0; d < ss.n && !b->err; d++) {
        if (!g_reserve(c, 1, 0, 0))
            goto out;
        int32_t gs = base + (int32_t)d;
        g->n_states++;
        gstate *st = &g->st[gs];
        memset(st, 0, sizeof *st);
        st->rule = r;
        int32_t *row = g->next + (size_t)gs * ncls;
        for (int k = 0; k < ncls; k++)
            row[k] = -1;
        size_t so = ss.off[d], sn = ss.off[d + 1] - so;
        bool has_accept = false;
        size_t n_sym = 0;
        for (size_t i = 0; i < sn; i++) {
            int32_t s = ss.data[so + i];
            if (s == accept)
                has_accept = true;
            for (int32_t e = c->first[s]; e >= 0; e = c->edges[e].next)
                if (c->edges[e].kind == NE_REF || c->edges[e].kind == NE_TOKEN) {
                    if (!eng_g_grow((void **)&sym, &cap_sym, n_sym + 1, sizeof *sym)) {
                        gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
                        goto out;
                    }
                    /* tokens keyed negative so the two kinds sort apart */
                    int32_t key = c->edges[e].kind == NE_REF ? c->edges[e].a : -1 - c->edges[e].a;
                    sym[n_sym++] = (symtarget){key, c->edges[e].to};
                }
        }
        if (rl->loop) {
            if (n_sym) {
                gb_fail(b, ENG_GRAMMAR_EINVAL, "loop rule %d calls a rule or names a token", (int)r);
                goto out;
            }
            if (d == 0 && has_accept) {
                gb_fail(b, ENG_GRAMMAR_EINVAL, "loop rule %d has a body that matches the empty text", (int)r);
                goto out;
            }
            if (d == 0)
                st->flags |= GS_LOOP;
        } else if (has_accept) {
            st->flags |= GS_FINAL;
        }
        /* byte classes: each class is a run of bytes, so a range covers a run of classes */
        size_t n_out = 1;
        for (size_t i = 0; i < sn; i++)
            for (int32_t e = c->first[ss.data[so + i]]; e >= 0; e = c->edges[e].next)
                n_out++;
        if (!eng_g_grow((void **)&tgt, &cap_tgt, n_out, sizeof *tgt)) {
            gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
            goto out;
        }
        for (int k = 0; k < ncls && !b->err; k++) {
            uint8_t rep = g->cls_lo[k];
            size_t nt = 0;
            for (size_t i = 0; i < sn; i++)
                for (int32_t e = c->first[ss.data[so + i]]; e >= 0; e = c->edges[e].next)
                    if (c->edges[e].kind == NE_RANGE && c->edges[e].lo <= rep && rep <= c->edges[e].hi)
                        tgt[nt++] = c->edges[e].to;
            if (!nt)
                continue;
            size_t n = eps_closure(c, &w, tgt, nt);
            bool acc = false;
            for (size_t i = 0; i < n; i++)
                acc |= w.buf[i] == accept;
            int32_t to;
            if (rl->loop && acc) {
                for (size_t i = 0; i < n; i++)
                    for (int32_t e = c->first[w.buf[i]]; e >= 0; e = c->edges[e].next)
                        if (c->edges[e].kind != NE_EPS) {
                            gb_fail(b, ENG_GRAMMAR_EINVAL,
                                    "loop rule %d: a text of its body is a prefix of another", (int)r);
                            goto out;
                        }
                to = 0;
            } else {
                to = sets_find(&ss, w.buf, n, &added);
                if (to < 0) {
                    gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
                    goto out;
                }
                if (base + (int64_t)ss.n > ENG_GRAMMAR_MAX_STATES) {
                    gb_fail(b, ENG_GRAMMAR_ETOOBIG, "more than %d grammar states", ENG_GRAMMAR_MAX_STATES);
                    goto out;
                }
            }
            /* row may have moved when the grammar grew */
            g->next[(size_t)gs * ncls + k] = base + to;
        }
        /* rule calls and tokens, one edge per distinct symbol */
        if (n_sym)
            qsort(sym, n_sym, sizeof *sym, cmp_symtarget);
        st = &g->st[gs];
        st->ref0 = (int32_t)g->n_refs;
        st->tok0 = (int32_t)g->n_toks;
        for (size_t i = 0; i < n_sym && !b->err;) {
            size_t j = i, nt = 0;
            while (j < n_sym && sym[j].key == sym[i].key)
                tgt[nt++] = sym[j++].nfa;
            size_t n = eps_closure(c, &w, tgt, nt);
            int32_t to = sets_find(&ss, w.buf, n, &added);
            if (to < 0 || !g_reserve(c, 0, 1, 1)) {
                gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
                goto out;
            }
            st = &g->st[gs];
            if (sym[i].key >= 0) {
                g->refs[g->n_refs++] = (gedge){sym[i].key, base + to};
                st->n_ref++;
            } else {
                g->toks[g->n_toks++] = (gedge){-1 - sym[i].key, base + to};
                st->n_tok++;
            }
            i = j;
        }
    }
    rl->n_states = (int32_t)(g->n_states - (size_t)base);
out:
    free(sym);
    free(tgt);
    free(w.stack);
    free(w.buf);
    free(w.mark);
    sets_free(&ss);
}

/* ---- whole-grammar analysis ---- */

static bool rule_nullable_scan(const eng_grammar *g, int32_t r, const bool *nullable, int32_t *queue, uint8_t *seen)
{
    const grule *rl = &g->rules[r];
    size_t qh = 0, qt = 0;
    queue[qt++] = rl->start;
    seen[rl->start - rl->first] = 1;
    bool found = false;
    while (qh < qt) {
        int32_t s = queue[qh++];
        if (g->st[s].flags & GS_FINAL)
            found = true;
        for (int32_t i = 0; i < g->st[s].n_ref; i++) {
            const gedge *e = &g->refs[g->st[s].ref0 + i];
            if (e->to >= 0 && nullable[e->a] && !seen[e->to - rl->first]) {
                seen[e->to - rl->first] = 1;
                queue[qt++] = e->to;
            }
        }
    }
    for (size_t i = 0; i < qt; i++)
        seen[queue[i] - rl->first] = 0;
    return found;
}

/*
 * Whether rule R can match some text, given which rules can (PROD): a
 * plain rule when a final state is reachable over bytes, tokens and calls
 * of productive rules; a loop rule when it may repeat zero times, or its
 * body leads back to the loop point and it may repeat at least once.
 */
static bool rule_productive_scan(const eng_grammar *g, int32_t r, const bool *prod, int32_t *queue, uint8_t *seen)
{
    const grule *rl = &g->rules[r];
    if (rl->loop && rl->min > rl->max)
        return false;
    if (rl->loop && rl->min == 0)
        return true;
    size_t qh = 0, qt = 0;
    queue[qt++] = rl->start;
    seen[0] = 1;
    bool found = false;
    while (qh < qt) {
        int32_t s = queue[qh++];
        const gstate *st = &g->st[s];
        if (st->flags & GS_FINAL)
            found = true;
        const int32_t *row = g->next + (size_t)s * g->n_cls;
        for (int k = 0; k < g->n_cls; k++) {
            int32_t t = row[k];
            if (t < 0)
                continue;
            if (rl->loop && t == rl->start)
                found = true;
            if (!seen[t - rl->first]) {
                seen[t - rl->first] = 1;
                queue[qt++] = t;
            }
        }
        for (int32_t i = 0; i < st->n_ref + st->n_tok; i++) {
            const gedge *e = i < st->n_ref ? &g->refs[st->ref0 + i] : &g->toks[st->tok0 + i - st->n_ref];
            if (e->to < 0 || (i < st->n_ref && !prod[e->a]))
                continue;
            if (!seen[e->to - rl->first]) {
                seen[e->to - rl->first] = 1;
                queue[qt++] = e->to;
            }
        }
    }
    for (size_t i = 0; i < qt; i++)
        seen[queue[i] - rl->first] = 0;
    return found && (!rl->loop || rl->max >= 1);
}

/*
 * Removes what cannot lead to a finished rule: calls of unproductive rules
 * and every edge into a state from which the rule's end (a loop rule's loop
 * point) cannot be reached (a backward search over predecessor lists).
 * Returns false on out-of-memory.
 */
static bool trim_rule(eng_grammar *g, int32_t r, const bool *prod, int32_t *queue, uint8_t *live)
{
    grule *rl = &g->rules[r];
    int32_t n = rl->n_states, f = rl->first;
    const int ncls = g->n_cls;
    if (n <= 0)
        return true;
    for (int32_t i = 0; i < n; i++) {
        gstate *st = &g->st[f + i];
        for (int32_t k = 0; k < st->n_ref; k++)
            if (!prod[g->refs[st->ref0 + k].a])
                g->refs[st->ref0 + k].to = -1;
    }
    int32_t *off = calloc((size_t)n + 1, sizeof *off);
    size_t n_pred = 0;
    if (!off)
        return false;
    /* predecessor lists, counted then filled */
    for (int32_t i = 0; i < n; i++) {
        const gstate *st = &g->st[f + i];
        const int32_t *row = g->next + (size_t)(f + i) * ncls;
        for (int k = 0; k < ncls; k++)
            if (row[k] >= 0)
                off[row[k] - f + 1]++;
        for (int32_t k = 0; k < st->n_ref; k++)
            if (g->refs[st->ref0 + k].to >= 0)
                off[g->refs[st->ref0 + k].to - f + 1]++;
        for (int32_t k = 0; k < st->n_tok; k++)
            off[g->toks[st->tok0 + k].to - f + 1]++;
    }
    for (int32_t i = 0; i < n; i++)
        off[i + 1] += off[i];
    n_pred = (size_t)off[n];
    int32_t *pred = malloc((n_pred ? n_pred : 1) * sizeof *pred);
    int32_t *fill = malloc((size_t)n * sizeof *fill);
    if (!pred || !fill) {
        free(off);
        free(pred);
        free(fill);
        return false;
    }
    memcpy(fill, off, (size_t)n * sizeof *fill);
    for (int32_t i = 0; i < n; i++) {
        const gstate *st = &g->st[f + i];
        const int32_t *row = g->next + (size_t)(f + i) * ncls;
        for (int k = 0; k < ncls; k++)
            if (row[k] >= 0)
                pred[fill[row[k] - f]++] = i;
        for (int32_t k = 0; k < st->n_ref; k++)
            if (g->refs[st->ref0 + k].to >= 0)
                pred[fill[g->refs[st->ref0 + k].to - f]++] = i;
        for (int32_t k = 0; k < st->n_tok; k++)
            pred[fill[g->toks[st->tok0 + k].to - f]++] = i;
    }
    if (n > 0)
        memset(live, 0, (size_t)n);
    size_t qh = 0, qt = 0;
    for (int32_t i = 0; i < n; i++)
        if ((g->st[f + i].flags & GS_FINAL) || (rl->loop && f + i == rl->start)) {
            live[i] = 1;
            queue[qt++] = i;
        }
    while (qh < qt) {
        int32_t s = queue[qh++];
        for (int32_t k = off[s]; k < off[s + 1]; k++)
            if (!live[pred[k]]) {
                live[pred[k]] = 1;
                queue[qt++] = pred[k];
            }
    }
    free(off);
    free(pred);
    free(fill);
    for (int32_t i = 0; i < n; i++) {
        gstate *st = &g->st[f + i];
        int32_t *row = g->next + (size_t)(f + i) * ncls;
        bool bytes = false;
        for (int k = 0; k < ncls; k++) {
            if (row[k] >= 0 && !live[row[k] - f])
                row[k] = -1;
            bytes |= row[k] >= 0;
        }
        for (int32_t k = 0; k < st->n_ref; k++) {
            gedge *e = &g->refs[st->ref0 + k];
            if (e->to >= 0 && !live[e->to - f])
                e->to = -1;
            if (e->to >= 0)
                rl->leaf = false;
        }
        for (int32_t k = 0; k < st->n_tok; k++) {
            gedge *e = &g->toks[st->tok0 + k];
            if (e->to >= 0 && !live[e->to - f])
                e->to = -1;
            if (e->to >= 0)
                rl->leaf = false;
        }
        if (bytes)
            st->flags |= GS_BYTES;
        else
            st->flags &= (uint8_t)~GS_BYTES;
    }
    return true;
}

/* Left recursion: a rule that can call itself before reading anything. */
static int check_left_recursion(eng_gbuild *b, const eng_grammar *g, const bool *nullable, int32_t *queue,
                                uint8_t *seen)
{
    size_t nr = g->n_rules;
    /* left[r] lists the rules r may call first */
    int32_t *lo = calloc(nr + 1, sizeof *lo);
    int32_t *lst = NULL;
    size_t n_lst = 0, cap_lst = 0;
    uint8_t *color = calloc(nr, 1);
    int32_t *stk = malloc((nr + 1) * 2 * sizeof *stk);
    int rc = 0;
    if (!lo || !color || !stk) {
        gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
        rc = -1;
        goto out;
    }
    for (size_t r = 0; r < nr; r++) {
        lo[r] = (int32_t)n_lst;
        const grule *rl = &g->rules[r];
        if (rl->loop)
            continue;
        size_t qh = 0, qt = 0;
        queue[qt++] = rl->start;
        seen[0] = 1;
        while (qh < qt) {
            const gstate *st = &g->st[queue[qh++]];
            for (int32_t i = 0; i < st->n_ref; i++) {
                const gedge *e = &g->refs[st->ref0 + i];
                if (e->to < 0)
                    continue;
                if (!eng_g_grow((void **)&lst, &cap_lst, n_lst + 1, sizeof *lst)) {
                    gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
                    rc = -1;
                    goto out;
                }
                lst[n_lst++] = e->a;
                if (nullable[e->a] && !seen[e->to - rl->first]) {
                    seen[e->to - rl->first] = 1;
                    queue[qt++] = e->to;
                }
            }
        }
        for (size_t i = 0; i < qt; i++)
            seen[queue[i] - rl->first] = 0;
    }
    lo[nr] = (int32_t)n_lst;
    /* iterative depth-first search for a cycle: color 1 = on the path, 2 = done */
    for (size_t r0 = 0; r0 < nr && !rc; r0++) {
        if (color[r0])
            continue;
        size_t sp = 0;
        stk[sp++] = (int32_t)r0;
        stk[sp++] = lo[r0];
        color[r0] = 1;
        while (sp && !rc) {
            int32_t r = stk[sp - 2], i = stk[sp - 1];
            if (i < lo[r + 1]) {
                stk[sp - 1] = i + 1;
                int32_t t = lst[i];
                if (color[t] == 1) {
                    gb_fail(b, ENG_GRAMMAR_EINVAL, "left recursion through rule %d", (int)t);
                    rc = -1;
                } else if (!color[t]) {
                    color[t] = 1;
                    stk[sp++] = t;
                    stk[sp++] = lo[t];
                }
            } else {
                color[r] = 2;
                sp -= 2;
            }
        }
    }
out:
    free(lo);
    free(lst);
    free(color);
    free(stk);
    return rc;
}

/*
 * Cache slots: states whose token sets are the same share one. Loop rules
 * with equal bodies (different bounds) do, since their cached sets ignore
 * the bounds; every other state has its own.
 */
static void assign_slots(eng_grammar *g)
{
    int32_t slot = 0;
    for (size_t r = 0; r < g->n_rules; r++) {
        grule *rl = &g->rules[r];
        int32_t same = -1;
        if (rl->loop)
            for (size_t q = 0; q < r && same < 0; q++) {
                const grule *o = &g->rules[q];
                if (!o->loop || o->n_states != rl->n_states)
                    continue;
                bool eq = true;
                for (int32_t i = 0; i < rl->n_states && eq; i++)
                    for (int k = 0; k < g->n_cls && eq; k++) {
                        int32_t a = g->next[(size_t)(rl->first + i) * g->n_cls + k];
                        int32_t c = g->next[(size_t)(o->first + i) * g->n_cls + k];
                        eq = (a < 0 && c < 0) || (a >= 0 && c >= 0 && a - rl->first == c - o->first);
                    }
                if (eq)
                    same = (int32_t)q;
            }
        for (int32_t i = 0; i < rl->n_states; i++)
            g->st[rl->first + i].slot = same >= 0 ? g->st[g->rules[same].first + i].slot : slot++;
    }
    g->n_slots = (size_t)slot;
}

int eng_gbuild_finish(eng_gbuild *b, int32_t root, eng_grammar **out, char *msg, size_t msg_len)
{
    *out = NULL;
    comp c = {.b = b};
    eng_grammar *g = NULL;
    bool *nullable = NULL, *prod = NULL;
    int32_t *queue = NULL;
    uint8_t *seen = NULL;
    if (!b->err && (root < 0 || (size_t)root >= b->n_rules))
        gb_fail(b, ENG_GRAMMAR_EINVAL, "unknown root rule %d", (int)root);
    for (size_t r = 0; r < b->n_rules && !b->err; r++)
        if (b->rules[r].body < 0)
            gb_fail(b, ENG_GRAMMAR_EINVAL, "rule %zu is never defined", r);
    if (b->err)
        goto fail;
    g = calloc(1, sizeof *g);
    if (!g) {
        gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
        goto fail;
    }
    g->trigger = -1;
    c.g = g;
    bool cut[257] = {0};
    cut[0] = true;
    mark_bounds(b, cut);
    int ncls = 0;
    for (int byte = 0; byte < 256; byte++) {
        if (cut[byte])
            g->cls_lo[ncls++] = (uint8_t)byte;
        g->cls[byte] = (uint8_t)(ncls - 1);
    }
    g->n_cls = ncls;
    g->n_rules = b->n_rules;
    g->root = root;
    g->rules = calloc(b->n_rules, sizeof *g->rules);
    if (!g->rules) {
        gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t r = 0; r < b->n_rules && !b->err; r++) {
        const rule_def *d = &b->rules[r];
        g->rules[r] = (grule){.loop = d->loop, .leaf = true, .min = d->min, .max = d->max};
        c.n_nfa = 0;
        c.n_edges = 0;
        int32_t start = nfa_state(&c);
        int32_t accept = nfa_expr(&c, d->body, start);
        if (b->err)
            break;
        determinize(&c, (int32_t)r, start, accept);
    }
    if (b->err)
        goto fail;
    /* Analysis over the whole grammar: nullable and productive rules (fixpoints), trimming, left recursion. */
    size_t nr = g->n_rules, max_states = 1;
    for (size_t r = 0; r < nr; r++)
        if ((size_t)g->rules[r].n_states > max_states)
            max_states = (size_t)g->rules[r].n_states;
    nullable = calloc(nr, sizeof *nullable);
    prod = calloc(nr, sizeof *prod);
    queue = malloc(max_states * sizeof *queue);
    seen = calloc(max_states, 1);
    if (!nullable || !prod || !queue || !seen) {
        gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
        goto fail;
    }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < nr; r++) {
            if (prod[r])
                continue;
            if (rule_productive_scan(g, (int32_t)r, prod, queue, seen))
                prod[r] = changed = true;
        }
    }
    if (!prod[root]) {
        gb_fail(b, ENG_GRAMMAR_EEMPTY, "the grammar matches no text");
        goto fail;
    }
    for (size_t r = 0; r < nr; r++)
        if (!trim_rule(g, (int32_t)r, prod, queue, seen)) {
            gb_fail(b, ENG_GRAMMAR_ENOMEM, "out of memory");
            goto fail;
        }
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < nr; r++) {
            if (nullable[r])
                continue;
            bool n = g->rules[r].loop ? g->rules[r].min == 0 : rule_nullable_scan(g, (int32_t)r, nullable, queue, seen);
            if (n)
                nullable[r] = changed = true;
        }
    }
    if (check_left_recursion(b, g, nullable, queue, seen) < 0)
        goto fail;
    assign_slots(g);
    free(nullable);
    free(prod);
    free(queue);
    free(seen);
    free(c.first);
    free(c.edges);
    *out = g;
    return 0;
fail:
    free(nullable);
    free(prod);
    free(queue);
    free(seen);
    free(c.first);
    free(c.edges);
    eng_grammar_free(g);
    if (msg && msg_len)
        snprintf(msg, msg_len, "%s", b->msg);
    return b->err ? b->err : ENG_GRAMMAR_EINVAL;
}

void eng_grammar_free(eng_grammar *g)
{
    if (!g)
        return;
    free(g->st);
    free(g->next);
    free(g->refs);
    free(g->toks);
    free(g->rules);
    free(g);
}

size_t eng_grammar_n_states(const eng_grammar *g)
{
    return g->n_states;
}

size_t eng_grammar_n_rules(const eng_grammar *g)
{
    return g->n_rules;
}

void eng_grammar_set_trigger(eng_grammar *g, int32_t id)
{
    g->trigger = id;
}

int32_t eng_grammar_trigger(const eng_grammar *g)
{
    return g->trigger;
}
