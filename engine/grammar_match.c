/*
 * grammar_match: eng_gvocab (a tokenizer's byte trie) and eng_gmatch (one
 * request's matcher) of engine/grammar.h.
 *
 * A parse stack is a configuration (state, counter, parent): the state of
 * the rule on top, the loop counter of that rule, and the frame below as an
 * index into the matcher's node array (each node a configuration too, whose
 * state is where the caller goes on once the rule returns). Bottom markers:
 * ROOT (the text is complete when the top rule returns) and, while a state's
 * token sets are cached, CTX (the unknown rest of some stack).
 *
 * After every byte the set of configurations is closed: calls are entered,
 * and finished rules return to their caller, until each configuration
 * waits on a byte or a token. Nodes made while computing a mask are dropped
 * once it is done; the stacks kept between tokens hold only older nodes.
 *
 * Threads: an eng_gvocab is immutable once built; an eng_gmatch is used by
 * one thread at a time (it writes its cache and scratch while masking).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "engine/grammar_int.h"

#define PAR_ROOT (-1)
#define PAR_CTX (-2)
#define REACH_ROOT 1u
#define REACH_CTX 2u
/* Token sets of at most this many ids are kept as lists, larger ones as bitsets. */
#define LIST_MAX 4096
/* Tokens longer than this many bytes are never allowed (Qwen3's longest has 128). */
#define TOKEN_MAX 1024

struct eng_gvocab {
    size_t n, words;
    char *blob;
    uint32_t *off, *len;   /* per id; len 0: not a byte token */
    uint64_t *eos_bits;
    int32_t *eos;
    size_t n_eos;
    /* the trie of the byte tokens, nodes in preorder */
    size_t n_nodes;
    uint8_t *t_byte;
    uint16_t *t_depth;
    int32_t *t_end;        /* one past the node's subtree */
    int32_t *t_first;      /* first of the ids ending here in ids[], or -1 */
    int32_t *t_count;
    int32_t *ids;          /* byte tokens in byte order */
    size_t n_ids;
    int max_len;
};

typedef struct cfg {
    int32_t g;
    uint32_t cnt;
    int32_t par;
} cfg;

/* The token sets of one cache slot. */
typedef struct gcache {
    bool done, loop;
    uint64_t *bits;        /* accepted ids as a bitset, or NULL */
    int32_t *ids;          /* accepted ids (loop slots: in order of iterations started) */
    uint32_t n_ids;
    uint32_t *kcum;        /* loop slots: kcum[k] = accepted ids starting fewer than k iterations */
    uint32_t kmax;
    int32_t *unc;          /* ids to run through the whole stack, in byte order */
    uint32_t n_unc;
    /*
     * Leaf rules: per uncertain id, the bytes that follow the points where
     * it could leave the rule. Such an id can only be accepted when one of
     * them is a byte the caller accepts next.
     */
    uint64_t (*unc_next)[4];
} gcache;

typedef struct visit {
    cfg key;
    uint32_t stamp;
} visit;

struct eng_gmatch {
    const eng_grammar *g;
    const eng_gvocab *v;
    cfg *nodes;
    size_t n_nodes, cap_nodes;
    cfg *cur;              /* the stacks after the text so far */
    size_t n_cur, cap_cur;
    bool complete, ended;
    cfg *pool;             /* configuration sets being built */
    size_t n_pool, cap_pool;
    cfg *work;
    size_t cap_work;
    visit *vis;
    size_t vis_cap, vis_used;
    size_t set_b;          /* where the set being built starts in the pool */
    uint32_t stamp;
    int err;               /* out of memory or too ambiguous, met inside a step */
    gcache *cache;
    /* per trie depth: set bounds, bottom reached, walk states */
    size_t *d_b, *d_n;
    uint8_t *d_reach;
    int32_t *w_st;
    uint32_t *w_k;
    uint64_t (*w_next)[4];
    /* scratch of the cache walk */
    int32_t *acc_ids;
    uint16_t *acc_k;
    size_t n_acc, cap_acc;
    int32_t *unc;
    uint64_t (*unc_next)[4];
    size_t n_unc, cap_unc, cap_unc_next;
    uint64_t *seen_slots;  /* base sets already added to this mask: (slot << 32 | bound) */
    size_t n_seen, cap_seen;
};

/* ---- vocabulary ---- */

void eng_gvocab_free(eng_gvocab *v)
{
    if (!v)
        return;
    free(v->blob);
    free(v->off);
    free(v->len);
    free(v->eos_bits);
    free(v->eos);
    free(v->t_byte);
    free(v->t_depth);
    free(v->t_end);
    free(v->t_first);
    free(v->t_count);
    free(v->ids);
    free(v);
}

size_t eng_gvocab_n(const eng_gvocab *v)
{
    return v->n;
}

size_t eng_gvocab_mask_words(const eng_gvocab *v)
{
    return v->words;
}

bool eng_gvocab_is_eos(const eng_gvocab *v, int32_t id)
{
    return id >= 0 && (size_t)id < v->n && (v->eos_bits[id / 64] >> (id % 64) & 1);
}

/* Orders ids by their bytes (a shorter prefix first), then by id; ARG is the vocabulary. */
static int cmp_token_bytes(const void *a, const void *b, void *arg)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const eng_gvocab *v = arg;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

static size_t lcp(const char *a, size_t la, const char *b, size_t lb)
{
    size_t n = la < lb ? la : lb, i = 0;
    while (i < n && a[i] == b[i])
        i++;
    return i;
}

/* Builds the trie over the ids with bytes: sorted, then one pass keeping the current path. */
static bool vocab_trie(eng_gvocab *v)
{
    v->ids = malloc((v->n ? v->n : 1) * sizeof *v->ids);
    if (!v->ids)
        return false;
    size_t total = 0;
    for (size_t id = 0; id < v->n; id++)
        if (v->len[id]) {
            v->ids[v->n_ids++] = (int32_t)id;
            total += v->len[id];
        }
    qsort_r(v->ids, v->n_ids, sizeof *v->ids, cmp_token_bytes, v);
    size_t cap = total + 1;
    v->t_byte = malloc(cap);
    v->t_depth = malloc(cap * sizeof *v->t_depth);
    v->t_end = malloc(cap * sizeof *v->t_end);
    v->t_first = malloc(cap * sizeof *v->t_first);
    v->t_count = calloc(cap, sizeof *v->t_count);
    int32_t path[TOKEN_MAX + 1];
    if (!v->t_byte || !v->t_depth || !v->t_end || !v->t_first || !v->t_count)
        return false;
    size_t depth = 0;
    const char *prev = NULL;
    size_t prev_len = 0;
    for (size_t i = 0; i < v->n_ids; i++) {
        int32_t id = v->ids[i];
        const char *s = v->blob + v->off[id];
        size_t len = v->len[id];
        size_t l = prev ? lcp(prev, prev_len, s, len) : 0;
        while (depth > l)
            v->t_end[path[depth--]] = (int32_t)v->n_nodes;
        while (depth < len) {
            size_t nd = v->n_nodes++;
            v->t_byte[nd] = (uint8_t)s[depth];
            v->t_depth[nd] = (uint16_t)(depth + 1);
            v->t_first[nd] = -1;
            path[++depth] = (int32_t)nd;
        }
        int32_t nd = path[len];
        if (v->t_first[nd] < 0)
            v->t_first[nd] = (int32_t)i;
        v->t_count[nd]++;
        if ((int)len > v->max_len)
            v->max_len = (int)len;
        prev = s;
        prev_len = len;
    }
    while (depth > 0)
        v->t_end[path[depth--]] = (int32_t)v->n_nodes;
    return true;
}

/* The common part: N ids, byte strings given by GET, the EOS ids. */
static eng_gvocab *vocab_new(size_t n, const char *(*get)(const void *, size_t, size_t *), const void *src,
                             const int32_t *eos, size_t n_eos)
{
    if (n == 0 || n > INT32_MAX)
        return NULL;
    eng_gvocab *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->n = n;
    v->words = (n + 63) / 64;
    v->off = calloc(n, sizeof *v->off);
    v->len = calloc(n, sizeof *v->len);
    v->eos_bits = calloc(v->words, sizeof *v->eos_bits);
    v->eos = malloc((n_eos ? n_eos : 1) * sizeof *v->eos);
    if (!v->off || !v->len || !v->eos_bits || !v->eos)
        goto fail;
    for (size_t i = 0; i < n_eos; i++)
        if (eos[i] >= 0 && (size_t)eos[i] < n) {
            v->eos_bits[eos[i] / 64] |= 1ull << (eos[i] % 64);
            v->eos[v->n_eos++] = eos[i];
        }
    size_t total = 0;
    for (size_t id = 0; id < n; id++) {
        size_t len = 0;
        const char *s = get(src, id, &len);
        if (s && len >= 1 && len <= TOKEN_MAX && !eng_gvocab_is_eos(v, (int32_t)id))
            total += len;
    }
    v->blob = malloc(total ? total : 1);
    if (!v->blob)
        goto fail;
    size_t at = 0;
    for (size_t id = 0; id < n; id++) {
        size_t len = 0;
        const char *s = get(src, id, &len);
        if (!s || len < 1 || len > TOKEN_MAX || eng_gvocab_is_eos(v, (int32_t)id))
            continue;
        memcpy(v->blob + at, s, len);
        v->off[id] = (uint32_t)at;
        v->len[id] = (uint32_t)len;
        at += len;
    }
    if (!vocab_trie(v))
        goto fail;
    return v;
fail:
    eng_gvocab_free(v);
    return NULL;
}

typedef struct bytes_src {
    const char *const *tokens;
    const size_t *lens;
} bytes_src;

static const char *get_bytes(const void *p, size_t id, size_t *len)
{
    const bytes_src *s = p;
    *len = s->tokens[id] ? s->lens[id] : 0;
    return s->tokens[id];
}

eng_gvocab *eng_gvocab_new_bytes(const char *const *tokens, const size_t *lens, size_t n_vocab, const int32_t *eos,
                                 size_t n_eos)
{
    bytes_src s = {tokens, lens};
    return vocab_new(n_vocab, get_bytes, &s, eos, n_eos);
}

static const char *get_tok(const void *p, size_t id, size_t *len)
{
    const eng_tok *t = p;
    *len = 0;
    if (id >= eng_tok_n_ids(t) || eng_tok_is_added(t, (int32_t)id))
        return NULL;
    return eng_tok_token_bytes(t, (int32_t)id, len);
}

eng_gvocab *eng_gvocab_new(const eng_tok *tok, size_t n_vocab, const int32_t *eos, size_t n_eos)
{
    return vocab_new(n_vocab, get_tok, tok, eos, n_eos);
}

/* ---- matcher: configurations, closure, byte steps ---- */

static void set_err(eng_gmatch *m, int err)
{
    if (!m->err)
        m->err = err;
}

static int32_t new_node(eng_gmatch *m, cfg c)
{
    if (!eng_g_grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes)) {
        set_err(m, ENG_GRAMMAR_ENOMEM);
        return PAR_ROOT;
    }
    m->nodes[m->n_nodes] = c;
    return (int32_t)m->n_nodes++;
}

static uint64_t cfg_hash(cfg c)
{
    uint64_t h = (uint64_t)(uint32_t)c.g * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)c.cnt << 32 | (uint32_t)c.par) * 0xC2B2AE3D27D4EB4Full;
    return h ^ (h >> 31);
}

/* Starts a new configuration set at the end of the pool (forgets what the last one visited). */
static void set_begin(eng_gmatch *m)
{
    if (++m->stamp == 0) {
        for (size_t i = 0; i < m->vis_cap; i++)
            m->vis[i].stamp = 0;
        m->stamp = 1;
    }
    m->vis_used = 0;
    m->set_b = m->n_pool;
}

/* True the first time C is seen in the current set. */
static bool visit_first(eng_gmatch *m, cfg c)
{
    if ((m->vis_used + 1) * 2 > m->vis_cap) {
        if (m->vis_used >= (size_t)ENG_GRAMMAR_MAX_STACKS * 8) {
            set_err(m, ENG_GRAMMAR_EAMBIG);
            return false;
        }
        size_t cap = m->vis_cap ? m->vis_cap * 2 : 256;
        visit *nv = calloc(cap, sizeof *nv);
        if (!nv) {
            set_err(m, ENG_GRAMMAR_ENOMEM);
            return false;
        }
        for (size_t i = 0; i < m->vis_cap; i++)
            if (m->vis[i].stamp == m->stamp) {
                size_t h = cfg_hash(m->vis[i].key) & (cap - 1);
                while (nv[h].stamp == m->stamp)
                    h = (h + 1) & (cap - 1);
                nv[h] = m->vis[i];
            }
        free(m->vis);
        m->vis = nv;
        m->vis_cap = cap;
    }
    size_t h = cfg_hash(c) & (m->vis_cap - 1);
    while (m->vis[h].stamp == m->stamp) {
        cfg k = m->vis[h].key;
        if (k.g == c.g && k.cnt == c.cnt && k.par == c.par)
            return false;
        h = (h + 1) & (m->vis_cap - 1);
    }
    m->vis[h].key = c;
    m->vis[h].stamp = m->stamp;
    m->vis_used++;
    return true;
}

static bool has_tokens(const eng_grammar *g, const gstate *st)
{
    for (int32_t i = 0; i < st->n_tok; i++)
        if (g->toks[st->tok0 + i].to >= 0)
            return true;
    return false;
}

/*
 * Adds the closure of C to the current set: every configuration reachable
 * by entering calls and returning from finished rules that waits on a byte
 * or a token. *REACH gets REACH_ROOT / REACH_CTX when a return hits the
 * bottom.
 */
static void closure(eng_gmatch *m, cfg c0, unsigned *reach)
{
    const eng_grammar *g = m->g;
    size_t sp = 0;
    if (!eng_g_grow((void **)&m->work, &m->cap_work, 1, sizeof *m->work)) {
        set_err(m, ENG_GRAMMAR_ENOMEM);
        return;
    }
    m->work[sp++] = c0;
    while (sp && !m->err) {
        cfg c = m->work[--sp];
        if (!visit_first(m, c))
            continue;
        const gstate *st = &g->st[c.g];
        const grule *rl = &g->rules[st->rule];
        bool loop = (st->flags & GS_LOOP) != 0;
        bool bytes = (st->flags & GS_BYTES) && !(loop && c.cnt >= rl->max);
        if (bytes || (st->n_tok && has_tokens(g, st))) {
            if (m->n_pool - m->set_b >= (size_t)ENG_GRAMMAR_MAX_STACKS) {
                set_err(m, ENG_GRAMMAR_EAMBIG);
                return;
            }
            if (!eng_g_grow((void **)&m->pool, &m->cap_pool, m->n_pool + 1, sizeof *m->pool)) {
                set_err(m, ENG_GRAMMAR_ENOMEM);
                return;
            }
            m->pool[m->n_pool++] = c;
        }
        if (!eng_g_grow((void **)&m->work, &m->cap_work, sp + (size_t)st->n_ref + 1, sizeof *m->work)) {
            set_err(m, ENG_GRAMMAR_ENOMEM);
            return;
        }
        for (int32_t i = 0; i < st->n_ref; i++) {
            const gedge *e = &g->refs[st->ref0 + i];
            if (e->to < 0)
                continue;
            int32_t n = new_node(m, (cfg){e->to, c.cnt, c.par});
            m->work[sp++] = (cfg){g->rules[e->a].start, 0, n};
        }
        if ((st->flags & GS_FINAL) || (loop && c.cnt >= rl->min)) {
            if (c.par == PAR_ROOT)
                *reach |= REACH_ROOT;
            else if (c.par == PAR_CTX)
                *reach |= REACH_CTX;
            else
                m->work[sp++] = m->nodes[c.par];
        }
    }
}

/*
 * Moves the set pool[B, B+N) past BYTE into a new set at the end of the
 * pool: *NB and *NN bound it, *REACH says whether a bottom was reached.
 */
static void step(eng_gmatch *m, size_t b, size_t n, uint8_t byte, size_t *nb, size_t *nn, unsigned *reach)
{
    const eng_grammar *g = m->g;
    int k = g->cls[byte];
    *reach = 0;
    set_begin(m);
    *nb = m->n_pool;
    for (size_t i = b; i < b + n && !m->err; i++) {
        cfg c = m->pool[i];
        const gstate *st = &g->st[c.g];
        if (!(st->flags & GS_BYTES))
            continue;
        int32_t t = g->next[(size_t)c.g * g->n_cls + k];
        if (t < 0)
            continue;
        uint32_t cnt = c.cnt;
        if (st->flags & GS_LOOP) {
            if (cnt >= g->rules[st->rule].max)
                continue;
            cnt++;
        }
        closure(m, (cfg){t, cnt, c.par}, reach);
    }
    *nn = m->n_pool - *nb;
}

/* ---- matcher: life cycle ---- */

eng_gmatch *eng_gmatch_new(const eng_grammar *g, const eng_gvocab *v)
{
    for (size_t i = 0; i < g->n_toks; i++)
        if (g->toks[i].to >= 0 && (size_t)g->toks[i].a >= v->n)
            return NULL;
    eng_gmatch *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->g = g;
    m->v = v;
    size_t depth = (size_t)v->max_len + 2;
    m->cache = calloc(g->n_slots ? g->n_slots : 1, sizeof *m->cache);
    m->d_b = malloc(depth * sizeof *m->d_b);
    m->d_n = malloc(depth * sizeof *m->d_n);
    m->d_reach = malloc(depth);
    m->w_st = malloc(depth * sizeof *m->w_st);
    m->w_k = malloc(depth * sizeof *m->w_k);
    m->w_next = malloc(depth * sizeof *m->w_next);
    if (!m->cache || !m->d_b || !m->d_n || !m->d_reach || !m->w_st || !m->w_k || !m->w_next) {
        eng_gmatch_free(m);
        return NULL;
    }
    eng_gmatch_reset(m);
    if (m->err) {
        eng_gmatch_free(m);
        return NULL;
    }
    return m;
}

static void cache_clear(gcache *c)
{
    free(c->bits);
    free(c->ids);
    free(c->kcum);
    free(c->unc);
    free(c->unc_next);
    memset(c, 0, sizeof *c);
}

void eng_gmatch_free(eng_gmatch *m)
{
    if (!m)
        return;
    if (m->cache)
        for (size_t i = 0; i < m->g->n_slots; i++)
            cache_clear(&m->cache[i]);
    free(m->cache);
    free(m->nodes);
    free(m->cur);
    free(m->pool);
    free(m->work);
    free(m->vis);
    free(m->d_b);
    free(m->d_n);
    free(m->d_reach);
    free(m->w_st);
    free(m->w_k);
    free(m->w_next);
    free(m->unc_next);
    free(m->acc_ids);
    free(m->acc_k);
    free(m->unc);
    free(m->seen_slots);
    free(m);
}

/* Makes pool[B, B+N) the current stacks. */
static bool commit(eng_gmatch *m, size_t b, size_t n, bool complete)
{
    if (!eng_g_grow((void **)&m->cur, &m->cap_cur, n + 1, sizeof *m->cur))
        return false;
    if (n)
        memcpy(m->cur, m->pool + b, n * sizeof *m->cur);
    m->n_cur = n;
    m->complete = complete;
    return true;
}

void eng_gmatch_reset(eng_gmatch *m)
{
    m->n_nodes = 0;
    m->n_pool = 0;
    m->ended = false;
    m->err = 0;
    unsigned reach = 0;
    set_begin(m);
    closure(m, (cfg){m->g->rules[m->g->root].start, 0, PAR_ROOT}, &reach);
    if (!m->err && !commit(m, 0, m->n_pool, reach & REACH_ROOT))
        m->err = ENG_GRAMMAR_ENOMEM;
}

bool eng_gmatch_complete(const eng_gmatch *m)
{
    return m->complete && !m->ended;
}

bool eng_gmatch_ended(const eng_gmatch *m)
{
    return m->ended;
}

/* ---- advancing ---- */

/* The current stacks copied to the start of the pool. */
static bool pool_from_cur(eng_gmatch *m)
{
    m->n_pool = 0;
    if (!eng_g_grow((void **)&m->pool, &m->cap_pool, m->n_cur + 1, sizeof *m->pool))
        return false;
    if (m->n_cur)
        memcpy(m->pool, m->cur, m->n_cur * sizeof *m->pool);
    m->n_pool = m->n_cur;
    return true;
}

/*
 * Runs the LEN bytes of S from the current stacks; on success *B and *N
 * bound the resulting set and *REACH tells whether the text is complete.
 * Returns 0, ENG_GRAMMAR_EREJECT or the step's error.
 */
static int run_bytes(eng_gmatch *m, const char *s, size_t len, size_t *b, size_t *n, unsigned *reach)
{
    if (!pool_from_cur(m))
        return ENG_GRAMMAR_ENOMEM;
    *b = 0;
    *n = m->n_cur;
    *reach = m->complete ? REACH_ROOT : 0;
    for (size_t i = 0; i < len; i++) {
        size_t nb, nn;
        step(m, *b, *n, (uint8_t)s[i], &nb, &nn, reach);
        if (m->err)
            return m->err;
        *b = nb;
        *n = nn;
        if (nn == 0 && !(i + 1 == len && (*reach & REACH_ROOT)))
            return ENG_GRAMMAR_EREJECT;
    }
    return 0;
}

/* Moves the current stacks over token edges named ID into a new set; *REACH as for a step. */
static void run_token(eng_gmatch *m, int32_t id, size_t *b, size_t *n, unsigned *reach)
{
    const eng_grammar *g = m->g;
    *reach = 0;
    set_begin(m);
    *b = m->n_pool;
    for (size_t i = 0; i < m->n_cur && !m->err; i++) {
        cfg c = m->cur[i];
        const gstate *st = &g->st[c.g];
        for (int32_t k = 0; k < st->n_tok; k++) {
            const gedge *e = &g->toks[st->tok0 + k];
            if (e->a == id && e->to >= 0)
                closure(m, (cfg){e->to, c.cnt, c.par}, reach);
        }
    }
    *n = m->n_pool - *b;
}

/*
 * Advances by ID when COMMIT, else only tells whether it could. A byte
 * token also named by a token edge takes both ways at once.
 */
static int advance(eng_gmatch *m, int32_t id, bool commit_it)
{
    const eng_gvocab *v = m->v;
    if (m->err)
        return m->err;
    if (id < 0 || (size_t)id >= v->n)
        return ENG_GRAMMAR_EVOCAB;
    if (m->ended)
        return ENG_GRAMMAR_EREJECT;
    if (eng_gvocab_is_eos(v, id)) {
        if (!m->complete)
            return ENG_GRAMMAR_EREJECT;
        if (commit_it)
            m->ended = true;
        return 0;
    }
    size_t n0 = m->n_nodes;
    size_t bb = 0, bn = 0, tb, tn;
    unsigned breach = 0, treach = 0;
    bool by_bytes = false;
    int rc = 0;
    if (v->len[id]) {
        rc = run_bytes(m, v->blob + v->off[id], v->len[id], &bb, &bn, &breach);
        if (rc && rc != ENG_GRAMMAR_EREJECT)
            goto out;
        by_bytes = rc == 0;
        rc = 0;
    } else {
        m->n_pool = 0;
    }
    run_token(m, id, &tb, &tn, &treach);
    if (m->err) {
        rc = m->err;
        goto out;
    }
    if (!by_bytes && tn == 0 && !(treach & REACH_ROOT)) {
        rc = ENG_GRAMMAR_EREJECT;
        goto out;
    }
    if (!commit_it)
        goto out;
    if (by_bytes && (tn || (treach & REACH_ROOT))) {
        /* both: the byte set followed by the token set's new members */
        size_t end = m->n_pool;
        for (size_t i = tb; i < end; i++) {
            bool dup = false;
            for (size_t j = bb; j < bb + bn && !dup; j++)
                dup = !memcmp(&m->pool[i], &m->pool[j], sizeof(cfg));
            if (!dup) {
                if (!eng_g_grow((void **)&m->pool, &m->cap_pool, m->n_pool + 1, sizeof *m->pool)) {
                    rc = ENG_GRAMMAR_ENOMEM;
                    goto out;
                }
                m->pool[m->n_pool++] = m->pool[i];
            }
        }
        memmove(m->pool + bb + bn, m->pool + end, (m->n_pool - end) * sizeof *m->pool);
        bn += m->n_pool - end;
        if (!commit(m, bb, bn, (breach | treach) & REACH_ROOT))
            rc = ENG_GRAMMAR_ENOMEM;
        return rc;
    }
    if (!(by_bytes ? commit(m, bb, bn, breach & REACH_ROOT) : commit(m, tb, tn, treach & REACH_ROOT)))
        rc = ENG_GRAMMAR_ENOMEM;
    return rc;
out:
    m->n_nodes = n0;
    if (rc == ENG_GRAMMAR_ENOMEM || rc == ENG_GRAMMAR_EAMBIG)
        m->err = 0; /* the matcher is unchanged; the caller decides */
    return rc;
}

int eng_gmatch_accept(eng_gmatch *m, int32_t id)
{
    return advance(m, id, true);
}

bool eng_gmatch_allows(eng_gmatch *m, int32_t id)
{
    int rc = advance(m, id, false);
    m->err = 0;
    return rc == 0;
}

int eng_gmatch_accept_bytes(eng_gmatch *m, const char *s, size_t len)
{
    if (m->err)
        return m->err;
    if (m->ended)
        return len ? ENG_GRAMMAR_EREJECT : 0;
    size_t n0 = m->n_nodes, b, n;
    unsigned reach;
    int rc = run_bytes(m, s, len, &b, &n, &reach);
    if (rc == 0 && !commit(m, b, n, reach & REACH_ROOT))
        rc = ENG_GRAMMAR_ENOMEM;
    if (rc) {
        m->n_nodes = n0;
        m->err = 0;
    }
    return rc;
}

/* ---- the per-state token sets ---- */

static bool acc_push(eng_gmatch *m, int32_t id, uint32_t k)
{
    if (m->n_acc == m->cap_acc) {
        size_t cap = m->cap_acc ? m->cap_acc * 2 : 1024;
        int32_t *ni = realloc(m->acc_ids, cap * sizeof *ni);
        if (!ni)
            return false;
        m->acc_ids = ni;
        uint16_t *nk = realloc(m->acc_k, cap * sizeof *nk);
        if (!nk)
            return false;
        m->acc_k = nk;
        m->cap_acc = cap;
    }
    m->acc_ids[m->n_acc] = id;
    m->acc_k[m->n_acc++] = (uint16_t)(k > UINT16_MAX ? UINT16_MAX : k);
    return true;
}

static const uint64_t all_bytes[4] = {~0ull, ~0ull, ~0ull, ~0ull};

static bool unc_push(eng_gmatch *m, int32_t id, const uint64_t next[4])
{
    if (!eng_g_grow((void **)&m->unc, &m->cap_unc, m->n_unc + 1, sizeof *m->unc) ||
        !eng_g_grow((void **)&m->unc_next, &m->cap_unc_next, m->n_unc + 1, sizeof *m->unc_next))
        return false;
    memcpy(m->unc_next[m->n_unc], next, sizeof *m->unc_next);
    m->unc[m->n_unc++] = id;
    return true;
}

/*
 * Adds the ids ending at trie nodes [FROM, TO) to the accepted list (with
 * K) or, when NEXT is given, to the uncertain one (with those bytes).
 */
static bool add_nodes(eng_gmatch *m, int32_t from, int32_t to, const uint64_t *next, uint32_t k)
{
    const eng_gvocab *v = m->v;
    for (int32_t i = from; i < to; i++)
        for (int32_t j = 0; j < v->t_count[i]; j++) {
            int32_t id = v->ids[v->t_first[i] + j];
            if (!(next ? unc_push(m, id, next) : acc_push(m, id, k)))
                return false;
        }
    return true;
}

/*
 * The walk for a state of a rule without calls or tokens: one automaton
 * state per trie depth. K counts the iterations a loop rule starts, with
 * the counter taken as unbounded (the mask filters by it).
 */
static bool walk_leaf(eng_gmatch *m, int32_t g0)
{
    const eng_grammar *g = m->g;
    const eng_gvocab *v = m->v;
    const int ncls = g->n_cls;
    m->w_st[0] = g0;
    m->w_k[0] = 0;
    memset(m->w_next[0], 0, sizeof m->w_next[0]);
    for (size_t i = 0; i < v->n_nodes;) {
        int d = v->t_depth[i];
        int32_t s = m->w_st[d - 1];
        uint8_t byte = v->t_byte[i];
        int32_t t = g->next[(size_t)s * ncls + g->cls[byte]];
        /* the bytes after the points (past the first byte) where the rule may return */
        uint64_t next[4];
        memcpy(next, m->w_next[d - 1], sizeof next);
        if (d > 1 && (g->st[s].flags & (GS_FINAL | GS_LOOP)))
            next[byte / 64] |= 1ull << (byte % 64);
        if (t < 0) {
            if ((next[0] | next[1] | next[2] | next[3]) && !add_nodes(m, (int32_t)i, v->t_end[i], next, 0))
                return false;
            i = (size_t)v->t_end[i];
            continue;
        }
        uint32_t k = m->w_k[d - 1] + ((g->st[s].flags & GS_LOOP) ? 1 : 0);
        if (v->t_count[i] && !add_nodes(m, (int32_t)i, (int32_t)i + 1, NULL, k))
            return false;
        m->w_st[d] = t;
        m->w_k[d] = k;
        memcpy(m->w_next[d], next, sizeof next);
        i++;
    }
    return true;
}

/* The walk for any other state: a configuration set per trie depth, over an unknown stack (CTX). */
static bool walk_stack(eng_gmatch *m, int32_t g0)
{
    const eng_gvocab *v = m->v;
    size_t n0 = m->n_nodes;
    m->n_pool = 0;
    if (!eng_g_grow((void **)&m->pool, &m->cap_pool, 1, sizeof *m->pool))
        return false;
    m->pool[m->n_pool++] = (cfg){g0, 0, PAR_CTX};
    m->d_b[0] = 0;
    m->d_n[0] = 1;
    m->d_reach[0] = 0;
    bool ok = true;
    for (size_t i = 0; i < v->n_nodes && ok;) {
        int d = v->t_depth[i];
        m->n_pool = m->d_b[d - 1] + m->d_n[d - 1];
        size_t nb, nn;
        unsigned reach;
        step(m, m->d_b[d - 1], m->d_n[d - 1], v->t_byte[i], &nb, &nn, &reach);
        if (m->err)
            break;
        bool ctx = reach & REACH_CTX;
        if (nn == 0 && !ctx) {
            if (m->d_reach[d - 1])
                ok = add_nodes(m, (int32_t)i, v->t_end[i], all_bytes, 0);
            i = (size_t)v->t_end[i];
            continue;
        }
        ok = !v->t_count[i] || add_nodes(m, (int32_t)i, (int32_t)i + 1, NULL, 0);
        if (nn == 0) {
            /* only the caller could go on: every longer token depends on the stack */
            ok = ok && add_nodes(m, (int32_t)i + 1, v->t_end[i], all_bytes, 0);
            i = (size_t)v->t_end[i];
            continue;
        }
        m->d_b[d] = nb;
        m->d_n[d] = nn;
        m->d_reach[d] = m->d_reach[d - 1] || ctx;
        i++;
    }
    m->n_nodes = n0;
    m->n_pool = 0;
    if (m->err) {
        m->err = 0;
        return false;
    }
    return ok;
}

/* Fills slot SLOT's sets by walking the trie from state G0. */
static int cache_fill(eng_gmatch *m, gcache *c, int32_t g0)
{
    const eng_grammar *g = m->g;
    const eng_gvocab *v = m->v;
    const grule *rl = &g->rules[g->st[g0].rule];
    m->n_acc = m->n_unc = 0;
    if (!(rl->leaf ? walk_leaf(m, g0) : walk_stack(m, g0)))
        return ENG_GRAMMAR_ENOMEM;
    c->loop = rl->loop;
    c->n_ids = (uint32_t)m->n_acc;
    c->ids = malloc((m->n_acc ? m->n_acc : 1) * sizeof *c->ids);
    c->unc = malloc((m->n_unc ? m->n_unc : 1) * sizeof *c->unc);
    if (!c->ids || !c->unc)
        goto fail;
    c->n_unc = (uint32_t)m->n_unc;
    if (m->n_unc)
        memcpy(c->unc, m->unc, m->n_unc * sizeof *c->unc);
    if (rl->leaf && m->n_unc) {
        c->unc_next = malloc(m->n_unc * sizeof *c->unc_next);
        if (!c->unc_next)
            goto fail;
        memcpy(c->unc_next, m->unc_next, m->n_unc * sizeof *c->unc_next);
    }
    if (c->loop) {
        /* counting sort by iterations started */
        uint32_t kmax = 0;
        for (size_t i = 0; i < m->n_acc; i++)
            if (m->acc_k[i] > kmax)
                kmax = m->acc_k[i];
        c->kmax = kmax;
        c->kcum = calloc((size_t)kmax + 2, sizeof *c->kcum);
        if (!c->kcum)
            goto fail;
        for (size_t i = 0; i < m->n_acc; i++)
            c->kcum[m->acc_k[i] + 1]++;
        for (uint32_t k = 0; k <= kmax; k++)
            c->kcum[k + 1] += c->kcum[k];
        uint32_t *fill = malloc(((size_t)kmax + 1) * sizeof *fill);
        if (!fill)
            goto fail;
        memcpy(fill, c->kcum, ((size_t)kmax + 1) * sizeof *fill);
        for (size_t i = 0; i < m->n_acc; i++)
            c->ids[fill[m->acc_k[i]]++] = m->acc_ids[i];
        free(fill);
    } else {
        if (m->n_acc)
            memcpy(c->ids, m->acc_ids, m->n_acc * sizeof *c->ids);
    }
    if (m->n_acc > LIST_MAX) {
        c->bits = calloc(v->words, sizeof *c->bits);
        if (!c->bits)
            goto fail;
        for (size_t i = 0; i < m->n_acc; i++)
            c->bits[m->acc_ids[i] / 64] |= 1ull << (m->acc_ids[i] % 64);
    }
    c->done = true;
    return 0;
fail:
    cache_clear(c);
    return ENG_GRAMMAR_ENOMEM;
}

/* ---- the mask ---- */

/* True when token ID's bytes can be read from configuration C, sharing work with the previous token. */
typedef struct unc_walk {
    const char *prev;
    size_t prev_len;
    size_t valid;  /* depths whose sets are still those of prev's path */
} unc_walk;

static bool unc_check(eng_gmatch *m, unc_walk *w, int32_t id)
{
    const eng_gvocab *v = m->v;
    const char *s = v->blob + v->off[id];
    size_t len = v->len[id];
    size_t l = w->prev ? lcp(w->prev, w->prev_len, s, len) : 0;
    if (l > w->valid)
        l = w->valid;
    w->prev = s;
    w->prev_len = len;
    for (size_t d = l + 1; d <= len; d++) {
        m->n_pool = m->d_b[d - 1] + m->d_n[d - 1];
        size_t nb, nn;
        unsigned reach;
        step(m, m->d_b[d - 1], m->d_n[d - 1], (uint8_t)s[d - 1], &nb, &nn, &reach);
        m->d_b[d] = nb;
        m->d_n[d] = nn;
        m->d_reach[d] = (uint8_t)reach;
        w->valid = d;
        if (m->err || nn == 0)
            return !m->err && d == len && (reach & REACH_ROOT);
    }
    return m->d_n[len] > 0 || (m->d_reach[len] & REACH_ROOT);
}

/*
 * The bytes the stack under C accepts right after C's rule returns: the
 * first bytes of the configurations the return leads to (none at the
 * bottom, where the text ends).
 */
static void follow_bytes(eng_gmatch *m, cfg c, uint64_t out[4])
{
    const eng_grammar *g = m->g;
    memset(out, 0, 4 * sizeof *out);
    if (c.par < 0)
        return;
    size_t b = m->n_pool;
    unsigned reach = 0;
    set_begin(m);
    closure(m, m->nodes[c.par], &reach);
    for (size_t i = b; i < m->n_pool; i++) {
        const gstate *st = &g->st[m->pool[i].g];
        if (!(st->flags & GS_BYTES) || ((st->flags & GS_LOOP) && m->pool[i].cnt >= g->rules[st->rule].max))
            continue;
        const int32_t *row = g->next + (size_t)m->pool[i].g * g->n_cls;
        for (int byte = 0; byte < 256; byte++)
            if (row[g->cls[byte]] >= 0)
                out[byte / 64] |= 1ull << (byte % 64);
    }
    m->n_pool = b;
}

static void set_bit(uint64_t *mask, int32_t id)
{
    mask[id / 64] |= 1ull << (id % 64);
}

/* Adds slot C's accepted ids for a loop counter R iterations below its bound. */
static void add_base(uint64_t *mask, const gcache *c, uint32_t r, size_t words)
{
    if (!c->loop || r >= c->kmax) {
        if (c->bits) {
            for (size_t i = 0; i < words; i++)
                mask[i] |= c->bits[i];
        } else {
            for (uint32_t i = 0; i < c->n_ids; i++)
                set_bit(mask, c->ids[i]);
        }
        return;
    }
    for (uint32_t i = 0; i < c->kcum[r + 1]; i++)
        set_bit(mask, c->ids[i]);
}

int eng_gmatch_mask(eng_gmatch *m, uint64_t *mask)
{
    const eng_grammar *g = m->g;
    const eng_gvocab *v = m->v;
    memset(mask, 0, v->words * sizeof *mask);
    if (m->err)
        return m->err;
    if (m->ended)
        return ENG_GRAMMAR_EDEAD;
    size_t n0 = m->n_nodes;
    int rc = 0;
    m->n_seen = 0;
    for (size_t ci = 0; ci < m->n_cur && !rc; ci++) {
        cfg c = m->cur[ci];
        const gstate *st = &g->st[c.g];
        for (int32_t k = 0; k < st->n_tok; k++)
            if (g->toks[st->tok0 + k].to >= 0)
                set_bit(mask, g->toks[st->tok0 + k].a);
        const grule *rl = &g->rules[st->rule];
        bool loop = (st->flags & GS_LOOP) != 0;
        if (!(st->flags & GS_BYTES) || (loop && c.cnt >= rl->max))
            continue;
        gcache *gc = &m->cache[st->slot];
        if (!gc->done && (rc = cache_fill(m, gc, c.g)) != 0)
            break;
        /* bodies of loop rules share slots: the bound is the loop's own */
        uint32_t r = gc->loop ? (rl->max == ENG_GRAMMAR_INF ? UINT32_MAX : rl->max - c.cnt) : UINT32_MAX;
        if (r > gc->kmax)
            r = gc->kmax + 1;
        uint64_t key = (uint64_t)(uint32_t)st->slot << 32 | r;
        bool seen = false;
        for (size_t i = 0; i < m->n_seen && !seen; i++)
            seen = m->seen_slots[i] == key;
        if (!seen) {
            if (!eng_g_grow((void **)&m->seen_slots, &m->cap_seen, m->n_seen + 1, sizeof *m->seen_slots)) {
                rc = ENG_GRAMMAR_ENOMEM;
                break;
            }
            m->seen_slots[m->n_seen++] = key;
            add_base(mask, gc, r, v->words);
        }
        if (!gc->n_unc)
            continue;
        m->n_pool = 0;
        uint64_t follow[4];
        if (gc->unc_next) {
            follow_bytes(m, c, follow);
            if (m->err) {
                rc = m->err;
                m->err = 0;
                break;
            }
        }
        if (!eng_g_grow((void **)&m->pool, &m->cap_pool, 1, sizeof *m->pool)) {
            rc = ENG_GRAMMAR_ENOMEM;
            break;
        }
        m->n_pool = 0;
        m->pool[m->n_pool++] = c;
        m->d_b[0] = 0;
        m->d_n[0] = 1;
        unc_walk w = {0};
        for (uint32_t i = 0; i < gc->n_unc; i++) {
            int32_t id = gc->unc[i];
            if ((mask[id / 64] >> (id % 64)) & 1)
                continue;
            if (gc->unc_next && !((gc->unc_next[i][0] & follow[0]) | (gc->unc_next[i][1] & follow[1]) |
                                  (gc->unc_next[i][2] & follow[2]) | (gc->unc_next[i][3] & follow[3])))
                continue;
            if (unc_check(m, &w, id))
                set_bit(mask, id);
            if (m->err) {
                rc = m->err;
                m->err = 0;
                break;
            }
        }
    }
    m->n_nodes = n0;
    m->n_pool = 0;
    if (rc) {
        memset(mask, 0, v->words * sizeof *mask);
        return rc;
    }
    if (m->complete)
        for (size_t i = 0; i < v->n_eos; i++)
            set_bit(mask, v->eos[i]);
    size_t count = 0;
    for (size_t i = 0; i < v->words; i++)
        count += (size_t)__builtin_popcountll(mask[i]);
    return count ? (int)count : ENG_GRAMMAR_EDEAD;
}
