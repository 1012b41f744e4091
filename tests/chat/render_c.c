/*
 * render_c: renders the conversations of a cases file (tests/chat/cases.json)
 * with api/chat_template.c and prints the results as one JSON array, one
 * string per case (or {"error": message} when the renderer rejects it), for
 * tests/chat_template.sh to compare with the real Jinja template.
 *
 * With --request each case goes the way of a chat completions request
 * instead: its messages and tools as the JSON body, read by
 * api_parse_request() and rendered by api_request_render(), as the server
 * does (assistant tool_calls, role tool messages, tools' tojson form).
 *
 * Usage: render_c [--request] CASES.json
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/chat_template.h"
#include "api/parse.h"

static const char *opt_string(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* CASE as a chat completions request body, parsed and rendered: a JSON string, or {"error": message}. */
static json_t *render_request(json_t *c)
{
    json_t *body = json_pack("{s:O}", "messages", json_object_get(c, "messages"));
    if (json_object_get(c, "tools"))
        json_object_set(body, "tools", json_object_get(c, "tools"));
    json_t *et = json_object_get(c, "enable_thinking");
    if (json_is_boolean(et))
        json_object_set_new(body, "chat_template_kwargs", json_pack("{s:O}", "enable_thinking", et));
    char *text = json_dumps(body, JSON_PRESERVE_ORDER);
    json_decref(body);
    api_request *q = NULL;
    api_error err;
    char *out = NULL;
    size_t len = 0;
    json_t *agp = json_object_get(c, "add_generation_prompt");
    int rc = text ? api_parse_request(API_KIND_CHAT, text, strlen(text), NULL, &q, &err) : API_ENOMEM;
    if (!rc)
        rc = api_request_render(q, !json_is_false(agp), &out, &len, &err);
    json_t *r = rc ? json_pack("{s:s}", "error", text ? err.message : "out of memory") : json_stringn(out, len);
    free(out);
    free(text);
    api_request_free(q);
    return r;
}

int main(int argc, char **argv)
{
    bool request = argc == 3 && !strcmp(argv[1], "--request");
    if (argc != 2 && !request) {
        fprintf(stderr, "usage: render_c [--request] CASES.json\n");
        return 2;
    }
    json_error_t jerr;
    json_t *cases = json_load_file(argv[argc - 1], 0, &jerr);
    if (!json_is_array(cases)) {
        fprintf(stderr, "render_c: %s:%d: %s\n", argv[argc - 1], jerr.line,
                cases ? "top level is not an array" : jerr.text);
        return 1;
    }
    json_t *results = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        if (request) {
            json_array_append_new(results, render_request(c));
            continue;
        }
        json_t *msgs = json_object_get(c, "messages");
        size_t n = json_array_size(msgs);
        api_chat_msg *m = calloc(n ? n : 1, sizeof *m);
        if (!m) {
            fprintf(stderr, "render_c: out of memory\n");
            return 1;
        }
        /* tool calls: OpenAI's form, {"function": {"name", "arguments" (a string)}} */
        api_chat_call *calls = NULL;
        size_t n_calls = 0;
        for (size_t k = 0; k < n; k++)
            n_calls += json_array_size(json_object_get(json_array_get(msgs, k), "tool_calls"));
        calls = calloc(n_calls ? n_calls : 1, sizeof *calls);
        n_calls = 0;
        for (size_t k = 0; k < n && calls; k++) {
            json_t *mj = json_array_get(msgs, k);
            m[k].role = opt_string(mj, "role");
            m[k].content = opt_string(mj, "content");
            m[k].reasoning_content = opt_string(mj, "reasoning_content");
            json_t *tc = json_object_get(mj, "tool_calls");
            m[k].tool_calls = calls + n_calls;
            m[k].n_tool_calls = json_array_size(tc);
            for (size_t t = 0; t < json_array_size(tc); t++, n_calls++) {
                json_t *f = json_object_get(json_array_get(tc, t), "function");
                calls[n_calls].name = opt_string(f, "name");
                calls[n_calls].arguments = opt_string(f, "arguments");
            }
        }
        api_chat_opts o;
        api_chat_opts_default(&o);
        /* tools in the tojson form: jansson's separators without JSON_COMPACT are ", " and ": " */
        json_t *tools = json_object_get(c, "tools");
        size_t n_tools = json_array_size(tools);
        char **tool_text = calloc(n_tools ? n_tools : 1, sizeof *tool_text);
        for (size_t t = 0; t < n_tools && tool_text; t++)
            tool_text[t] = json_dumps(json_array_get(tools, t), JSON_PRESERVE_ORDER);
        o.tools = (const char *const *)tool_text;
        o.n_tools = n_tools;
        if (!calls || !tool_text) {
            fprintf(stderr, "render_c: out of memory\n");
            return 1;
        }
        json_t *v = json_object_get(c, "add_generation_prompt");
        if (json_is_boolean(v))
            o.add_generation_prompt = json_is_true(v);
        v = json_object_get(c, "enable_thinking");
        if (json_is_boolean(v))
            o.enable_thinking = json_is_true(v);
        char *out = NULL;
        size_t len = 0;
        api_chat_error err;
        if (api_chat_render(m, n, &o, &out, &len, &err) == 0)
            json_array_append_new(results, json_stringn(out, len));
        else
            json_array_append_new(results, json_pack("{s:s}", "error", err.message));
        free(out);
        for (size_t t = 0; t < n_tools; t++)
            free(tool_text[t]);
        free(tool_text);
        free(calls);
        free(m);
    }
    char *text = json_dumps(results, JSON_INDENT(1) | JSON_ENSURE_ASCII);
    if (!text) {
        fprintf(stderr, "render_c: cannot serialize the results\n");
        return 1;
    }
    puts(text);
    free(text);
    json_decref(results);
    json_decref(cases);
    return 0;
}
