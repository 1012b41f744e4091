/*
 * tokenizer: loads a Hugging Face tokenizer.json of the byte-level BPE kind
 * and encodes/decodes with it (see tokenizer.h for the pipeline).
 *
 * Internally the BPE model works on raw bytes: the ByteLevel pre-tokenizer
 * maps each byte to one printable character and the vocabulary is written in
 * that alphabet, so a pre-token's characters are exactly its bytes. At load we
 * resolve the 256 single-byte tokens and turn every merge "A B" into an entry
 * (id A, id B) -> (rank, id of AB) of an open-addressing hash; encoding then
 * never builds byte-level strings. Each token also gets its decoded bytes,
 * computed once, so decoding is a table lookup.
 *
 * Called by the command line (server/cmd_tokenize.c) and the request path. The
 * loaded tables are read-only; encoding uses scratch memory of the eng_tok and
 * must be done by one thread at a time (see tokenizer.h).
 */
#include "engine/tokenizer.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Ids and vocabulary sizes beyond this are rejected as corrupt. */
#define MAX_IDS (1 << 24)
/* Inputs beyond this are refused (BPE symbol positions are 32-bit). */
#define TOK_MAX_INPUT ((size_t)1 << 30)

/* Word cache: direct-mapped, for pre-tokens of 2..CACHE_KEY_MAX bytes. */
#define CACHE_SLOTS 8192
#define CACHE_KEY_MAX 32

/* The split pattern of the ByteLevel pre-tokenizer when its use_regex is set (GPT-2's). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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

static int text_append(eng_tok_text *t, const void *p, size_t n)
{
    if (text_reserve(t, n))
        return ENG_TOK_ENOMEM;
    memcpy(t->s + t->len, p, n);
    t->len += n;
    t->s[t->len] = '\0';
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Hashing                                                                 */

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)n * 0xff51afd7ed558ccdULL);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x9fb21c651e98df25ULL;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    return mix64(h ^ w);
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

/* ---------------------------------------------------------------------- */
/* UTF-8                                                                   */

/*
 * Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid. When the
 * bytes run out before the sequence is complete but everything seen so far is
 * valid, returns 0 and sets *incomplete to the number of bytes seen. Otherwise
 * *incomplete is 0 and *bad is the length of the maximal invalid subpart (at
 * least 1), which is what a lossy conversion replaces by one U+FFFD.
 */
static size_t utf8_seq(const unsigned char *s, size_t n, size_t *incomplete, size_t *bad)
{
    *incomplete = 0;
    *bad = 1;
    unsigned c = s[0];
    if (c < 0x80)
        return 1;
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else {
        return 0;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *incomplete = i;
            return 0;
        }
        unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) {
            *bad = i;
            return 0;
        }
    }
    return need;
}

/* Length of the longest valid UTF-8 prefix of s[0..n). */
static size_t utf8_valid_prefix(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t inc, bad, k = utf8_seq(s + i, n - i, &inc, &bad);
        if (!k)
            break;
        i += k;
    }
    return i;
}

/*
 * Appends s[0..n) to OUT with invalid sequences replaced by U+FFFD. With
 * hold_tail, a trailing incomplete (but so far valid) sequence is not
 * converted; returns in *consumed how many bytes were.
 */
static int utf8_lossy_append(const unsigned char *s, size_t n, bool hold_tail, eng_tok_text *out, size_t *consumed)
{
    static const char fffd[] = "\xEF\xBF\xBD";
    size_t i = 0, run = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t inc, bad, k = utf8_seq(s + i, n - i, &inc, &bad);
        if (k) {
            i += k;
            continue;
        }
        if (inc && hold_tail)
            break;
        if (text_append(out, s + run, i - run) || text_append(out, fffd, 3))
            return ENG_TOK_ENOMEM;
        i += inc ? inc : bad;
        run = i;
    }
    if (text_append(out, s + run, i - run))
        return ENG_TOK_ENOMEM;
    if (consumed)
        *consumed = i;
    return 0;
}

int eng_tok_utf8_lossy(const char *in, size_t len, eng_tok_text *out)
{
    return utf8_lossy_append((const unsigned char *)in, len, false, out, NULL);
}

/* Decodes one code point of valid UTF-8; returns its length. */
static size_t utf8_decode(const unsigned char *s, int32_t *cp)
{
    if (s[0] < 0x80) {
        *cp = s[0];
        return 1;
    }
    if (s[0] < 0xE0) {
        *cp = ((s[0] & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (s[0] < 0xF0) {
        *cp = ((s[0] & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    *cp = ((s[0] & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

/* Length of the code point starting at s (valid UTF-8 assumed, n >= 1). */
static inline size_t utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/* ---------------------------------------------------------------------- */
/* Unicode versions                                                        */

/*
 * The reference implementation matches split patterns with Unicode 16.0
 * properties but normalizes with Unicode 9.0 tables, while PCRE2 (10.42 and
 * later) and utf8proc (2.8 and later) know Unicode 14.0 and 15.0 or newer.
 * The tables below close the gaps: letters and numbers newer than PCRE2's
 * tables are added to \p{L} and \p{N} where patterns use them, and
 * characters the Unicode 9.0 normalizer does not know are passed through the
 * normalizer untouched (they are starters that never compose there).
 */
typedef struct cp_range {
    int32_t lo, hi;
} cp_range;

/* Generated by tests/tokenizer/gen-unicode-tables.mjs: begin. */
/* General_Category L: assigned in Unicode 15.0 or 16.0 */
static const cp_range letters_since_u14[] = {
    {0x1C89, 0x1C8A}, {0xA7CB, 0xA7CD}, {0xA7DA, 0xA7DC}, {0x105C0, 0x105F3},
    {0x10D4A, 0x10D65}, {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x1123F, 0x11240},
    {0x11380, 0x11389}, {0x1138B, 0x1138B}, {0x1138E, 0x1138E}, {0x11390, 0x113B5},
    {0x113B7, 0x113B7}, {0x113D1, 0x113D1}, {0x113D3, 0x113D3}, {0x11BC0, 0x11BE0},
    {0x11F02, 0x11F02}, {0x11F04, 0x11F10}, {0x11F12, 0x11F33}, {0x1342F, 0x1342F},
    {0x13441, 0x13446}, {0x13460, 0x143FA}, {0x16100, 0x1611D}, {0x16D40, 0x16D6C},
    {0x18CFF, 0x18CFF}, {0x1B132, 0x1B132}, {0x1B155, 0x1B155}, {0x1DF25, 0x1DF2A},
    {0x1E030, 0x1E06D}, {0x1E4D0, 0x1E4EB}, {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0},
    {0x2B739, 0x2B739}, {0x2EBF0, 0x2EE5D}, {0x31350, 0x323AF},
};
/* General_Category N: assigned in Unicode 15.0 or 16.0 */
static const cp_range numbers_since_u14[] = {
    {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x11F50, 0x11F59},
    {0x16130, 0x16139}, {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1D2C0, 0x1D2D3},
    {0x1E4F0, 0x1E4F9}, {0x1E5F1, 0x1E5FA},
};
/* Unassigned in Unicode 9.0 and marks or decomposable in Unicode 15.0; U+11A7 */
static const cp_range norm_frozen[] = {
    {0x07FD, 0x07FD}, {0x0898, 0x089F}, {0x08CA, 0x08D3}, {0x09FE, 0x09FE},
    {0x0AFA, 0x0AFF}, {0x0B55, 0x0B55}, {0x0C04, 0x0C04}, {0x0C3C, 0x0C3C},
    {0x0CF3, 0x0CF3}, {0x0D00, 0x0D00}, {0x0D3B, 0x0D3C}, {0x0D81, 0x0D81},
    {0x0EBA, 0x0EBA}, {0x0ECE, 0x0ECE}, {0x11A7, 0x11A7}, {0x1715, 0x1715},
    {0x180F, 0x180F}, {0x1ABF, 0x1ACE}, {0x1CF7, 0x1CF7}, {0x1DF6, 0x1DFA},
    {0x32FF, 0x32FF}, {0xA7F2, 0xA7F4}, {0xA82C, 0xA82C}, {0xA8FF, 0xA8FF},
    {0xAB69, 0xAB69}, {0x10781, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA},
    {0x10D24, 0x10D27}, {0x10EAB, 0x10EAC}, {0x10EFD, 0x10EFF}, {0x10F46, 0x10F50},
    {0x10F82, 0x10F85}, {0x11070, 0x11070}, {0x11073, 0x11074}, {0x110C2, 0x110C2},
    {0x11145, 0x11146}, {0x111CE, 0x111CF}, {0x11241, 0x11241}, {0x1133B, 0x1133B},
    {0x1145E, 0x1145E}, {0x1182C, 0x1183A}, {0x11930, 0x11935}, {0x11937, 0x11938},
    {0x1193B, 0x1193E}, {0x11940, 0x11940}, {0x11942, 0x11943}, {0x119D1, 0x119D7},
    {0x119DA, 0x119E0}, {0x119E4, 0x119E4}, {0x11A01, 0x11A0A}, {0x11A33, 0x11A39},
    {0x11A3B, 0x11A3E}, {0x11A47, 0x11A47}, {0x11A51, 0x11A5B}, {0x11A8A, 0x11A99},
    {0x11D31, 0x11D36}, {0x11D3A, 0x11D3A}, {0x11D3C, 0x11D3D}, {0x11D3F, 0x11D45},
    {0x11D47, 0x11D47}, {0x11D8A, 0x11D8E}, {0x11D90, 0x11D91}, {0x11D93, 0x11D97},
    {0x11EF3, 0x11EF6}, {0x11F00, 0x11F01}, {0x11F03, 0x11F03}, {0x11F34, 0x11F3A},
    {0x11F3E, 0x11F42}, {0x13440, 0x13440}, {0x13447, 0x13455}, {0x16F4F, 0x16F4F},
    {0x16F7F, 0x16F87}, {0x16FE4, 0x16FE4}, {0x16FF0, 0x16FF1}, {0x1CF00, 0x1CF2D},
    {0x1CF30, 0x1CF46}, {0x1E030, 0x1E06D}, {0x1E08F, 0x1E08F}, {0x1E130, 0x1E136},
    {0x1E2AE, 0x1E2AE}, {0x1E2EC, 0x1E2EF}, {0x1E4EC, 0x1E4EF}, {0x1F16C, 0x1F16C},
    {0x1FBF0, 0x1FBF9},
};
/* Generated by tests/tokenizer/gen-unicode-tables.mjs: end. */

static bool in_ranges(const cp_range *r, size_t n, int32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

/* The White_Space characters, as a class body: what \s means in the reference's patterns. */
static const char WHITE_SPACE_ITEMS[] =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

/* ---------------------------------------------------------------------- */
/* The ByteLevel alphabet: each byte <-> one printable code point           */

static void byte_alphabet(int32_t byte_cp[256])
{
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_cp[b] = printable ? b : 256 + n++;
    }
}

/* ---------------------------------------------------------------------- */
/* The loaded tokenizer                                                    */

enum norm_kind { NORM_NFC, NORM_NFD, NORM_NFKC, NORM_NFKD };

enum split_behavior { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };

typedef struct pretok_step {
    pcre2_code *re;          /* NULL: no matches (empty literal, or ByteLevel without regex) */
    enum split_behavior behavior;
    bool invert;
    bool byte_level;         /* the ByteLevel step (last) */
    bool add_prefix_space;   /* ByteLevel: prepend ' ' to pieces not starting with one */
} pretok_step;

typedef struct added_tok {
    int32_t id;
    char *content;           /* as the file gives it */
    char *match;             /* what is matched: the content, normalized if "normalized" */
    size_t match_len;
    bool single_word, lstrip, rstrip, normalized, special;
} added_tok;

/* Added tokens bucketed by first byte, longest first, for leftmost-longest matching. */
typedef struct added_set {
    size_t n;
    uint32_t *order;         /* indices into eng_tok.added, grouped by first byte */
    uint32_t first[257];     /* bucket b is order[first[b] .. first[b+1]) */
} added_set;

typedef struct merge_slot {
    uint64_t key;            /* (uint64)left << 32 | right */
    uint32_t rank;           /* UINT32_MAX marks an empty slot */
    int32_t id;              /* the merged token */
} merge_slot;

typedef struct cache_slot {
    uint64_t hash;
    uint8_t klen;            /* 0: empty */
    uint8_t nids;
    char key[CACHE_KEY_MAX];
    int32_t ids[CACHE_KEY_MAX];
} cache_slot;

struct eng_tok {
    char *path;

    /* Normalizer: a sequence of Unicode normal forms, possibly empty. */
    size_t n_norms;
    enum norm_kind norms[8];
    int32_t *second_starters;    /* see find_second_starters() */
    size_t n_second_starters;

    size_t n_steps;
    pretok_step steps[16];

    /* Token table, by id: decoded bytes at blob[off[id]], len[id] bytes. */
    size_t n_ids;
    uint32_t *tok_off;
    uint32_t *tok_len;       /* UINT32_MAX: no token has this id */
    uint8_t *tok_flags;
    char *blob;

    /* BPE model. */
    int32_t byte_id[256];    /* id of each single-byte token, -1 if absent */
    int32_t unk_id;          /* -1 when the model has no unk_token */
    bool fuse_unk;
    bool ignore_merges;
    merge_slot *merges;
    size_t merge_mask;
    int32_t *word_slots;     /* ignore_merges: hash of byte-level vocab tokens by bytes, -1 empty */
    size_t word_mask;

    size_t n_added;
    added_tok *added;
    added_set raw_set;       /* "normalized": false, matched before the normalizer */
    added_set norm_set;      /* "normalized": true, matched after it */

    eng_tok_enc *enc;        /* eng_tok_encode()'s own encoder */
};

/* Everything an encoding writes: one per encoding thread (tokenizer.h). */
struct eng_tok_enc {
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    eng_tok_text clean;      /* the input with invalid UTF-8 replaced */
    int32_t *sym_id, *sym_prev, *sym_next;
    uint64_t *heap;
    size_t sym_cap;
    cache_slot *cache;       /* BPE results of recent words */
};

enum { TOK_PRESENT = 1, TOK_SPECIAL = 2, TOK_PURE = 4 };

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
/* Normalizer                                                              */

static bool is_frozen(int32_t cp)
{
    return cp >= 0x7FD && in_ranges(norm_frozen, sizeof norm_frozen / sizeof norm_frozen[0], cp);
}

static bool is_composing(enum norm_kind kind)
{
    return kind == NORM_NFC || kind == NORM_NFKC;
}

/*
 * Whether CP can change, or change its neighbours, under normal form KIND:
 * marks (non-zero combining class), characters with a decomposition that the
 * form applies, Hangul syllables (decomposing forms) and the starters that can
 * be the second half of a composition (composing forms). Any other character
 * is a starter that stays as it is and that nothing after it composes across.
 */
static bool nf_trigger(const eng_tok *t, enum norm_kind kind, int32_t cp)
{
    const utf8proc_property_t *p = utf8proc_get_property(cp);
    bool compat = kind == NORM_NFKC || kind == NORM_NFKD;
    if (p->combining_class)
        return true;
    if (p->decomp_seqindex != UINT16_MAX && (compat || p->decomp_type == 0))
        return true;
    if (cp >= 0xAC00 && cp <= 0xD7A3)
        return !is_composing(kind);
    if (!is_composing(kind))
        return false;
    if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2))
        return true;
    size_t lo = 0, hi = t->n_second_starters;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (t->second_starters[mid] == cp)
            return true;
        if (t->second_starters[mid] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/*
 * The starters (combining class 0) that end a canonical decomposition, e.g.
 * U+0BBE in U+0BCA = U+0BC6 U+0BBE: composing forms may join them to what
 * precedes. Found once at load from utf8proc's own data; sorted.
 */
static int find_second_starters(eng_tok *t)
{
    size_t cap = 0;
    for (int32_t cp = 0xC0; cp < 0x30000; cp++) {
        const utf8proc_property_t *p = utf8proc_get_property(cp);
        if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0)
            continue;
        utf8proc_int32_t d[8];
        int boundclass = 0;
        utf8proc_ssize_t n = utf8proc_decompose_char(cp, d, 8, UTF8PROC_DECOMPOSE, &boundclass);
        if (n < 2 || n > 8 || utf8proc_get_property(d[n - 1])->combining_class)
            continue;
        size_t k = 0;
        while (k < t->n_second_starters && t->second_starters[k] != d[n - 1])
            k++;
        if (k < t->n_second_starters)
            continue;
        if (t->n_second_starters == cap) {
            cap = cap ? 2 * cap : 32;
            int32_t *a = realloc(t->second_starters, cap * sizeof *a);
            if (!a)
                return ENG_TOK_ENOMEM;
            t->second_starters = a;
        }
        t->second_starters[t->n_second_starters++] = d[n - 1];
    }
    if (t->n_second_starters)
        qsort(t->second_starters, t->n_second_starters, sizeof *t->second_starters, cmp_i32);
    return 0;
}

static int map_region(enum norm_kind kind, const char *s, size_t n, eng_tok_text *out)
{
    int opts = UTF8PROC_STABLE;
    opts |= is_composing(kind) ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE;
    if (kind == NORM_NFKC || kind == NORM_NFKD)
        opts |= UTF8PROC_COMPAT;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)opts);
    if (r < 0)
        return r == UTF8PROC_ERROR_NOMEM ? ENG_TOK_ENOMEM : ENG_TOK_ENORM;
    int rc = text_append(out, dst, (size_t)r);
    free(dst);
    return rc;
}

/*
 * One normal form of valid UTF-8 S. Only the regions around trigger
 * characters go through utf8proc, each from the last unaffected starter
 * before it to the next one after it; the rest is copied. Characters of
 * norm_frozen bound regions and are copied untouched: the reference's Unicode
 * 9.0 tables see them as starters that compose with nothing. OUT receives the
 * result only when something changed (*changed).
 */
static int map_form(const eng_tok *t, enum norm_kind kind, const char *s, size_t n, eng_tok_text *out, bool *changed)
{
    size_t copied = 0, safe = 0, region = SIZE_MAX;
    int rc = 0;
    *changed = false;
#define CLOSE_REGION(at)                                                                      \
    do {                                                                                      \
        if (region != SIZE_MAX) {                                                             \
            if (!*changed && (rc = text_append(out, "", 0)))                                   \
                return rc;                                                                    \
            *changed = true;                                                                  \
            if ((rc = text_append(out, s + copied, region - copied)) ||                       \
                (rc = map_region(kind, s + region, (at) - region, out)))                      \
                return rc;                                                                    \
            copied = (at);                                                                    \
            region = SIZE_MAX;                                                                \
        }                                                                                     \
    } while (0)
    for (size_t i = 0; i < n;) {
        if ((unsigned char)s[i] < 0x80) {
            CLOSE_REGION(i);
            safe = i++;
            continue;
        }
        int32_t cp;
        size_t l = utf8_decode((const unsigned char *)s + i, &cp);
        if (is_frozen(cp)) {
            CLOSE_REGION(i);
            safe = i + l;
        } else if (nf_trigger(t, kind, cp)) {
            if (region == SIZE_MAX)
                region = safe;
        } else {
            CLOSE_REGION(i);
            safe = i;
        }
        i += l;
    }
    CLOSE_REGION(n);
#undef CLOSE_REGION
    if (*changed)
        rc = text_append(out, s + copied, n - copied);
    return rc;
}

/*
 * Normalizes s[0..n) into *out (malloc'd, caller frees) or sets *out to NULL
 * when no normalizer changes the text. Input must be valid UTF-8.
 */
static int normalize(const eng_tok *t, const char *s, size_t n, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = n;
    eng_tok_text cur = {0};
    for (size_t k = 0; k < t->n_norms; k++) {
        eng_tok_text next = {0};
        bool changed = false;
        int rc = map_form(t, t->norms[k], cur.s ? cur.s : s, cur.s ? cur.len : n, &next, &changed);
        if (rc) {
            eng_tok_text_free(&next);
            eng_tok_text_free(&cur);
            return rc;
        }
        if (changed) {
            eng_tok_text_free(&cur);
            cur = next;
        } else {
            eng_tok_text_free(&next);
        }
    }
    if (cur.s) {
        *out = cur.s;
        *out_len = cur.len;
    }
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Loading                                                                 */

typedef struct load_ctx {
    const char *path;
    eng_diag *diag;
} load_ctx;

static int bad(load_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(load_ctx *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    eng_diag_add(c->diag, "%s: %s", c->path, msg);
    return -1;
}

/* Reads an optional boolean OBJ.KEY; null or absent gives DEF. */
static int get_bool(load_ctx *c, json_t *obj, const char *field, const char *key, bool def, bool *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v))
        return bad(c, "%s.%s: must be true or false", field, key);
    *out = json_is_true(v);
    return 0;
}

static const char *type_of(json_t *obj)
{
    json_t *v = json_object_get(obj, "type");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int load_normalizer(load_ctx *c, eng_tok *t, json_t *n, const char *field)
{
    if (!n || json_is_null(n))
        return 0;
    if (!json_is_object(n))
        return bad(c, "%s: must be an object or null", field);
    const char *type = type_of(n);
    if (!type)
        return bad(c, "%s.type: missing", field);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return bad(c, "%s.normalizers: must be an array", field);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.normalizers[%zu]", field, i);
            if (load_normalizer(c, t, json_array_get(list, i), sub))
                return -1;
        }
        return 0;
    }
    static const struct { const char *name; enum norm_kind kind; } forms[] = {
        {"NFC", NORM_NFC}, {"NFD", NORM_NFD}, {"NFKC", NORM_NFKC}, {"NFKD", NORM_NFKD},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        if (strcmp(type, forms[i].name))
            continue;
        if (t->n_norms == sizeof t->norms / sizeof t->norms[0])
            return bad(c, "%s: too many normalizers", field);
        t->norms[t->n_norms++] = forms[i].kind;
        return 0;
    }
    return bad(c, "%s.type: normalizer '%s' is not supported (NFC, NFD, NFKC, NFKD, Sequence)", field, type);
}

static int append_ranges(eng_tok_text *o, const cp_range *r, size_t n)
{
    char buf[48];
    for (size_t i = 0; i < n; i++) {
        int l = r[i].lo == r[i].hi ? snprintf(buf, sizeof buf, "\\x{%X}", (unsigned)r[i].lo)
                                   : snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", (unsigned)r[i].lo, (unsigned)r[i].hi);
        if (text_append(o, buf, (size_t)l))
            return ENG_TOK_ENOMEM;
    }
    return 0;
}

/*
 * Rewrites a split pattern written for the reference's regex engine so that
 * PCRE2 gives it the same meaning: \s becomes the White_Space class (PCRE2's
 * \s also takes U+180E), as does \S outside classes, and \p{L}, \p{N} (and
 * \P{L}, \P{N} outside classes) gain the letters and numbers newer than
 * PCRE2's tables. Everything else, including \S and \P inside a class, is
 * copied unchanged.
 */
static int translate_pattern(const char *pat, size_t len, eng_tok_text *o)
{
    static const cp_range *const tabs[2] = {letters_since_u14, numbers_since_u14};
    static const size_t ntabs[2] = {sizeof letters_since_u14 / sizeof letters_since_u14[0],
                                    sizeof numbers_since_u14 / sizeof numbers_since_u14[0]};
    static const char *const props[2] = {"\\p{L}", "\\p{N}"};
    bool in_class = false;
    int rc = text_append(o, "", 0);
    for (size_t i = 0; i < len && !rc;) {
        char c = pat[i];
        if (c == '\\' && i + 1 < len) {
            char e = pat[i + 1];
            if (e == 'Q') {
                size_t j = i + 2;
                while (j + 1 < len && !(pat[j] == '\\' && pat[j + 1] == 'E'))
                    j++;
                j = j + 1 < len ? j + 2 : len;
                rc = text_append(o, pat + i, j - i);
                i = j;
                continue;
            }
            if (e == 's' || (e == 'S' && !in_class)) {
                if (!in_class)
                    rc = text_append(o, e == 's' ? "[" : "[^", e == 's' ? 1 : 2);
                if (!rc)
                    rc = text_append(o, WHITE_SPACE_ITEMS, sizeof WHITE_SPACE_ITEMS - 1);
                if (!rc && !in_class)
                    rc = text_append(o, "]", 1);
                i += 2;
                continue;
            }
            if ((e == 'p' || e == 'P') && i + 2 < len) {
                size_t name = i + 2, name_len = 1, next = i + 3;
                if (pat[i + 2] == '{') {
                    const char *close = memchr(pat + i + 3, '}', len - (i + 3));
                    name = i + 3;
                    name_len = close ? (size_t)(close - (pat + name)) : 0;
                    next = close ? (size_t)(close - pat) + 1 : len;
                }
                int which = -1;
                if ((name_len == 1 && pat[name] == 'L') || (name_len == 6 && !memcmp(pat + name, "Letter", 6)))
                    which = 0;
                else if ((name_len == 1 && pat[name] == 'N') || (name_len == 6 && !memcmp(pat + name, "Number", 6)))
                    which = 1;
                if (which < 0 || (e == 'P' && in_class)) {
                    rc = text_append(o, pat + i, next - i);
                } else {
                    if (!in_class)
                        rc = text_append(o, e == 'p' ? "[" : "[^", e == 'p' ? 1 : 2);
                    if (!rc)
                        rc = text_append(o, props[which], strlen(props[which]));
                    if (!rc)
                        rc = append_ranges(o, tabs[which], ntabs[which]);
                    if (!rc && !in_class)
                        rc = text_append(o, "]", 1);
                }
                i = next;
                continue;
            }
            rc = text_append(o, pat + i, 2);
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            /* A ']' right after '[' or '[^' is a literal member. */
            size_t j = i + 1;
            if (j < len && pat[j] == '^')
                j++;
            if (j < len && pat[j] == ']')
                j++;
            rc = text_append(o, pat + i, j - i);
            in_class = true;
            i = j;
            continue;
        }
        if (in_class && c == '[' && i + 1 < len && pat[i + 1] == ':') {
            /* A POSIX class such as [:alpha:] inside a class. */
            size_t j = i + 2;
            while (j + 1 < len && !(pat[j] == ':' && pat[j + 1] == ']'))
                j++;
            j = j + 1 < len ? j + 2 : len;
            rc = text_append(o, pat + i, j - i);
            i = j;
            continue;
        }
        if (in_class && c == ']')
            in_class = false;
        rc = text_append(o, pat + i, 1);
        i++;
    }
    return rc;
}

static int compile_pattern(load_ctx *c, const char *field, const char *pat, size_t len, bool literal, pcre2_code **out)
{
    *out = NULL;
    if (literal && len == 0)
        return 0;
    int err = 0;
    PCRE2_SIZE off = 0;
    uint32_t opts = PCRE2_UTF;
    eng_tok_text tr = {0};
    if (literal) {
        opts |= PCRE2_LITERAL;
    } else {
        opts |= PCRE2_UCP;
        if (utf8_valid_prefix((const unsigned char *)pat, len) != len)
            return bad(c, "%s: the pattern is not valid UTF-8", field);
        if (translate_pattern(pat, len, &tr)) {
            eng_tok_text_free(&tr);
            return bad(c, "%s: out of memory", field);
        }
        pat = tr.s;
        len = tr.len;
    }
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, opts, &err, &off, NULL);
    eng_tok_text_free(&tr);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return bad(c, "%s: cannot compile the pattern: %s", field, (const char *)msg);
    }
    /* JIT is an optimization; the interpreter runs the same pattern if it is unavailable. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    *out = re;
    return 0;
}

static int add_step(load_ctx *c, eng_tok *t, const char *field, pretok_step **out)
{
    if (t->n_steps == sizeof t->steps / sizeof t->steps[0])
        return bad(c, "%s: too many pre-tokenizer steps", field);
    *out = &t->steps[t->n_steps++];
    memset(*out, 0, sizeof **out);
    return 0;
}

static int load_pretokenizer(load_ctx *c, eng_tok *t, json_t *p, const char *field)
{
    if (!p || json_is_null(p))
        return 0;
    if (!json_is_object(p))
        return bad(c, "%s: must be an object or null", field);
    const char *type = type_of(p);
    if (!type)
        return bad(c, "%s.type: missing", field);
    if (!strcmp(type, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return bad(c, "%s.pretokenizers: must be an array", field);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s.pretokenizers[%zu]", field, i);
            if (load_pretokenizer(c, t, json_array_get(list, i), sub))
                return -1;
        }
        return 0;
    }
    if (!strcmp(type, "Split")) {
        pretok_step *st = NULL;
        if (add_step(c, t, field, &st))
            return -1;
        json_t *pat = json_object_get(p, "pattern");
        json_t *rx = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
        json_t *lit = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
        char sub[256];
        if (json_is_string(rx)) {
            snprintf(sub, sizeof sub, "%s.pattern.Regex", field);
            if (compile_pattern(c, sub, json_string_value(rx), json_string_length(rx), false, &st->re))
                return -1;
        } else if (json_is_string(lit)) {
            snprintf(sub, sizeof sub, "%s.pattern.String", field);
            if (compile_pattern(c, sub, json_string_value(lit), json_string_length(lit), true, &st->re))
                return -1;
        } else {
            return bad(c, "%s.pattern: must be {\"Regex\": string} or {\"String\": string}", field);
        }
        json_t *beh = json_object_get(p, "behavior");
        static const struct { const char *name; enum split_behavior b; } names[] = {
            {"Removed", SPLIT_REMOVED},           {"Isolated", SPLIT_ISOLATED},
            {"MergedWithPrevious", SPLIT_MERGED_PREV}, {"MergedWithNext", SPLIT_MERGED_NEXT},
            {"Contiguous", SPLIT_CONTIGUOUS},
        };
        size_t i = 0;
        for (; json_is_string(beh) && i < sizeof names / sizeof names[0]; i++)
            if (!strcmp(json_string_value(beh), names[i].name))
                break;
        if (!json_is_string(beh) || i == sizeof names / sizeof names[0])
            return bad(c, "%s.behavior: must be one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous", field);
        st->behavior = names[i].b;
        return get_bool(c, p, field, "invert", false, &st->invert);
    }
    if (!strcmp(type, "ByteLevel")) {
        pretok_step *st = NULL;
        bool use_regex = true, trim = true;
        if (add_step(c, t, field, &st))
            return -1;
        st->byte_level = true;
        st->behavior = SPLIT_ISOLATED;
        if (get_bool(c, p, field, "add_prefix_space", true, &st->add_prefix_space) ||
            get_bool(c, p, field, "trim_offsets", true, &trim) ||
            get_bool(c, p, field, "use_regex", true, &use_regex))
            return -1;
        if (use_regex)
            return compile_pattern(c, field, GPT2_PATTERN, sizeof GPT2_PATTERN - 1, false, &st->re);
        return 0;
    }
    return bad(c, "%s.type: pre-tokenizer '%s' is not supported (Split, ByteLevel, Sequence)", field, type);
}

/* Decoded bytes of a token string: each character mapped back to its byte, or the raw UTF-8 if any is not in the alphabet. */
static size_t token_to_bytes(const char *s, size_t n, const uint8_t cp_byte[0x144], const bool cp_in[0x144], char *dst, bool *pure)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t l = utf8_decode((const unsigned char *)s + i, &cp);
        if (cp >= 0x144 || !cp_in[cp]) {
            memcpy(dst, s, n);
            *pure = false;
            return n;
        }
        dst[k++] = (char)cp_byte[cp];
        i += l;
    }
    *pure = true;
    return k;
}

static int merge_insert(eng_tok *t, int32_t a, int32_t b, uint32_t rank, int32_t id)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        merge_slot *s = &t->merges[i];
        if (s->rank == UINT32_MAX || s->key == key) {
            /* A repeated pair keeps the later rank, as a map built from the list would. */
            s->key = key;
            s->rank = rank;
            s->id = id;
            return 0;
        }
    }
}

static inline const merge_slot *merge_find(const eng_tok *t, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t i = mix64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const merge_slot *s = &t->merges[i];
        if (s->rank == UINT32_MAX)
            return NULL;
        if (s->key == key)
            return s;
    }
}

/* Id of the vocabulary token spelled s[0..n) in the byte-level alphabet, or -1. */
static int32_t vocab_get(json_t *vocab, const char *s, size_t n)
{
    json_t *v = json_object_getn(vocab, s, n);
    return json_is_integer(v) ? (int32_t)json_integer_value(v) : -1;
}

static int load_merges(load_ctx *c, eng_tok *t, json_t *vocab, json_t *merges)
{
    size_t n = json_array_size(merges);
    /* Load factor at most 2/3: short probes, and the table (4 MB for Qwen3) stays cache-friendlier. */
    size_t cap = pow2_at_least(n + n / 2 + 16);
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges)
        return bad(c, "model.merges: out of memory");
    for (size_t i = 0; i < cap; i++)
        t->merges[i].rank = UINT32_MAX;
    t->merge_mask = cap - 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    int rc = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t la, lb;
        if (json_is_string(m)) {
            a = json_string_value(m);
            const char *sp = memchr(a, ' ', json_string_length(m));
            if (!sp || memchr(sp + 1, ' ', json_string_length(m) - (size_t)(sp + 1 - a))) {
                bad(c, "model.merges[%zu]: expected \"A B\" (two tokens separated by one space)", i);
                goto out;
            }
            la = (size_t)(sp - a);
            b = sp + 1;
            lb = json_string_length(m) - la - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            la = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            lb = json_string_length(json_array_get(m, 1));
        } else {
            bad(c, "model.merges[%zu]: expected \"A B\" or [\"A\", \"B\"]", i);
            goto out;
        }
        int32_t ia = vocab_get(vocab, a, la), ib = vocab_get(vocab, b, lb);
        if (ia < 0 || ib < 0) {
            bad(c, "model.merges[%zu]: token '%.*s' is not in model.vocab", i, (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
            goto out;
        }
        if (la + lb > buf_cap) {
            buf_cap = 2 * (la + lb);
            char *nb = realloc(buf, buf_cap);
            if (!nb) {
                bad(c, "model.merges: out of memory");
                goto out;
            }
            buf = nb;
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int32_t id = vocab_get(vocab, buf, la + lb);
        if (id < 0) {
            bad(c, "model.merges[%zu]: merged token '%.*s' is not in model.vocab", i, (int)(la + lb), buf);
            goto out;
        }
        merge_insert(t, ia, ib, (uint32_t)i, id);
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

static int load_model(load_ctx *c, eng_tok *t, json_t *model, json_t **vocab_out)
{
    if (!json_is_object(model))
        return bad(c, "model: missing or not an object");
    const char *type = type_of(model);
    json_t *merges = json_object_get(model, "merges");
    if (!type && !merges)
        return bad(c, "model.type: missing");
    if (type && strcmp(type, "BPE"))
        return bad(c, "model.type: model '%s' is not supported (only BPE)", type);
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        return bad(c, "model.vocab: missing or not an object");
    if (!json_is_array(merges))
        return bad(c, "model.merges: missing or not an array");

    json_t *v = json_object_get(model, "dropout");
    if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0.0))
        return bad(c, "model.dropout: BPE dropout is not supported");
    v = json_object_get(model, "continuing_subword_prefix");
    if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
        return bad(c, "model.continuing_subword_prefix: not supported with byte-level BPE");
    v = json_object_get(model, "end_of_word_suffix");
    if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
        return bad(c, "model.end_of_word_suffix: not supported with byte-level BPE");
    bool byte_fallback = false;
    if (get_bool(c, model, "model", "byte_fallback", false, &byte_fallback) ||
        get_bool(c, model, "model", "fuse_unk", false, &t->fuse_unk) ||
        get_bool(c, model, "model", "ignore_merges", false, &t->ignore_merges))
        return -1;
    if (byte_fallback)
        return bad(c, "model.byte_fallback: not supported with byte-level BPE");

    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= MAX_IDS)
            return bad(c, "model.vocab: id of '%s' must be an integer in [0, %d)", key, MAX_IDS);
        if ((size_t)json_integer_value(val) + 1 > t->n_ids)
            t->n_ids = (size_t)json_integer_value(val) + 1;
    }
    t->unk_id = -1;
    v = json_object_get(model, "unk_token");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad(c, "model.unk_token: must be a string or null");
        t->unk_id = vocab_get(vocab, json_string_value(v), json_string_length(v));
        if (t->unk_id < 0)
            return bad(c, "model.unk_token: '%s' is not in model.vocab", json_string_value(v));
    }
    if (load_merges(c, t, vocab, merges))
        return -1;
    *vocab_out = vocab;
    return 0;
}

static int load_added(load_ctx *c, eng_tok *t, json_t *list)
{
    if (!list || json_is_null(list))
        return 0;
    if (!json_is_array(list))
        return bad(c, "added_tokens: must be an array");
    size_t n = json_array_size(list);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added)
        return bad(c, "added_tokens: out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(list, i);
        char field[64];
        snprintf(field, sizeof field, "added_tokens[%zu]", i);
        if (!json_is_object(a))
            return bad(c, "%s: must be an object", field);
        json_t *id = json_object_get(a, "id"), *content = json_object_get(a, "content");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= MAX_IDS)
            return bad(c, "%s.id: must be an integer in [0, %d)", field, MAX_IDS);
        if (!json_is_string(content) || json_string_length(content) == 0)
            return bad(c, "%s.content: must be a non-empty string", field);
        added_tok *at = &t->added[t->n_added];
        at->id = (int32_t)json_integer_value(id);
        if (get_bool(c, a, field, "single_word", false, &at->single_word) ||
            get_bool(c, a, field, "lstrip", false, &at->lstrip) ||
            get_bool(c, a, field, "rstrip", false, &at->rstrip) ||
            get_bool(c, a, field, "special", false, &at->special))
            return -1;
        /* A token is normalized unless it says otherwise; special tokens default to not. */
        if (get_bool(c, a, field, "normalized", !at->special, &at->normalized))
            return -1;
        if (strlen(json_string_value(content)) != json_string_length(content))
            return bad(c, "%s.content: must not hold NUL characters", field);
        at->match_len = json_string_length(content);
        at->content = strdup(json_string_value(content));
        at->match = strdup(json_string_value(content));
        t->n_added++;
        if (!at->content || !at->match)
            return bad(c, "%s: out of memory", field);
        if ((size_t)at->id + 1 > t->n_ids)
            t->n_ids = (size_t)at->id + 1;
    }
    return 0;
}

/* Buckets the added tokens with the given "normalized" flag by first byte, longest first. */
static int build_added_set(eng_tok *t, bool normalized, added_set *s)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n_added; i++)
        n += t->added[i].normalized == normalized && t->added[i].match_len > 0;
    s->order = malloc((n ? n : 1) * sizeof *s->order);
    if (!s->order)
        return ENG_TOK_ENOMEM;
    s->n = n;
    uint32_t count[256] = {0};
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized && t->added[i].match_len > 0)
            count[(unsigned char)t->added[i].match[0]]++;
    s->first[0] = 0;
    for (int b = 0; b < 256; b++)
        s->first[b + 1] = s->first[b] + count[b];
    uint32_t fill[256];
    memcpy(fill, s->first, sizeof fill);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized && t->added[i].match_len > 0)
            s->order[fill[(unsigned char)t->added[i].match[0]]++] = (uint32_t)i;
    /* Insertion sort per bucket by length, longest first (buckets are small). */
    for (int b = 0; b < 256; b++) {
        for (uint32_t i = s->first[b] + 1; i < s->first[b + 1]; i++) {
            uint32_t x = s->order[i];
            uint32_t j = i;
            while (j > s->first[b] && t->added[s->order[j - 1]].match_len < t->added[x].match_len) {
                s->order[j] = s->order[j - 1];
                j--;
            }
            s->order[j] = x;
        }
    }
    return 0;
}

static int build_tables(load_ctx *c, eng_tok *t, json_t *vocab)
{
    int32_t byte_cp[256];
    uint8_t cp_byte[0x144] = {0};
    bool cp_in[0x144] = {false};
    byte_alphabet(byte_cp);
    for (int b = 0; b < 256; b++) {
        cp_byte[byte_cp[b]] = (uint8_t)b;
        cp_in[byte_cp[b]] = true;
    }

    size_t blob_cap = 0;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) blob_cap += strlen(key);
    for (size_t i = 0; i < t->n_added; i++)
        blob_cap += t->added[i].match_len;
    if (blob_cap >= UINT32_MAX)
        return bad(c, "model.vocab: too large");
    t->tok_off = calloc(t->n_ids ? t->n_ids : 1, sizeof *t->tok_off);
    t->tok_len = malloc((t->n_ids ? t->n_ids : 1) * sizeof *t->tok_len);
    t->tok_flags = calloc(t->n_ids ? t->n_ids : 1, 1);
    t->blob = malloc(blob_cap + 1);
    if (!t->tok_off || !t->tok_len || !t->tok_flags || !t->blob)
        return bad(c, "model.vocab: out of memory");
    for (size_t i = 0; i < t->n_ids; i++)
        t->tok_len[i] = UINT32_MAX;

    size_t used = 0, n_pure = 0;
    json_object_foreach(vocab, key, val) {
        int32_t id = (int32_t)json_integer_value(val);
        bool pure;
        size_t len = token_to_bytes(key, strlen(key), cp_byte, cp_in, t->blob + used, &pure);
        t->tok_off[id] = (uint32_t)used;
        t->tok_len[id] = (uint32_t)len;
        t->tok_flags[id] = TOK_PRESENT | (pure ? TOK_PURE : 0);
        n_pure += pure;
        used += len;
    }
    /* Added tokens decode to their content, taking precedence over a vocabulary entry with the same id. */
    for (size_t i = 0; i < t->n_added; i++) {
        const added_tok *a = &t->added[i];
        bool pure;
        size_t len = token_to_bytes(a->match, a->match_len, cp_byte, cp_in, t->blob + used, &pure);
        t->tok_off[a->id] = (uint32_t)used;
        t->tok_len[a->id] = (uint32_t)len;
        t->tok_flags[a->id] = (uint8_t)(TOK_PRESENT | (a->special ? TOK_SPECIAL : 0) | (t->tok_flags[a->id] & TOK_PURE));
        used += len;
    }

    for (int b = 0; b < 256; b++) {
        char u[4];
        int32_t cp = byte_cp[b];
        size_t l = cp < 0x80 ? (u[0] = (char)cp, 1) : (u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), 2);
        t->byte_id[b] = vocab_get(vocab, u, l);
    }

    if (t->ignore_merges) {
        size_t cap = pow2_at_least(2 * n_pure + 16);
        t->word_slots = malloc(cap * sizeof *t->word_slots);
        if (!t->word_slots)
            return bad(c, "model.vocab: out of memory");
        memset(t->word_slots, 0xff, cap * sizeof *t->word_slots);
        t->word_mask = cap - 1;
        json_object_foreach(vocab, key, val) {
            int32_t id = (int32_t)json_integer_value(val);
            if (!(t->tok_flags[id] & TOK_PURE))
                continue;
            size_t i = hash_bytes(t->blob + t->tok_off[id], t->tok_len[id]) & t->word_mask;
            while (t->word_slots[i] >= 0)
                i = (i + 1) & t->word_mask;
            t->word_slots[i] = id;
        }
    }
    return 0;
}

static int load_decoder(load_ctx *c, json_t *d)
{
    if (!d || json_is_null(d))
        return bad(c, "decoder: missing (a ByteLevel decoder is required)");
    if (!json_is_object(d))
        return bad(c, "decoder: must be an object");
    const char *type = type_of(d);
    if (!type)
        return bad(c, "decoder.type: missing");
    if (strcmp(type, "ByteLevel"))
        return bad(c, "decoder.type: decoder '%s' is not supported (only ByteLevel)", type);
    return 0;
}

static int load_post_processor(load_ctx *c, json_t *p)
{
    if (!p || json_is_null(p))
        return 0;
    const char *type = json_is_object(p) ? type_of(p) : NULL;
    if (!type)
        return bad(c, "post_processor.type: missing");
    /* ByteLevel only adjusts offsets; processors that insert tokens are not implemented. */
    if (strcmp(type, "ByteLevel"))
        return bad(c, "post_processor.type: post-processor '%s' is not supported (only ByteLevel)", type);
    return 0;
}

static char *find_file(const char *path)
{
    struct stat st;
    char *p = NULL;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        if (asprintf(&p, "%s/tokenizer.json", path) < 0)
            return NULL;
        return p;
    }
    return strdup(path);
}

int eng_tok_load(const char *path, eng_tok **out, eng_diag *diag)
{
    *out = NULL;
    json_t *root = NULL;
    eng_tok *t = calloc(1, sizeof *t);
    if (!t) {
        eng_diag_add(diag, "%s: out of memory", path);
        return -1;
    }
    t->path = find_file(path);
    if (!t->path) {
        eng_diag_add(diag, "%s: out of memory", path);
        goto fail;
    }
    load_ctx c = {t->path, diag};
    /* Parsing from memory is several times faster than jansson's reading a FILE by character. */
    eng_tok_text file = {0};
    FILE *f = fopen(t->path, "rb");
    if (!f) {
        bad(&c, "cannot open: %s", strerror(errno));
        goto fail;
    }
    char chunk[1 << 16];
    size_t got;
    int rc_read = 0;
    while (!rc_read && (got = fread(chunk, 1, sizeof chunk, f)) > 0)
        rc_read = text_append(&file, chunk, got);
    if (rc_read || ferror(f)) {
        bad(&c, "cannot read: %s", rc_read ? "out of memory" : strerror(errno));
        fclose(f);
        eng_tok_text_free(&file);
        goto fail;
    }
    fclose(f);
    json_error_t jerr;
    root = json_loadb(file.s ? file.s : "", file.len, 0, &jerr);
    eng_tok_text_free(&file);
    if (!root) {
        bad(&c, "line %d column %d: %s", jerr.line, jerr.column, jerr.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        bad(&c, "top level: must be an object");
        goto fail;
    }

    json_t *vocab = NULL;
    if (load_model(&c, t, json_object_get(root, "model"), &vocab) ||
        load_added(&c, t, json_object_get(root, "added_tokens")) ||
        load_normalizer(&c, t, json_object_get(root, "normalizer"), "normalizer") ||
        load_pretokenizer(&c, t, json_object_get(root, "pre_tokenizer"), "pre_tokenizer") ||
        load_decoder(&c, json_object_get(root, "decoder")) ||
        load_post_processor(&c, json_object_get(root, "post_processor")))
        goto fail;

    size_t n_byte_level = 0;
    for (size_t i = 0; i < t->n_steps; i++)
        n_byte_level += t->steps[i].byte_level;
    if (n_byte_level != 1 || !t->steps[t->n_steps - 1].byte_level) {
        bad(&c, "pre_tokenizer: must end with one ByteLevel step (only byte-level BPE is supported)");
        goto fail;
    }

    if (build_tables(&c, t, vocab))
        goto fail;

    if (t->n_norms && find_second_starters(t)) {
        bad(&c, "out of memory");
        goto fail;
    }

    /* Tokens matched after normalization are matched in their normalized form. */
    for (size_t i = 0; i < t->n_added; i++) {
        added_tok *a = &t->added[i];
        if (!a->normalized || !t->n_norms)
            continue;
        char *norm = NULL;
        size_t len = 0;
        bool ok = utf8_valid_prefix((const unsigned char *)a->match, a->match_len) == a->match_len;
        if (!ok || normalize(t, a->match, a->match_len, &norm, &len)) {
            bad(&c, "added_tokens[%zu].content: cannot be normalized", i);
            goto fail;
        }
        if (norm) {
            free(a->match);
            a->match = norm;
            a->match_len = len;
        }
    }
    if (build_added_set(t, false, &t->raw_set) || build_added_set(t, true, &t->norm_set)) {
        bad(&c, "added_tokens: out of memory");
        goto fail;
    }

    t->enc = eng_tok_enc_new();
    if (!t->enc) {
        bad(&c, "out of memory");
        goto fail;
    }

    json_decref(root);
    *out = t;
    return 0;
fail:
    json_decref(root);
    eng_tok_free(t);
    return -1;
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
    utf8_decode(s + j, &cp);
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
            bool word_after = stop < n && (utf8_decode(u + stop, &cp), is_word_cp(cp));
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
                size_t l = utf8_decode(u + stop, &cp);
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
    int rc = normalize(t, s, n, &norm, &len);
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
    if (utf8_valid_prefix((const unsigned char *)text, len) != len) {
        enc->clean.len = 0;
        if (utf8_lossy_append((const unsigned char *)text, len, false, &enc->clean, NULL))
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
    int rc = utf8_lossy_append((const unsigned char *)raw, k, false, out, NULL);
    free(raw);
    if (rc && out->s) {
        out->len = old;
        out->s[old] = '\0';
    }
    if (!rc && !out->s)
        rc = text_append(out, "", 0);
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
    if (text_append(&s->raw, s->held, s->n_held) ||
        text_append(&s->raw, t->blob + t->tok_off[id], t->tok_len[id]))
        return ENG_TOK_ENOMEM;
    size_t consumed = 0;
    if (utf8_lossy_append((const unsigned char *)s->raw.s, s->raw.len, true, &s->out, &consumed))
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
    int rc = utf8_lossy_append(s->held, s->n_held, false, &s->out, NULL);
    s->n_held = 0;
    *text = s->out.s;
    *len = s->out.len;
    return rc;
}
