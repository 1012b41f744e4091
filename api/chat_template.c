/*
 * chat_template: the Qwen3 chat template without a template engine (see
 * chat_template.h). Each step below names the template expression it
 * reproduces; "strip" always means the characters '\n' only, as the
 * template's lstrip('\n') / rstrip('\n') / strip('\n') do.
 *
 * Called by the API layer on the event-loop thread or a worker; stateless.
 */
#include "api/chat_template.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *api_chat_strerror(int err)
{
    switch (err) {
#define API_CHAT_STR(name, value, status, type, msg) \
    case value:                                      \
        return msg;
        API_CHAT_ERRORS(API_CHAT_STR)
#undef API_CHAT_STR
    }
    return "unknown chat template error";
}

int api_chat_http_status(int err)
{
    switch (err) {
#define API_CHAT_STATUS(name, value, status, type, msg) \
    case value:                                         \
        return status;
        API_CHAT_ERRORS(API_CHAT_STATUS)
#undef API_CHAT_STATUS
    }
    return 500;
}

const char *api_chat_error_type(int err)
{
    switch (err) {
#define API_CHAT_TYPE(name, value, status, type, msg) \
    case value:                                       \
        return type;
        API_CHAT_ERRORS(API_CHAT_TYPE)
#undef API_CHAT_TYPE
    }
    return "server_error";
}

void api_chat_opts_default(api_chat_opts *o)
{
    o->add_generation_prompt = true;
    o->enable_thinking = true;
    o->tools = NULL;
    o->n_tools = 0;
}

/* ---- byte spans ---------------------------------------------------------- */

typedef struct span {
    const char *p;
    size_t n;
} span;

static span span_of(const char *s) { return (span){s, strlen(s)}; }

/* Position of the first / last occurrence of NEEDLE in S, or SIZE_MAX. */
static size_t find_first(span s, const char *needle)
{
    size_t nl = strlen(needle);
    const char *hit = memmem(s.p, s.n, needle, nl);
    return hit ? (size_t)(hit - s.p) : SIZE_MAX;
}

static size_t find_last(span s, const char *needle)
{
    size_t nl = strlen(needle);
    if (s.n < nl)
        return SIZE_MAX;
    for (size_t i = s.n - nl + 1; i-- > 0;)
        if (memcmp(s.p + i, needle, nl) == 0)
            return i;
    return SIZE_MAX;
}

static span lstrip_nl(span s)
{
    while (s.n > 0 && s.p[0] == '\n') {
        s.p++;
        s.n--;
    }
    return s;
}

static span rstrip_nl(span s)
{
    while (s.n > 0 && s.p[s.n - 1] == '\n')
        s.n--;
    return s;
}

static bool starts_with(span s, const char *pre)
{
    size_t n = strlen(pre);
    return s.n >= n && memcmp(s.p, pre, n) == 0;
}

static bool ends_with(span s, const char *suf)
{
    size_t n = strlen(suf);
    return s.n >= n && memcmp(s.p + s.n - n, suf, n) == 0;
}

/* ---- reasoning split ----------------------------------------------------- */

/*
 * The template's split of an assistant message that contains "</think>":
 *   content   = content.split('</think>')[-1].lstrip('\n')
 *   reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
 */
static void split_think(span text, span *reasoning, span *content)
{
    static const char close[] = "</think>", open[] = "<think>";
    size_t first = find_first(text, close);
    size_t last = find_last(text, close);
    *content = lstrip_nl((span){text.p + last + strlen(close), text.n - last - strlen(close)});
    span before = rstrip_nl((span){text.p, first});
    size_t o = find_last(before, open);
    if (o != SIZE_MAX)
        before = (span){before.p + o + strlen(open), before.n - o - strlen(open)};
    *reasoning = lstrip_nl(before);
}

void api_chat_split_reasoning(const char *text, size_t len, api_chat_split *out)
{
    span t = {text, len}, r, c;
    memset(out, 0, sizeof *out);
    if (find_first(t, "</think>") != SIZE_MAX) {
        split_think(t, &r, &c);
        out->has_reasoning = true;
    } else if (starts_with(t, "<think>")) {
        r = lstrip_nl((span){text + strlen("<think>"), len - strlen("<think>")});
        c = (span){text + len, 0};
        out->has_reasoning = true;
    } else {
        r = (span){text, 0};
        c = t;
    }
    out->reasoning_off = (size_t)(r.p - text);
    out->reasoning_len = r.n;
    out->content_off = (size_t)(c.p - text);
    out->content_len = c.n;
}

/* ---- output buffer ------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void put(sbuf *b, span s)
{
    if (b->oom || s.n == 0)
        return;
    if (s.n > SIZE_MAX - b->n - 1) {
        b->oom = true;
        return;
    }
    if (b->n + s.n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + s.n + 1)
            cap = cap > SIZE_MAX / 2 ? b->n + s.n + 1 : cap * 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s.p, s.n);
    b->n += s.n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s) { put(b, span_of(s)); }

/* ---- rendering ----------------------------------------------------------- */

enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL };

/* Fills ERR: the param ("messages[I].FIELD") followed by WHAT. */
static int fail(api_chat_error *err, int code, int index, const char *field, const char *what)
{
    if (err) {
        err->index = index;
        if (index >= 0)
            snprintf(err->param, sizeof err->param, "messages[%d]%s%s", index, field ? "." : "",
                     field ? field : "");
        else
            snprintf(err->param, sizeof err->param, "messages");
        snprintf(err->message, sizeof err->message, "%s%s", err->param, what);
    }
    return code;
}

/* Checks every message and fills ROLES. */
static int check_messages(const api_chat_msg *msgs, size_t n, enum role *roles, api_chat_error *err)
{
    if (n == 0)
        return fail(err, API_CHAT_EEMPTY, -1, NULL, " must contain at least one message");
    for (size_t i = 0; i < n; i++) {
        int idx = i > INT32_MAX ? INT32_MAX : (int)i;
        const char *role = msgs[i].role;
        if (!role)
            return fail(err, API_CHAT_EROLE, idx, "role", " is missing");
        if (strcmp(role, "system") == 0)
            roles[i] = ROLE_SYSTEM;
        else if (strcmp(role, "user") == 0)
            roles[i] = ROLE_USER;
        else if (strcmp(role, "assistant") == 0)
            roles[i] = ROLE_ASSISTANT;
        else if (strcmp(role, "tool") == 0)
            roles[i] = ROLE_TOOL;
        else {
            /* Quote at most 32 bytes of the client's role, cut on a UTF-8
             * character boundary so the message stays valid UTF-8. */
            size_t shown = strlen(role);
            if (shown > 32) {
                shown = 32;
                while (shown > 0 && ((unsigned char)role[shown] & 0xc0) == 0x80)
                    shown--;
            }
            char what[96];
            snprintf(what, sizeof what,
                     ": unsupported role '%.*s' (expected system, user, assistant or tool)", (int)shown,
                     role);
            return fail(err, API_CHAT_EROLE, idx, "role", what);
        }
        if (!msgs[i].content)
            return fail(err, API_CHAT_ECONTENT, idx, "content", " must be a string");
        for (size_t k = 0; k < msgs[i].n_tool_calls; k++)
            if (roles[i] != ROLE_ASSISTANT || !msgs[i].tool_calls[k].name || !msgs[i].tool_calls[k].arguments)
                return fail(err, API_CHAT_ECONTENT, idx, "tool_calls",
                            roles[i] != ROLE_ASSISTANT ? " belong to assistant messages only"
                                                       : " need a name and arguments");
    }
    return API_CHAT_OK;
}

/*
 * The template's ns.last_query_index: the last user message whose content is
 * not a wrapped tool response, or the last index when there is none.
 */
static size_t last_query_index(const api_chat_msg *msgs, size_t n, const enum role *roles)
{
    for (size_t i = n; i-- > 0;) {
        span c = span_of(msgs[i].content);
        if (roles[i] == ROLE_USER &&
            !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>")))
            return i;
    }
    return n - 1;
}

static void render_assistant(sbuf *b, const api_chat_msg *m, bool keep_think)
{
    span content = span_of(m->content);
    span reasoning = {"", 0};
    if (m->reasoning_content)
        reasoning = span_of(m->reasoning_content);
    else if (find_first(content, "</think>") != SIZE_MAX)
        split_think(span_of(m->content), &reasoning, &content);

    puts_(b, "<|im_start|>assistant\n");
    /* "loop.last or reasoning_content" decided by the caller through KEEP_THINK. */
    if (keep_think) {
        puts_(b, "<think>\n");
        put(b, rstrip_nl(lstrip_nl(reasoning)));
        puts_(b, "\n</think>\n\n");
        put(b, lstrip_nl(content));
    } else {
        put(b, content);
    }
    /* "(loop.first and content) or (not loop.first)": a newline before every block but a first one after no content. */
    for (size_t k = 0; k < m->n_tool_calls; k++) {
        if (k > 0 || content.n > 0)
            puts_(b, "\n");
        puts_(b, "<tool_call>\n{\"name\": \"");
        puts_(b, m->tool_calls[k].name);
        puts_(b, "\", \"arguments\": ");
        puts_(b, m->tool_calls[k].arguments);
        puts_(b, "}\n</tool_call>");
    }
    puts_(b, "<|im_end|>\n");
}

/* True when the assistant message at I keeps its think block (see the header). */
static bool keeps_think(const api_chat_msg *m, size_t i, size_t n, size_t last_query)
{
    if (i <= last_query)
        return false;
    if (i == n - 1)
        return true;
    /* The reasoning the template would compute must be non-empty. */
    if (m->reasoning_content)
        return m->reasoning_content[0] != '\0';
    span c = span_of(m->content), r, rest;
    if (find_first(c, "</think>") == SIZE_MAX)
        return false;
    split_think(c, &r, &rest);
    return r.n > 0;
}

int api_chat_render(const api_chat_msg *msgs, size_t n, const api_chat_opts *opts, char **out,
                    size_t *out_len, api_chat_error *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (err) {
        err->index = -1;
        err->param[0] = '\0';
        err->message[0] = '\0';
    }
    api_chat_opts defaults;
    if (!opts) {
        api_chat_opts_default(&defaults);
        opts = &defaults;
    }
    if (n > 0 && !msgs)
        return fail(err, API_CHAT_EEMPTY, -1, NULL, " must contain at least one message");
    if (n > SIZE_MAX / sizeof(enum role))
        return fail(err, API_CHAT_ENOMEM, -1, NULL, ": too many messages");
    enum role *roles = malloc((n ? n : 1) * sizeof *roles);
    if (!roles)
        return fail(err, API_CHAT_ENOMEM, -1, NULL, ": out of memory");
    int rc = check_messages(msgs, n, roles, err);
    if (rc != API_CHAT_OK) {
        free(roles);
        return rc;
    }

    sbuf b = {0};
    if (opts->n_tools) {
        puts_(&b, "<|im_start|>system\n");
        if (roles[0] == ROLE_SYSTEM) {
            puts_(&b, msgs[0].content);
            puts_(&b, "\n\n");
        }
        puts_(&b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided "
                  "with function signatures within <tools></tools> XML tags:\n<tools>");
        for (size_t k = 0; k < opts->n_tools; k++) {
            puts_(&b, "\n");
            puts_(&b, opts->tools[k]);
        }
        puts_(&b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                  "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                  "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    } else if (roles[0] == ROLE_SYSTEM) {
        puts_(&b, "<|im_start|>system\n");
        puts_(&b, msgs[0].content);
        puts_(&b, "<|im_end|>\n");
    }
    size_t lq = last_query_index(msgs, n, roles);
    for (size_t i = 0; i < n; i++) {
        switch (roles[i]) {
        case ROLE_SYSTEM:
            if (i == 0)
                break;
            /* A later system message is rendered in place, like a user one. */
            __attribute__((fallthrough));
        case ROLE_USER:
            puts_(&b, "<|im_start|>");
            puts_(&b, msgs[i].role);
            puts_(&b, "\n");
            puts_(&b, msgs[i].content);
            puts_(&b, "<|im_end|>\n");
            break;
        case ROLE_ASSISTANT:
            render_assistant(&b, &msgs[i], keeps_think(&msgs[i], i, n, lq));
            break;
        case ROLE_TOOL:
            /* A run of tool messages is one user turn. */
            if (i == 0 || roles[i - 1] != ROLE_TOOL)
                puts_(&b, "<|im_start|>user");
            puts_(&b, "\n<tool_response>\n");
            puts_(&b, msgs[i].content);
            puts_(&b, "\n</tool_response>");
            if (i == n - 1 || roles[i + 1] != ROLE_TOOL)
                puts_(&b, "<|im_end|>\n");
            break;
        }
    }
    if (opts->add_generation_prompt) {
        puts_(&b, "<|im_start|>assistant\n");
        if (!opts->enable_thinking)
            puts_(&b, "<think>\n\n</think>\n\n");
    }
    free(roles);
    if (!b.oom && !b.p && !(b.p = calloc(1, 1)))
        b.oom = true;
    if (b.oom) {
        free(b.p);
        return fail(err, API_CHAT_ENOMEM, -1, NULL, ": out of memory");
    }
    *out = b.p;
    if (out_len)
        *out_len = b.n;
    return API_CHAT_OK;
}
