/*
 * test_api: the api/ module. Request parsing runs the data-driven cases of
 * tests/api/valid/<case>/ and tests/api/invalid/<case>/ (request.json and
 * an `expected` file of "key = value" lines: the parsed fields, or the
 * status, type, code and param of the error); then the error body, the
 * constant-time key comparison, the response shapes, and the streaming
 * renderer, whose concatenated deltas must equal the non-streamed fields
 * however the text is cut.
 */
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/error.h"
#include "api/parse.h"
#include "api/render.h"
#include "engine/sampler.h"
#include "tests/check_main.h"

/* ---- case files ------------------------------------------------------------ */

typedef struct kv {
    char key[64];
    char value[512];
} kv;

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b) {
                free(buf);
                buf = NULL;
            }
            buf = b;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = '\0';
    *len = n;
    return buf;
}

/* Reads an `expected` file; "\n" in values stands for a newline. */
static int read_expected(const char *path, kv *out, int max)
{
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char line[700];
    int n = 0;
    while (fgets(line, sizeof line, f) && n < max) {
        char *eq = strstr(line, " = ");
        if (!eq)
            continue;
        *eq = '\0';
        char *v = eq + 3;
        v[strcspn(v, "\n")] = '\0';
        copy_str(out[n].key, sizeof out[n].key, line);
        char *w = out[n].value;
        for (char *r = v; *r && w < out[n].value + sizeof out[n].value - 1; r++) {
            if (r[0] == '\\' && r[1] == 'n') {
                *w++ = '\n';
                r++;
            } else {
                *w++ = *r;
            }
        }
        *w = '\0';
        n++;
    }
    fclose(f);
    return n;
}

static const char *lookup(const kv *e, int n, const char *key)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(e[i].key, key))
            return e[i].value;
    return NULL;
}

static const char *srcdir(void)
{
    const char *s = getenv("QD_SRCDIR");
    return s && *s ? s : ".";
}

/* The case folders under tests/api/WHICH, sorted. */
static int list_cases(const char *which, char names[][128], int max)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/api/%s", srcdir(), which);
    DIR *d = opendir(dir);
    ck_assert_msg(d != NULL, "cannot open %s (set QD_SRCDIR)", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max)
        if (e->d_name[0] != '.')
            copy_str(names[n++], 128, e->d_name);
    closedir(d);
    qsort(names, (size_t)n, 128, (int (*)(const void *, const void *))strcmp);
    return n;
}

static api_kind kind_of(const char *s) { return s && !strcmp(s, "chat") ? API_KIND_CHAT : API_KIND_COMPLETION; }

static void check_float(const char *name, const char *field, float got, const char *want)
{
    if (!want)
        return;
    double w = atof(want);
    ck_assert_msg(got > w - 1e-6 && got < w + 1e-6, "%s: %s is %g, expected %s", name, field, (double)got, want);
}

static void check_bool(const char *name, const char *field, bool got, const char *want)
{
    if (!want)
        return;
    ck_assert_msg(got == !strcmp(want, "true"), "%s: %s is %d, expected %s", name, field, got, want);
}

static void check_str(const char *name, const char *field, const char *got, const char *want)
{
    if (!want)
        return;
    ck_assert_msg(got && !strcmp(got, want), "%s: %s is '%s', expected '%s'", name, field, got ? got : "(null)", want);
}

static void check_valid(const char *name)
{
    char path[1200];
    kv e[40];
    snprintf(path, sizeof path, "%s/tests/api/valid/%s/expected", srcdir(), name);
    int n = read_expected(path, e, 40);
    snprintf(path, sizeof path, "%s/tests/api/valid/%s/request.json", srcdir(), name);
    size_t len;
    char *body = read_file(path, &len);
    ck_assert_msg(body != NULL, "cannot read %s", path);
    api_request *r = NULL;
    api_error err;
    int rc = api_parse_request(kind_of(lookup(e, n, "kind")), body, len, NULL, &r, &err);
    ck_assert_msg(rc == 0, "valid/%s rejected: %s (param %s)", name, err.message, err.param);
    const char *v;
    check_str(name, "model", r->model, lookup(e, n, "model"));
    check_str(name, "prompt", r->prompt, lookup(e, n, "prompt"));
    if ((v = lookup(e, n, "prompt_ids"))) {
        char got[512] = "";
        for (size_t i = 0; i < r->n_prompt_ids; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d", i ? "," : "", r->prompt_ids[i]);
        ck_assert_msg(!strcmp(got, v), "%s: prompt ids %s, expected %s", name, got, v);
        ck_assert_msg(r->prompt == NULL, "%s: both text and ids", name);
    }
    if ((v = lookup(e, n, "max_tokens")))
        ck_assert_msg(r->max_tokens == atoll(v), "%s: max_tokens %lld, expected %s", name, (long long)r->max_tokens, v);
    check_float(name, "temperature", r->sampling.temperature, lookup(e, n, "temperature"));
    check_float(name, "top_p", r->sampling.top_p, lookup(e, n, "top_p"));
    check_float(name, "min_p", r->sampling.min_p, lookup(e, n, "min_p"));
    check_float(name, "presence_penalty", r->sampling.presence_penalty, lookup(e, n, "presence_penalty"));
    check_float(name, "frequency_penalty", r->sampling.frequency_penalty, lookup(e, n, "frequency_penalty"));
    check_float(name, "repetition_penalty", r->sampling.repetition_penalty, lookup(e, n, "repetition_penalty"));
    if ((v = lookup(e, n, "top_k")))
        ck_assert_msg(r->sampling.top_k == atoi(v), "%s: top_k %d, expected %s", name, r->sampling.top_k, v);
    if ((v = lookup(e, n, "seed")))
        ck_assert_msg(r->sampling.seed == strtoull(v, NULL, 10), "%s: seed %llu, expected %s", name,
                      (unsigned long long)r->sampling.seed, v);
    check_bool(name, "seed_given", r->seed_given, lookup(e, n, "seed_given"));
    check_bool(name, "stream", r->stream, lookup(e, n, "stream"));
    check_bool(name, "include_usage", r->include_usage, lookup(e, n, "include_usage"));
    check_bool(name, "enable_thinking", r->enable_thinking, lookup(e, n, "enable_thinking"));
    if ((v = lookup(e, n, "n")))
        ck_assert_msg(r->n == atoi(v), "%s: n %d, expected %s", name, r->n, v);
    if ((v = lookup(e, n, "best_of")))
        ck_assert_msg(r->best_of == atoi(v), "%s: best_of %d, expected %s", name, r->best_of, v);
    if ((v = lookup(e, n, "n_stop")))
        ck_assert_msg(r->n_stop == (size_t)atoi(v), "%s: %zu stop strings, expected %s", name, r->n_stop, v);
    check_bool(name, "logprobs", r->logprobs, lookup(e, n, "logprobs"));
    check_bool(name, "echo", r->echo, lookup(e, n, "echo"));
    if ((v = lookup(e, n, "top_logprobs")))
        ck_assert_msg(r->top_logprobs == atoi(v), "%s: top_logprobs %d, expected %s", name, r->top_logprobs, v);
    if ((v = lookup(e, n, "n_bias")))
        ck_assert_msg(r->n_bias == (size_t)atoi(v), "%s: %zu logit_bias entries, expected %s", name, r->n_bias, v);
    for (size_t i = 0; i < r->n_bias && i < 4; i++) {
        char key[32];
        snprintf(key, sizeof key, "bias_id%zu", i);
        if ((v = lookup(e, n, key)))
            ck_assert_msg(r->bias_ids[i] == atoi(v), "%s: %s is %d, expected %s", name, key, r->bias_ids[i], v);
        snprintf(key, sizeof key, "bias%zu", i);
        check_float(name, key, r->bias[i], lookup(e, n, key));
    }
    if ((v = lookup(e, n, "n_messages")))
        ck_assert_msg(r->n_messages == (size_t)atoi(v), "%s: %zu messages, expected %s", name, r->n_messages, v);
    for (int i = 0; i < 4; i++) {
        char key[32];
        snprintf(key, sizeof key, "stop%d", i);
        if ((v = lookup(e, n, key)))
            check_str(name, key, (size_t)i < r->n_stop ? r->stop[i] : NULL, v);
        snprintf(key, sizeof key, "role%d", i);
        if ((v = lookup(e, n, key)))
            check_str(name, key, (size_t)i < r->n_messages ? r->messages[i].role : NULL, v);
        snprintf(key, sizeof key, "content%d", i);
        if ((v = lookup(e, n, key)))
            check_str(name, key, (size_t)i < r->n_messages ? r->messages[i].content : NULL, v);
        snprintf(key, sizeof key, "reasoning%d", i);
        if ((v = lookup(e, n, key)))
            check_str(name, key, (size_t)i < r->n_messages ? r->messages[i].reasoning_content : NULL, v);
    }
    api_request_free(r);
    free(body);
}

static void check_invalid(const char *name)
{
    char path[1200];
    kv e[16];
    snprintf(path, sizeof path, "%s/tests/api/invalid/%s/expected", srcdir(), name);
    int n = read_expected(path, e, 16);
    snprintf(path, sizeof path, "%s/tests/api/invalid/%s/request.json", srcdir(), name);
    size_t len;
    char *body = read_file(path, &len);
    ck_assert_msg(body != NULL, "cannot read %s", path);
    api_request *r = NULL;
    api_error err;
    memset(&err, 0, sizeof err);
    int rc = api_parse_request(kind_of(lookup(e, n, "kind")), body, len, NULL, &r, &err);
    ck_assert_msg(rc != 0 && r == NULL, "invalid/%s was accepted", name);
    ck_assert_msg(rc == err.code, "%s: returned %d, error struct says %d", name, rc, err.code);
    char status[16];
    snprintf(status, sizeof status, "%d", api_error_status(rc));
    check_str(name, "status", status, lookup(e, n, "status"));
    check_str(name, "type", api_error_type(rc), lookup(e, n, "type"));
    check_str(name, "code", api_error_code(rc), lookup(e, n, "code"));
    const char *param = lookup(e, n, "param");
    check_str(name, "param", err.param[0] ? err.param : "null", param);
    ck_assert_msg(err.message[0] != '\0', "%s: empty message", name);
    free(body);
}

START_TEST(test_valid_cases)
{
    static char names[256][128];
    int n = list_cases("valid", names, 256);
    ck_assert_int_ge(n, 10);
    for (int i = 0; i < n; i++)
        check_valid(names[i]);
}
END_TEST

START_TEST(test_invalid_cases)
{
    static char names[256][128];
    int n = list_cases("invalid", names, 256);
    ck_assert_int_ge(n, 10);
    for (int i = 0; i < n; i++)
        check_invalid(names[i]);
}
END_TEST

/* ---- the field table ------------------------------------------------------- */

static const char *use_word(api_field_use u)
{
    return u == API_FIELD_READ ? "implemented" : u == API_FIELD_REFUSED ? "rejected" : "ignored";
}

/*
 * The README's table of request fields ("| `name` | endpoints | outcome ...")
 * says what the parser's table does, row for row, in the same order.
 */
START_TEST(test_readme_field_table)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/README.md", srcdir());
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    char line[2048];
    size_t row = 0;
    while (fgets(line, sizeof line, f)) {
        char name[64], where[32], outcome[32];
        if (sscanf(line, "| `%63[^`]` | %31[a-z] | %31[a-z]", name, where, outcome) != 3)
            continue;
        api_field_info fi;
        ck_assert_msg(api_field_get(row, &fi), "README lists '%s' beyond the parser's %zu fields", name, row);
        ck_assert_msg(!strcmp(fi.name, name), "README row %zu is '%s', the parser's is '%s'", row, name, fi.name);
        const char *want = fi.completions && fi.chat ? "both" : fi.chat ? "chat" : "completions";
        ck_assert_msg(!strcmp(where, want), "README: '%s' belongs to %s, the parser says %s", name, where, want);
        ck_assert_msg(!strcmp(outcome, use_word(fi.use)), "README: '%s' is %s, the parser says %s", name, outcome,
                      use_word(fi.use));
        row++;
    }
    fclose(f);
    api_field_info fi;
    ck_assert_msg(!api_field_get(row, &fi), "README lists %zu fields; the parser knows '%s' too", row, fi.name);
}
END_TEST

/* Every rejected field has an invalid case naming it, and is rejected by it. */
START_TEST(test_refused_fields_have_cases)
{
    static char names[256][128];
    int n = list_cases("invalid", names, 256);
    api_field_info fi;
    for (size_t i = 0; api_field_get(i, &fi); i++) {
        if (fi.use != API_FIELD_REFUSED)
            continue;
        bool found = false;
        for (int k = 0; k < n && !found; k++) {
            char path[1200];
            kv e[16];
            snprintf(path, sizeof path, "%s/tests/api/invalid/%s/expected", srcdir(), names[k]);
            int m = read_expected(path, e, 16);
            const char *param = lookup(e, m, "param"), *code = lookup(e, m, "code");
            found = param && code && !strcmp(param, fi.name) && !strcmp(code, "unsupported_value");
        }
        ck_assert_msg(found, "no tests/api/invalid case rejects '%s' with unsupported_value", fi.name);
    }
}
END_TEST

/* Fields a request leaves out take the defaults given; those it sets keep their values. */
START_TEST(test_sampling_defaults)
{
    eng_sampling d;
    eng_sampling_default(&d);
    d.temperature = 0.6f;
    d.top_p = 0.95f;
    d.top_k = 20;
    d.repetition_penalty = 1.05f;
    d.seed = 99;
    api_request *r = NULL;
    api_error err;
    const char *body = "{\"prompt\":\"x\"}";
    ck_assert_int_eq(api_parse_request(API_KIND_COMPLETION, body, strlen(body), &d, &r, &err), 0);
    ck_assert(r->sampling.temperature == d.temperature && r->sampling.top_p == d.top_p);
    ck_assert(r->sampling.top_k == 20 && r->sampling.repetition_penalty == d.repetition_penalty);
    ck_assert(r->sampling.min_p == 0.0f && r->sampling.presence_penalty == 0.0f);
    ck_assert(!r->seed_given && r->sampling.seed == 0);
    api_request_free(r);

    body = "{\"prompt\":\"x\",\"temperature\":0,\"top_k\":-1,\"top_p\":null}";
    ck_assert_int_eq(api_parse_request(API_KIND_COMPLETION, body, strlen(body), &d, &r, &err), 0);
    ck_assert(r->sampling.temperature == 0.0f && r->sampling.top_k == 0 && r->sampling.top_p == d.top_p);
    api_request_free(r);

    /* Without defaults, OpenAI's. */
    ck_assert_int_eq(api_parse_request(API_KIND_COMPLETION, "{\"prompt\":\"x\"}", 14, NULL, &r, &err), 0);
    ck_assert(r->sampling.temperature == 1.0f && r->sampling.top_p == 1.0f && r->sampling.top_k == 0);
    api_request_free(r);
}
END_TEST

/* A client's field name cut to fit the error keeps the body valid UTF-8. */
START_TEST(test_unknown_field_utf8)
{
    char body[512];
    /* Two bytes, then two-byte characters: cut at 63 bytes, the 31st would be split. */
    char key[128] = "ab";
    for (int i = 0; i < 40; i++)
        strcat(key, "\xc3\xa9");
    snprintf(body, sizeof body, "{\"prompt\":\"x\",\"%s\":1}", key);
    api_request *r = NULL;
    api_error err;
    int rc = api_parse_request(API_KIND_COMPLETION, body, strlen(body), NULL, &r, &err);
    ck_assert_int_eq(rc, API_EUNSUPPORTED);
    char *out = api_error_body(&err);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    ck_assert_msg(j != NULL, "error body is not JSON: %s", out);
    const char *param = json_string_value(json_object_get(json_object_get(j, "error"), "param"));
    ck_assert_msg(param && strlen(param) == 62 && !strncmp(param, key, 62), "param '%s'", param ? param : "(none)");
    json_decref(j);
    free(out);
}
END_TEST

/* ---- errors ------------------------------------------------------------------ */

START_TEST(test_error_body)
{
    api_error e;
    api_error_set(&e, API_ERANGE, "top_p", "top_p must be in (0, 1], got %d", 3);
    char *body = api_error_body(&e);
    json_error_t je;
    json_t *j = json_loads(body, 0, &je);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_object_size(j), 1);
    json_t *err = json_object_get(j, "error");
    ck_assert_str_eq(json_string_value(json_object_get(err, "message")), "top_p must be in (0, 1], got 3");
    ck_assert_str_eq(json_string_value(json_object_get(err, "type")), "invalid_request_error");
    ck_assert_str_eq(json_string_value(json_object_get(err, "param")), "top_p");
    ck_assert_str_eq(json_string_value(json_object_get(err, "code")), "invalid_value");
    json_decref(j);
    free(body);

    api_error_set(&e, API_EBODY, NULL, NULL);
    body = api_error_body(&e);
    j = json_loads(body, 0, &je);
    err = json_object_get(j, "error");
    ck_assert(json_is_null(json_object_get(err, "param")));
    ck_assert_str_eq(json_string_value(json_object_get(err, "message")), api_strerror(API_EBODY));
    json_decref(j);
    free(body);

    /* Every code has a status among the documented ones and a type. */
    int codes[] = {API_EJSON, API_ETYPE, API_EMISSING, API_ERANGE, API_EUNSUPPORTED, API_ECONTEXT, API_EPROMPT,
                   API_EAUTH, API_EMODEL, API_ENOTFOUND, API_EMETHOD, API_EBODY, API_ERATE, API_ELOADING,
                   API_EOVERLOADED, API_ESHUTDOWN, API_ETIMEOUT, API_EINTERNAL, API_ENOMEM, API_EHEADER,
                   API_EKVBUDGET};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++) {
        int s = api_error_status(codes[i]);
        ck_assert(s == 400 || s == 401 || s == 404 || s == 405 || s == 413 || s == 429 || s == 431 || s == 500 ||
                  s == 503);
        ck_assert(api_error_type(codes[i])[0] != '\0');
        ck_assert(api_error_code(codes[i])[0] != '\0');
    }
    ck_assert_int_eq(api_error_status(API_EAUTH), 401);
    ck_assert_str_eq(api_error_type(API_EAUTH), "authentication_error");
    ck_assert_int_eq(api_error_status(API_EOVERLOADED), 503);
}
END_TEST

START_TEST(test_secret_equal)
{
    ck_assert(api_secret_equal("abc", 3, "abc", 3));
    ck_assert(!api_secret_equal("abc", 3, "abd", 3));
    ck_assert(!api_secret_equal("abc", 3, "abcd", 4));
    ck_assert(!api_secret_equal("", 0, "a", 1));
    ck_assert(api_secret_equal("", 0, "", 0));
    /* Past the span the longer length is walked. */
    char a[API_SECRET_SPAN + 9], b[API_SECRET_SPAN + 9];
    memset(a, 'k', sizeof a);
    memcpy(b, a, sizeof b);
    ck_assert(api_secret_equal(a, sizeof a, b, sizeof b));
    b[sizeof b - 1] = 'x';
    ck_assert(!api_secret_equal(a, sizeof a, b, sizeof b));
    ck_assert(!api_secret_equal(a, sizeof a - 1, b, sizeof b));
}
END_TEST

/* ---- rendering ------------------------------------------------------------------- */

static json_t *parse_ok(char *s)
{
    ck_assert_ptr_nonnull(s);
    json_error_t je;
    json_t *j = json_loads(s, 0, &je);
    ck_assert_msg(j != NULL, "not JSON: %s", s);
    free(s);
    return j;
}

/* usage.prompt_tokens_details.cached_tokens of a body or chunk; -1 when absent. */
static json_int_t cached_tokens(const json_t *j)
{
    json_t *d = json_object_get(json_object_get(j, "usage"), "prompt_tokens_details");
    json_t *n = json_object_get(d, "cached_tokens");
    return json_is_integer(n) ? json_integer_value(n) : -1;
}

START_TEST(test_render_result)
{
    api_meta m = {.id = "cmpl-1", .created = 1700000000, .model = "tiny"};
    api_usage u = {5, 7, 4};
    api_timings t = {1.5, 2.25, 3.0, 100.0, 12.5};
    json_t *j = parse_ok(api_render_result(API_KIND_COMPLETION, &m, "hello", 5, "length", &u, &t, NULL));
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "text_completion");
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "text")), "hello");
    ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "length");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(j, "usage"), "total_tokens")), 12);
    ck_assert_int_eq(cached_tokens(j), 4);
    ck_assert(json_real_value(json_object_get(json_object_get(j, "timings"), "prompt_ms")) == 2.25);
    json_decref(j);

    const char *text = "<think>\nweighing it\n</think>\n\nBlue.";
    j = parse_ok(api_render_result(API_KIND_CHAT, &m, text, strlen(text), "stop", &u, &t, NULL));
    ck_assert_str_eq(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    ck_assert_str_eq(json_string_value(json_object_get(msg, "role")), "assistant");
    ck_assert_str_eq(json_string_value(json_object_get(msg, "content")), "Blue.");
    ck_assert_str_eq(json_string_value(json_object_get(msg, "reasoning_content")), "weighing it");
    json_decref(j);

    j = parse_ok(api_render_result(API_KIND_CHAT, &m, "Plain.", 6, "stop", &u, &t, NULL));
    msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    ck_assert_ptr_null(json_object_get(msg, "reasoning_content"));
    json_decref(j);

    eng_sampling d;
    eng_sampling_default(&d);
    d.temperature = 0.6f;
    d.top_k = 20;
    char *models = api_render_models("tiny", 1, 512, &d, "model");
    ck_assert_msg(strstr(models, "\"temperature\":0.6,") != NULL, "floats at their precision: %s", models);
    j = parse_ok(models);
    json_t *m0 = json_array_get(json_object_get(j, "data"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(m0, "id")), "tiny");
    ck_assert_int_eq(json_integer_value(json_object_get(m0, "max_model_len")), 512);
    json_t *sd = json_object_get(m0, "sampling_defaults");
    ck_assert_str_eq(json_string_value(json_object_get(sd, "source")), "model");
    ck_assert_int_eq(json_integer_value(json_object_get(sd, "top_k")), 20);
    ck_assert(json_real_value(json_object_get(sd, "top_p")) == 1.0);
    json_decref(j);
}
END_TEST

/* system_fingerprint: in every body and chunk when the server has one, absent otherwise. */
START_TEST(test_render_fingerprint)
{
    api_meta m = {.id = "cmpl-1", .created = 1700000000, .model = "tiny", .fingerprint = "fp_0123456789ab_0011223344556677"};
    api_usage u = {5, 7, 0};
    api_timings t = {1, 2, 3, 4, 5};
    for (int kind = 0; kind < 2; kind++) {
        api_kind k = kind ? API_KIND_CHAT : API_KIND_COMPLETION;
        json_t *j = parse_ok(api_render_result(k, &m, "x", 1, "stop", &u, &t, NULL));
        ck_assert_str_eq(json_string_value(json_object_get(j, "system_fingerprint")), m.fingerprint);
        json_decref(j);
        api_stream *s = api_stream_new(k, &m, true);
        api_stream_begin(s);
        api_stream_text(s, "hi", 2);
        api_stream_end(s, "stop", &u, &t);
        int chunks = 0;
        char *c;
        while ((c = api_stream_next(s))) {
            j = parse_ok(c);
            ck_assert_str_eq(json_string_value(json_object_get(j, "system_fingerprint")), m.fingerprint);
            json_decref(j);
            chunks++;
        }
        ck_assert_int_ge(chunks, 2);
        api_stream_free(s);
    }
    api_meta none = {.id = "cmpl-1", .created = 1700000000, .model = "tiny"};
    json_t *j = parse_ok(api_render_result(API_KIND_CHAT, &none, "x", 1, "stop", &u, &t, NULL));
    ck_assert_ptr_null(json_object_get(j, "system_fingerprint"));
    json_decref(j);
}
END_TEST

/* Timings print with at most three decimals, not jansson's 17 digits. */
START_TEST(test_render_timings_precision)
{
    api_meta m = {.id = "cmpl-1", .created = 1700000000, .model = "tiny"};
    api_usage u = {5, 7, 0};
    api_timings t = {0.052, 1234.56789, 1.0 / 3.0, 98.7654321, 10.0 / 3.0};
    char *body = api_render_result(API_KIND_COMPLETION, &m, "x", 1, "stop", &u, &t, NULL);
    ck_assert_msg(strstr(body, "\"timings\":{\"queue_ms\":0.052,\"prompt_ms\":1234.568,\"ttft_ms\":0.333,"
                               "\"decode_tokens_per_s\":98.765,\"tpot_ms\":3.333}") != NULL,
                  "timings: %s", body);
    free(body);
    api_stream *s = api_stream_new(API_KIND_CHAT, &m, false);
    api_stream_end(s, "stop", &u, &t);
    char *c = api_stream_next(s);
    ck_assert_msg(strstr(c, "\"queue_ms\":0.052,") != NULL, "stream timings: %s", c);
    free(c);
    api_stream_free(s);
}
END_TEST

typedef struct streamed {
    char content[1024], reasoning[1024];
    bool saw_reasoning, saw_role, saw_usage, usage_null_everywhere;
    json_int_t cached; /* the usage chunk's cached_tokens */
    char finish[16];
    int chunks;
    json_t *calls;     /* tool_calls deltas joined by index, as a client does */
} streamed;

/* A delta's tool_calls entries joined into O's calls: the first of a call names it, the rest add arguments. */
static void join_calls(streamed *o, json_t *tc)
{
    size_t i;
    json_t *e;
    json_array_foreach(tc, i, e) {
        size_t idx = (size_t)json_integer_value(json_object_get(e, "index"));
        json_t *fn = json_object_get(e, "function"), *args = json_object_get(fn, "arguments");
        ck_assert(json_is_string(args));
        if (idx == json_array_size(o->calls)) {
            ck_assert_str_eq(json_string_value(args), "");
            ck_assert_str_eq(json_string_value(json_object_get(e, "type")), "function");
            json_array_append_new(o->calls, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id", json_object_get(e, "id"), "type",
                                                      "function", "function", "name", json_object_get(fn, "name"),
                                                      "arguments", ""));
            continue;
        }
        ck_assert_uint_eq(idx + 1, json_array_size(o->calls));
        ck_assert_ptr_null(json_object_get(e, "id"));
        ck_assert_ptr_null(json_object_get(fn, "name"));
        json_t *have = json_object_get(json_object_get(json_array_get(o->calls, idx), "function"), "arguments");
        char buf[1024];
        snprintf(buf, sizeof buf, "%s%s", json_string_value(have), json_string_value(args));
        json_string_set(have, buf);
    }
}

static void collect(api_stream *s, streamed *o)
{
    char *c;
    while ((c = api_stream_next(s))) {
        json_t *j = parse_ok(c);
        o->chunks++;
        json_t *usage = json_object_get(j, "usage");
        json_t *choices = json_object_get(j, "choices");
        if (json_array_size(choices) == 0) {
            ck_assert(json_is_object(usage));
            o->saw_usage = true;
            o->cached = cached_tokens(j);
            json_decref(j);
            continue;
        }
        if (!json_is_null(usage))
            o->usage_null_everywhere = false;
        json_t *ch = json_array_get(choices, 0);
        json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr))
            snprintf(o->finish, sizeof o->finish, "%s", json_string_value(fr));
        json_t *d = json_object_get(ch, "delta");
        if (d) {
            if (json_object_get(d, "role"))
                o->saw_role = true;
            json_t *cc = json_object_get(d, "content"), *rc = json_object_get(d, "reasoning_content");
            if (json_is_string(cc))
                strcat(o->content, json_string_value(cc));
            if (json_object_get(d, "tool_calls"))
                join_calls(o, json_object_get(d, "tool_calls"));
            if (json_is_string(rc)) {
                strcat(o->reasoning, json_string_value(rc));
                o->saw_reasoning = true;
            }
        } else {
            strcat(o->content, json_string_value(json_object_get(ch, "text")));
        }
        json_decref(j);
    }
}

/* Streams TEXT cut every STEP bytes and compares with the one-shot split. */
static void stream_equals_result(const char *text, size_t step)
{
    api_meta m = {.id = "chatcmpl-1", .created = 1, .model = "tiny"};
    api_usage u = {1, 2, 1};
    api_timings t = {0};
    api_stream *s = api_stream_new(API_KIND_CHAT, &m, true);
    streamed o;
    memset(&o, 0, sizeof o);
    o.usage_null_everywhere = true;
    ck_assert_int_eq(api_stream_begin(s), 0);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step)
        ck_assert_int_eq(api_stream_text(s, text + i, i + step <= n ? step : n - i), 0);
    ck_assert_int_eq(api_stream_end(s, "stop", &u, &t), 0);
    collect(s, &o);
    api_stream_free(s);

    json_t *j = parse_ok(api_render_result(API_KIND_CHAT, &m, text, n, "stop", &u, &t, NULL));
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    ck_assert_msg(!strcmp(o.content, json_string_value(json_object_get(msg, "content"))),
                  "text %s step %zu: streamed content '%s', expected '%s'", text, step, o.content,
                  json_string_value(json_object_get(msg, "content")));
    json_t *r = json_object_get(msg, "reasoning_content");
    if (r)
        ck_assert_msg(!strcmp(o.reasoning, json_string_value(r)), "text %s step %zu: streamed reasoning '%s', expected '%s'",
                      text, step, o.reasoning, json_string_value(r));
    else
        ck_assert_msg(o.reasoning[0] == '\0', "text %s: reasoning streamed but none expected", text);
    ck_assert(o.saw_role);
    ck_assert(o.saw_usage);
    ck_assert_int_eq(o.cached, cached_tokens(j));
    ck_assert_int_eq(o.cached, 1);
    ck_assert(o.usage_null_everywhere);
    ck_assert_str_eq(o.finish, "stop");
    json_decref(j);
}

START_TEST(test_stream_split)
{
    static const char *texts[] = {
        "Plain answer.",
        "<think>\nLet me think.\n</think>\n\nThe answer is 4.",
        "<think>\n\n</think>\n\nNo reasoning.",
        "<think>cut short, still thinking\n",
        "<think>",
        "<thi",
        "<thinking is not a tag",
        "\n\nleading newlines stay in plain content\n\n",
        "<think>a\n\nb</think>c\n<think>d",
        "<think>x</think>\n\n\n",
        "<think>one\n</thin k></think>two",
        "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        for (size_t step = 1; step <= 9; step++)
            stream_equals_result(texts[i], step);
}
END_TEST

/*
 * Tool calls: TEXT streamed in pieces of STEP bytes gives content and
 * tool_calls deltas that join to the one-shot message (ids included), the
 * call's text never as content, and finish_reason "tool_calls" when a call
 * was made.
 */
static void tool_stream_equals_result(const char *text, size_t step, int want_calls, const char *want_content)
{
    api_meta m = {.id = "chatcmpl-1", .created = 1, .model = "tiny", .tool_calls = true, .tool_seed = 42};
    api_usage u = {1, 2, 0};
    api_timings t = {0};
    api_stream *s = api_stream_new(API_KIND_CHAT, &m, false);
    streamed o;
    memset(&o, 0, sizeof o);
    o.calls = json_array();
    ck_assert_int_eq(api_stream_begin(s), 0);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += step)
        ck_assert_int_eq(api_stream_text(s, text + i, i + step <= n ? step : n - i), 0);
    ck_assert_int_eq(api_stream_end(s, "stop", &u, &t), 0);
    collect(s, &o);
    api_stream_free(s);

    json_t *j = parse_ok(api_render_result(API_KIND_CHAT, &m, text, n, "stop", &u, &t, NULL));
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0), *msg = json_object_get(ch, "message");
    json_t *content = json_object_get(msg, "content"), *calls = json_object_get(msg, "tool_calls");
    if (want_content)
        ck_assert_msg(json_is_string(content) && !strcmp(json_string_value(content), want_content),
                      "text %s: content '%s', expected '%s'", text, json_string_value(content), want_content);
    else
        ck_assert_msg(json_is_null(content), "text %s: content '%s', expected null", text, json_string_value(content));
    ck_assert_msg(!strcmp(o.content, want_content ? want_content : ""), "text %s step %zu: streamed content '%s'", text,
                  step, o.content);
    ck_assert_int_eq((int)json_array_size(calls), want_calls);
    ck_assert_int_eq((int)json_array_size(o.calls), want_calls);
    if (want_calls)
        ck_assert_msg(json_equal(calls, o.calls), "text %s step %zu: streamed calls %s, expected %s", text, step,
                      json_dumps(o.calls, 0), json_dumps(calls, 0));
    const char *fr = want_calls ? "tool_calls" : "stop";
    ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), fr);
    ck_assert_str_eq(o.finish, fr);
    json_decref(o.calls);
    json_decref(j);
}

START_TEST(test_stream_tool_calls)
{
    static const struct {
        const char *text, *content;
        int calls;
    } cases[] = {
        {"<tool_call>\n{\"name\": \"get\", \"arguments\": {\"a\": {\"b\": [1, \"}\\n\"]}}}\n</tool_call>", NULL, 1},
        {"<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", "
         "\"arguments\": {\"x\": 1}}\n</tool_call>", NULL, 2},
        {"Let me look.\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"</tool\"}}\n</tool_call>\n",
         "Let me look.", 1},
        {"<think>\nhm <tool_call>\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>", NULL, 1},
        /* not the form: the tag stays text */
        {"a <tool_call> b", "a <tool_call> b", 0},
        {"<tool_call>\n{\"nam", "<tool_call>\n{\"nam", 0},
        {"x<tool_call>\n{\"name\": 5}", "x<tool_call>\n{\"name\": 5}", 0},
        {"<tool_call>", "<tool_call>", 0},
        /* text before the close tag that starts as the tag does is arguments (a fuzz finding) */
        {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}<</tool_call>", NULL, 1},
        {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}</tool</tool_call>", NULL, 1},
        /* cut short by max_tokens: the arguments so far */
        {"<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1", NULL, 1},
        {"plain answer\n", "plain answer", 0},
        {"", NULL, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (size_t step = 1; step <= 13; step++)
            tool_stream_equals_result(cases[i].text, step, cases[i].calls, cases[i].content);
    /* the arguments as written, ids from the seed */
    api_meta m = {.id = "chatcmpl-1", .created = 1, .model = "tiny", .tool_calls = true, .tool_seed = 7};
    api_usage u = {1, 2, 0};
    api_timings t = {0};
    const char *text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}\n</tool_call>";
    json_t *j = parse_ok(api_render_result(API_KIND_CHAT, &m, text, strlen(text), "length", &u, &t, NULL));
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *call = json_array_get(json_object_get(json_object_get(ch, "message"), "tool_calls"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(call, "function"), "arguments")), "{\"a\": [1, 2]}");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(call, "function"), "name")), "f");
    const char *id = json_string_value(json_object_get(call, "id"));
    ck_assert_uint_eq(strlen(id), 29);
    ck_assert(!strncmp(id, "call_", 5));
    ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_t *j2 = parse_ok(api_render_result(API_KIND_CHAT, &m, text, strlen(text), "stop", &u, &t, NULL));
    json_t *call2 = json_array_get(
        json_object_get(json_object_get(json_array_get(json_object_get(j2, "choices"), 0), "message"), "tool_calls"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(call2, "id")), id);
    m.tool_seed = 8;
    json_t *j3 = parse_ok(api_render_result(API_KIND_CHAT, &m, text, strlen(text), "stop", &u, &t, NULL));
    json_t *call3 = json_array_get(
        json_object_get(json_object_get(json_array_get(json_object_get(j3, "choices"), 0), "message"), "tool_calls"), 0);
    ck_assert_str_ne(json_string_value(json_object_get(call3, "id")), id);
    /* the close tag ends the arguments where it stands: a partial tag before it stays */
    const char *partial = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}</tool</tool_call>";
    json_t *j4 = parse_ok(api_render_result(API_KIND_CHAT, &m, partial, strlen(partial), "stop", &u, &t, NULL));
    json_t *call4 = json_array_get(
        json_object_get(json_object_get(json_array_get(json_object_get(j4, "choices"), 0), "message"), "tool_calls"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(call4, "function"), "arguments")),
                     "{\"a\": 1}</tool");
    json_decref(j);
    json_decref(j2);
    json_decref(j3);
    json_decref(j4);
}
END_TEST

/* The first tool call of choice I of a chat body J. */
static json_t *choice_call(json_t *j, size_t i)
{
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), i), "message");
    return json_array_get(json_object_get(msg, "tool_calls"), 0);
}

START_TEST(test_choices_tool_calls)
{
    /* n choices of one request: each its own calls, ids differing between
     * choices, choice 0's those of the single answer, a stream's per index */
    api_meta m = {.id = "chatcmpl-1", .created = 1, .model = "tiny", .tool_calls = true, .tool_seed = 7};
    api_usage u = {1, 2, 0};
    api_timings t = {0};
    const char *text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    api_choice c[3] = {{text, strlen(text), "stop", NULL}, {text, strlen(text), "stop", NULL},
                       {"plain", 5, "stop", NULL}};
    json_t *j = parse_ok(api_render_choices(API_KIND_CHAT, &m, c, 3, &u, &t));
    json_t *one = parse_ok(api_render_result(API_KIND_CHAT, &m, text, strlen(text), "stop", &u, &t, NULL));
    const char *id0 = json_string_value(json_object_get(choice_call(j, 0), "id"));
    const char *id1 = json_string_value(json_object_get(choice_call(j, 1), "id"));
    ck_assert_str_eq(id0, json_string_value(json_object_get(choice_call(one, 0), "id")));
    ck_assert_str_ne(id0, id1);
    for (size_t i = 0; i < 3; i++) {
        json_t *ch = json_array_get(json_object_get(j, "choices"), i);
        ck_assert_int_eq(json_integer_value(json_object_get(ch, "index")), (json_int_t)i);
        ck_assert_str_eq(json_string_value(json_object_get(ch, "finish_reason")), i < 2 ? "tool_calls" : "stop");
    }
    ck_assert_ptr_null(choice_call(j, 2));
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_array_get(json_object_get(j, "choices"), 2),
                                                                       "message"), "content")), "plain");
    ck_assert_uint_ne(api_choice_tool_seed(7, 1), api_choice_tool_seed(7, 2));
    ck_assert_uint_eq(api_choice_tool_seed(7, 0), 7);

    api_stream *s = api_stream_new(API_KIND_CHAT, &m, false);
    ck_assert_int_eq(api_stream_set_index(s, 1), 0);
    ck_assert_int_eq(api_stream_begin(s), 0);
    ck_assert_int_eq(api_stream_text(s, text, strlen(text)), 0);
    ck_assert_int_eq(api_stream_end(s, "stop", NULL, NULL), 0);
    ck_assert_int_eq(api_stream_tool_calls(s), 1);
    bool saw_id = false;
    for (char *chunk; (chunk = api_stream_next(s)); free(chunk)) {
        json_t *k = parse_ok(strdup(chunk));
        json_t *ch = json_array_get(json_object_get(k, "choices"), 0);
        ck_assert_int_eq(json_integer_value(json_object_get(ch, "index")), 1);
        json_t *d = json_array_get(json_object_get(json_object_get(ch, "delta"), "tool_calls"), 0);
        if (json_object_get(d, "id")) {
            ck_assert_str_eq(json_string_value(json_object_get(d, "id")), id1);
            saw_id = true;
        }
        json_decref(k);
    }
    ck_assert(saw_id);
    api_stream_free(s);
    json_decref(j);
    json_decref(one);
}
END_TEST

START_TEST(test_stream_completion)
{
    api_meta m = {.id = "cmpl-9", .created = 1, .model = "tiny"};
    api_usage u = {3, 4, 0};
    api_timings t = {0};
    api_stream *s = api_stream_new(API_KIND_COMPLETION, &m, false);
    streamed o;
    memset(&o, 0, sizeof o);
    ck_assert_int_eq(api_stream_begin(s), 0);
    ck_assert_ptr_null(api_stream_next(s));
    api_stream_text(s, "<think>", 7);
    api_stream_text(s, " héllo", strlen(" héllo"));
    api_stream_end(s, "length", &u, &t);
    collect(s, &o);
    ck_assert_str_eq(o.content, "<think> héllo");
    ck_assert_str_eq(o.finish, "length");
    ck_assert(!o.saw_usage);
    ck_assert_int_eq(o.chunks, 3);
    api_stream_free(s);
}
END_TEST

static Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_valid_cases);
    tcase_add_test(tc, test_invalid_cases);
    tcase_add_test(tc, test_readme_field_table);
    tcase_add_test(tc, test_refused_fields_have_cases);
    tcase_add_test(tc, test_sampling_defaults);
    tcase_add_test(tc, test_unknown_field_utf8);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_error_body);
    tcase_add_test(tc, test_secret_equal);
    suite_add_tcase(s, tc);
    tc = tcase_create("render");
    tcase_add_test(tc, test_render_result);
    tcase_add_test(tc, test_render_timings_precision);
    tcase_add_test(tc, test_render_fingerprint);
    tcase_add_test(tc, test_stream_split);
    tcase_add_test(tc, test_stream_completion);
    tcase_add_test(tc, test_stream_tool_calls);
    tcase_add_test(tc, test_choices_tool_calls);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return qd_run_suite(api_suite());
}
