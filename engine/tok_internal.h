/*
 * tok_internal: what the tokenizer's files share. tokenizer.c encodes and
 * decodes; tok_load.c reads a tokenizer.json into an eng_tok, with
 * tok_read.c reading its vocabulary and merges straight from the text;
 * tok_unicode.c holds UTF-8, Unicode normalization and the translation of
 * split patterns to PCRE2. Private to those files and their tests; the
 * thread rules are tokenizer.h's.
 */
#ifndef QWEN3D_ENGINE_TOK_INTERNAL_H
#define QWEN3D_ENGINE_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/tokenizer.h"

/* Ids and vocabulary sizes beyond this are rejected as corrupt. */
#define MAX_IDS (1 << 24)
/* Inputs beyond this are refused (BPE symbol positions are 32-bit). */
#define TOK_MAX_INPUT ((size_t)1 << 30)

/* Word cache: direct-mapped, for pre-tokens of 2..CACHE_KEY_MAX bytes. */
#define CACHE_SLOTS 8192
#define CACHE_KEY_MAX 32


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
    int32_t *second_starters;    /* see tok_find_second_starters() */
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
    bool read_directly;      /* model.vocab and model.merges came from tok_read_bpe_lists() */
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

/* ---- hashing ---- */

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t hash_bytes(const void *p, size_t n)
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

static inline size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
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

/* ---- the BPE model's lists, as the loader reads them ---- */

/* Spellings looked up together by the reader (tok_read.c). */
#define TOK_VOCAB_BATCH 96

typedef struct tok_vocab_entry {
    uint32_t off, len;       /* the spelling: text[off], len bytes */
    int32_t id;
} tok_vocab_entry;

/* model.vocab: spellings (byte-level alphabet) with their ids, in file order, hashed. */
typedef struct tok_vocab {
    size_t n, n_cap;
    tok_vocab_entry *ent;
    char *text;
    size_t text_len, text_cap;
    uint64_t *slots;         /* by hash of the spelling: high 32 bits of the hash, entry index + 1; 0 empty */
    size_t mask;
} tok_vocab;

/* A merge resolved to ids: tokens A and B merge into ID; its rank is its index. */
typedef struct tok_merge {
    int32_t a, b, id;
} tok_merge;

typedef struct tok_bpe_lists {
    tok_vocab vocab;
    tok_merge *merges;
    size_t n_merges, merges_cap;
} tok_bpe_lists;

/* Adds a spelling: 0, 1 when it is already there (nothing added), ENG_TOK_ENOMEM. */
int tok_vocab_add(tok_vocab *v, const char *s, size_t n, int32_t id);
/* Id of spelling s[0..n), or -1. */
int32_t tok_vocab_get(const tok_vocab *v, const char *s, size_t n);
int tok_bpe_lists_add_merge(tok_bpe_lists *l, int32_t a, int32_t b, int32_t id);
void tok_bpe_lists_free(tok_bpe_lists *l);

/*
 * Reads model.vocab and model.merges from the text of a tokenizer.json
 * (tok_read.c says what it accepts). Returns 0 with the lists in *OUT and,
 * in *REST (malloc'd, NUL-terminated), the text with "{}" and "[]" in place
 * of the two values; -1, with nothing to free and no message, when the file
 * is not one it reads, so that the caller parses it all with jansson.
 */
int tok_read_bpe_lists(const char *text, size_t len, tok_bpe_lists *out, char **rest, size_t *rest_len);

/* Loads PATH like eng_tok_load() but with jansson alone: the reference tok_read.c is tested against. */
int tok_load_with_jansson(const char *path, eng_tok **out, eng_diag *diag);

/*
 * eng_tok_load() of a file's text, FILE, which messages call NAME; with
 * TRY_DIRECT false, jansson alone reads it. For tests and fuzzing.
 */
int tok_load_text(const char *name, const eng_tok_text *file, bool try_direct, eng_tok **out, eng_diag *diag);

/* Whether two loads built the same tables (what encoding and decoding read). For tests and fuzzing. */
bool tok_same_tables(const eng_tok *a, const eng_tok *b);

/* ---- shared by the files ---- */

/* Bytes of the UTF-8 sequence whose lead byte is C (assumed valid). */
static inline size_t utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

/*
 * Normalizes s[0..n) into *out (malloc'd, caller frees) or sets *out to NULL
 * when no normalizer changes the text. Input must be valid UTF-8.
 */
int tok_normalize(const eng_tok *t, const char *s, size_t n, char **out, size_t *out_len);

/*
 * The starters (combining class 0) that end a canonical decomposition, e.g.
 * U+0BBE in U+0BCA = U+0BC6 U+0BBE: composing forms may join them to what
 * precedes. Found once at load from utf8proc's own data; sorted.
 */
int tok_find_second_starters(eng_tok *t);

/* Decodes one code point of valid UTF-8; returns its length. */
size_t tok_utf8_decode(const unsigned char *s, int32_t *cp);

/* Length of the longest valid UTF-8 prefix of s[0..n). */
size_t tok_utf8_valid_prefix(const unsigned char *s, size_t n);

/*
 * Appends s[0..n) to OUT with invalid sequences replaced by U+FFFD. With
 * hold_tail, a trailing incomplete (but so far valid) sequence is not
 * converted; returns in *consumed how many bytes were.
 */
int tok_utf8_lossy_append(const unsigned char *s, size_t n, bool hold_tail, eng_tok_text *out, size_t *consumed);

/*
 * Rewrites a split pattern written for the reference's regex engine so that
 * PCRE2 gives it the same meaning: \s becomes the White_Space class (PCRE2's
 * \s also takes U+180E), as does \S outside classes, and \p{L}, \p{N} (and
 * \P{L}, \P{N} outside classes) gain the letters and numbers newer than
 * PCRE2's tables. Everything else, including \S and \P inside a class, is
 * copied unchanged.
 */
int tok_translate_pattern(const char *pat, size_t len, eng_tok_text *o);

/*
 * Asks the kernel to map the whole pages of fresh memory P[0..N) at once
 * (MADV_POPULATE_WRITE), where touching them would fault them in one page
 * at a time; a hint, ignored where the kernel lacks it.
 */
void tok_prefault(void *p, size_t n);

/* Appends s[0..n) to T; ENG_TOK_ENOMEM when it cannot grow. */
int tok_text_append(eng_tok_text *t, const void *p, size_t n);

#endif
