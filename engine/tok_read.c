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

/* ---------------------------------------------------------------------- */
/* The vocabulary table                                                    */

#define NO_ENTRY SIZE_MAX

static size_t vocab_find(const tok_vocab *v, const char *s, size_t n, uint64_t h)
{
    if (!v->slots)
        return NO_ENTRY;
    for (size_t i = h & v->mask;; i = (i + 1) & v->mask) {
        uint32_t e = v->slots[i];
        if (!e)
            return NO_ENTRY;
        e--;
        if (v->len[e] == n && !memcmp(v->text + v->off[e], s, n))
            return e;
    }
}

int32_t tok_vocab_get(const tok_vocab *v, const char *s, size_t n)
{
    size_t e = vocab_find(v, s, n, hash_bytes(s, n));
    return e == NO_ENTRY ? -1 : v->id[e];
}

static int vocab_rehash(tok_vocab *v, size_t cap)
{
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return ENG_TOK_ENOMEM;
    for (size_t e = 0; e < v->n; e++) {
        size_t i = hash_bytes(v->text + v->off[e], v->len[e]) & (cap - 1);
        while (slots[i])
            i = (i + 1) & (cap - 1);
        slots[i] = (uint32_t)e + 1;
    }
    free(v->slots);
    v->slots = slots;
    v->mask = cap - 1;
    return 0;
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

int tok_vocab_add(tok_vocab *v, const char *s, size_t n, int32_t id)
{
    uint64_t h = hash_bytes(s, n);
    if (vocab_find(v, s, n, h) != NO_ENTRY)
        return 1;
    if (v->n >= UINT32_MAX - 1 || v->text_len + n >= UINT32_MAX)
        return ENG_TOK_ENOMEM;
    if (v->n == v->n_cap) {
        size_t cap = v->n_cap ? 2 * v->n_cap : 256;
        uint32_t *off = realloc(v->off, cap * sizeof *off);
        if (!off)
            return ENG_TOK_ENOMEM;
        v->off = off;
        uint32_t *len = realloc(v->len, cap * sizeof *len);
        if (!len)
            return ENG_TOK_ENOMEM;
        v->len = len;
        int32_t *id_of = realloc(v->id, cap * sizeof *id_of);
        if (!id_of)
            return ENG_TOK_ENOMEM;
        v->id = id_of;
        v->n_cap = cap;
    }
    if (grow((void **)&v->text, &v->text_cap, v->text_len + n + 1, 1))
        return ENG_TOK_ENOMEM;
    /* Load factor at most 1/2. */
    if (2 * (v->n + 1) > (v->slots ? v->mask + 1 : 0) &&
        vocab_rehash(v, pow2_at_least(4 * (v->n + 1))))
        return ENG_TOK_ENOMEM;
    memcpy(v->text + v->text_len, s, n);
    v->off[v->n] = (uint32_t)v->text_len;
    v->len[v->n] = (uint32_t)n;
    v->id[v->n] = id;
    v->text_len += n;
    size_t i = h & v->mask;
    while (v->slots[i])
        i = (i + 1) & v->mask;
    v->slots[i] = (uint32_t)v->n + 1;
    v->n++;
    return 0;
}

void tok_bpe_lists_free(tok_bpe_lists *l)
{
    free(l->vocab.off);
    free(l->vocab.len);
    free(l->vocab.id);
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
/* Finding the two values                                                  */

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
    const char *val, *val_end;
} member;

/*
 * The next member of the object whose members start at *PP (just past its
 * '{', or past the previous member): 1 and *M, 0 at the closing brace (*PP
 * past it), -1 when malformed.
 */
static int next_member(const char **pp, const char *end, bool *first, member *m)
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
    p = skip_ws(p + 1, end);
    m->val = p;
    if (!(p = skip_value(p, end)))
        return -1;
    m->val_end = p;
    *pp = p;
    return 1;
}

static bool key_is(const member *m, const char *name)
{
    return m->key_len == strlen(name) && !memcmp(m->key, name, m->key_len);
}

/* The extents of model.vocab (span[0]) and model.merges (span[1]); -1 unless each is found once. */
static int find_values(const char *text, size_t len, const char *span[2][2])
{
    const char *end = text + len, *p = skip_ws(text, end);
    if (p == end || *p != '{')
        return -1;
    p++;
    bool first = true, model_seen = false;
    member m;
    int r;
    while ((r = next_member(&p, end, &first, &m)) == 1) {
        /* An escaped key could spell "model"; jansson would then see what this walk does not. */
        if (m.escaped)
            return -1;
        if (!key_is(&m, "model"))
            continue;
        if (model_seen || *m.val != '{')
            return -1;
        model_seen = true;
        const char *q = m.val + 1;
        bool first_in_model = true;
        member mm;
        int rm;
        while ((rm = next_member(&q, m.val_end, &first_in_model, &mm)) == 1) {
            if (mm.escaped)
                return -1;
            int which = key_is(&mm, "vocab") ? 0 : key_is(&mm, "merges") ? 1 : -1;
            if (which < 0)
                continue;
            if (span[which][0])
                return -1;
            span[which][0] = mm.val;
            span[which][1] = mm.val_end;
        }
        if (rm < 0 || q != m.val_end)
            return -1;
    }
    if (r < 0 || skip_ws(p, end) != end)
        return -1;
    return model_seen && span[0][0] && span[1][0] ? 0 : -1;
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

static int read_vocab(const char *p, const char *end, tok_vocab *v, eng_tok_text *buf)
{
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')
        return p + 1 == end ? 0 : -1;
    for (;;) {
        buf->len = 0;
        if (p == end || *p != '"' || !(p = read_string(p, end, buf)))
            return -1;
        p = skip_ws(p, end);
        if (p == end || *p != ':')
            return -1;
        int32_t id;
        if (!(p = read_id(skip_ws(p + 1, end), end, &id)) || tok_vocab_add(v, buf->s ? buf->s : "", buf->len, id))
            return -1;
        p = skip_ws(p, end);
        if (p < end && *p == '}')
            return p + 1 == end ? 0 : -1;
        if (p == end || *p != ',')
            return -1;
        p = skip_ws(p + 1, end);
    }
}

static int read_merges(const char *p, const char *end, tok_bpe_lists *l, eng_tok_text *buf)
{
    p = skip_ws(p + 1, end);
    if (p < end && *p == ']')
        return p + 1 == end ? 0 : -1;
    for (;;) {
        buf->len = 0;
        size_t la, lb;
        if (p == end)
            return -1;
        if (*p == '"') {
            if (!(p = read_string(p, end, buf)))
                return -1;
            const char *sp = memchr(buf->s, ' ', buf->len);
            if (!sp || memchr(sp + 1, ' ', buf->len - (size_t)(sp + 1 - buf->s)))
                return -1;
            la = (size_t)(sp - buf->s);
            lb = buf->len - la - 1;
            /* Close the gap so that the two halves spell the merged token. */
            memmove(buf->s + la, buf->s + la + 1, lb);
        } else if (*p == '[') {
            p = skip_ws(p + 1, end);
            if (p == end || *p != '"' || !(p = read_string(p, end, buf)))
                return -1;
            la = buf->len;
            p = skip_ws(p, end);
            if (p == end || *p != ',')
                return -1;
            p = skip_ws(p + 1, end);
            if (p == end || *p != '"' || !(p = read_string(p, end, buf)))
                return -1;
            lb = buf->len - la;
            p = skip_ws(p, end);
            if (p == end || *p != ']')
                return -1;
            p++;
        } else {
            return -1;
        }
        const char *s = buf->s ? buf->s : "";
        int32_t a = tok_vocab_get(&l->vocab, s, la), b = tok_vocab_get(&l->vocab, s + la, lb);
        int32_t id = tok_vocab_get(&l->vocab, s, la + lb);
        if (a < 0 || b < 0 || id < 0 || tok_bpe_lists_add_merge(l, a, b, id))
            return -1;
        p = skip_ws(p, end);
        if (p < end && *p == ']')
            return p + 1 == end ? 0 : -1;
        if (p == end || *p != ',')
            return -1;
        p = skip_ws(p + 1, end);
    }
}

int tok_read_bpe_lists(const char *text, size_t len, tok_bpe_lists *out, char **rest, size_t *rest_len)
{
    memset(out, 0, sizeof *out);
    *rest = NULL;
    const char *span[2][2] = {{NULL, NULL}, {NULL, NULL}};
    if (find_values(text, len, span) || *span[0][0] != '{' || *span[1][0] != '[')
        return -1;
    eng_tok_text buf = {0};
    int rc = read_vocab(span[0][0], span[0][1], &out->vocab, &buf) ||
             read_merges(span[1][0], span[1][1], out, &buf) ? -1 : 0;
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
