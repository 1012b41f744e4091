/*
 * tokenizer: encodes and decodes with a Hugging Face tokenizer.json of the
 * byte-level BPE kind (see tokenizer.h for the pipeline; tok_load.c reads
 * the file, tok_unicode.c handles UTF-8 and normalization).
 *
 * Internally the BPE model works on raw bytes: the ByteLevel pre-tokenizer
 * maps each byte to one printable character and the vocabulary is written in
 * that alphabet, so a pre-token's characters are exactly its bytes. At load we
 * resolve the 256 single-byte tokens and turn every merge "A B" into an entry
 * (id A, id B) -> (rank, id of AB) of an open-addressing hash; encoding then
 * never builds byte-level strings. Each token also gets its decoded bytes,
 * computed once, so decoding is a table lookup.
 *
 * Called by the command line (server/cli/cmd_tokenize.c) and the request path. The
 * loaded tables are read-only; encoding uses scratch memory of the eng_tok and
 * must be done by one thread at a time (see tokenizer.h).
 */
#include "engine/tok_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>

const char *eng_tok_strerror(int err)
{
    switch (err) {
#define ENG_TOK_MSG(name, value, msg) \
    case value:                       \
        return msg;
        ENG_TOK_ERRORS(ENG_TOK_MSG)
#undef ENG_TOK_MSG
    }
    return "unknown tokenizer error";
}

/* ---------------------------------------------------------------------- */
/* Growable buffers                                                        */

void eng_tok_ids_free(eng_tok_ids *ids)
{
    if (!ids)
        return;
    free(ids->ids);
    ids->ids = NULL;
    ids->n = ids->cap = 0;
}

void eng_tok_text_free(eng_tok_text *t)
{
    if (!t)
        return;
    free(t->s);
    t->s = NULL;
    t->len = t->cap = 0;
}

static int ids_reserve(eng_tok_ids *v, size_t extra)
{
    if (v->cap - v->n >= extra)
        return 0;
    size_t cap = v->cap ? v->cap : 64;
    while (cap - v->n < extra)
        cap *= 2;
    int32_t *p = realloc(v->ids, cap * sizeof *p);
    if (!p)
        return ENG_TOK_ENOMEM;
    v->ids = p;
    v->cap = cap;
    return 0;
}

static inline int ids_push(eng_tok_ids *v, int32_t id)
{
    if (v->n == v->cap && ids_reserve(v, 1))
        return ENG_TOK_ENOMEM;
    v->ids[v->n++] = id;
    return 0;
}

static int text_reserve(eng_tok_text *t, size_t extra)
{
    if (t->s && t->cap - t->len > extra)
        return 0;
    size_t cap = t->cap ? t->cap : 64;
    while (cap - t->len <= extra)
        cap *= 2;
    char *p = realloc(t->s, cap);
    if (!p)
        return ENG_TOK_ENOMEM;
    t->s = p;
    t->cap = cap;
    return 0;
}

int tok_text_append(eng_tok_text *t, const void *p, size_t n)
{
    if (text_reserve(t, n))
        return ENG_TOK_ENOMEM;
    memcpy(t->s + t->len, p, n);
    t->len += n;
    t->s[t->len] = '\0';
    return 0;
}

size_t eng_tok_n_ids(const eng_tok *t)
{
    return t->n_ids;
}

bool eng_tok_is_special(const eng_tok *t, int32_t id)
{
    return id >= 0 && (size_t)id < t->n_ids && (t->tok_flags[id] & TOK_SPECIAL);
}

int32_t eng_tok_added_id(const eng_tok *t, const char *content)
{
    for (size_t i = 0; i < t->n_added; i++)
        if (!strcmp(t->added[i].content, content))
            return t->added[i].id;
    return -1;
}

bool eng_tok_is_added(const eng_tok *t, int32_t id)
{
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id == id)
            return true;
    return false;
}

const char *eng_tok_token_bytes(const eng_tok *t, int32_t id, size_t *len)
{
    if (id < 0 || (size_t)id >= t->n_ids || !(t->tok_flags[id] & TOK_PRESENT))
        return NULL;
    *len = t->tok_len[id];
    return t->blob + t->tok_off[id];
}

static void added_set_free(added_set *s)
{
    free(s->order);
    s->order = NULL;
    s->n = 0;
}

void eng_tok_free(eng_tok *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n_steps; i++)
        pcre2_code_free(t->steps[i].re);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].match);
    }
    free(t->added);
    added_set_free(&t->raw_set);
    added_set_free(&t->norm_set);
    free(t->tok_off);
    free(t->tok_len);
    free(t->tok_flags);
    free(t->blob);
    free(t->merges);
    free(t->word_slots);
    eng_tok_enc_free(t->enc);
    free(t->second_starters);
    free(t->path);
    free(t);
}

/* ---------------------------------------------------------------------- */
/* BPE                                                                     */

static int sym_reserve(eng_tok_enc *enc, size_t n)
{
    if (n <= enc->sym_cap)
        return 0;
    size_t cap = pow2_at_least(n);
    int32_t *a = realloc(enc->sym_id, cap * sizeof *a);
    if (!a)
        return ENG_TOK_ENOMEM;
    enc->sym_id = a;
    int32_t *b = realloc(enc->sym_prev, cap * sizeof *b);
    if (!b)
        return ENG_TOK_ENOMEM;
    enc->sym_prev = b;
    int32_t *c = realloc(enc->sym_next, cap * sizeof *c);
    if (!c)
        return ENG_TOK_ENOMEM;
    enc->sym_next = c;
    /* Each merge pushes at most two entries besides the initial n - 1. */
    uint64_t *h = realloc(enc->heap, 3 * cap * sizeof *h);
    if (!h)
        return ENG_TOK_ENOMEM;
    enc->heap = h;
    enc->sym_cap = cap;
    return 0;
}

static inline void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v)
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static inline uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= m)
            break;
        size_t c = (l + 1 < m && h[l + 1] < h[l]) ? l + 1 : l;
        if (h[c] >= v)
            break;
        h[i] = h[c];
        i = c;
    }
    if (m)
        h[i] = v;
    return top;
}

/*
 * Splits one pre-token (raw bytes) into tokens. Merges are applied lowest
 * rank first and, at equal rank, leftmost first; a queue entry is stale when
 * the pair at its position no longer has its rank. Runs in O(n log n).
 */
static int bpe_word(const eng_tok *t, eng_tok_enc *enc, const unsigned char *w, size_t n, eng_tok_ids *out)
{
    if (t->ignore_merges) {
        for (size_t i = hash_bytes(w, n) & t->word_mask; t->word_slots[i] >= 0; i = (i + 1) & t->word_mask) {
            int32_t id = t->word_slots[i];
            if (t->tok_len[id] == n && !memcmp(t->blob + t->tok_off[id], w, n))
                return ids_push(out, id);
        }
    }
    if (sym_reserve(enc, n))
        return ENG_TOK_ENOMEM;
    int32_t *id = enc->sym_id, *prev = enc->sym_prev, *next = enc->sym_next;
    size_t m = 0;
    bool pending_unk = false;
    for (size_t i = 0; i < n; i++) {
        int32_t b = t->byte_id[w[i]];
        if (b < 0) {
            if (t->unk_id < 0)
                continue;
            if (pending_unk && t->fuse_unk)
                continue;
            b = t->unk_id;
            pending_unk = true;
        } else {
            pending_unk = false;
        }
        id[m++] = b;
    }
    if (m == 0)
        return 0;
    for (size_t i = 0; i < m; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < m ? (int32_t)i + 1 : -1;
    }
    uint64_t *heap = enc->heap;
    size_t hn = 0;
    for (size_t i = 0; i + 1 < m; i++) {
        const merge_slot *ms = merge_find(t, id[i], id[i + 1]);
        if (ms)
            heap_push(heap, &hn, (uint64_t)ms->rank << 32 | i);
    }
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        uint32_t rank = (uint32_t)(top >> 32);
        int32_t pos = (int32_t)(uint32_t)top;
        if (id[pos] < 0)
            continue;
        int32_t nx = next[pos];
        if (nx < 0)
            continue;
        const merge_slot *ms = merge_find(t, id[pos], id[nx]);
        if (!ms || ms->rank != rank)
            continue;
        id[pos] = ms->id;
        id[nx] = -1;
        next[pos] = next[nx];
        if (next[pos] >= 0)
            prev[next[pos]] = pos;
        if (prev[pos] >= 0) {
            const merge_slot *l = merge_find(t, id[prev[pos]], id[pos]);
            if (l)
                heap_push(heap, &hn, (uint64_t)l->rank << 32 | (uint32_t)prev[pos]);
        }
        if (next[pos] >= 0) {
            const merge_slot *r = merge_find(t, id[pos], id[next[pos]]);
            if (r)
                heap_push(heap, &hn, (uint64_t)r->rank << 32 | (uint32_t)pos);
        }
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        if (ids_push(out, id[i]))
            return ENG_TOK_ENOMEM;
    return 0;
}

/* BPE through the word cache. */
static int bpe_cached(const eng_tok *t, eng_tok_enc *enc, const unsigned char *w, size_t n, eng_tok_ids *out)
{
    if (n == 1 && t->byte_id[w[0]] >= 0 && !t->ignore_merges)
        return ids_push(out, t->byte_id[w[0]]);
    if (n > CACHE_KEY_MAX)
        return bpe_word(t, enc, w, n, out);
    uint64_t h = hash_bytes(w, n);
    cache_slot *s = &enc->cache[h & (CACHE_SLOTS - 1)];
    if (s->klen == n && s->hash == h && !memcmp(s->key, w, n)) {
        if (ids_reserve(out, s->nids))
            return ENG_TOK_ENOMEM;
        memcpy(out->ids + out->n, s->ids, s->nids * sizeof *s->ids);
        out->n += s->nids;
        return 0;
    }
    size_t before = out->n;
    int rc = bpe_word(t, enc, w, n, out);
    if (rc)
        return rc;
    size_t k = out->n - before;
    if (k <= CACHE_KEY_MAX) {
        s->hash = h;
        s->klen = (uint8_t)n;
        s->nids = (uint8_t)k;
        memcpy(s->key, w, n);
        memcpy(s->ids, out->ids + before, k * sizeof *s->ids);
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Pre-tokenization                                                        */

static int pretok(const eng_tok *t, eng_tok_enc *enc, size_t step, const char *p, size_t n, eng_tok_ids *out);

/* Turns the ranges of one Split step into pieces according to its behavior. */
typedef struct splitter {
    const eng_tok *t;
    eng_tok_enc *enc;
    size_t step;             /* next step to run on each piece */
    const char *p;
    enum split_behavior behavior;
    bool have;               /* a pending piece */
    size_t ps, pe;
    bool pm;                 /* pending piece is a match */
    bool prev_match;
    eng_tok_ids *out;
} splitter;

static int emit(splitter *sp, size_t s, size_t e)
{
    return e > s ? pretok(sp->t, sp->enc, sp->step, sp->p + s, e - s, sp->out) : 0;
}

static int feed(splitter *sp, size_t s, size_t e, bool m)
{
    int rc = 0;
    switch (sp->behavior) {
    case SPLIT_ISOLATED:
        return emit(sp, s, e);
    case SPLIT_REMOVED:
        return m ? 0 : emit(sp, s, e);
    case SPLIT_MERGED_PREV:
        /* A match joins the piece before it unless that piece was a match too. */
        if (m && !sp->prev_match && sp->have) {
            sp->pe = e;
        } else {
            if (sp->have)
                rc = emit(sp, sp->ps, sp->pe);
            sp->ps = s, sp->pe = e, sp->have = true;
        }
        sp->prev_match = m;
        return rc;
    case SPLIT_MERGED_NEXT:
        /* A match joins the piece after it unless that piece is a match too. */
        if (sp->have) {
            sp->have = false;
            if (!m)
                return emit(sp, sp->ps, e);
            if ((rc = emit(sp, sp->ps, sp->pe)))
                return rc;
        }
        if (m) {
            sp->ps = s, sp->pe = e, sp->have = true;
            return 0;
        }
        return emit(sp, s, e);
    case SPLIT_CONTIGUOUS:
        if (sp->have && m == sp->prev_match) {
            sp->pe = e;
        } else {
            if (sp->have)
                rc = emit(sp, sp->ps, sp->pe);
            sp->ps = s, sp->pe = e, sp->have = true;
        }
        sp->prev_match = m;
        return rc;
    }
    return 0;
}

static int split_step(const eng_tok *t, eng_tok_enc *enc, size_t step, const char *p, size_t n, eng_tok_ids *out)
{
    const pretok_step *st = &t->steps[step];
    splitter sp = {.t = t, .enc = enc, .step = step + 1, .p = p, .behavior = st->behavior, .out = out};
    size_t prev = 0, off = 0, last_end = SIZE_MAX;
    int rc;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(enc->md);
    while (off <= n) {
        int r = pcre2_match(st->re, (PCRE2_SPTR)p, n, off, PCRE2_NO_UTF_CHECK, enc->md, enc->mctx);
        if (r == PCRE2_ERROR_NOMATCH)
            break;
        if (r < 0)
            return ENG_TOK_EREGEX;
        size_t s = ov[0], e = ov[1];
        if (s == e && s == last_end) {
            /* No empty match right after the previous match: step over one character. */
            off = s < n ? s + utf8_len((unsigned char)p[s]) : n + 1;
            continue;
        }
        if (prev < s && (rc = feed(&sp, prev, s, st->invert)))
            return rc;
        if ((rc = feed(&sp, s, e, !st->invert)))
            return rc;
        prev = e;
        last_end = e;
        off = e;
    }
    if (prev < n && (rc = feed(&sp, prev, n, st->invert)))
        return rc;
    return sp.have ? emit(&sp, sp.ps, sp.pe) : 0;
}

static int pretok(const eng_tok *t, eng_tok_enc *enc, size_t step, const char *p, size_t n, eng_tok_ids *out)
{
    if (step == t->n_steps)
        return bpe_cached(t, enc, (const unsigned char *)p, n, out);
    const pretok_step *st = &t->steps[step];
    if (st->byte_level && st->add_prefix_space && p[0] != ' ') {
        char *q = malloc(n + 1);
        if (!q)
            return ENG_TOK_ENOMEM;
        q[0] = ' ';
        memcpy(q + 1, p, n);
        int rc = st->re ? split_step(t, enc, step, q, n + 1, out) : pretok(t, enc, step + 1, q, n + 1, out);
        free(q);
        return rc;
    }
    if (st->re)
        return split_step(t, enc, step, p, n, out);
    /* No pattern: the whole piece is one non-match (a match if inverted, which Removed drops). */
    if (st->invert && st->behavior == SPLIT_REMOVED)
        return 0;
    return pretok(t, enc, step + 1, p, n, out);
}

/* ---------------------------------------------------------------------- */
/* Added tokens and the whole pipeline                                     */

/* Rust regex \w and \s, as the added-token flags use them, approximated from the Unicode category. */
static bool is_word_cp(int32_t cp)
{
    if (cp == '_' || cp == 0x200C || cp == 0x200D)
        return true;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return false;
    }
}

static bool is_space_cp(int32_t cp)
{
    return (cp >= 9 && cp <= 13) || cp == ' ' || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* The code point ending at s[i] (i > 0, valid UTF-8). */
static int32_t cp_before(const unsigned char *s, size_t i, size_t *start)
{
    size_t j = i - 1;
    while (j > 0 && (s[j] & 0xC0) == 0x80)
        j--;
    int32_t cp;
    tok_utf8_decode(s + j, &cp);
    *start = j;
    return cp;
}

/*
 * Finds the next added token of SET in s[from..n) (leftmost, then longest),
 * applying single_word, lstrip and rstrip. seg is where the text not yet
 * emitted starts (lstrip never reaches before it). Returns false if none.
 */
static bool next_added(const eng_tok *t, const added_set *set, const char *s, size_t n, size_t from, size_t seg,
                       unsigned flags, size_t *ms, size_t *me, int32_t *id)
{
    const unsigned char *u = (const unsigned char *)s;
    if (!set->n)
        return false;
    for (size_t i = from; i < n; i++) {
        uint32_t b0 = set->first[u[i]], b1 = set->first[u[i] + 1];
        if (b0 == b1)
            continue;
        const added_tok *hit = NULL;
        for (uint32_t k = b0; k < b1; k++) {
            const added_tok *a = &t->added[set->order[k]];
            if ((flags & ENG_TOK_SPECIAL_AS_TEXT) && a->special)
                continue;
            if (a->match_len <= n - i && !memcmp(s + i, a->match, a->match_len)) {
                hit = a;
                break;
            }
        }
        if (!hit)
            continue;
        size_t start = i, stop = i + hit->match_len;
        if (hit->single_word) {
            size_t dummy;
            int32_t cp;
            bool word_before = start > 0 && is_word_cp(cp_before(u, start, &dummy));
            bool word_after = stop < n && (tok_utf8_decode(u + stop, &cp), is_word_cp(cp));
            if (word_before || word_after) {
                i = stop - 1;
                continue;
            }
        }
        if (hit->lstrip) {
            while (start > seg) {
                size_t j;
                if (!is_space_cp(cp_before(u, start, &j)))
                    break;
                start = j;
            }
        }
        if (hit->rstrip) {
            while (stop < n) {
                int32_t cp;
                size_t l = tok_utf8_decode(u + stop, &cp);
                if (!is_space_cp(cp))
                    break;
                stop += l;
            }
        }
        *ms = start;
        *me = stop;
        *id = hit->id;
        return true;
    }
    return false;
}

/* Normalized text: added tokens with "normalized" set, then pre-tokenization. */
static int encode_normalized(const eng_tok *t, eng_tok_enc *enc, const char *s, size_t n, unsigned flags,
                             eng_tok_ids *out)
{
    size_t seg = 0, ms, me;
    int32_t id;
    int rc;
    while (next_added(t, &t->norm_set, s, n, seg, seg, flags, &ms, &me, &id)) {
        if (ms > seg && (rc = pretok(t, enc, 0, s + seg, ms - seg, out)))
            return rc;
        if ((rc = ids_push(out, id)))
            return rc;
        seg = me;
    }
    return seg < n ? pretok(t, enc, 0, s + seg, n - seg, out) : 0;
}

static int encode_piece(const eng_tok *t, eng_tok_enc *enc, const char *s, size_t n, unsigned flags, eng_tok_ids *out)
{
    char *norm = NULL;
    size_t len = 0;
    int rc = tok_normalize(t, s, n, &norm, &len);
    if (rc)
        return rc;
    rc = encode_normalized(t, enc, norm ? norm : s, len, flags, out);
    free(norm);
    return rc;
}

eng_tok_enc *eng_tok_enc_new(void)
{
    eng_tok_enc *enc = calloc(1, sizeof *enc);
    if (!enc)
        return NULL;
    enc->md = pcre2_match_data_create(1, NULL);
    enc->mctx = pcre2_match_context_create(NULL);
    enc->jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL);
    enc->cache = calloc(CACHE_SLOTS, sizeof *enc->cache);
    if (!enc->md || !enc->mctx || !enc->jit_stack || !enc->cache) {
        eng_tok_enc_free(enc);
        return NULL;
    }
    pcre2_jit_stack_assign(enc->mctx, NULL, enc->jit_stack);
    return enc;
}

void eng_tok_enc_free(eng_tok_enc *enc)
{
    if (!enc)
        return;
    pcre2_match_data_free(enc->md);
    pcre2_match_context_free(enc->mctx);
    pcre2_jit_stack_free(enc->jit_stack);
    eng_tok_text_free(&enc->clean);
    free(enc->sym_id);
    free(enc->sym_prev);
    free(enc->sym_next);
    free(enc->heap);
    free(enc->cache);
    free(enc);
}

int eng_tok_encode(eng_tok *t, const char *text, size_t len, unsigned flags, eng_tok_ids *out)
{
    return eng_tok_encode_with(t, t->enc, text, len, flags, out);
}

int eng_tok_encode_with(const eng_tok *t, eng_tok_enc *enc, const char *text, size_t len, unsigned flags,
                        eng_tok_ids *out)
{
    if (len > TOK_MAX_INPUT)
        return ENG_TOK_ETOOBIG;
    size_t before = out->n;
    const char *s = text;
    if (tok_utf8_valid_prefix((const unsigned char *)text, len) != len) {
        enc->clean.len = 0;
        if (tok_utf8_lossy_append((const unsigned char *)text, len, false, &enc->clean, NULL))
            return ENG_TOK_ENOMEM;
        s = enc->clean.s;
        len = enc->clean.len;
    }
    size_t seg = 0, ms, me;
    int32_t id;
    int rc = 0;
    while (next_added(t, &t->raw_set, s, len, seg, seg, flags, &ms, &me, &id)) {
        if (ms > seg && (rc = encode_piece(t, enc, s + seg, ms - seg, flags, out)))
            goto fail;
        if ((rc = ids_push(out, id)))
            goto fail;
        seg = me;
    }
    if (seg < len && (rc = encode_piece(t, enc, s + seg, len - seg, flags, out)))
        goto fail;
    return 0;
fail:
    out->n = before;
    return rc;
}

/* ---------------------------------------------------------------------- */
/* Decoding                                                                */

int eng_tok_decode(const eng_tok *t, const int32_t *ids, size_t n, bool skip_special, eng_tok_text *out)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->n_ids || !(t->tok_flags[id] & TOK_PRESENT))
            return ENG_TOK_EBADID;
        total += t->tok_len[id];
    }
    char *raw = malloc(total ? total : 1);
    if (!raw)
        return ENG_TOK_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && (t->tok_flags[ids[i]] & TOK_SPECIAL))
            continue;
        memcpy(raw + k, t->blob + t->tok_off[ids[i]], t->tok_len[ids[i]]);
        k += t->tok_len[ids[i]];
    }
    size_t old = out->len;
    int rc = tok_utf8_lossy_append((const unsigned char *)raw, k, false, out, NULL);
    free(raw);
    if (rc && out->s) {
        out->len = old;
        out->s[old] = '\0';
    }
    if (!rc && !out->s)
        rc = tok_text_append(out, "", 0);
    return rc;
}

struct eng_tok_stream {
    const eng_tok *t;
    bool skip_special;
    unsigned char held[4];   /* an incomplete UTF-8 sequence (at most 3 bytes) */
    size_t n_held;
    eng_tok_text raw;        /* scratch: held bytes + the token's bytes */
    eng_tok_text out;        /* the text returned by the last call */
};

eng_tok_stream *eng_tok_stream_new(const eng_tok *t, bool skip_special)
{
    eng_tok_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->t = t;
    s->skip_special = skip_special;
    if (text_reserve(&s->out, 64))
        goto fail;
    s->out.s[0] = '\0';
    return s;
fail:
    eng_tok_stream_free(s);
    return NULL;
}

void eng_tok_stream_free(eng_tok_stream *s)
{
    if (!s)
        return;
    eng_tok_text_free(&s->raw);
    eng_tok_text_free(&s->out);
    free(s);
}

int eng_tok_stream_put(eng_tok_stream *s, int32_t id, const char **text, size_t *len)
{
    const eng_tok *t = s->t;
    if (id < 0 || (size_t)id >= t->n_ids || !(t->tok_flags[id] & TOK_PRESENT))
        return ENG_TOK_EBADID;
    s->out.len = 0;
    s->out.s[0] = '\0';
    *text = s->out.s;
    *len = 0;
    if (s->skip_special && (t->tok_flags[id] & TOK_SPECIAL))
        return 0;
    /* The held bytes followed by this token's, converted up to a trailing incomplete sequence. */
    s->raw.len = 0;
    if (tok_text_append(&s->raw, s->held, s->n_held) ||
        tok_text_append(&s->raw, t->blob + t->tok_off[id], t->tok_len[id]))
        return ENG_TOK_ENOMEM;
    size_t consumed = 0;
    if (tok_utf8_lossy_append((const unsigned char *)s->raw.s, s->raw.len, true, &s->out, &consumed))
        return ENG_TOK_ENOMEM;
    s->n_held = s->raw.len - consumed;
    memcpy(s->held, s->raw.s + consumed, s->n_held);
    *text = s->out.s;
    *len = s->out.len;
    return 0;
}

int eng_tok_stream_finish(eng_tok_stream *s, const char **text, size_t *len)
{
    s->out.len = 0;
    s->out.s[0] = '\0';
    int rc = tok_utf8_lossy_append(s->held, s->n_held, false, &s->out, NULL);
    s->n_held = 0;
    *text = s->out.s;
    *len = s->out.len;
    return rc;
}

