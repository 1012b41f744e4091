/*
 * fuzz_schema: the JSON Schema compiler (api/schema.c) and the grammar
 * matcher on what it builds.
 *
 * Input: a JSON document, taken as a schema. Checked: a rejected schema
 * gets a code of the schema error table and an error whose pointer is empty
 * or starts with '/' (an unsupported keyword always has one); an accepted one gives a matcher
 * that, over a vocabulary of the 256 single bytes and a few longer tokens,
 * never reaches a dead end on a seeded walk, whose mask equals the
 * brute-force reference for every id at the first steps, and whose
 * finished text is JSON (jansson parses it).
 */
#include <jansson.h>
#include <string.h>

#include "api/schema.h"
#include "engine/grammar.h"
#include "tests/fuzz/fuzz.h"

#define N_BYTES 256
static const char *const longer[] = {"{\"", "\":", "\",", "\"}", "true", "null", "false", "12", "-0.5e", "\\u00e9",
                                     "\xC3\xA9", "\xF0\x9F\x98\x80", "\":\"", "[{", "}]", ", \"", "\\\"", "2024-"};
#define N_LONGER (sizeof longer / sizeof longer[0])
#define N_VOCAB (N_BYTES + N_LONGER + 1)
#define EOS_ID ((int32_t)(N_VOCAB - 1))
#define MAX_STEPS 300
#define CHECKED_STEPS 6

static eng_gvocab *vocab;
static const char *tok_bytes[N_VOCAB];
static size_t tok_len[N_VOCAB];
static char single[N_BYTES];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    for (int b = 0; b < N_BYTES; b++) {
        single[b] = (char)b;
        tok_bytes[b] = &single[b];
        tok_len[b] = 1;
    }
    for (size_t i = 0; i < N_LONGER; i++) {
        tok_bytes[N_BYTES + i] = longer[i];
        tok_len[N_BYTES + i] = strlen(longer[i]);
    }
    int32_t eos = EOS_ID;
    vocab = eng_gvocab_new_bytes(tok_bytes, tok_len, N_VOCAB, &eos, 1);
    if (!vocab) {
        fprintf(stderr, "fuzz_schema: no vocabulary\n");
        exit(1);
    }
    return 0;
}

static void check_error(int rc, const api_schema_error *e)
{
    FUZZ_CHECK(rc == API_SCHEMA_EUNSUPPORTED || rc == API_SCHEMA_EINVALID || rc == API_SCHEMA_ETOOBIG ||
               rc == API_SCHEMA_EEMPTY || rc == API_SCHEMA_ENOMEM);
    FUZZ_CHECK(memchr(e->keyword, '\0', sizeof e->keyword) && memchr(e->pointer, '\0', sizeof e->pointer) &&
               memchr(e->message, '\0', sizeof e->message));
    FUZZ_CHECK(e->pointer[0] == '\0' || e->pointer[0] == '/');
    FUZZ_CHECK(e->message[0] != '\0');
    /* an unsupported keyword (the empty name is one) has a pointer of its own */
    if (rc == API_SCHEMA_EUNSUPPORTED)
        FUZZ_CHECK(e->pointer[0] == '/');
}

static void walk(const eng_grammar *g, uint64_t seed)
{
    eng_gmatch *m = eng_gmatch_new(g, vocab);
    if (!m)
        return; /* out of memory */
    uint64_t mask[(N_VOCAB + 63) / 64];
    char text[4096];
    size_t len = 0;
    for (int step = 0; step < MAX_STEPS; step++) {
        int n = eng_gmatch_mask(m, mask);
        if (n == ENG_GRAMMAR_ENOMEM || n == ENG_GRAMMAR_EAMBIG)
            break;
        /* every single byte is a token, so a trimmed grammar never strands the text */
        FUZZ_CHECK(n > 0);
        if (step < CHECKED_STEPS)
            for (int32_t id = 0; id < (int32_t)N_VOCAB; id++)
                FUZZ_CHECK((((mask[id / 64] >> (id % 64)) & 1) != 0) == eng_gmatch_allows(m, id));
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        int32_t id = -1;
        if (eng_gmatch_complete(m) && (seed & 1))
            id = EOS_ID;
        for (uint64_t k = seed % (uint64_t)n, i = 0; id < 0 && i < N_VOCAB; i++)
            if (((mask[i / 64] >> (i % 64)) & 1) && k-- == 0)
                id = (int32_t)i;
        FUZZ_CHECK(id >= 0);
        int rc = eng_gmatch_accept(m, id);
        if (rc == ENG_GRAMMAR_ENOMEM || rc == ENG_GRAMMAR_EAMBIG)
            break;
        FUZZ_CHECK(rc == 0);
        if (id == EOS_ID) {
            json_error_t je;
            json_t *j = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
            if (!j)
                fprintf(stderr, "fuzz_schema: output is not JSON (%s): %.*s\n", je.text, (int)len, text);
            FUZZ_CHECK(j);
            json_decref(j);
            break;
        }
        if (len + tok_len[id] > sizeof text)
            break;
        memcpy(text + len, tok_bytes[id], tok_len[id]);
        len += tok_len[id];
    }
    eng_gmatch_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!schema)
        return 0;
    eng_grammar *g = NULL;
    api_schema_error err;
    int rc = api_schema_compile(schema, &g, &err);
    if (rc) {
        FUZZ_CHECK(!g);
        check_error(rc, &err);
    } else {
        FUZZ_CHECK(g);
        uint64_t seed = 0x9E3779B97F4A7C15ull;
        for (size_t i = 0; i < size; i++)
            seed = (seed ^ data[i]) * 0x100000001B3ull;
        walk(g, seed | 1);
        eng_grammar_free(g);
    }
    json_decref(schema);
    return 0;
}
