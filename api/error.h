/*
 * error: the error codes of the HTTP API, each with its HTTP status, its
 * OpenAI error type and code, and its message, from one table; and the
 * OpenAI-shaped error body {"error":{"message","type","param","code"}}.
 *
 * Called by the request parser, the renderers and the server's routes; pure
 * functions, any thread.
 */
#ifndef QWEN3D_API_ERROR_H
#define QWEN3D_API_ERROR_H

#include <stddef.h>

/* X(name, value, http status, OpenAI type, OpenAI code, message) */
#define API_ERRORS(X)                                                                                      \
    X(API_OK, 0, 200, "", "", "success")                                                                   \
    X(API_EJSON, -1, 400, "invalid_request_error", "invalid_json", "request body is not valid JSON")       \
    X(API_ETYPE, -2, 400, "invalid_request_error", "invalid_type", "field has the wrong type")             \
    X(API_EMISSING, -3, 400, "invalid_request_error", "missing_required_parameter", "missing field")       \
    X(API_ERANGE, -4, 400, "invalid_request_error", "invalid_value", "value out of range")                 \
    X(API_EUNSUPPORTED, -5, 400, "invalid_request_error", "unsupported_value", "unsupported value")        \
    X(API_ECONTEXT, -6, 400, "invalid_request_error", "context_length_exceeded",                           \
      "request exceeds the model's context length")                                                        \
    X(API_EPROMPT, -7, 400, "invalid_request_error", "invalid_prompt", "invalid prompt")                   \
    X(API_EAUTH, -8, 401, "authentication_error", "invalid_api_key", "missing or invalid API key")         \
    X(API_EMODEL, -9, 404, "invalid_request_error", "model_not_found", "model not found")                  \
    X(API_ENOTFOUND, -10, 404, "invalid_request_error", "not_found", "no such endpoint")                   \
    X(API_EMETHOD, -11, 405, "invalid_request_error", "method_not_allowed", "method not allowed")          \
    X(API_EBODY, -12, 413, "invalid_request_error", "request_too_large", "request body too large")         \
    X(API_ERATE, -13, 429, "rate_limit_error", "rate_limit_exceeded", "too many requests")                 \
    X(API_ELOADING, -14, 503, "server_error", "model_loading", "the model is still loading")               \
    X(API_EOVERLOADED, -15, 503, "server_error", "queue_full", "the request queue is full")                \
    X(API_ESHUTDOWN, -16, 503, "server_error", "shutting_down", "the server is shutting down")             \
    X(API_ETIMEOUT, -17, 503, "server_error", "timeout", "the request's deadline passed before it ran")    \
    X(API_EINTERNAL, -18, 500, "server_error", "internal_error", "internal error")                         \
    X(API_ENOMEM, -19, 500, "server_error", "out_of_memory", "out of memory")                              \
    X(API_EHEADER, -20, 431, "invalid_request_error", "request_header_too_large",                          \
      "request headers too large")                                                                         \
    X(API_EKVBUDGET, -21, 503, "server_error", "kv_budget_exceeded",                                       \
      "the request needs more KV cache than the server's budget")                                   \
    X(API_ECORS, -31, 403, "invalid_request_error", "cors_origin_not_allowed",                            \
      "the request's Origin is not allowed by --cors-origin")

enum {
#define API_ERR_ENUM(name, value, status, type, code, msg) name = value,
    API_ERRORS(API_ERR_ENUM)
#undef API_ERR_ENUM
};

const char *api_strerror(int err);
int api_error_status(int err);
const char *api_error_type(int err);
const char *api_error_code(int err);

/* A failed request: the code, the request field at fault and one line. */
typedef struct api_error {
    int code;           /* API_E* */
    char param[64];     /* e.g. "messages[1].role"; empty = null */
    char message[512];  /* room for a schema error with the limits it broke */
} api_error;

/*
 * Fills ERR (may be NULL) and returns CODE. PARAM may be NULL; FMT NULL uses
 * the table's message.
 */
int api_error_set(api_error *err, int code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The JSON error body of ERR, malloc'd and NUL-terminated; NULL on out-of-memory. */
char *api_error_body(const api_error *err);

/*
 * Constant-time comparison of two byte strings (for API keys): the time
 * depends on neither content nor, up to API_SECRET_SPAN bytes, on the
 * lengths, so it tells a client nothing about the key, not even its length.
 */
#define API_SECRET_SPAN 1024
int api_secret_equal(const char *a, size_t alen, const char *b, size_t blen);

#endif
