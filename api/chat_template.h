/*
 * chat_template: the Qwen3 chat template, rendered natively.
 *
 * Renders what the chat_template of Qwen3's tokenizer_config.json renders
 * (as Hugging Face's Jinja runtimes do) for conversations of system, user
 * and assistant messages, with or without tools:
 *
 *   - a system message first becomes "<|im_start|>system\n{content}<|im_end|>\n";
 *     a later one is rendered in place like a user message;
 *   - user messages: "<|im_start|>user\n{content}<|im_end|>\n";
 *   - assistant messages have their reasoning split off: the text between
 *     "<think>" and "</think>" (or reasoning_content when given). Turns after
 *     the last user query keep it as "<think>\n{reasoning}\n</think>\n\n"
 *     (the final message always does); earlier turns lose it;
 *   - with tools, the system message opens with the system prompt (if the
 *     first message is one) and the template's "# Tools" block listing each
 *     tool's JSON; an assistant message's tool calls follow its content as
 *     "<tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>" blocks
 *     (a newline between blocks, and before the first after content);
 *     consecutive tool messages share one user turn, each wrapped in
 *     "\n<tool_response>\n...\n</tool_response>";
 *   - the generation prompt "<|im_start|>assistant\n", followed by the empty
 *     "<think>\n\n</think>\n\n" when thinking is disabled.
 * Whitespace follows the template exactly (see the .c file for each strip).
 *
 * Called by the API layer after it has turned the request's JSON into
 * api_chat_msg structs; it has no state and may run on any thread.
 */
#ifndef QWEN3D_API_CHAT_TEMPLATE_H
#define QWEN3D_API_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

/* Error codes with their HTTP status and OpenAI error type. */
#define API_CHAT_ERRORS(X)                                                                  \
    X(API_CHAT_OK, 0, 200, "", "success")                                                   \
    X(API_CHAT_EEMPTY, -1, 400, "invalid_request_error", "messages must not be empty")     \
    X(API_CHAT_EROLE, -2, 400, "invalid_request_error", "unsupported message role")        \
    X(API_CHAT_ECONTENT, -3, 400, "invalid_request_error", "message content must be a string") \
    X(API_CHAT_ENOMEM, -4, 500, "server_error", "out of memory")

enum {
#define API_CHAT_ENUM(name, value, status, type, msg) name = value,
    API_CHAT_ERRORS(API_CHAT_ENUM)
#undef API_CHAT_ENUM
};

const char *api_chat_strerror(int err);
int api_chat_http_status(int err);
const char *api_chat_error_type(int err);

/* A tool call of an earlier assistant turn. */
typedef struct api_chat_call {
    const char *name;
    const char *arguments;         /* JSON text, rendered as given (OpenAI sends it as a string) */
} api_chat_call;

/* One message, as the request parser fills it. Strings are NUL-terminated UTF-8. */
typedef struct api_chat_msg {
    const char *role;              /* "system", "user", "assistant" or "tool" */
    const char *content;           /* NULL when the request's content is not a string */
    const char *reasoning_content; /* assistant only, optional (NULL = absent) */
    const api_chat_call *tool_calls; /* assistant only: N_TOOL_CALLS calls */
    size_t n_tool_calls;
} api_chat_msg;

typedef struct api_chat_opts {
    bool add_generation_prompt;    /* end with the assistant header (chat completions) */
    bool enable_thinking;          /* chat_template_kwargs.enable_thinking */
    /* Tools as JSON text in the template's tojson form (separators ", " and ": ", keys in order). */
    const char *const *tools;
    size_t n_tools;
} api_chat_opts;

/* Generation prompt on, thinking on: the template's defaults for a chat request. */
void api_chat_opts_default(api_chat_opts *o);

/* What api_chat_render() rejected. */
typedef struct api_chat_error {
    int index;          /* the message at fault, or -1 */
    char param[48];     /* e.g. "messages[2].role", for the OpenAI error's param */
    char message[160];  /* one line naming the message and the problem */
} api_chat_error;

/*
 * Renders N messages. On success returns 0 and sets *out to a malloc'd
 * NUL-terminated string (*out_len bytes, OUT_LEN may be NULL) the caller
 * frees. Otherwise returns a negative API_CHAT_E* code, *out is NULL and ERR
 * (may be NULL) names the message and field.
 */
int api_chat_render(const api_chat_msg *msgs, size_t n, const api_chat_opts *opts, char **out,
                    size_t *out_len, api_chat_error *err);

/*
 * Generated text split into reasoning and answer, as byte ranges of the text.
 * With a "</think>": the reasoning is what lies before the first "</think>"
 * and after the last "<think>" before it, without surrounding newlines; the
 * content is what follows the last "</think>", without leading newlines (the
 * split the template applies to assistant turns). Without "</think>", a text
 * that starts with "<think>" (thinking cut short) is all reasoning after it;
 * any other text is all content.
 */
typedef struct api_chat_split {
    bool has_reasoning;
    size_t reasoning_off, reasoning_len;
    size_t content_off, content_len;
} api_chat_split;

void api_chat_split_reasoning(const char *text, size_t len, api_chat_split *out);

#endif
