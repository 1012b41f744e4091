/*
 * error: the API error table and the OpenAI error body (see error.h).
 * Pure functions, any thread.
 */
#include "api/error.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

const char *api_strerror(int err)
{
    switch (err) {
#define API_ERR_STR(name, value, status, type, code, msg) \
    case value:                                           \
        return msg;
        API_ERRORS(API_ERR_STR)
#undef API_ERR_STR
    }
    return "unknown error";
}

int api_error_status(int err)
{
    switch (err) {
#define API_ERR_STATUS(name, value, status, type, code, msg) \
    case value:                                              \
        return status;
        API_ERRORS(API_ERR_STATUS)
#undef API_ERR_STATUS
    }
    return 500;
}

const char *api_error_type(int err)
{
    switch (err) {
#define API_ERR_TYPE(name, value, status, type, code, msg) \
    case value:                                            \
        return type;
        API_ERRORS(API_ERR_TYPE)
#undef API_ERR_TYPE
    }
    return "server_error";
}

const char *api_error_code(int err)
{
    switch (err) {
#define API_ERR_CODE(name, value, status, type, code, msg) \
    case value:                                            \
        return code;
        API_ERRORS(API_ERR_CODE)
#undef API_ERR_CODE
    }
    return "internal_error";
}

/*
 * A text cut at CAP - 1 bytes may end inside a UTF-8 sequence (a field name or
 * a quote of the client's): drops the incomplete sequence, so the error body
 * can still carry it.
 */
static void cut_utf8(char *s, size_t cap)
{
    size_t n = strlen(s);
    if (n < cap - 1)
        return;
    size_t k = n;
    while (k > 0 && ((unsigned char)s[k - 1] & 0xC0) == 0x80)
        k--;
    if (k == 0)
        return;
    unsigned char lead = (unsigned char)s[k - 1];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (n - (k - 1) < want)
        s[k - 1] = '\0';
}

int api_error_set(api_error *err, int code, const char *param, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    cut_utf8(err->param, sizeof err->param);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    } else {
        snprintf(err->message, sizeof err->message, "%s", api_strerror(code));
    }
    cut_utf8(err->message, sizeof err->message);
    return code;
}

char *api_error_body(const api_error *err)
{
    const char *code = api_error_code(err->code);
    json_t *e = json_object();
    json_t *root = json_object();
    if (!e || !root) {
        json_decref(e);
        json_decref(root);
        return NULL;
    }
    /* Messages may quote client input cut at a byte limit; never emit invalid UTF-8. */
    json_t *msg = json_string(err->message);
    if (!msg)
        msg = json_string(api_strerror(err->code));
    json_object_set_new(e, "message", msg);
    json_object_set_new(e, "type", json_string(api_error_type(err->code)));
    json_object_set_new(e, "param", err->param[0] ? json_string(err->param) : json_null());
    json_object_set_new(e, "code", code[0] ? json_string(code) : json_null());
    json_object_set_new(root, "error", e);
    char *s = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return s;
}

int api_secret_equal(const char *a, size_t alen, const char *b, size_t blen)
{
    /* Walks at least API_SECRET_SPAN bytes and the longer length whatever
     * the contents, so the time depends neither on where the first
     * difference lies nor on the length of a key shorter than the span. */
    size_t n = alen > blen ? alen : blen;
    if (n < API_SECRET_SPAN)
        n = API_SECRET_SPAN;
    uint8_t diff = (uint8_t)(alen != blen);
    for (size_t i = 0; i < n; i++) {
        uint8_t x = i < alen ? (uint8_t)a[i] : 0;
        uint8_t y = i < blen ? (uint8_t)b[i] : 0;
        diff |= (uint8_t)(x ^ y);
    }
    return diff == 0;
}
