/*
 * tok_read: model.vocab and model.merges of a tokenizer.json, read straight
 * from the file's text. The two values are nearly all of a large vocabulary's
 * file (10.6 of Qwen3's 11.4 MB), and as a jansson tree of some 300,000 small
 * values they cost about half a second to build, search and free on every
 * start; read here into flat tables they take a few tens of milliseconds.
 *
 * The reader is narrow and strict. Anything it does not expect makes it give
 * up without a message: a key at the top level or in "model" written with
 * escapes or given twice, a vocabulary id that is not a plain integer below
 * MAX_IDS, a string JSON or jansson would refuse (control characters, bad
 * escapes, lone surrogates, \u0000, invalid UTF-8), a repeated vocabulary
 * entry, a merge that is not "A B" or ["A", "B"] or names a token the
 * vocabulary lacks. The loader then parses the whole file with jansson and
 * reports what is wrong. What the reader accepts, jansson would have read to
 * the same entries in the same order, so both ways build the same tables.
 */
#include "engine/tok_internal.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

void tok_prefault(void *p, size_t n)
{
#ifdef MADV_POPULATE_WRITE
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)p + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
    if (page > 0 && hi > lo + (uintptr_t)(64 * page))
        (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
#else
    (void)p;
    (void)n;
#endif
}

/* ---------------------------------------------------------------------- */
/* The vocabulary table                                                    */

#define NO_ENTRY SIZE_MAX

/* A slot: entry index + 1 in the low half (0: empty), the hash's high half above, so most misses skip the entry. */
static inline uint64_t slot_of(size_t e, uint64_t h) { return (h & 0xffffffff00000000ULL) | ((uint64_t)e + 1); }

static size_t vocab_find(const tok_vocab *v, const char *s, size_t n, uint64_t h)
{
    if (!v->slots)
        return NO_ENTRY;
    for (size_t i = h & v->mask;; i = (i + 1) & v->mask) {
        uint64_t slot = v->slots[i];
        if (!slot)
            return NO_ENTRY;
        if ((slot ^ h) >> 32)
            continue;
        const tok_vocab_entry *e = &v->ent[(uint32_t)slot - 1];
        if (e->len == n && !memcmp(v->text + e->off, s, n))
            return (uint32_t)slot - 1;
    }
}

int32_t tok_vocab_get(const tok_vocab *v, const char *s, size_t n)
{
    size_t e = vocab_find(v, s, n, hash_bytes(s, n));
    return e == NO_ENTRY ? -1 : v->ent[e].id;
}

/*
 * Ids of COUNT spellings at once. The answers are tok_vocab_get()'s; the
 * slots, entries and spellings they need are prefetched a stage ahead for
 * the whole batch first, so their cache misses overlap instead of queueing
 * one lookup behind another (the table of a large vocabulary is megabytes).
 */
static void vocab_get_batch(const tok_vocab *v, const char *const *s, const size_t *n, int32_t *ids, size_t count)
{
    uint64_t h[TOK_VOCAB_BATCH];
    if (!v->slots) {
        for (size_t q = 0; q < count; q++)
            ids[q] = -1;
        return;
    }
    for (size_t q = 0; q < count; q++) {
        h[q] = hash_bytes(s[q], n[q]);
        __builtin_prefetch(&v->slots[h[q] & v->mask]);
    }
    for (size_t q = 0; q < count; q++) {
        uint64_t slot = v->slots[h[q] & v->mask];
        if (slot && !((slot ^ h[q]) >> 32))
            __builtin_prefetch(&v->ent[(uint32_t)slot - 1]);
    }
    for (size_t q = 0; q < count; q++) {
        uint64_t slot = v->slots[h[q] & v->mask];
        if (slot && !((slot ^ h[q]) >> 32))
            __builtin_prefetch(v->text + v->ent[(uint32_t)slot - 1].off);
    }
    for (size_t q = 0; q < count; q++) {
        size_t e = vocab_find(v, s[q], n[q], h[q]);
        ids[q] = e == NO_ENTRY ? -1 : v->ent[e].id;
    }
}

static int vocab_rehash(tok_vocab *v, size_t cap)
{
    uint64_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return ENG_TOK_ENOMEM;
    tok_prefault(slots, cap * sizeof *slots);
    for (size_t e = 0; e < v->n; e++) {
        uint64_t h = hash_bytes(v->text + v->ent[e].off, v->ent[e].len);
        size_t i = h & (cap - 1);
        while (slots[i])
            i = (i + 1) & (cap - 1);
        slots[i] = slot_of(e, h);
    }
    free(v->slots);
    v->slots = slots;
    v->mask = cap - 1;
    return 0;
}

/* Sizes the table for N entries in all (load factor at most 1/2), so that adding them does not rehash. */
static int vocab_reserve(tok_vocab *v, size_t n)
{
    size_t cap = pow2_at_least(2 * n + 2);
    return cap > (v->slots ? v->mask + 1 : 0) ? vocab_rehash(v, cap) : 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return ENG_TOK_ENOMEM;
    *p = q;
    *cap = c;
    return 0;
}

static int vocab_add_hashed(tok_vocab *v, const char *s, size_t n, uint64_t h, int32_t id)
{
    if (vocab_find(v, s, n, h) != NO_ENTRY)
        return 1;
    if (v->n >= UINT32_MAX - 1 || v->text_len + n >= UINT32_MAX)
        return ENG_TOK_ENOMEM;
    if (grow((void **)&v->ent, &v->n_cap, v->n + 1, sizeof *v->ent) ||
        grow((void **)&v->text, &v->text_cap, v->text_len + n + 1, 1))
        return ENG_TOK_ENOMEM;
    if (2 * (v->n + 1) > (v->slots ? v->mask + 1 : 0) && vocab_reserve(v, 2 * (v->n + 1)))
        return ENG_TOK_ENOMEM;
    memcpy(v->text + v->text_len, s, n);
    v->ent[v->n] = (tok_vocab_entry){(uint32_t)v->text_len, (uint32_t)n, id};
    v->text_len += n;
    size_t i = h & v->mask;
    while (v->slots[i])
        i = (i + 1) & v->mask;
    v->slots[i] = slot_of(v->n, h);
    v->n++;
    return 0;
}

int tok_vocab_add(tok_vocab *v, const char *s, size_t n, int32_t id)
{
    return vocab_add_hashed(v, s, n, hash_bytes(s, n), id);
}

void tok_bpe_lists_free(tok_bpe_lists *l)
{
    free(l->vocab.ent);
    free(l->vocab.text);
    free(l->vocab.slots);
    free(l->merges);
    memset(l, 0, sizeof *l);
}

int tok_bpe_lists_add_merge(tok_bpe_lists *l, int32_t a, int32_t b, int32_t id)
{
    if (grow((void **)&l->merges, &l->merges_cap, l->n_merges + 1, sizeof *l->merges))
        return ENG_TOK_ENOMEM;
    l->merges[l->n_merges++] = (tok_merge){a, b, id};
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Walking to the two values                                              */

static const char *skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the string whose opening quote is at P, or NULL; *escaped tells whether it holds a backslash. */
static const char *skip_string(const char *p, const char *end, bool *escaped)
{
    *escaped = false;
    for (p++; p < end;) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (!q)
            return NULL;
        const char *bs = memchr(p, '\\', (size_t)(q - p));
        if (!bs)
            return q + 1;
        *escaped = true;
        p = bs + 2;
    }
    return NULL;
}

/*
 * Past the value starting at P, or NULL. Only the extent is found (brackets
 * counted, strings skipped); jansson checks the grammar of what is kept.
 */
static const char *skip_value(const char *p, const char *end)
{
    bool esc;
    if (p == end)
        return NULL;
    if (*p == '"')
        return skip_string(p, end, &esc);
    if (*p == '{' || *p == '[') {
        size_t depth = 0;
        while (p < end) {
            if (*p == '"') {
                if (!(p = skip_string(p, end, &esc)))
                    return NULL;
                continue;
            }
            if (*p == '{' || *p == '[')
                depth++;
            else if ((*p == '}' || *p == ']') && --depth == 0)
                return p + 1;
            p++;
        }
        return NULL;
    }
    const char *start = p;
    while (p < end && *p != ',' && *p != '}' && *p != ']' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
        p++;
    return p == start ? NULL : p;
}

typedef struct member {
    const char *key;     /* between the quotes, as written */
    size_t key_len;
    bool escaped;
    const char *val;     /* the value's first byte */
} member;

/*
 * The next key of the object whose members start at *PP (just past its '{',
 * or past the previous member's value): 1 and *M with M->val the value's
 * first byte (*PP there too), 0 at the closing brace (*PP past it), -1 when
 * malformed. The caller reads or skips the value and leaves *PP past it.
 */
static int next_key(const char **pp, const char *end, bool *first, member *m)
{
    const char *p = skip_ws(*pp, end);
    if (p == end)
        return -1;
    if (*p == '}') {
        *pp = p + 1;
        return 0;
    }
    if (!*first) {
        if (*p != ',')
            return -1;
        p = skip_ws(p + 1, end);
    }
    *first = false;
    if (p == end || *p != '"')
        return -1;
    const char *key_end = skip_string(p, end, &m->escaped);
    if (!key_end)
        return -1;
    m->key = p + 1;
    m->key_len = (size_t)(key_end - 1 - m->key);
    p = skip_ws(key_end, end);
    if (p == end || *p != ':')
        return -1;
    *pp = m->val = skip_ws(p + 1, end);
    return 1;
}

static bool key_is(const member *m, const char *name)
{
    return m->key_len == strlen(name) && !memcmp(m->key, name, m->key_len);
}

/* ---------------------------------------------------------------------- */
/* Reading the two values                                                  */

static int hex4(const char *p, const char *end, uint32_t *out)
{
    if (end - p < 4)
        return -1;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* Appends the decoded string whose opening quote is at P to O; returns the position past its closing quote, or NULL. */
static const char *read_string(const char *p, const char *end, eng_tok_text *o)
{
    size_t start = o->len;
    unsigned high = 0;
    p++;
    for (;;) {
        const char *run = p;
        while (p < end && (unsigned char)*p >= 0x20 && *p != '"' && *p != '\\')
            high |= (unsigned char)*p++;
        if (p > run && tok_text_append(o, run, (size_t)(p - run)))
            return NULL;
        if (p == end || (unsigned char)*p < 0x20)
            return NULL;
        if (*p == '"')
            break;
        if (++p == end)
            return NULL;
        char e = *p++, ch;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (hex4(p, end, &cp))
                return NULL;
            p += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                return NULL;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                    return NULL;
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0)
                return NULL;
            char u[4];
            size_t n;
            if (cp < 0x80) {
                u[0] = (char)cp;
                n = 1;
            } else if (cp < 0x800) {
                u[0] = (char)(0xC0 | cp >> 6);
                u[1] = (char)(0x80 | (cp & 0x3F));
                n = 2;
            } else if (cp < 0x10000) {
                u[0] = (char)(0xE0 | cp >> 12);
                u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
                u[2] = (char)(0x80 | (cp & 0x3F));
                n = 3;
            } else {
                u[0] = (char)(0xF0 | cp >> 18);
                u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
                u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
                u[3] = (char)(0x80 | (cp & 0x3F));
                n = 4;
            }
            if (tok_text_append(o, u, n))
                return NULL;
            continue;
        }
        default:
            return NULL;
        }
        if (tok_text_append(o, &ch, 1))
            return NULL;
    }
    /* Escapes give whole sequences, so checking the result checks the raw bytes too. */
    if ((high & 0x80) &&
        tok_utf8_valid_prefix((const unsigned char *)o->s + start, o->len - start) != o->len - start)
        return NULL;
    return p + 1;
}

/* A vocabulary id: a plain JSON integer in [0, MAX_IDS). */
static const char *read_id(const char *p, const char *end, int32_t *id)
{
    if (p == end || *p < '0' || *p > '9')
        return NULL;
    uint32_t v = 0;
    if (*p == '0') {
        p++;
    } else {
        while (p < end && *p >= '0' && *p <= '9') {
            v = v * 10 + (uint32_t)(*p++ - '0');
            if (v >= MAX_IDS)
                return NULL;
        }
    }
    if (p < end && ((*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E'))
        return NULL;
    *id = (int32_t)v;
    return p;
}

/* Adds the K spellings at BUF + OFF[i], LEN[i] with IDS[i], their slots prefetched together first. */
static int add_batch(tok_vocab *v, const eng_tok_text *buf, const size_t *off, const size_t *len, const int32_t *ids,
                     size_t k)
{
    uint64_t h[TOK_VOCAB_BATCH];
    const char *base = buf->s ? buf->s : "";
    for (size_t i = 0; i < k; i++) {
        h[i] = hash_bytes(base + off[i], len[i]);
        __builtin_prefetch(&v->slots[h[i] & v->mask]);
    }
    for (size_t i = 0; i < k; i++)
        if (vocab_add_hashed(v, base + off[i], len[i], h[i], ids[i]))
            return -1;
    return 0;
}

/*
 * The steps between a container's elements. open_list: *PP at its opening
 * bracket; 1 when it closes at once (*PP past), else 0 with *PP at the first
 * element. next_element: *PP past an element; 1 at the closing bracket (*PP
 * past it), 0 at a comma (*PP at the next element), -1 when malformed.
 */
static int open_list(const char **pp, const char *end, char close)
{
    const char *p = skip_ws(*pp + 1, end);
    *pp = p < end && *p == close ? p + 1 : p;
    return p < end && *p == close;
}

static int next_element(const char **pp, const char *end, char close)
{
    const char *p = skip_ws(*pp, end);
    if (p < end && *p == close) {
        *pp = p + 1;
        return 1;
    }
    if (p == end || *p != ',')
        return -1;
    *pp = skip_ws(p + 1, end);
    return 0;
}

/* Adds the object at P (its '{') to V; past its '}', or NULL. */
static const char *read_vocab(const char *p, const char *end, tok_vocab *v, eng_tok_text *buf)
{
    size_t off[TOK_VOCAB_BATCH], len[TOK_VOCAB_BATCH], k = 0;
    int32_t ids[TOK_VOCAB_BATCH];
    buf->len = 0;
    if (open_list(&p, end, '}'))
        return p;
    for (;;) {
        if (k == TOK_VOCAB_BATCH) {
            if (add_batch(v, buf, off, len, ids, k))
                return NULL;
            k = 0;
            buf->len = 0;
        }
        off[k] = buf->len;
        if (p == end || *p != '"' || !(p = read_string(p, end, buf)))
            return NULL;
        len[k] = buf->len - off[k];
        p = skip_ws(p, end);
        if (p == end || *p != ':')
            return NULL;
        if (!(p = read_id(skip_ws(p + 1, end), end, &ids[k])))
            return NULL;
        k++;
        int r = next_element(&p, end, '}');
        if (r)
            return r > 0 && !add_batch(v, buf, off, len, ids, k) ? p : NULL;
    }
}

#define MERGES_PER_BATCH (TOK_VOCAB_BATCH / 3)

/* Resolves the K merges whose spellings are at BUF + OFF[i] (LA[i] bytes, then LB[i]) and adds them in order. */
static int add_merges(tok_bpe_lists *l, const eng_tok_text *buf, const size_t *off, const size_t *la,
                      const size_t *lb, size_t k)
{
    const char *s[TOK_VOCAB_BATCH];
    size_t n[TOK_VOCAB_BATCH];
    int32_t ids[TOK_VOCAB_BATCH];
    const char *base = buf->s ? buf->s : "";
    for (size_t i = 0; i < k; i++) {
        s[3 * i] = s[3 * i + 2] = base + off[i];
        n[3 * i] = la[i];
        s[3 * i + 1] = base + off[i] + la[i];
        n[3 * i + 1] = lb[i];
        n[3 * i + 2] = la[i] + lb[i];
    }
    vocab_get_batch(&l->vocab, s, n, ids, 3 * k);
    for (size_t i = 0; i < k; i++)
        if (ids[3 * i] < 0 || ids[3 * i + 1] < 0 || ids[3 * i + 2] < 0 ||
            tok_bpe_lists_add_merge(l, ids[3 * i], ids[3 * i + 1], ids[3 * i + 2]))
            return -1;
    return 0;
}

/* Adds the merges of the array at P (its '[') to L; past its ']', or NULL. */
static const char *read_merges(const char *p, const char *end, tok_bpe_lists *l, eng_tok_text *buf)
{
    size_t off[MERGES_PER_BATCH], la[MERGES_PER_BATCH], lb[MERGES_PER_BATCH], k = 0;
    buf->len = 0;
    if (open_list(&p, end, ']'))
        return p;
    for (;;) {
        if (k == MERGES_PER_BATCH) {
            if (add_merges(l, buf, off, la, lb, k))
                return NULL;
            k = 0;
            buf->len = 0;
        }
        size_t start = off[k] = buf->len;
        if (p == end)
            return NULL;
        if (*p == '"') {
            if (!(p = read_string(p, end, buf)))
                return NULL;
            char *m = buf->s + start;
            size_t n = buf->len - start;
            const char *sp = memchr(m, ' ', n);
            if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - m)))
                return NULL;
            la[k] = (size_t)(sp - m);
            lb[k] = n - la[k] - 1;
            /* Close the gap so that the two halves spell the merged token. */
            memmove(m + la[k], m + la[k] + 1, lb[k]);
            buf->len--;
        } else if (*p == '[') {
            p = skip_ws(p + 1, end);
            if (p == end || *p != '"' || !(p = read_string(p, end, buf)))
                return NULL;
            la[k] = buf->len - start;
            p = skip_ws(p, end);
            if (p == end || *p != ',')
                return NULL;
            p = skip_ws(p + 1, end);
            if (p == end || *p != '"' || !(p = read_string(p, end, buf)))
                return NULL;
            lb[k] = buf->len - start - la[k];
            p = skip_ws(p, end);
            if (p == end || *p != ']')
                return NULL;
            p++;
        } else {
            return NULL;
        }
        k++;
        int r = next_element(&p, end, ']');
        if (r)
            return r > 0 && !add_merges(l, buf, off, la, lb, k) ? p : NULL;
    }
}

/*
 * Walks TEXT, one JSON object, to "model" and reads its "vocab" and "merges"
 * where they stand, into OUT (merges written before the vocabulary are read
 * after it: they name its entries); SPAN[0] and SPAN[1] get the two values'
 * extents. -1 unless "model" is there once, with each of the two once.
 */
static int read_model(const char *text, size_t len, tok_bpe_lists *out, eng_tok_text *buf, const char *span[2][2])
{
    const char *end = text + len, *p = skip_ws(text, end);
    if (p == end || *p != '{')
        return -1;
    p++;
    bool first = true, model_seen = false;
    member m;
    int r;
    while ((r = next_key(&p, end, &first, &m)) == 1) {
        /* An escaped key could spell "model"; jansson would then see what this walk does not. */
        if (m.escaped)
            return -1;
        if (!key_is(&m, "model")) {
            if (!(p = skip_value(p, end)))
                return -1;
            continue;
        }
        if (model_seen || p == end || *p != '{')
            return -1;
        model_seen = true;
        p++;
        bool first_in_model = true;
        member mm;
        int rm;
        while ((rm = next_key(&p, end, &first_in_model, &mm)) == 1) {
            if (mm.escaped)
                return -1;
            int which = key_is(&mm, "vocab") ? 0 : key_is(&mm, "merges") ? 1 : -1;
            if (which >= 0 && span[which][0])
                return -1;
            if (which == 0) {
                if (p == end || *p != '{')
                    return -1;
                /* Every entry has a colon, and little after the vocabulary does:
                 * a bound that sizes the table once, without finding its end first. */
                size_t colons = 0;
                for (const char *q = p; (q = memchr(q, ':', (size_t)(end - q))) != NULL; q++)
                    colons++;
                p = !vocab_reserve(&out->vocab, colons) ? read_vocab(p, end, &out->vocab, buf) : NULL;
            } else if (which == 1 && span[0][0]) {
                p = p < end && *p == '[' ? read_merges(p, end, out, buf) : NULL;
            } else {
                p = skip_value(p, end);
            }
            if (!p)
                return -1;
            if (which >= 0) {
                span[which][0] = mm.val;
                span[which][1] = p;
            }
        }
        if (rm < 0)
            return -1;
    }
    if (r < 0 || skip_ws(p, end) != end || !span[0][0] || !span[1][0])
        return -1;
    /* Merges that came first were only skipped. */
    if (span[1][0] < span[0][0] && (*span[1][0] != '[' || read_merges(span[1][0], span[1][1], out, buf) != span[1][1]))
        return -1;
    return 0;
}

int tok_read_bpe_lists(const char *text, size_t len, tok_bpe_lists *out, char **rest, size_t *rest_len)
{
    memset(out, 0, sizeof *out);
    *rest = NULL;
    const char *span[2][2] = {{NULL, NULL}, {NULL, NULL}};
    /* Storage from the start: the readers point into it even when every string so far was empty. */
    eng_tok_text buf = {0};
    int rc = tok_text_append(&buf, "", 0) || read_model(text, len, out, &buf, span) ? -1 : 0;
    eng_tok_text_free(&buf);
    if (rc) {
        tok_bpe_lists_free(out);
        return -1;
    }
    /* The rest of the file, with empty values of the same kinds in their places. */
    int first = span[0][0] < span[1][0] ? 0 : 1, second = 1 - first;
    static const char *const stand_in[2] = {"{}", "[]"};
    size_t n = len - (size_t)(span[0][1] - span[0][0]) - (size_t)(span[1][1] - span[1][0]) + 4;
    char *r = malloc(n + 1), *w = r;
    if (!r) {
        tok_bpe_lists_free(out);
        return -1;
    }
    const char *cuts[5] = {text, span[first][0], span[first][1], span[second][0], span[second][1]};
    memcpy(w, cuts[0], (size_t)(cuts[1] - cuts[0]));
    w += cuts[1] - cuts[0];
    memcpy(w, stand_in[first], 2);
    w += 2;
    memcpy(w, cuts[2], (size_t)(cuts[3] - cuts[2]));
    w += cuts[3] - cuts[2];
    memcpy(w, stand_in[second], 2);
    w += 2;
    memcpy(w, cuts[4], (size_t)(text + len - cuts[4]));
    w += text + len - cuts[4];
    *w = '\0';
    *rest = r;
    *rest_len = (size_t)(w - r);
    return 0;
}
