/*
 * parse: request bodies to api_request (see parse.h). Each field has one
 * small reader that checks the JSON type, then the range; readers return 0
 * or the API_E* code they filled ERR with.
 *
 * Called on the event-loop thread; stateless.
 */
#include "api/parse.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/schema.h"
#include "engine/stop.h"

/* Largest request arrays accepted, far above what a context holds. */
#define MAX_PROMPT_IDS (1u << 20)
#define MAX_MESSAGES 4096
#define MAX_TOKENS INT32_MAX

void api_request_free(api_request *r)
{
    if (!r)
        return;
    free(r->model);
    free(r->prompt);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_messages; i++) {
        free((char *)r->messages[i].role);
        free((char *)r->messages[i].content);
        free((char *)r->messages[i].reasoning_content);
        for (size_t k = 0; k < r->messages[i].n_tool_calls; k++) {
            free((char *)r->messages[i].tool_calls[k].name);
            free((char *)r->messages[i].tool_calls[k].arguments);
        }
        free((api_chat_call *)r->messages[i].tool_calls);
    }
    for (size_t i = 0; i < r->n_tools; i++) {
        free(r->tools[i].name);
        free(r->tools[i].json);
        free(r->tools[i].parameters);
    }
    free(r->tools);
    free(r->messages);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r->format_schema);
    free(r->bias_ids);
    free(r->bias);
    free(r);
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

static int type_error(api_error *err, const char *field, const char *want, const json_t *v)
{
    return api_error_set(err, API_ETYPE, field, "'%s' must be %s, not %s", field, want, json_type_name(v));
}

/* Formats a field name ("messages[3].content") into BUF; long names are cut. */
static void fieldf(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fieldf(char *buf, size_t cap, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

/* Optional number in [lo, hi] (null = absent). Integers are numbers too. */
static int get_float(json_t *root, const char *field, double lo, double hi, bool lo_open, float *out, api_error *err)
{
    json_t *v = json_object_get(root, field);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return type_error(err, field, "a number", v);
    double x = json_number_value(v);
    if (!isfinite(x) || x > hi || (lo_open ? x <= lo : x < lo))
        return api_error_set(err, API_ERANGE, field, "'%s' must be in %s%g, %g], not %g", field, lo_open ? "(" : "[",
                             lo, hi, x);
    *out = (float)x;
    return 0;
}

/* Optional integer in [lo, hi] (null = absent); *given tells whether it was there. */
static int get_int(json_t *root, const char *field, int64_t lo, int64_t hi, int64_t *out, bool *given, api_error *err)
{
    json_t *v = json_object_get(root, field);
    if (given)
        *given = false;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v))
        return type_error(err, field, "an integer", v);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return api_error_set(err, API_ERANGE, field, "'%s' must be in [%lld, %lld], not %lld", field, (long long)lo,
                             (long long)hi, (long long)x);
    *out = x;
    if (given)
        *given = true;
    return 0;
}

static int get_bool(json_t *root, const char *field, bool *out, api_error *err)
{
    json_t *v = json_object_get(root, field);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return type_error(err, field, "a boolean", v);
    *out = json_is_true(v);
    return 0;
}

/* ---- the field table ---------------------------------------------------- */

#define IN_COMPLETIONS (1u << API_KIND_COMPLETION)
#define IN_CHAT (1u << API_KIND_CHAT)
#define IN_BOTH (IN_COMPLETIONS | IN_CHAT)

/*
 * A check of a REFUSED or IGNORED field's value (never null): 0 when the
 * value is accepted, else the error it set. REFUSED fields accept only the
 * values that ask for nothing the server lacks; IGNORED fields any value of
 * the right type.
 */
typedef int (*field_check)(const json_t *v, const char *field, api_error *err);

static int refuse(const char *field, api_error *err)
{
    return api_error_set(err, API_EUNSUPPORTED, field,
                         "'%s' is not supported by this server, which does not ignore it either", field);
}

static int refuse_any(const json_t *v, const char *field, api_error *err)
{
    (void)v;
    return refuse(field, err);
}

/* "" asks for nothing. */
static int refuse_string(const json_t *v, const char *field, api_error *err)
{
    if (!json_is_string(v))
        return type_error(err, field, "a string", v);
    return json_string_length(v) == 0 ? 0 : refuse(field, err);
}

static int refuse_nonempty_array(const json_t *v, const char *field, api_error *err)
{
    if (!json_is_array(v))
        return type_error(err, field, "an array", v);
    return json_array_size(v) == 0 ? 0 : refuse(field, err);
}

/* function_call (the older tool_choice): "none" and "auto" call nothing when no function is given. */
static int refuse_tool_choice(const json_t *v, const char *field, api_error *err)
{
    if (!json_is_string(v) && !json_is_object(v))
        return type_error(err, field, "a string or an object", v);
    const char *s = json_string_value(v);
    return s && (!strcmp(s, "none") || !strcmp(s, "auto")) ? 0 : refuse(field, err);
}

/* modalities: ["text"] is what the server produces anyway. */
static int refuse_modalities(const json_t *v, const char *field, api_error *err)
{
    if (!json_is_array(v))
        return type_error(err, field, "an array", v);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (!json_is_string(e) || strcmp(json_string_value(e), "text") != 0)
            return refuse(field, err);
    }
    return 0;
}

static int want_string(const json_t *v, const char *field, api_error *err)
{
    return json_is_string(v) ? 0 : type_error(err, field, "a string", v);
}

static int want_boolean(const json_t *v, const char *field, api_error *err)
{
    return json_is_boolean(v) ? 0 : type_error(err, field, "a boolean", v);
}

static int want_object(const json_t *v, const char *field, api_error *err)
{
    return json_is_object(v) ? 0 : type_error(err, field, "an object", v);
}

static int want_array(const json_t *v, const char *field, api_error *err)
{
    return json_is_array(v) ? 0 : type_error(err, field, "an array", v);
}

/* false asks for nothing. */
static int refuse_true(const json_t *v, const char *field, api_error *err)
{
    if (!json_is_boolean(v))
        return type_error(err, field, "a boolean", v);
    return json_is_true(v) ? refuse(field, err) : 0;
}

typedef struct field_rule {
    const char *name;
    unsigned in;            /* IN_COMPLETIONS, IN_CHAT */
    api_field_use use;
    field_check check;      /* REFUSED, IGNORED; NULL for READ */
} field_rule;

#define READ(name, in) {name, in, API_FIELD_READ, NULL}
#define REFUSED(name, in, check) {name, in, API_FIELD_REFUSED, check}
#define IGNORED(name, in, check) {name, in, API_FIELD_IGNORED, check}

/* The README's field table says the same, row for row (test_api compares them).
 * Ignored fields are accepted on both endpoints: they change nothing either way. */
static const field_rule FIELDS[] = {
    READ("model", IN_BOTH),
    READ("prompt", IN_COMPLETIONS),
    READ("messages", IN_CHAT),
    READ("max_tokens", IN_BOTH),
    READ("max_completion_tokens", IN_CHAT),
    READ("temperature", IN_BOTH),
    READ("top_p", IN_BOTH),
    READ("top_k", IN_BOTH),
    READ("min_p", IN_BOTH),
    READ("presence_penalty", IN_BOTH),
    READ("frequency_penalty", IN_BOTH),
    READ("repetition_penalty", IN_BOTH),
    READ("seed", IN_BOTH),
    READ("stop", IN_BOTH),
    READ("stream", IN_BOTH),
    READ("stream_options", IN_BOTH),
    READ("chat_template_kwargs", IN_CHAT),
    READ("n", IN_BOTH),
    READ("best_of", IN_COMPLETIONS),
    READ("echo", IN_COMPLETIONS),
    READ("logprobs", IN_BOTH),
    READ("top_logprobs", IN_CHAT),
    READ("logit_bias", IN_BOTH),
    REFUSED("suffix", IN_COMPLETIONS, refuse_string),
    READ("response_format", IN_CHAT),
    READ("tools", IN_CHAT),
    READ("tool_choice", IN_CHAT),
    READ("parallel_tool_calls", IN_CHAT),
    REFUSED("functions", IN_CHAT, refuse_nonempty_array),
    REFUSED("function_call", IN_CHAT, refuse_tool_choice),
    REFUSED("modalities", IN_CHAT, refuse_modalities),
    REFUSED("audio", IN_CHAT, refuse_any),
    REFUSED("reasoning_effort", IN_CHAT, refuse_any),
    REFUSED("verbosity", IN_CHAT, refuse_any),
    REFUSED("web_search_options", IN_CHAT, refuse_any),
    IGNORED("prediction", IN_BOTH, want_object),
    IGNORED("user", IN_BOTH, want_string),
    IGNORED("safety_identifier", IN_BOTH, want_string),
    IGNORED("prompt_cache_key", IN_BOTH, want_string),
    IGNORED("prompt_cache_retention", IN_BOTH, want_string),
    IGNORED("service_tier", IN_BOTH, want_string),
    IGNORED("store", IN_BOTH, want_boolean),
    IGNORED("metadata", IN_BOTH, want_object),
};
#define N_FIELDS (sizeof FIELDS / sizeof *FIELDS)

bool api_field_get(size_t i, api_field_info *out)
{
    if (i >= N_FIELDS)
        return false;
    out->name = FIELDS[i].name;
    out->completions = FIELDS[i].in & IN_COMPLETIONS;
    out->chat = FIELDS[i].in & IN_CHAT;
    out->use = FIELDS[i].use;
    return true;
}

static const char *endpoint_of(unsigned in)
{
    return in & IN_CHAT ? "/v1/chat/completions" : "/v1/completions";
}

/*
 * Every key of obj against a table: unknown, refused and ignored ones. in is
 * the endpoint's bit; prefix names obj in errors (NULL for the request itself).
 */
static int check_keys(json_t *obj, const field_rule *table, size_t n, unsigned in, const char *prefix,
                      api_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        const field_rule *f = NULL;
        for (size_t i = 0; i < n && !f; i++)
            if (!strcmp(table[i].name, key))
                f = &table[i];
        char buf[160];
        const char *p = key; /* the key's path in errors */
        if (prefix) {
            fieldf(buf, sizeof buf, "%s.%s", prefix, key);
            p = buf;
        }
        if (f && !(f->in & in))
            return api_error_set(err, API_EUNSUPPORTED, p, "'%s' is a field of %s, not of %s", p, endpoint_of(f->in),
                                 endpoint_of(in));
        /* A key the server does not know might change the output: it is not dropped silently. */
        if (!f)
            return prefix ? refuse(p, err)
                          : api_error_set(err, API_EUNSUPPORTED, p, "'%s' is not a request field this server knows", p);
        if (f->use == API_FIELD_READ || json_is_null(v))
            continue;
        int rc = f->check(v, p, err);
        if (rc)
            return rc;
    }
    return 0;
}

static int parse_id_array(json_t *arr, const char *field, api_request *r, api_error *err)
{
    size_t n = json_array_size(arr);
    if (n > MAX_PROMPT_IDS)
        return api_error_set(err, API_ECONTEXT, field, "'%s' has %zu token ids, more than any context holds", field, n);
    r->prompt_ids = malloc((n ? n : 1) * sizeof *r->prompt_ids);
    if (!r->prompt_ids)
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(arr, i);
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT32_MAX) {
            char p[128];
            fieldf(p, sizeof p, "%s[%zu]", field, i);
            return api_error_set(err, json_is_integer(e) ? API_EPROMPT : API_ETYPE, p,
                                 "'%s' must be a non-negative token id", p);
        }
        r->prompt_ids[i] = (int32_t)json_integer_value(e);
    }
    r->n_prompt_ids = n;
    return 0;
}

/* prompt: a string, an array of token ids, or an array holding one of those. */
static int parse_prompt(json_t *root, api_request *r, api_error *err)
{
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p))
        return api_error_set(err, API_EMISSING, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) > 0 && !json_is_integer(json_array_get(p, 0))) {
        if (json_array_size(p) != 1)
            return api_error_set(err, API_EUNSUPPORTED, "prompt",
                                 "'prompt' with %zu prompts: one prompt per request is supported",
                                 json_array_size(p));
        json_t *one = json_array_get(p, 0);
        if (json_is_string(one) || json_is_array(one))
            p = one;
        else
            return type_error(err, "prompt[0]", "a string or an array of token ids", one);
        if (json_is_array(p))
            return parse_id_array(p, "prompt[0]", r, err);
    }
    if (json_is_string(p)) {
        r->prompt_len = json_string_length(p);
        r->prompt = dup_n(json_string_value(p), r->prompt_len);
        if (!r->prompt)
            return api_error_set(err, API_ENOMEM, NULL, NULL);
        return 0;
    }
    if (json_is_array(p))
        return parse_id_array(p, "prompt", r, err);
    return type_error(err, "prompt", "a string or an array of token ids", p);
}

/* content: a string, null, or an array of {"type":"text","text":...} parts joined by newlines. */
static int parse_content(json_t *c, const char *field, bool null_ok, char **out, api_error *err)
{
    *out = NULL;
    if (!c || json_is_null(c)) {
        if (!null_ok)
            return api_error_set(err, API_EMISSING, field, "'%s' is required", field);
        *out = dup_n("", 0);
        return *out ? 0 : api_error_set(err, API_ENOMEM, NULL, NULL);
    }
    if (json_is_string(c)) {
        *out = dup_n(json_string_value(c), json_string_length(c));
        return *out ? 0 : api_error_set(err, API_ENOMEM, NULL, NULL);
    }
    if (!json_is_array(c))
        return type_error(err, field, "a string or an array of text parts", c);
    size_t total = 0, n = json_array_size(c);
    for (size_t i = 0; i < n; i++) {
        json_t *part = json_array_get(c, i);
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        char p[128];
        fieldf(p, sizeof p, "%s[%zu]", field, i);
        if (!json_is_object(part))
            return type_error(err, p, "an object", part);
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0)
            return api_error_set(err, API_EUNSUPPORTED, p, "'%s': only parts of type \"text\" are supported", p);
        if (!json_is_string(text))
            return api_error_set(err, API_ETYPE, p, "'%s.text' must be a string", p);
        total += json_string_length(text) + 1;
    }
    char *s = malloc(total + 1), *w = s;
    if (!s)
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        json_t *text = json_object_get(json_array_get(c, i), "text");
        if (i)
            *w++ = '\n';
        memcpy(w, json_string_value(text), json_string_length(text));
        w += json_string_length(text);
    }
    *w = '\0';
    *out = s;
    return 0;
}

/* Keys of OBJ outside the NULL-terminated list KNOWN are refused, so none is dropped unseen. */
static int known_keys(json_t *obj, const char *field, const char *const *known, api_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        size_t i = 0;
        while (known[i] && strcmp(known[i], key))
            i++;
        if (!known[i]) {
            char p[128];
            fieldf(p, sizeof p, "%s.%s", field, key);
            return refuse(p, err);
        }
    }
    return 0;
}

/* An assistant message's tool_calls: [{id, type "function", function: {name, arguments}}]. */
static int parse_tool_calls(json_t *e, size_t i, api_chat_msg *msg, api_error *err)
{
    json_t *tc = json_object_get(e, "tool_calls");
    char p[160];
    fieldf(p, sizeof p, "messages[%zu].tool_calls", i);
    if (!tc || json_is_null(tc))
        return 0;
    if (!json_is_array(tc))
        return type_error(err, p, "an array", tc);
    if (json_array_size(tc) && strcmp(msg->role, "assistant"))
        return api_error_set(err, API_ERANGE, p, "'%s' belongs to assistant messages only", p);
    size_t n = json_array_size(tc);
    api_chat_call *calls = calloc(n ? n : 1, sizeof *calls);
    if (!calls)
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    msg->tool_calls = calls;
    static const char *const keys[] = {"id", "type", "function", NULL};
    static const char *const fn_keys[] = {"name", "arguments", NULL};
    for (size_t k = 0; k < n; k++) {
        json_t *c = json_array_get(tc, k);
        fieldf(p, sizeof p, "messages[%zu].tool_calls[%zu]", i, k);
        if (!json_is_object(c))
            return type_error(err, p, "an object", c);
        int rc = known_keys(c, p, keys, err);
        if (rc)
            return rc;
        json_t *type = json_object_get(c, "type"), *id = json_object_get(c, "id"), *f = json_object_get(c, "function");
        if (type && !json_is_null(type) && (!json_is_string(type) || strcmp(json_string_value(type), "function")))
            return api_error_set(err, API_EUNSUPPORTED, p, "'%s.type' must be \"function\"", p);
        if (id && !json_is_null(id) && !json_is_string(id))
            return type_error(err, p, "an object whose id is a string", id);
        fieldf(p, sizeof p, "messages[%zu].tool_calls[%zu].function", i, k);
        if (!json_is_object(f))
            return f ? type_error(err, p, "an object", f) : api_error_set(err, API_EMISSING, p, "'%s' is required", p);
        if ((rc = known_keys(f, p, fn_keys, err)))
            return rc;
        json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        fieldf(p, sizeof p, "messages[%zu].tool_calls[%zu].function.name", i, k);
        if (!json_is_string(name))
            return name ? type_error(err, p, "a string", name) : api_error_set(err, API_EMISSING, p, "'%s' is required", p);
        fieldf(p, sizeof p, "messages[%zu].tool_calls[%zu].function.arguments", i, k);
        /* OpenAI sends a JSON string, rendered as given; an object is rendered as the template's tojson */
        char *a = json_is_string(args) ? dup_n(json_string_value(args), json_string_length(args))
                  : json_is_object(args) ? json_dumps(args, JSON_PRESERVE_ORDER) : NULL;
        if (!json_is_string(args) && !json_is_object(args))
            return args ? type_error(err, p, "a string", args) : api_error_set(err, API_EMISSING, p, "'%s' is required", p);
        calls[k].arguments = a;
        calls[k].name = dup_n(json_string_value(name), json_string_length(name));
        msg->n_tool_calls = k + 1;
        if (!a || !calls[k].name)
            return api_error_set(err, API_ENOMEM, NULL, NULL);
    }
    return 0;
}

/* A tool message's tool_call_id: a string (the template does not show it). */
static int parse_tool_call_id(json_t *e, size_t i, api_error *err)
{
    json_t *id = json_object_get(e, "tool_call_id");
    char p[64];
    fieldf(p, sizeof p, "messages[%zu].tool_call_id", i);
    return !id || json_is_null(id) || json_is_string(id) ? 0 : type_error(err, p, "a string", id);
}

/*
 * A message's keys, checked like the request's own fields so that a key
 * that could change the prompt is never dropped unseen. Accepted as they
 * are: a message's name (the Qwen3 template does not show it) and what an
 * OpenAI client sends back with an assistant turn it received, where it
 * asks for nothing: refusal null or "", audio null, annotations (citations
 * of the answer, not shown), prefix false (vLLM's request to continue the
 * turn is refused). "reasoning" (vLLM's newer name) is reasoning_content
 * when that is absent or the same; parse_messages reads it.
 */
static const field_rule MESSAGE_FIELDS[] = {
    READ("role", IN_CHAT),
    READ("content", IN_CHAT),
    READ("tool_calls", IN_CHAT),
    READ("tool_call_id", IN_CHAT),
    READ("reasoning_content", IN_CHAT),
    READ("reasoning", IN_CHAT),
    READ("function_call", IN_CHAT),
    IGNORED("name", IN_CHAT, want_string),
    IGNORED("annotations", IN_CHAT, want_array),
    REFUSED("refusal", IN_CHAT, refuse_string),
    REFUSED("audio", IN_CHAT, refuse_any),
    REFUSED("prefix", IN_CHAT, refuse_true),
};

static int message_keys(json_t *e, size_t i, api_error *err)
{
    char p[64];
    fieldf(p, sizeof p, "messages[%zu]", i);
    return check_keys(e, MESSAGE_FIELDS, sizeof MESSAGE_FIELDS / sizeof *MESSAGE_FIELDS, IN_CHAT, p, err);
}

/* The message's reasoning_content, or its "reasoning" (vLLM's newer name) when that is absent or the same. */
static int message_reasoning(json_t *e, size_t i, json_t **out, api_error *err)
{
    json_t *a = json_object_get(e, "reasoning_content"), *b = json_object_get(e, "reasoning");
    char p[64];
    if (a && json_is_null(a))
        a = NULL;
    if (b && json_is_null(b))
        b = NULL;
    fieldf(p, sizeof p, "messages[%zu].reasoning_content", i);
    if (a && !json_is_string(a))
        return type_error(err, p, "a string", a);
    fieldf(p, sizeof p, "messages[%zu].reasoning", i);
    if (b && !json_is_string(b))
        return type_error(err, p, "a string", b);
    if (a && b && !json_equal(a, b))
        return api_error_set(err, API_ERANGE, p, "'%s' differs from 'messages[%zu].reasoning_content': send one", p, i);
    *out = a ? a : b;
    return 0;
}

static int parse_messages(json_t *root, api_request *r, api_error *err)
{
    json_t *m = json_object_get(root, "messages");
    if (!m || json_is_null(m))
        return api_error_set(err, API_EMISSING, "messages", "'messages' is required");
    if (!json_is_array(m))
        return type_error(err, "messages", "an array", m);
    size_t n = json_array_size(m);
    if (n == 0)
        return api_error_set(err, API_ERANGE, "messages", "'messages' must not be empty");
    if (n > MAX_MESSAGES)
        return api_error_set(err, API_ERANGE, "messages", "'messages' has more than %d entries", MAX_MESSAGES);
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages)
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(m, i);
        char p[128];
        fieldf(p, sizeof p, "messages[%zu]", i);
        if (!json_is_object(e))
            return type_error(err, p, "an object", e);
        int rc = message_keys(e, i, err);
        if (rc)
            return rc;
        r->n_messages = i + 1;
        api_chat_msg *msg = &r->messages[i];
        json_t *role = json_object_get(e, "role");
        fieldf(p, sizeof p, "messages[%zu].role", i);
        if (!role)
            return api_error_set(err, API_EMISSING, p, "'%s' is required", p);
        if (!json_is_string(role))
            return type_error(err, p, "a string", role);
        const char *rs = json_string_value(role);
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "developer") &&
            strcmp(rs, "tool"))
            return api_error_set(err, API_EUNSUPPORTED, p,
                                 "'%s' must be \"system\", \"user\", \"assistant\" or \"tool\"", p);
        /* OpenAI's "developer" role is the system prompt of newer models. */
        const char *role_name = strcmp(rs, "developer") ? rs : "system";
        msg->role = dup_n(role_name, strlen(role_name));
        if (!msg->role)
            return api_error_set(err, API_ENOMEM, NULL, NULL);
        fieldf(p, sizeof p, "messages[%zu].content", i);
        char *content = NULL;
        rc = parse_content(json_object_get(e, "content"), p, !strcmp(rs, "assistant"), &content, err);
        msg->content = content;
        if (rc)
            return rc;
        /* The older function_call form would be rendered into the prompt differently. */
        json_t *fc = json_object_get(e, "function_call");
        fieldf(p, sizeof p, "messages[%zu].function_call", i);
        if (fc && !json_is_null(fc))
            return refuse(p, err);
        if ((rc = parse_tool_calls(e, i, msg, err)) || (rc = parse_tool_call_id(e, i, err)))
            return rc;
        json_t *rc_v = NULL;
        if ((rc = message_reasoning(e, i, &rc_v, err)))
            return rc;
        if (rc_v) {
            msg->reasoning_content = dup_n(json_string_value(rc_v), json_string_length(rc_v));
            if (!msg->reasoning_content)
                return api_error_set(err, API_ENOMEM, NULL, NULL);
        }
    }
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return type_error(err, "chat_template_kwargs", "an object", kw);
        json_t *et = json_object_get(kw, "enable_thinking");
        if (et && !json_is_null(et)) {
            if (!json_is_boolean(et))
                return type_error(err, "chat_template_kwargs.enable_thinking", "a boolean", et);
            r->enable_thinking = json_is_true(et);
        }
        /* The other variables the Qwen3 template reads; keys it does not read change nothing. */
        json_t *agp = json_object_get(kw, "add_generation_prompt"), *tools = json_object_get(kw, "tools");
        int rc;
        if (agp && !json_is_null(agp) && !json_is_true(agp))
            return refuse("chat_template_kwargs.add_generation_prompt", err);
        if (tools && !json_is_null(tools) &&
            (rc = refuse_nonempty_array(tools, "chat_template_kwargs.tools", err)))
            return rc;
    }
    return 0;
}

static int parse_stop(json_t *root, api_request *r, api_error *err)
{
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s))
        return 0;
    size_t n = json_is_array(s) ? json_array_size(s) : 1;
    if (!json_is_string(s) && !json_is_array(s))
        return type_error(err, "stop", "a string or an array of strings", s);
    if (n > ENG_STOP_MAX_STRINGS)
        return api_error_set(err, API_ERANGE, "stop", "'stop' has %zu strings; at most %d are allowed", n,
                             ENG_STOP_MAX_STRINGS);
    r->stop = calloc(n ? n : 1, sizeof *r->stop);
    if (!r->stop)
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(s) ? json_array_get(s, i) : s;
        char p[48];
        fieldf(p, sizeof p, "stop[%zu]", i);
        if (!json_is_string(e))
            return type_error(err, p, "a string", e);
        if (strlen(json_string_value(e)) != json_string_length(e))
            return api_error_set(err, API_ERANGE, p, "'%s' must not contain NUL characters", p);
        r->stop[i] = dup_n(json_string_value(e), json_string_length(e));
        if (!r->stop[i])
            return api_error_set(err, API_ENOMEM, NULL, NULL);
        r->n_stop = i + 1;
    }
    eng_stop_error se;
    if (eng_stop_validate((const char *const *)r->stop, r->n_stop, &se) != 0) {
        char p[48];
        if (se.index >= 0)
            fieldf(p, sizeof p, "stop[%d]", se.index);
        else
            fieldf(p, sizeof p, "stop");
        return api_error_set(err, API_ERANGE, p, "%s", se.message);
    }
    return 0;
}

static int parse_sampling(json_t *root, api_request *r, api_error *err)
{
    eng_sampling *s = &r->sampling;
    int rc;
    /* Ranges wider than the sampler's are caught by eng_sampling_validate below,
     * which names the field; these reads only check types and finiteness. */
    if ((rc = get_float(root, "temperature", -1e30, 1e30, false, &s->temperature, err)) ||
        (rc = get_float(root, "top_p", -1e30, 1e30, false, &s->top_p, err)) ||
        (rc = get_float(root, "min_p", -1e30, 1e30, false, &s->min_p, err)) ||
        (rc = get_float(root, "presence_penalty", -1e30, 1e30, false, &s->presence_penalty, err)) ||
        (rc = get_float(root, "frequency_penalty", -1e30, 1e30, false, &s->frequency_penalty, err)) ||
        (rc = get_float(root, "repetition_penalty", -1e30, 1e30, false, &s->repetition_penalty, err)))
        return rc;
    int64_t k = 0;
    bool given = false;
    if ((rc = get_int(root, "top_k", -1, INT32_MAX, &k, &given, err)))
        return rc;
    if (given)
        s->top_k = k < 0 ? 0 : (int32_t)k; /* -1 is "off" in vLLM's API */
    int64_t seed = 0;
    if ((rc = get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, &r->seed_given, err)))
        return rc;
    s->seed = (uint64_t)seed;
    eng_sampling_error se;
    if (eng_sampling_validate(s, &se) != 0)
        return api_error_set(err, API_ERANGE, se.field, "%s", se.message);
    return 0;
}

static int parse_model(json_t *root, api_request *r, api_error *err)
{
    json_t *model = json_object_get(root, "model");
    if (!model || json_is_null(model))
        return 0;
    if (!json_is_string(model))
        return type_error(err, "model", "a string", model);
    if (!(r->model = dup_n(json_string_value(model), json_string_length(model))))
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    return 0;
}

/* logprobs and top_logprobs: completions' count of top entries, or chat's boolean and count. */
static int parse_logprobs(api_kind kind, json_t *root, api_request *r, api_error *err)
{
    json_t *v = json_object_get(root, "logprobs");
    int rc;
    if (kind == API_KIND_COMPLETION) {
        /* false: what older clients send for "none" */
        if (!v || json_is_null(v) || json_is_false(v))
            return 0;
        int64_t n = 0;
        if ((rc = get_int(root, "logprobs", 0, API_COMPLETION_LOGPROBS_MAX, &n, NULL, err)))
            return rc;
        r->logprobs = true;
        r->top_logprobs = (int)n;
        return 0;
    }
    if ((rc = get_bool(root, "logprobs", &r->logprobs, err)))
        return rc;
    int64_t top = 0;
    bool given = false;
    if ((rc = get_int(root, "top_logprobs", 0, ENG_TOP_LOGPROBS_MAX, &top, &given, err)))
        return rc;
    if (given && top > 0 && !r->logprobs)
        return api_error_set(err, API_ERANGE, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r->top_logprobs = (int)top;
    return 0;
}

/* logit_bias: {"token id": bias}, ids as decimal strings, biases in [-100, 100]. */
static int parse_logit_bias(json_t *root, api_request *r, api_error *err)
{
    json_t *b = json_object_get(root, "logit_bias");
    if (!b || json_is_null(b))
        return 0;
    if (!json_is_object(b))
        return type_error(err, "logit_bias", "an object", b);
    size_t n = json_object_size(b);
    r->bias_ids = malloc((n ? n : 1) * sizeof *r->bias_ids);
    r->bias = malloc((n ? n : 1) * sizeof *r->bias);
    if (!r->bias_ids || !r->bias)
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    const char *key;
    json_t *v;
    json_object_foreach(b, key, v) {
        char p[80];
        fieldf(p, sizeof p, "logit_bias.%.40s", key);
        char *end = NULL;
        long long id = strtoll(key, &end, 10);
        if (!*key || *key == '-' || *key == '+' || *key == ' ' || *end || id < 0 || id > INT32_MAX)
            return api_error_set(err, API_ERANGE, p, "'logit_bias' keys must be token ids, not \"%.40s\"", key);
        if (!json_is_number(v))
            return type_error(err, p, "a number", v);
        double x = json_number_value(v);
        if (!(x >= -ENG_LOGIT_BIAS_MAX && x <= ENG_LOGIT_BIAS_MAX))
            return api_error_set(err, API_ERANGE, p, "'%s' must be in [-100, 100], not %g", p, x);
        r->bias_ids[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias++] = (float)x;
    }
    return 0;
}

/* A name of OpenAI's function names: 1-64 of a-z, A-Z, 0-9, '_' and '-' (json_schema.name's rule too). */
static bool name_ok(const char *s, size_t n)
{
    if (n < 1 || n > 64)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return false;
    return true;
}

/* response_format: text, json_object, or json_schema {name, description, schema, strict}. */
static int parse_format(json_t *root, api_request *r, api_error *err)
{
    json_t *f = json_object_get(root, "response_format");
    if (!f || json_is_null(f))
        return 0;
    if (!json_is_object(f))
        return type_error(err, "response_format", "an object", f);
    static const char *const keys[] = {"type", "json_schema", NULL};
    int rc = known_keys(f, "response_format", keys, err);
    if (rc)
        return rc;
    json_t *type = json_object_get(f, "type");
    if (!type)
        return api_error_set(err, API_EMISSING, "response_format.type", "'response_format.type' is required");
    if (!json_is_string(type))
        return type_error(err, "response_format.type", "a string", type);
    const char *t = json_string_value(type);
    json_t *js = json_object_get(f, "json_schema");
    if (strcmp(t, "json_schema") && js && !json_is_null(js))
        return api_error_set(err, API_ERANGE, "response_format.json_schema",
                             "'response_format.json_schema' belongs to type \"json_schema\" only");
    if (!strcmp(t, "text"))
        return 0;
    if (!strcmp(t, "json_object")) {
        r->format = API_FORMAT_JSON_OBJECT;
        return 0;
    }
    if (strcmp(t, "json_schema"))
        return api_error_set(err, API_EUNSUPPORTED, "response_format.type",
                             "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", not "
                             "\"%.40s\"", t);
    if (!js || json_is_null(js))
        return api_error_set(err, API_EMISSING, "response_format.json_schema",
                             "'response_format.json_schema' is required with type \"json_schema\"");
    if (!json_is_object(js))
        return type_error(err, "response_format.json_schema", "an object", js);
    static const char *const js_keys[] = {"name", "description", "schema", "strict", NULL};
    if ((rc = known_keys(js, "response_format.json_schema", js_keys, err)))
        return rc;
    json_t *name = json_object_get(js, "name"), *desc = json_object_get(js, "description"),
           *schema = json_object_get(js, "schema"), *strict = json_object_get(js, "strict");
    if (!name)
        return api_error_set(err, API_EMISSING, "response_format.json_schema.name",
                             "'response_format.json_schema.name' is required");
    if (!json_is_string(name))
        return type_error(err, "response_format.json_schema.name", "a string", name);
    if (!name_ok(json_string_value(name), json_string_length(name)))
        return api_error_set(err, API_ERANGE, "response_format.json_schema.name",
                             "'response_format.json_schema.name' must be 1 to 64 of a-z, A-Z, 0-9, _ and -");
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return type_error(err, "response_format.json_schema.description", "a string", desc);
    /* strict or not, the output follows the schema: there is no weaker mode to choose. */
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return type_error(err, "response_format.json_schema.strict", "a boolean", strict);
    if (schema && !json_is_null(schema) && !json_is_object(schema) && !json_is_boolean(schema))
        return type_error(err, "response_format.json_schema.schema", "an object", schema);
    /* Without a schema, any JSON value. */
    r->format = API_FORMAT_JSON_SCHEMA;
    r->format_schema = schema && !json_is_null(schema) ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY)
                                                       : strdup("true");
    return r->format_schema ? 0 : api_error_set(err, API_ENOMEM, NULL, NULL);
}

/* tools: [{type "function", function: {name, description, parameters, strict}}], names unique. */
static int parse_tool_list(json_t *tools, api_request *r, api_error *err)
{
    if (!json_is_array(tools))
        return type_error(err, "tools", "an array", tools);
    size_t n = json_array_size(tools);
    if (n > API_MAX_TOOLS)
        return api_error_set(err, API_ERANGE, "tools", "'tools' has %zu tools; at most %d are allowed", n,
                             API_MAX_TOOLS);
    if (!(r->tools = calloc(n ? n : 1, sizeof *r->tools)))
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    static const char *const keys[] = {"type", "function", NULL};
    static const char *const fn_keys[] = {"name", "description", "parameters", "strict", NULL};
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tools, i);
        char p[80];
        fieldf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t))
            return type_error(err, p, "an object", t);
        json_t *type = json_object_get(t, "type"), *f = json_object_get(t, "function");
        char tp[80];
        fieldf(tp, sizeof tp, "tools[%zu].type", i);
        if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
            return api_error_set(err, type ? API_EUNSUPPORTED : API_EMISSING, tp,
                                 "'%s' must be \"function\" (the only kind of tool supported)", tp);
        int rc = known_keys(t, p, keys, err);
        if (rc)
            return rc;
        fieldf(p, sizeof p, "tools[%zu].function", i);
        if (!json_is_object(f))
            return f ? type_error(err, p, "an object", f) : api_error_set(err, API_EMISSING, p, "'%s' is required", p);
        if ((rc = known_keys(f, p, fn_keys, err)))
            return rc;
        json_t *name = json_object_get(f, "name"), *desc = json_object_get(f, "description"),
               *params = json_object_get(f, "parameters"), *strict = json_object_get(f, "strict");
        fieldf(p, sizeof p, "tools[%zu].function.name", i);
        if (!json_is_string(name))
            return name ? type_error(err, p, "a string", name) : api_error_set(err, API_EMISSING, p, "'%s' is required", p);
        if (!name_ok(json_string_value(name), json_string_length(name)))
            return api_error_set(err, API_ERANGE, p, "'%s' must be 1 to 64 of a-z, A-Z, 0-9, _ and -", p);
        for (size_t k = 0; k < i; k++)
            if (!strcmp(r->tools[k].name, json_string_value(name)))
                return api_error_set(err, API_ERANGE, p, "'%s': \"%s\" is also the name of tools[%zu]", p,
                                     json_string_value(name), k);
        fieldf(p, sizeof p, "tools[%zu].function.description", i);
        if (desc && !json_is_null(desc) && !json_is_string(desc))
            return type_error(err, p, "a string", desc);
        fieldf(p, sizeof p, "tools[%zu].function.strict", i);
        if (strict && !json_is_null(strict) && !json_is_boolean(strict))
            return type_error(err, p, "a boolean", strict);
        fieldf(p, sizeof p, "tools[%zu].function.parameters", i);
        if (params && !json_is_null(params) && !json_is_object(params))
            return type_error(err, p, "an object", params);
        api_tool *tl = &r->tools[i];
        r->n_tools = i + 1;
        tl->name = dup_n(json_string_value(name), json_string_length(name));
        /* jansson's separators without JSON_COMPACT are the template's tojson ", " and ": " */
        tl->json = json_dumps(t, JSON_PRESERVE_ORDER);
        tl->parameters = params && !json_is_null(params) ? json_dumps(params, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
        if (!tl->name || !tl->json || (params && !json_is_null(params) && !tl->parameters))
            return api_error_set(err, API_ENOMEM, NULL, NULL);
    }
    return 0;
}

/* tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name": ...}}. */
static int parse_tool_choice(json_t *v, api_request *r, api_error *err)
{
    if (json_is_string(v)) {
        const char *c = json_string_value(v);
        if (!strcmp(c, "none"))
            r->tool_choice = API_TOOL_CHOICE_NONE;
        else if (!strcmp(c, "auto"))
            r->tool_choice = r->n_tools ? API_TOOL_CHOICE_AUTO : API_TOOL_CHOICE_NONE;
        else if (!strcmp(c, "required"))
            r->tool_choice = API_TOOL_CHOICE_REQUIRED;
        else
            return api_error_set(err, API_ERANGE, "tool_choice",
                                 "'tool_choice' must be \"none\", \"auto\", \"required\" or a function, not \"%.40s\"", c);
    } else if (json_is_object(v)) {
        static const char *const keys[] = {"type", "function", NULL};
        int rc = known_keys(v, "tool_choice", keys, err);
        if (rc)
            return rc;
        json_t *type = json_object_get(v, "type"), *f = json_object_get(v, "function");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
            return api_error_set(err, API_EUNSUPPORTED, "tool_choice.type", "'tool_choice.type' must be \"function\"");
        json_t *name = json_is_object(f) ? json_object_get(f, "name") : NULL;
        if (!json_is_string(name))
            return api_error_set(err, API_EMISSING, "tool_choice.function.name",
                                 "'tool_choice.function.name' is required and must be a string");
        static const char *const fn_keys[] = {"name", NULL};
        if ((rc = known_keys(f, "tool_choice.function", fn_keys, err)))
            return rc;
        size_t k = 0;
        while (k < r->n_tools && strcmp(r->tools[k].name, json_string_value(name)))
            k++;
        if (k == r->n_tools)
            return api_error_set(err, API_ERANGE, "tool_choice.function.name",
                                 "'tool_choice.function.name': \"%.64s\" is not one of the request's tools",
                                 json_string_value(name));
        r->tool_choice = API_TOOL_CHOICE_NAMED;
        r->tool_named = k;
    } else {
        return type_error(err, "tool_choice", "a string or an object", v);
    }
    if (r->tool_choice >= API_TOOL_CHOICE_REQUIRED && !r->n_tools)
        return api_error_set(err, API_ERANGE, "tool_choice", "'tool_choice' asks for a call but 'tools' is empty");
    return 0;
}

static int parse_tools(json_t *root, api_request *r, api_error *err)
{
    json_t *tools = json_object_get(root, "tools"), *choice = json_object_get(root, "tool_choice");
    int rc;
    r->parallel_tool_calls = true;
    if ((rc = get_bool(root, "parallel_tool_calls", &r->parallel_tool_calls, err)))
        return rc;
    if (tools && !json_is_null(tools) && (rc = parse_tool_list(tools, r, err)))
        return rc;
    r->tool_choice = r->n_tools ? API_TOOL_CHOICE_AUTO : API_TOOL_CHOICE_NONE;
    if (choice && !json_is_null(choice) && (rc = parse_tool_choice(choice, r, err)))
        return rc;
    /* One grammar per generation: a call's or the answer's, not a choice between them. */
    if (r->tool_choice != API_TOOL_CHOICE_NONE && r->format != API_FORMAT_TEXT)
        return api_error_set(err, API_EUNSUPPORTED, "response_format",
                             "'response_format' other than text with 'tools' needs 'tool_choice': \"none\"");
    return 0;
}

static int schema_error(int rc, const char *param, const api_schema_error *se, api_error *err);

int api_request_tools_grammar(const api_request *r, const eng_tok *tok, eng_grammar **out, api_error *err)
{
    *out = NULL;
    if (!r->n_tools)
        return api_request_grammar(r, out, err);
    int32_t open_id = eng_tok_added_id(tok, "<tool_call>"), close_id = eng_tok_added_id(tok, "</tool_call>");
    if (open_id < 0 || close_id < 0)
        return api_error_set(err, API_EUNSUPPORTED, "tools",
                             "'tools': this model's tokenizer has no <tool_call> and </tool_call> tokens");
    bool named = r->tool_choice == API_TOOL_CHOICE_NAMED;
    size_t first = named ? r->tool_named : 0, n = named ? 1 : r->n_tools;
    api_tool_spec *spec = calloc(n, sizeof *spec);
    json_t **params = calloc(n, sizeof *params);
    int rc = API_ENOMEM;
    if (!spec || !params)
        goto done;
    for (size_t i = 0; i < n; i++) {
        const api_tool *t = &r->tools[first + i];
        spec[i].name = t->name;
        if (t->parameters && !(params[i] = json_loads(t->parameters, 0, NULL)))
            goto done;
        spec[i].parameters = params[i];
    }
    api_schema_error se;
    rc = api_schema_tools(spec, n, API_TOOLS_REQUIRED, r->parallel_tool_calls, open_id, close_id, out, &se);
    if (rc) {
        /* the pointer is "/tools/I/function/parameters/...", I counted among the tools compiled */
        char param[96];
        snprintf(param, sizeof param, "tools[%zu].function.parameters", first + strtoul(se.pointer + 7, NULL, 10));
        rc = schema_error(rc, param, &se, err);
        goto done;
    }
    if (r->tool_choice == API_TOOL_CHOICE_AUTO)
        eng_grammar_set_trigger(*out, open_id);
    if (r->tool_choice == API_TOOL_CHOICE_NONE) {
        eng_grammar_free(*out);
        *out = NULL;
        rc = api_request_grammar(r, out, err);
    }
done:
    for (size_t i = 0; params && i < n; i++)
        json_decref(params[i]);
    free(params);
    free(spec);
    return rc == API_ENOMEM ? api_error_set(err, API_ENOMEM, NULL, NULL) : rc;
}

int api_request_render(const api_request *r, bool add_generation_prompt, char **out, size_t *len, api_error *err)
{
    api_chat_opts co;
    api_chat_opts_default(&co);
    co.enable_thinking = r->enable_thinking;
    co.add_generation_prompt = add_generation_prompt;
    const char **tools = calloc(r->n_tools ? r->n_tools : 1, sizeof *tools);
    if (!tools)
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    for (size_t i = 0; i < r->n_tools; i++)
        tools[i] = r->tools[i].json;
    co.tools = tools;
    co.n_tools = r->n_tools;
    api_chat_error ce;
    int rc = api_chat_render(r->messages, r->n_messages, &co, out, len, &ce);
    free(tools);
    if (rc == 0)
        return 0;
    int code = api_chat_http_status(rc) == 400 ? API_ERANGE : API_ENOMEM;
    return api_error_set(err, code, ce.param[0] ? ce.param : "messages", "%s", ce.message);
}

int api_request_grammar(const api_request *r, eng_grammar **out, api_error *err)
{
    *out = NULL;
    if (r->format == API_FORMAT_TEXT)
        return 0;
    api_schema_error se;
    int rc;
    const char *param = "response_format.json_schema.schema";
    if (r->format == API_FORMAT_JSON_OBJECT) {
        param = "response_format";
        rc = api_schema_json_object(out, &se);
    } else {
        json_error_t je;
        json_t *schema = json_loads(r->format_schema, JSON_DECODE_ANY, &je);
        if (!schema)
            return api_error_set(err, API_ENOMEM, NULL, NULL);
        rc = api_schema_compile(schema, out, &se);
        json_decref(schema);
    }
    return rc == 0 ? 0 : schema_error(rc, param, &se, err);
}

/* A schema that failed to compile (API_SCHEMA_E* RC, SE) as the 400 naming PARAM, or the limits. */
static int schema_error(int rc, const char *param, const api_schema_error *se, api_error *err)
{
    if (rc == API_SCHEMA_ENOMEM)
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    if (rc == API_SCHEMA_ETOOBIG)
        return api_error_set(err, API_ERANGE, param,
                             "'%s': %s; the limits are nesting depth %d, %d subschemas, %d properties per object, "
                             "%d for minItems/maxItems/prefixItems, %d enum values, %d bytes of enum and const "
                             "text, lengths up to %d, and %d grammar states",
                             param, se->message, API_SCHEMA_MAX_DEPTH, API_SCHEMA_MAX_NODES, API_SCHEMA_MAX_PROPERTIES,
                             API_SCHEMA_MAX_ITEMS, API_SCHEMA_MAX_ENUM, API_SCHEMA_MAX_LITERAL, API_SCHEMA_MAX_LENGTH,
                             ENG_GRAMMAR_MAX_STATES);
    return api_error_set(err, rc == API_SCHEMA_EUNSUPPORTED ? API_EUNSUPPORTED : API_ERANGE, param, "'%s': %s", param,
                         se->message);
}

/* n and best_of (see api_request); stream must be read first. */
static int parse_choices(json_t *root, api_request *r, api_error *err)
{
    int64_t n = 1, best_of = 0;
    bool best_given = false;
    int rc;
    if ((rc = get_int(root, "n", 1, API_MAX_CHOICES, &n, NULL, err)) ||
        (rc = get_int(root, "best_of", 1, API_MAX_CHOICES, &best_of, &best_given, err)))
        return rc;
    if (!best_given)
        best_of = n;
    if (best_of < n)
        return api_error_set(err, API_ERANGE, "best_of",
                             "'best_of' (%lld) must be at least 'n' (%lld): it is the number of candidates the n "
                             "choices are picked from",
                             (long long)best_of, (long long)n);
    if (best_of > n && r->stream)
        return api_error_set(err, API_ERANGE, "best_of",
                             "'best_of' greater than 'n' cannot be used with 'stream': the best candidates are known "
                             "only once all of them have ended");
    r->n = (int)n;
    r->best_of = (int)best_of;
    return 0;
}

/* A token limit FIELD, when given: at least 1 (0 with ECHO: the prompt's log-likelihood, nothing generated). */
static int get_limit(json_t *root, const char *field, bool echo, int64_t *out, bool *given, api_error *err)
{
    int rc = get_int(root, field, INT64_MIN, INT64_MAX, out, given, err);
    if (rc || !*given)
        return rc;
    if (*out < (echo ? 0 : 1))
        return api_error_set(err, API_ERANGE, field, "'%s' must be at least %d%s, not %lld", field, echo ? 0 : 1,
                             echo ? "" : " (0 only with 'echo')", (long long)*out);
    /* No context holds more (the engine counts tokens in INT32), and the
     * server adds the prompt's length to it. */
    if (*out > MAX_TOKENS)
        return api_error_set(err, API_ERANGE, field, "'%s' must be at most %d, not %lld", field, MAX_TOKENS,
                             (long long)*out);
    return 0;
}

static int parse_root(api_kind kind, json_t *root, api_request *r, api_error *err)
{
    int rc;
    if ((rc = parse_model(root, r, err)))
        return rc;
    if ((rc = check_keys(root, FIELDS, N_FIELDS, 1u << kind, NULL, err)))
        return rc;
    if ((rc = kind == API_KIND_CHAT ? parse_messages(root, r, err) : parse_prompt(root, r, err)))
        return rc;

    if (kind == API_KIND_COMPLETION && (rc = get_bool(root, "echo", &r->echo, err)))
        return rc;
    bool given = false, given_mc = false;
    int64_t mt = -1, mc = -1;
    if ((rc = get_limit(root, "max_tokens", r->echo, &mt, &given, err)))
        return rc;
    /* Both are checked when both are sent; max_tokens wins. */
    if (kind == API_KIND_CHAT && (rc = get_limit(root, "max_completion_tokens", false, &mc, &given_mc, err)))
        return rc;
    r->max_tokens = given ? mt : given_mc ? mc : -1;

    if ((rc = parse_sampling(root, r, err)) || (rc = parse_stop(root, r, err)) ||
        (rc = parse_logprobs(kind, root, r, err)) || (rc = parse_logit_bias(root, r, err)))
        return rc;
    if ((rc = get_bool(root, "stream", &r->stream, err)) || (rc = parse_format(root, r, err)))
        return rc;
    if (kind == API_KIND_CHAT && (rc = parse_tools(root, r, err)))
        return rc;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return type_error(err, "stream_options", "an object", so);
        json_t *iu = json_object_get(so, "include_usage");
        if (iu && !json_is_null(iu) && !json_is_boolean(iu))
            return type_error(err, "stream_options.include_usage", "a boolean", iu);
        r->include_usage = json_is_true(iu);
    }
    return parse_choices(root, r, err);
}

/* The fields of /tokenize and /detokenize; no other is accepted. */
static int check_tokenize_fields(json_t *root, bool detokenize, api_error *err)
{
    static const char *const tok_fields[] = {"model", "prompt", "messages", "add_special_tokens",
                                             "add_generation_prompt", "chat_template_kwargs", "return_token_strs"};
    static const char *const detok_fields[] = {"model", "tokens"};
    const char *const *known = detokenize ? detok_fields : tok_fields;
    size_t n = detokenize ? 2 : sizeof tok_fields / sizeof *tok_fields;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        bool found = false;
        for (size_t i = 0; i < n && !found; i++)
            found = !strcmp(key, known[i]);
        if (!found)
            return api_error_set(err, API_EUNSUPPORTED, key, "'%s' is not a field of %s", key,
                                 detokenize ? "/detokenize" : "/tokenize");
    }
    return 0;
}

static int parse_tokenize(bool detokenize, json_t *root, api_request *r, api_error *err)
{
    int rc;
    if ((rc = parse_model(root, r, err)))
        return rc;
    if ((rc = check_tokenize_fields(root, detokenize, err)))
        return rc;
    if (detokenize) {
        json_t *t = json_object_get(root, "tokens");
        if (!t || json_is_null(t))
            return api_error_set(err, API_EMISSING, "tokens", "'tokens' is required");
        if (!json_is_array(t))
            return type_error(err, "tokens", "an array of token ids", t);
        return parse_id_array(t, "tokens", r, err);
    }
    json_t *p = json_object_get(root, "prompt"), *m = json_object_get(root, "messages");
    bool has_p = p && !json_is_null(p), has_m = m && !json_is_null(m);
    if (has_p == has_m)
        return api_error_set(err, has_p ? API_ERANGE : API_EMISSING, has_p ? "messages" : "prompt",
                             "give exactly one of 'prompt' and 'messages'");
    r->add_generation_prompt = true;
    r->add_special_tokens = has_p;
    if (has_p) {
        if (!json_is_string(p))
            return type_error(err, "prompt", "a string", p);
        r->prompt_len = json_string_length(p);
        if (!(r->prompt = dup_n(json_string_value(p), r->prompt_len)))
            return api_error_set(err, API_ENOMEM, NULL, NULL);
    } else {
        r->kind = API_KIND_CHAT;
        if ((rc = get_bool(root, "add_generation_prompt", &r->add_generation_prompt, err)))
            return rc;
        if ((rc = parse_messages(root, r, err)))
            return rc;
    }
    if ((rc = get_bool(root, "add_special_tokens", &r->add_special_tokens, err)) ||
        (rc = get_bool(root, "return_token_strs", &r->return_token_strs, err)))
        return rc;
    return 0;
}

/* The body as a JSON object and a zeroed request, or an error (nothing to free). */
static int load_body(const char *body, size_t len, json_t **root, api_request **r, api_error *err)
{
    json_error_t je;
    *r = NULL;
    *root = json_loadb(body, len, 0, &je);
    if (!*root)
        return api_error_set(err, API_EJSON, NULL, "request body is not valid JSON: %s at line %d, column %d",
                             je.text, je.line, je.column);
    if (!json_is_object(*root)) {
        json_decref(*root);
        return api_error_set(err, API_EJSON, NULL, "request body must be a JSON object");
    }
    if (!(*r = calloc(1, sizeof **r))) {
        json_decref(*root);
        return api_error_set(err, API_ENOMEM, NULL, NULL);
    }
    (*r)->enable_thinking = true;
    (*r)->n = (*r)->best_of = 1;
    return 0;
}

/* After parsing with result RC: ROOT freed, R handed out or freed. */
static int load_done(int rc, json_t *root, api_request *r, api_request **out)
{
    json_decref(root);
    if (rc)
        api_request_free(r);
    else
        *out = r;
    return rc;
}

int api_parse_tokenize(bool detokenize, const char *body, size_t len, api_request **out, api_error *err)
{
    *out = NULL;
    json_t *root;
    api_request *r;
    int rc = load_body(body, len, &root, &r, err);
    if (rc)
        return rc;
    r->kind = API_KIND_COMPLETION;
    return load_done(parse_tokenize(detokenize, root, r, err), root, r, out);
}

int api_parse_request(api_kind kind, const char *body, size_t len, const eng_sampling *defaults, api_request **out,
                      api_error *err)
{
    *out = NULL;
    json_t *root;
    api_request *r;
    int rc = load_body(body, len, &root, &r, err);
    if (rc)
        return rc;
    r->kind = kind;
    if (defaults)
        r->sampling = *defaults;
    else
        eng_sampling_default(&r->sampling);
    r->sampling.seed = 0;
    return load_done(parse_root(kind, root, r, err), root, r, out);
}
