/*
 * walk: random walks through grammars compiled from JSON Schemas, with the
 * real Qwen3 vocabulary, for tests/grammar.sh.
 *
 * Usage: walk TOKENIZER_JSON SCHEMAS_JSON WALKS SEED OUT_JSONL
 * SCHEMAS_JSON holds an array of cases {"name", "schema"} ("json_object":
 * true compiles JSON mode instead, "schema" then being what ajv checks), or
 * {"name", "tools": [{"name", "parameters"}], "mode": "required"|"auto",
 * "parallel": bool}. Each walk starts from the grammar's start and, at every
 * step, draws one id from the mask with rng_draw() (tests/grammar/rng.h,
 * seeded by SEED, the case and the walk) until it draws EOS. Writes one line per walk:
 * {"case": i, "walk": w, "text": ..., "tokens": n}. Exits 1 when a schema
 * fails to compile, a mask is empty (a dead end), the drawn id is refused,
 * or a walk passes 6000 tokens; the validator (tests/grammar/validate.js)
 * then checks the texts against the schemas with ajv.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/schema.h"
#include "engine/grammar.h"
#include "engine/tokenizer.h"
#include "tests/grammar/rng.h"

#define MAX_STEPS 6000

static int compile_case(const json_t *c, const eng_tok *tok, eng_grammar **g, api_schema_error *err)
{
    const json_t *tools = json_object_get(c, "tools");
    if (json_is_true(json_object_get(c, "json_object")))
        return api_schema_json_object(g, err);
    if (!tools)
        return api_schema_compile(json_object_get(c, "schema"), g, err);
    size_t n = json_array_size(tools);
    api_tool_spec *spec = calloc(n ? n : 1, sizeof *spec);
    if (!spec)
        return API_SCHEMA_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        spec[i].name = json_string_value(json_object_get(json_array_get(tools, i), "name"));
        spec[i].parameters = json_object_get(json_array_get(tools, i), "parameters");
    }
    const char *mode = json_string_value(json_object_get(c, "mode"));
    int rc = api_schema_tools(spec, n, mode && !strcmp(mode, "auto") ? API_TOOLS_AUTO : API_TOOLS_REQUIRED,
                              json_is_true(json_object_get(c, "parallel")), eng_tok_added_id(tok, "<tool_call>"),
                              eng_tok_added_id(tok, "</tool_call>"), g, err);
    free(spec);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: walk TOKENIZER_JSON SCHEMAS_JSON WALKS SEED OUT_JSONL\n");
        return 2;
    }
    eng_diag diag;
    eng_diag_init(&diag);
    eng_tok *tok = NULL;
    if (eng_tok_load(argv[1], &tok, &diag) != 0) {
        eng_diag_print(&diag, stderr, "walk");
        return 1;
    }
    json_error_t je;
    json_t *cases = json_load_file(argv[2], 0, &je);
    if (!json_is_array(cases)) {
        fprintf(stderr, "walk: %s: %s\n", argv[2], je.text);
        return 1;
    }
    int walks = atoi(argv[3]);
    uint64_t seed = strtoull(argv[4], NULL, 10);
    FILE *out = fopen(argv[5], "w");
    /* Qwen3: <|im_end|> and <|endoftext|> end a generation; logits are 151936 wide */
    int32_t eos[2] = {eng_tok_added_id(tok, "<|im_end|>"), eng_tok_added_id(tok, "<|endoftext|>")};
    eng_gvocab *v = eng_gvocab_new(tok, 151936, eos, 2);
    if (!out || !v) {
        fprintf(stderr, "walk: cannot open %s or build the vocabulary\n", argv[5]);
        return 1;
    }
    size_t words = eng_gvocab_mask_words(v);
    uint64_t *mask = malloc(words * sizeof *mask);
    uint16_t *first = rng_first_bytes(tok, words * 64);
    int status = 0;
    for (size_t ci = 0; ci < json_array_size(cases) && !status; ci++) {
        const json_t *c = json_array_get(cases, ci);
        eng_grammar *g = NULL;
        api_schema_error err;
        int rc = compile_case(c, tok, &g, &err);
        if (rc) {
            fprintf(stderr, "walk: case %zu (%s): %s: %s\n", ci, json_string_value(json_object_get(c, "name")),
                    api_schema_strerror(rc), err.message);
            status = 1;
            break;
        }
        eng_gmatch *m = eng_gmatch_new(g, v);
        for (int w = 0; w < walks && m && !status; w++) {
            uint64_t st = seed * 0x9E3779B97F4A7C15ull ^ (ci + 1) * 0xBF58476D1CE4E5B9ull ^ (uint64_t)(w + 1) * 0x94D049BB133111EBull;
            if (!st)
                st = 1;
            eng_gmatch_reset(m);
            eng_tok_ids ids = {0};
            int steps = 0;
            for (;;) {
                int n = eng_gmatch_mask(m, mask);
                if (n <= 0) {
                    fprintf(stderr, "walk: case %zu walk %d step %d: %s\n", ci, w, steps, eng_grammar_strerror(n));
                    status = 1;
                    break;
                }
                int32_t id = rng_draw(mask, words, first, &st);
                if ((rc = eng_gmatch_accept(m, id)) != 0) {
                    fprintf(stderr, "walk: case %zu walk %d: id %d in the mask refused: %s\n", ci, w, id,
                            eng_grammar_strerror(rc));
                    status = 1;
                    break;
                }
                if (eng_gvocab_is_eos(v, id))
                    break;
                if (ids.n == ids.cap) {
                    ids.cap = ids.cap ? ids.cap * 2 : 256;
                    ids.ids = realloc(ids.ids, ids.cap * sizeof *ids.ids);
                }
                ids.ids[ids.n++] = id;
                if (++steps > MAX_STEPS) {
                    fprintf(stderr, "walk: case %zu walk %d: no end after %d tokens\n", ci, w, MAX_STEPS);
                    status = 1;
                    break;
                }
            }
            eng_tok_text text = {0};
            if (!status && eng_tok_decode(tok, ids.ids, ids.n, false, &text) == 0) {
                json_t *line = json_pack("{s:i,s:i,s:s%,s:i}", "case", (int)ci, "walk", w, "text", text.s ? text.s : "",
                                         text.len, "tokens", (int)ids.n);
                char *s = json_dumps(line, JSON_COMPACT);
                fprintf(out, "%s\n", s);
                free(s);
                json_decref(line);
            }
            eng_tok_text_free(&text);
            eng_tok_ids_free(&ids);
        }
        if (!m) {
            fprintf(stderr, "walk: case %zu: no matcher\n", ci);
            status = 1;
        }
        eng_gmatch_free(m);
        eng_grammar_free(g);
    }
    fclose(out);
    free(mask);
    free(first);
    eng_gvocab_free(v);
    json_decref(cases);
    eng_tok_free(tok);
    eng_diag_clear(&diag);
    return status;
}
