/*
 * fuzz_parse: request bodies of POST /v1/completions and
 * /v1/chat/completions through api_parse_request(), and a parsed chat
 * request on through api_request_render() (messages, tool calls and tool
 * results, tools) and its response_format through api_request_grammar(),
 * as the server's routes do.
 *
 * Input: byte 0 picks the endpoint (bit 0: chat), the rest is the body.
 * Checked: a rejected body yields an error code of the API table, a 4xx or
 * 5xx status and an error body that is valid JSON naming message, type,
 * param and code; an accepted one holds exactly one prompt form, fields in
 * the ranges the engine accepts, tools and tool_choice that agree, and
 * (chat) renders without error; its
 * response_format either compiles or is rejected with a 4xx naming a
 * response_format parameter (or runs out of memory).
 */
#include <jansson.h>
#include <string.h>

#include "api/chat_template.h"
#include "api/error.h"
#include "api/parse.h"
#include "engine/sampler.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static void check_error(int rc, const api_error *e)
{
    FUZZ_CHECK(rc < 0 && rc == e->code);
    int status = api_error_status(rc);
    FUZZ_CHECK(status >= 400 && status <= 599);
    FUZZ_CHECK(memchr(e->message, '\0', sizeof e->message) && memchr(e->param, '\0', sizeof e->param));
    char *body = api_error_body(e);
    if (!body)
        return; /* out of memory */
    json_error_t je;
    json_t *root = json_loads(body, 0, &je);
    FUZZ_CHECK(root);
    json_t *err = json_object_get(root, "error");
    FUZZ_CHECK(json_is_string(json_object_get(err, "message")));
    FUZZ_CHECK(json_is_string(json_object_get(err, "type")));
    FUZZ_CHECK(json_object_get(err, "param") && json_object_get(err, "code"));
    json_decref(root);
    free(body);
}

static void check_request(const api_request *r, api_kind kind)
{
    FUZZ_CHECK(r->kind == kind);
    /* At most INT32_MAX: the server adds the prompt's length to it. */
    FUZZ_CHECK(r->max_tokens == -1 || (r->max_tokens >= 1 && r->max_tokens <= INT32_MAX));
    eng_sampling_error se;
    FUZZ_CHECK(eng_sampling_validate(&r->sampling, &se) == 0);
    for (size_t i = 0; i < r->n_stop; i++)
        FUZZ_CHECK(r->stop[i] && r->stop[i][0]);
    if (kind == API_KIND_COMPLETION) {
        FUZZ_CHECK((r->prompt != NULL) != (r->prompt_ids != NULL));
        FUZZ_CHECK(!r->messages && r->n_messages == 0);
        if (r->prompt)
            FUZZ_CHECK(r->prompt[r->prompt_len] == '\0');
        for (size_t i = 0; i < r->n_prompt_ids; i++)
            FUZZ_CHECK(r->prompt_ids[i] >= 0);
        return;
    }
    FUZZ_CHECK(!r->prompt && !r->prompt_ids && r->n_messages >= 1);
    FUZZ_CHECK((r->format == API_FORMAT_JSON_SCHEMA) == (r->format_schema != NULL));
    eng_grammar *g = NULL;
    api_error ge;
    int grc = api_request_grammar(r, &g, &ge);
    if (grc == 0) {
        FUZZ_CHECK((g != NULL) == (r->format != API_FORMAT_TEXT));
    } else {
        FUZZ_CHECK(!g);
        check_error(grc, &ge);
        FUZZ_CHECK(grc == API_ENOMEM || !strncmp(ge.param, "response_format", 15));
    }
    eng_grammar_free(g);
    for (size_t i = 0; i < r->n_messages; i++) {
        const api_chat_msg *m = &r->messages[i];
        FUZZ_CHECK(m->role && m->content);
        FUZZ_CHECK(!strcmp(m->role, "system") || !strcmp(m->role, "user") || !strcmp(m->role, "assistant") ||
                   !strcmp(m->role, "tool"));
        for (size_t k = 0; k < m->n_tool_calls; k++)
            FUZZ_CHECK(!strcmp(m->role, "assistant") && m->tool_calls[k].name && m->tool_calls[k].arguments);
    }
    FUZZ_CHECK(r->n_tools <= API_MAX_TOOLS);
    for (size_t i = 0; i < r->n_tools; i++)
        FUZZ_CHECK(r->tools[i].name && r->tools[i].json);
    FUZZ_CHECK(r->tool_choice != API_TOOL_CHOICE_NAMED || r->tool_named < r->n_tools);
    FUZZ_CHECK(r->tool_choice == API_TOOL_CHOICE_NONE || r->n_tools > 0);
    FUZZ_CHECK(r->tool_choice == API_TOOL_CHOICE_NONE || r->format == API_FORMAT_TEXT);
    char *out = NULL;
    size_t len = 0;
    api_error re;
    int rc = api_request_render(r, true, &out, &len, &re);
    FUZZ_CHECK(rc == 0 || rc == API_ENOMEM);
    if (rc == 0) {
        FUZZ_CHECK(out && strlen(out) <= len);
        static const char head[] = "<|im_start|>";
        FUZZ_CHECK(len >= sizeof head - 1 && !memcmp(out, head, sizeof head - 1));
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    api_kind kind = (data[0] & 1) ? API_KIND_CHAT : API_KIND_COMPLETION;
    api_request *r = NULL;
    api_error e;
    memset(&e, 0, sizeof e);
    int rc = api_parse_request(kind, (const char *)data + 1, size - 1, NULL, &r, &e);
    if (rc != 0) {
        FUZZ_CHECK(!r);
        check_error(rc, &e);
        if (fuzz_report())
            fprintf(stderr, "fuzz_parse: %s: %s\n", e.param, e.message);
        return 0;
    }
    FUZZ_CHECK(r);
    check_request(r, kind);
    api_request_free(r);
    return 0;
}
