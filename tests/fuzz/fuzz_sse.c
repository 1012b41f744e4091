/*
 * fuzz_sse: the streamed response path, from text pieces to SSE events:
 * api_stream (chunk JSON, incremental reasoning split for chat) framed by
 * srv_sse_format(), against the one-shot body of api_render_result(); and
 * srv_sse_format() on the raw input.
 *
 * Input: byte 0 holds the options (bit 0: chat, bit 1: include_usage,
 * bit 2: finish reason "stop" rather than "length", bit 3: chat with tools,
 * whose <tool_call> blocks become tool_calls); the rest is the
 * generated text, cut into the pieces the scheduler would deliver at each
 * 0xFF byte (a byte that valid UTF-8 never holds).
 *
 * Checked: every event is one "data: " line carrying a JSON object and ends
 * with a blank line; the stream ends with exactly one chunk naming the
 * finish reason, then (include_usage) the usage chunk; the deltas joined
 * equal the one-shot body's text, or its content and reasoning_content for
 * chat (with tools: the tool_calls deltas joined equal the message's
 * tool_calls, ids included), whenever the pieces are valid UTF-8 and the text is one that
 * render.h promises the same split for (see chat_split_comparable); an SSE
 * parser reading srv_sse_format(X) gets X back, with line breaks as "\n" and
 * NUL bytes dropped.
 */
#include <jansson.h>
#include <string.h>

#include "api/render.h"
#include "server/sse.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void buf_add(buf *b, const char *s, size_t n)
{
    if (!n)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        FUZZ_CHECK(p);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static size_t count(const char *s, size_t n, const char *needle)
{
    size_t c = 0, nl = strlen(needle);
    for (const char *p = s; n >= nl && (p = memmem(p, n - (size_t)(p - s), needle, nl)); p += nl)
        c++;
    return c;
}

/*
 * render.h promises equal splits except after a second "</think>". Beyond
 * that the stream only opens the reasoning on a leading "<think>" and keeps
 * later "<think>" tags in it, while the one-shot split also takes reasoning
 * from a text that has "</think>" without a leading "<think>", and starts it
 * after the last "<think>" before the "</think>". Those texts are left out.
 */
static bool chat_split_comparable(const char *t, size_t n)
{
    static const char open[] = "<think>", close[] = "</think>";
    size_t closes = count(t, n, close);
    if (closes == 0)
        return true;
    if (closes > 1 || n < strlen(open) || memcmp(t, open, strlen(open)) != 0)
        return false;
    const char *end = memmem(t, n, close, strlen(close));
    return count(t + 1, (size_t)(end - t) - 1, open) == 0;
}

/* Frames one chunk and reads it back as an SSE client would. */
static json_t *frame_and_parse(const char *chunk)
{
    size_t len = 0;
    char *ev = srv_sse_format(chunk, strlen(chunk), &len);
    FUZZ_CHECK(ev);
    FUZZ_CHECK(len >= 8 && !memcmp(ev, "data: ", 6) && !memcmp(ev + len - 2, "\n\n", 2));
    FUZZ_CHECK(!memchr(ev, '\n', len - 2) && !memchr(ev, '\r', len));
    json_error_t je;
    json_t *j = json_loadb(ev + 6, len - 8, JSON_ALLOW_NUL, &je);
    FUZZ_CHECK(json_is_object(j));
    free(ev);
    return j;
}

static void check_sse_format(const uint8_t *data, size_t n)
{
    size_t len = 0;
    char *ev = srv_sse_format((const char *)data, n, &len);
    FUZZ_CHECK(ev && strlen(ev) == len);
    FUZZ_CHECK(len >= 8 && !memcmp(ev + len - 2, "\n\n", 2));
    /* Parse: lines end at "\n" only (the writer emits no "\r"); each must be a data line. */
    buf got = {0}, want = {0};
    FUZZ_CHECK(!memchr(ev, '\r', len));
    size_t lines = 0;
    for (size_t i = 0; i < len - 1;) {
        const char *nl = memchr(ev + i, '\n', len - 1 - i);
        FUZZ_CHECK(nl);
        size_t ll = (size_t)(nl - (ev + i));
        FUZZ_CHECK(ll >= 6 && !memcmp(ev + i, "data: ", 6));
        if (lines++)
            buf_add(&got, "\n", 1);
        buf_add(&got, ev + i + 6, ll - 6);
        i += ll + 1;
    }
    for (size_t i = 0; i < n; i++) {
        char c = (char)data[i];
        if (c == '\r' && i + 1 < n && data[i + 1] == '\n')
            continue;
        if (c == '\r')
            c = '\n';
        if (c)
            buf_add(&want, &c, 1);
    }
    FUZZ_CHECK(got.n == want.n && (!got.n || !memcmp(got.p, want.p, got.n)));
    free(got.p);
    free(want.p);
    free(ev);
}

/* Adds the string member KEY of OBJ (if any) to B. */
static void take(buf *b, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (v) {
        FUZZ_CHECK(json_is_string(v));
        buf_add(b, json_string_value(v), json_string_length(v));
    }
}

/* A delta's tool_calls entries joined into CALLS, OpenAI's way: the first names the call, the rest add arguments. */
static void join_calls(json_t *calls, json_t *tc)
{
    size_t i;
    json_t *e;
    json_array_foreach(tc, i, e) {
        size_t idx = (size_t)json_integer_value(json_object_get(e, "index"));
        json_t *fn = json_object_get(e, "function"), *args = json_object_get(fn, "arguments");
        FUZZ_CHECK(json_is_string(args));
        if (idx == json_array_size(calls)) {
            FUZZ_CHECK(json_string_length(args) == 0);
            json_array_append_new(calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", json_object_get(e, "id"), "type",
                                                   "function", "function", "name", json_object_get(fn, "name"),
                                                   "arguments", ""));
            continue;
        }
        FUZZ_CHECK(idx + 1 == json_array_size(calls) && !json_object_get(e, "id"));
        json_t *have = json_object_get(json_object_get(json_array_get(calls, idx), "function"), "arguments");
        size_t a = json_string_length(have), b = json_string_length(args);
        char *j = malloc(a + b);
        FUZZ_CHECK(j);
        memcpy(j, json_string_value(have), a);
        memcpy(j + a, json_string_value(args), b);
        json_string_setn(have, j, a + b);
        free(j);
    }
}

static bool same(const buf *b, json_t *v)
{
    if (json_is_null(v))
        v = NULL;
    const char *s = v ? json_string_value(v) : "";
    size_t n = v ? json_string_length(v) : 0;
    return s && b->n == n && (n == 0 || !memcmp(b->p, s, n));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    check_sse_format(data, size);
    api_kind kind = data[0] & 1 ? API_KIND_CHAT : API_KIND_COMPLETION;
    bool usage_on = (data[0] >> 1) & 1;
    const char *finish = (data[0] >> 2) & 1 ? "stop" : "length";
    bool tools = kind == API_KIND_CHAT && (data[0] >> 3) & 1;
    api_meta meta = {.id = "fuzz-1", .created = 1, .model = "m", .tool_calls = tools, .tool_seed = data[0]};
    json_t *calls = json_array();
    api_stream *st = api_stream_new(kind, &meta, usage_on);
    FUZZ_CHECK(st);
    FUZZ_CHECK(api_stream_begin(st) == 0);

    buf text = {0}, content = {0}, reasoning = {0};
    bool pieces_utf8 = true;
    const char *p = (const char *)data + 1, *end = (const char *)data + size;
    while (p <= end) {
        const char *cut = memchr(p, 0xff, (size_t)(end - p));
        size_t n = (size_t)((cut ? cut : end) - p);
        pieces_utf8 = pieces_utf8 && fuzz_utf8_valid(p, n);
        buf_add(&text, p, n);
        FUZZ_CHECK(api_stream_text(st, p, n) == 0);
        p += n + 1;
    }
    api_usage usage = {3, 4, 0};
    api_timings timings = {1, 2, 3, 4, 5};
    FUZZ_CHECK(api_stream_end(st, finish, &usage, &timings) == 0);

    char *chunk;
    size_t n_chunks = 0, n_finish = 0, n_usage = 0;
    bool after_finish = false;
    while ((chunk = api_stream_next(st))) {
        json_t *j = frame_and_parse(chunk);
        free(chunk);
        n_chunks++;
        json_t *choices = json_object_get(j, "choices");
        FUZZ_CHECK(json_is_array(choices));
        if (json_array_size(choices) == 0) {
            FUZZ_CHECK(usage_on && after_finish && json_is_object(json_object_get(j, "usage")));
            n_usage++;
            json_decref(j);
            continue;
        }
        FUZZ_CHECK(!after_finish);
        json_t *c = json_array_get(choices, 0);
        json_t *fr = json_object_get(c, "finish_reason");
        if (json_is_string(fr)) {
            FUZZ_CHECK(!strcmp(json_string_value(fr), finish) ||
                       (tools && !strcmp(finish, "stop") && !strcmp(json_string_value(fr), "tool_calls")));
            after_finish = true;
            n_finish++;
        } else {
            FUZZ_CHECK(json_is_null(fr));
        }
        if (kind == API_KIND_CHAT) {
            json_t *d = json_object_get(c, "delta");
            FUZZ_CHECK(json_is_object(d));
            take(&content, d, "content");
            take(&reasoning, d, "reasoning_content");
            if (json_object_get(d, "tool_calls"))
                join_calls(calls, json_object_get(d, "tool_calls"));
        } else {
            take(&content, c, "text");
        }
        json_decref(j);
    }
    FUZZ_CHECK(n_finish == 1 && n_usage == (usage_on ? 1u : 0u));
    FUZZ_CHECK(n_chunks >= 1 + n_usage);

    char *body = api_render_result(kind, &meta, text.p ? text.p : "", text.n, finish, &usage, &timings, NULL);
    FUZZ_CHECK(body);
    json_error_t je;
    json_t *one = json_loads(body, JSON_ALLOW_NUL, &je);
    FUZZ_CHECK(json_is_object(one));
    free(body);
    json_t *c0 = json_array_get(json_object_get(one, "choices"), 0);
    FUZZ_CHECK(json_is_object(c0));
    if (pieces_utf8) {
        if (kind == API_KIND_COMPLETION) {
            FUZZ_CHECK(same(&content, json_object_get(c0, "text")));
        } else if (chat_split_comparable(text.p ? text.p : "", text.n)) {
            json_t *msg = json_object_get(c0, "message");
            FUZZ_CHECK(same(&content, json_object_get(msg, "content")));
            FUZZ_CHECK(same(&reasoning, json_object_get(msg, "reasoning_content")));
            json_t *want = json_object_get(msg, "tool_calls");
            FUZZ_CHECK(want ? json_equal(want, calls) : json_array_size(calls) == 0);
        }
    }
    json_decref(one);
    json_decref(calls);
    free(text.p);
    free(content.p);
    free(reasoning.p);
    api_stream_free(st);
    return 0;
}
