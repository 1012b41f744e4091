/*
 * tok_load: reads a Hugging Face tokenizer.json into an eng_tok (see
 * tokenizer.h for what is supported): the normalizer and pre-tokenizer
 * pipelines, the BPE model and its merges, the added tokens, and the tables
 * encoding and decoding use. Called by eng_tok_load on the loading thread;
 * what it builds is read-only afterwards.
 */
#include "engine/tok_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* The split pattern of the ByteLevel pre-tokenizer when its use_regex is set (GPT-2's). */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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

/* A leaf of a normalizer or pre-tokenizer pipeline: the object N at FIELD, of type TYPE (not "Sequence"). */
typedef int (*leaf_fn)(load_ctx *c, eng_tok *t, json_t *n, const char *field, const char *type);

/*
 * Reads a normalizer or pre-tokenizer pipeline at FIELD (null: none): a
 * "Sequence" recurses into its array LIST_KEY ("normalizers" or
 * "pretokenizers"), every other type goes to LEAF, in order.
 */
static int load_pipeline(load_ctx *c, eng_tok *t, json_t *n, const char *field, const char *list_key, leaf_fn leaf)
{
    if (!n || json_is_null(n))
        return 0;
    if (!json_is_object(n))
        return bad(c, "%s: must be an object or null", field);
    const char *type = type_of(n);
    if (!type)
        return bad(c, "%s.type: missing", field);
    if (strcmp(type, "Sequence"))
        return leaf(c, t, n, field, type);
    json_t *list = json_object_get(n, list_key);
    if (!json_is_array(list))
        return bad(c, "%s.%s: must be an array", field, list_key);
    for (size_t i = 0; i < json_array_size(list); i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.%s[%zu]", field, list_key, i);
        if (load_pipeline(c, t, json_array_get(list, i), sub, list_key, leaf))
            return -1;
    }
    return 0;
}

static int normalizer_leaf(load_ctx *c, eng_tok *t, json_t *n, const char *field, const char *type)
{
    (void)n;
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
        if (tok_utf8_valid_prefix((const unsigned char *)pat, len) != len)
            return bad(c, "%s: the pattern is not valid UTF-8", field);
        if (tok_translate_pattern(pat, len, &tr)) {
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

static int pretokenizer_leaf(load_ctx *c, eng_tok *t, json_t *p, const char *field, const char *type)
{
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
        size_t l = tok_utf8_decode((const unsigned char *)s + i, &cp);
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

/* model.merges from the JSON tree into L, resolved against L's vocabulary. */
static int merges_from_json(load_ctx *c, json_t *merges, tok_bpe_lists *l)
{
    size_t n = json_array_size(merges);
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
        int32_t ia = tok_vocab_get(&l->vocab, a, la), ib = tok_vocab_get(&l->vocab, b, lb);
        if (ia < 0 || ib < 0) {
            bad(c, "model.merges[%zu]: token '%.*s' is not in model.vocab", i, (int)(ia < 0 ? la : lb), ia < 0 ? a : b);
            goto out;
        }
        /* Never NULL, even for two empty spellings: memcpy and the lookup need a pointer. */
        if (!buf || la + lb > buf_cap) {
            buf_cap = 2 * (la + lb) + 16;
            char *nb = realloc(buf, buf_cap);
            if (!nb) {
                bad(c, "model.merges: out of memory");
                goto out;
            }
            buf = nb;
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int32_t id = tok_vocab_get(&l->vocab, buf, la + lb);
        if (id < 0) {
            bad(c, "model.merges[%zu]: merged token '%.*s' is not in model.vocab", i, (int)(la + lb), buf);
            goto out;
        }
        if (tok_bpe_lists_add_merge(l, ia, ib, id)) {
            bad(c, "model.merges: out of memory");
            goto out;
        }
    }
    rc = 0;
out:
    free(buf);
    return rc;
}

/* The merge table: merge i has rank i. */
static int insert_merges(load_ctx *c, eng_tok *t, const tok_bpe_lists *l)
{
    size_t n = l->n_merges;
    /* Load factor at most 2/3: short probes, and the table (4 MB for Qwen3) stays cache-friendlier. */
    size_t cap = pow2_at_least(n + n / 2 + 16);
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges)
        return bad(c, "model.merges: out of memory");
    tok_prefault(t->merges, cap * sizeof *t->merges);
    for (size_t i = 0; i < cap; i++)
        t->merges[i].rank = UINT32_MAX;
    t->merge_mask = cap - 1;
    for (size_t i = 0; i < n; i++)
        merge_insert(t, l->merges[i].a, l->merges[i].b, (uint32_t)i, l->merges[i].id);
    return 0;
}

/*
 * The BPE model. With READ_DIRECTLY, L already holds the vocabulary and
 * merges (tok_read_bpe_lists) and the tree has empty stand-ins for them;
 * otherwise they are read from the tree into L.
 */
static int load_model(load_ctx *c, eng_tok *t, json_t *model, bool read_directly, tok_bpe_lists *l)
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

    if (read_directly) {
        if (json_object_size(vocab) || json_array_size(merges))
            return bad(c, "model: the stand-ins for vocab and merges are not where they were read");
    } else {
        const char *key;
        json_t *val;
        json_object_foreach(vocab, key, val) {
            if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= MAX_IDS)
                return bad(c, "model.vocab: id of '%s' must be an integer in [0, %d)", key, MAX_IDS);
            /* jansson's keys are unique, so this only fails for memory. */
            if (tok_vocab_add(&l->vocab, key, strlen(key), (int32_t)json_integer_value(val)))
                return bad(c, "model.vocab: out of memory");
        }
    }
    for (size_t i = 0; i < l->vocab.n; i++)
        if ((size_t)l->vocab.ent[i].id + 1 > t->n_ids)
            t->n_ids = (size_t)l->vocab.ent[i].id + 1;
    t->unk_id = -1;
    v = json_object_get(model, "unk_token");
    if (v && !json_is_null(v)) {
        if (!json_is_string(v))
            return bad(c, "model.unk_token: must be a string or null");
        t->unk_id = tok_vocab_get(&l->vocab, json_string_value(v), json_string_length(v));
        if (t->unk_id < 0)
            return bad(c, "model.unk_token: '%s' is not in model.vocab", json_string_value(v));
    }
    if (!read_directly && merges_from_json(c, merges, l))
        return -1;
    return insert_merges(c, t, l);
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

static int build_tables(load_ctx *c, eng_tok *t, const tok_vocab *v)
{
    int32_t byte_cp[256];
    uint8_t cp_byte[0x144] = {0};
    bool cp_in[0x144] = {false};
    byte_alphabet(byte_cp);
    for (int b = 0; b < 256; b++) {
        cp_byte[byte_cp[b]] = (uint8_t)b;
        cp_in[byte_cp[b]] = true;
    }

    size_t blob_cap = v->text_len;
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
    for (size_t e = 0; e < v->n; e++) {
        int32_t id = v->ent[e].id;
        bool pure;
        size_t len = token_to_bytes(v->text + v->ent[e].off, v->ent[e].len, cp_byte, cp_in, t->blob + used, &pure);
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
        t->byte_id[b] = tok_vocab_get(v, u, l);
    }

    if (t->ignore_merges) {
        size_t cap = pow2_at_least(2 * n_pure + 16);
        t->word_slots = malloc(cap * sizeof *t->word_slots);
        if (!t->word_slots)
            return bad(c, "model.vocab: out of memory");
        memset(t->word_slots, 0xff, cap * sizeof *t->word_slots);
        t->word_mask = cap - 1;
        for (size_t e = 0; e < v->n; e++) {
            int32_t id = v->ent[e].id;
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

/* Builds T from the text of its file; with READ_DIRECTLY, the vocabulary and merges come from tok_read_bpe_lists(). */
static int load_text(load_ctx *c, eng_tok *t, const eng_tok_text *file, bool read_directly)
{
    int rc = -1;
    json_t *root = NULL;
    tok_bpe_lists lists = {0};
    json_error_t jerr;
    const char *text = file->s ? file->s : "";
    if (read_directly) {
        char *rest;
        size_t rest_len;
        if (tok_read_bpe_lists(text, file->len, &lists, &rest, &rest_len))
            return bad(c, "model.vocab and model.merges: not read directly");
        root = json_loadb(rest, rest_len, 0, &jerr);
        free(rest);
    } else {
        root = json_loadb(text, file->len, 0, &jerr);
    }
    if (!root) {
        bad(c, "line %d column %d: %s", jerr.line, jerr.column, jerr.text);
        goto out;
    }
    if (!json_is_object(root)) {
        bad(c, "top level: must be an object");
        goto out;
    }

    if (load_model(c, t, json_object_get(root, "model"), read_directly, &lists) ||
        load_added(c, t, json_object_get(root, "added_tokens")) ||
        load_pipeline(c, t, json_object_get(root, "normalizer"), "normalizer", "normalizers", normalizer_leaf) ||
        load_pipeline(c, t, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", "pretokenizers",
                      pretokenizer_leaf) ||
        load_decoder(c, json_object_get(root, "decoder")) ||
        load_post_processor(c, json_object_get(root, "post_processor")))
        goto out;

    size_t n_byte_level = 0;
    for (size_t i = 0; i < t->n_steps; i++)
        n_byte_level += t->steps[i].byte_level;
    if (n_byte_level != 1 || !t->steps[t->n_steps - 1].byte_level) {
        bad(c, "pre_tokenizer: must end with one ByteLevel step (only byte-level BPE is supported)");
        goto out;
    }

    if (build_tables(c, t, &lists.vocab))
        goto out;

    if (t->n_norms && tok_find_second_starters(t)) {
        bad(c, "out of memory");
        goto out;
    }

    /* Tokens matched after normalization are matched in their normalized form. */
    for (size_t i = 0; i < t->n_added; i++) {
        added_tok *a = &t->added[i];
        if (!a->normalized || !t->n_norms)
            continue;
        char *norm = NULL;
        size_t len = 0;
        bool ok = tok_utf8_valid_prefix((const unsigned char *)a->match, a->match_len) == a->match_len;
        if (!ok || tok_normalize(t, a->match, a->match_len, &norm, &len)) {
            bad(c, "added_tokens[%zu].content: cannot be normalized", i);
            goto out;
        }
        if (norm) {
            free(a->match);
            a->match = norm;
            a->match_len = len;
        }
    }
    if (build_added_set(t, false, &t->raw_set) || build_added_set(t, true, &t->norm_set)) {
        bad(c, "added_tokens: out of memory");
        goto out;
    }

    t->enc = eng_tok_enc_new();
    if (!t->enc) {
        bad(c, "out of memory");
        goto out;
    }

    t->read_directly = read_directly;
    rc = 0;
out:
    json_decref(root);
    tok_bpe_lists_free(&lists);
    return rc;
}

/* The whole file at PATH into *OUT (NUL-terminated): sized by fstat, so read once into one buffer. */
static int read_file(const char *path, eng_tok_text *out, load_ctx *c)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bad(c, "cannot open: %s", strerror(errno));
    struct stat st;
    /* One byte beyond the size to see the end of the file, one for the NUL. */
    size_t cap = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? (size_t)st.st_size + 2 : 1 << 16, len = 0;
    char *buf = malloc(cap);
    if (buf)
        tok_prefault(buf, cap);
    for (;;) {
        if (buf && cap - len < 2) {
            char *nb = realloc(buf, 2 * cap);
            if (!nb)
                free(buf);
            buf = nb;
            cap *= 2;
        }
        if (!buf) {
            close(fd);
            return bad(c, "cannot read: out of memory");
        }
        ssize_t got = read(fd, buf + len, cap - len - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return bad(c, "cannot read: %s", strerror(e));
        }
        if (got == 0)
            break;
        len += (size_t)got;
    }
    close(fd);
    buf[len] = '\0';
    *out = (eng_tok_text){buf, len, cap};
    return 0;
}

static eng_tok *tok_new(const char *file_path)
{
    eng_tok *t = calloc(1, sizeof *t);
    if (t && !(t->path = strdup(file_path))) {
        free(t);
        t = NULL;
    }
    return t;
}

int tok_load_text(const char *name, const eng_tok_text *file, bool try_direct, eng_tok **out, eng_diag *diag)
{
    *out = NULL;
    load_ctx c = {name, diag};
    eng_tok *t = NULL;
    int rc = -1;
    if (try_direct) {
        eng_diag quiet;
        eng_diag_init(&quiet);
        load_ctx quiet_ctx = {name, &quiet};
        t = tok_new(name);
        rc = t ? load_text(&quiet_ctx, t, file, true) : -1;
        eng_diag_clear(&quiet);
        if (rc) {
            eng_tok_free(t);
            t = NULL;
        }
    }
    if (rc) {
        t = tok_new(name);
        if (!t)
            return bad(&c, "out of memory");
        rc = load_text(&c, t, file, false);
    }
    if (rc) {
        eng_tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

static int tok_load(const char *path, bool try_direct, eng_tok **out, eng_diag *diag)
{
    *out = NULL;
    char *file_path = find_file(path);
    if (!file_path) {
        eng_diag_add(diag, "%s: out of memory", path);
        return -1;
    }
    load_ctx c = {file_path, diag};
    /* Parsing from memory is several times faster than jansson's reading a FILE by character. */
    eng_tok_text file = {0};
    int rc = read_file(file_path, &file, &c) ? -1 : tok_load_text(file_path, &file, try_direct, out, diag);
    eng_tok_text_free(&file);
    free(file_path);
    return rc;
}

int eng_tok_load(const char *path, eng_tok **out, eng_diag *diag)
{
    return tok_load(path, true, out, diag);
}

int tok_load_with_jansson(const char *path, eng_tok **out, eng_diag *diag)
{
    return tok_load(path, false, out, diag);
}

bool tok_same_tables(const eng_tok *a, const eng_tok *b)
{
    if (a->n_ids != b->n_ids || memcmp(a->byte_id, b->byte_id, sizeof a->byte_id) || a->unk_id != b->unk_id ||
        a->fuse_unk != b->fuse_unk || a->ignore_merges != b->ignore_merges || a->merge_mask != b->merge_mask ||
        a->word_mask != b->word_mask || a->n_added != b->n_added || a->n_norms != b->n_norms ||
        a->n_steps != b->n_steps)
        return false;
    for (size_t id = 0; id < a->n_ids; id++)
        if (a->tok_len[id] != b->tok_len[id] || a->tok_flags[id] != b->tok_flags[id] ||
            (a->tok_len[id] != UINT32_MAX && memcmp(a->blob + a->tok_off[id], b->blob + b->tok_off[id], a->tok_len[id])))
            return false;
    for (size_t i = 0; i <= a->merge_mask; i++) {
        const merge_slot *x = &a->merges[i], *y = &b->merges[i];
        if (x->rank != y->rank || (x->rank != UINT32_MAX && (x->key != y->key || x->id != y->id)))
            return false;
    }
    if ((a->word_slots || b->word_slots) &&
        (!a->word_slots || !b->word_slots || memcmp(a->word_slots, b->word_slots, (a->word_mask + 1) * sizeof *a->word_slots)))
        return false;
    for (size_t i = 0; i < a->n_added; i++) {
        const added_tok *x = &a->added[i], *y = &b->added[i];
        if (x->id != y->id || x->match_len != y->match_len || memcmp(x->match, y->match, x->match_len) ||
            x->special != y->special || x->normalized != y->normalized || x->single_word != y->single_word ||
            x->lstrip != y->lstrip || x->rstrip != y->rstrip)
            return false;
    }
    for (size_t i = 0; i < a->n_norms; i++)
        if (a->norms[i] != b->norms[i])
            return false;
    for (size_t i = 0; i < a->n_steps; i++) {
        const pretok_step *x = &a->steps[i], *y = &b->steps[i];
        if ((x->re == NULL) != (y->re == NULL) || x->behavior != y->behavior || x->invert != y->invert ||
            x->byte_level != y->byte_level || x->add_prefix_space != y->add_prefix_space)
            return false;
    }
    return true;
}
