/*
 * parse: the JSON bodies of POST /v1/completions and /v1/chat/completions
 * turned into native api_request structs (jansson stays inside api/).
 *
 * Every field of design.md section 3 is read with its type and range
 * checked; the first problem found fills an api_error naming the field
 * ("param") and the reason. Fields the server does not use are ignored,
 * except the ones that would change the output it promises (n > 1, echo,
 * logprobs, best_of > 1, suffix, tools), which are rejected.
 *
 * Called by the server's routes on the event-loop thread; no state, any
 * thread.
 */
#ifndef QWEN3D_API_PARSE_H
#define QWEN3D_API_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/chat_template.h"
#include "api/error.h"
#include "engine/sampler.h"

typedef enum api_kind {
    API_KIND_COMPLETION = 0, /* POST /v1/completions */
    API_KIND_CHAT,           /* POST /v1/chat/completions */
} api_kind;

/* A parsed request. All strings are owned by the struct (api_request_free). */
typedef struct api_request {
    api_kind kind;
    char *model;                  /* NULL when absent */

    /* completions: the prompt as text, or as token ids (exactly one is set) */
    char *prompt;
    size_t prompt_len;
    int32_t *prompt_ids;
    size_t n_prompt_ids;

    /* chat: the messages, ready for api_chat_render() */
    api_chat_msg *messages;
    size_t n_messages;
    bool enable_thinking;         /* chat_template_kwargs.enable_thinking, default true */

    int64_t max_tokens;           /* -1 when absent (max_tokens or max_completion_tokens) */
    eng_sampling sampling;        /* validated; seed meaningful only if seed_given */
    bool seed_given;
    char **stop;                  /* validated with eng_stop_validate() */
    size_t n_stop;
    bool stream;
    bool include_usage;           /* stream_options.include_usage */
} api_request;

/*
 * Parses LEN bytes of BODY as a request of KIND. Returns 0 and sets *out (free
 * with api_request_free), or a negative API_E* code with ERR filled.
 */
int api_parse_request(api_kind kind, const char *body, size_t len, api_request **out, api_error *err);
void api_request_free(api_request *r);

#endif
