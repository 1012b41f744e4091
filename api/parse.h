/*
 * parse: the JSON bodies of POST /v1/completions and /v1/chat/completions
 * turned into native api_request structs (jansson stays inside api/).
 *
 * Every field of design.md section 3 is read with its type and range
 * checked; the first problem found fills an api_error naming the field
 * ("param") and the reason. Which fields are read, refused or ignored is
 * decided by one table (api_field_get() lists it): nothing a client sends
 * is dropped without a word.
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
#include "engine/grammar.h"
#include "engine/sampler.h"

/* response_format: what the output must be. */
typedef enum api_format {
    API_FORMAT_TEXT = 0,     /* absent, or {"type": "text"} */
    API_FORMAT_JSON_OBJECT,  /* {"type": "json_object"}: any JSON object */
    API_FORMAT_JSON_SCHEMA,  /* {"type": "json_schema", "json_schema": {...}} */
} api_format;
/* Most top log-probabilities a completions request may ask for (`logprobs`). */
#define API_COMPLETION_LOGPROBS_MAX 5

/* tool_choice: whether and how the model calls the request's tools. */
typedef enum api_tool_choice {
    API_TOOL_CHOICE_NONE = 0,  /* no call: the answer is text (tools still rendered in the prompt) */
    API_TOOL_CHOICE_AUTO,      /* free text, and a call the model opens follows its tool's schema */
    API_TOOL_CHOICE_REQUIRED,  /* only calls, of any of the tools */
    API_TOOL_CHOICE_NAMED,     /* only calls of tools[tool_named] */
} api_tool_choice;

/* Most tools a request may give (each is rendered into the prompt and compiled into the grammar). */
#define API_MAX_TOOLS 128

/* A function of `tools`. */
typedef struct api_tool {
    char *name;
    char *json;        /* the whole tool object as sent, in the chat template's tojson form */
    char *parameters;  /* function.parameters as JSON text; NULL when absent (any object) */
} api_tool;

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
    /*
     * n: the choices returned (1..API_MAX_CHOICES). best_of: the candidates
     * generated (n..API_MAX_CHOICES, completions only), of which the n with
     * the highest cumulative log-probability are returned; equal to n when
     * absent. best_of > n cannot stream: the best are known only at the end.
     */
    int n;
    int best_of;

    api_format format;            /* response_format */
    char *format_schema;          /* API_FORMAT_JSON_SCHEMA: json_schema.schema as JSON text */
    /* chat: tools, tool_choice (default auto with tools, none without) and parallel_tool_calls (default true) */
    api_tool *tools;
    size_t n_tools;
    api_tool_choice tool_choice;
    size_t tool_named;
    bool parallel_tool_calls;
    /* completions' `logprobs` (0-5 top entries), chat's `logprobs: true` with `top_logprobs` (0-20) */
    bool logprobs;
    int top_logprobs;
    bool echo;                    /* completions: the prompt leads the text (and its logprobs) */
    /* logit_bias: N_BIAS ids (not yet checked against the vocabulary) and their biases in [-100, 100] */
    int32_t *bias_ids;
    float *bias;
    size_t n_bias;

    /* POST /tokenize (api_parse_tokenize) */
    bool add_special_tokens;      /* default true for a prompt, false for messages, as vLLM's */
    bool add_generation_prompt;   /* messages: end with the assistant header; default true */
    bool return_token_strs;       /* also each id's token string */
} api_request;

/* The most choices (n) or candidates (best_of) a request may ask for. */
#define API_MAX_CHOICES 16

/*
 * Parses LEN bytes of BODY as a request of KIND. Sampling fields the request
 * leaves out take the values of DEFAULTS (NULL: eng_sampling_default(); its
 * seed is not used). Returns 0 and sets *out (free with api_request_free),
 * or a negative API_E* code with ERR filled.
 */
int api_parse_request(api_kind kind, const char *body, size_t len, const eng_sampling *defaults, api_request **out,
                      api_error *err);
void api_request_free(api_request *r);

/*
 * The grammar R's output must follow (response_format), into *OUT; NULL
 * when it asks for none. Apart from api_parse_request() because compiling
 * a large schema takes long enough to keep it off the event loop. Returns 0,
 * or a negative API_E* code with ERR naming the schema keyword and its JSON
 * pointer (400 unsupported_value for a keyword outside the supported
 * subset, invalid_value for an invalid schema or one past a limit, the
 * limits then listed in the message).
 */
int api_request_grammar(const api_request *r, eng_grammar **out, api_error *err);

/*
 * The grammar of a chat request with tools whose tool_choice calls them, into
 * *OUT: Qwen3's <tool_call> blocks of the tools (api_schema_tools; one tool
 * for a named choice; several calls when parallel_tool_calls), a lazy one
 * triggered by <tool_call> for auto. Otherwise api_request_grammar(), after
 * compiling the tools' parameters anyway (tool_choice none), so a schema
 * that does not compile is a 400 whatever the choice. TOK names the tags'
 * ids. Returns as api_request_grammar(), errors naming
 * tools[i].function.parameters and the JSON pointer inside it.
 */
int api_request_tools_grammar(const api_request *r, const eng_tok *tok, eng_grammar **out, api_error *err);

/*
 * A chat request's prompt: its messages and tools through the Qwen3 chat
 * template (enable_thinking as the request says; the generation prompt when
 * ADD_GENERATION_PROMPT) into *OUT (malloc'd, *LEN bytes). Returns 0, or a
 * negative API_E* code with ERR naming the message at fault.
 */
int api_request_render(const api_request *r, bool add_generation_prompt, char **out, size_t *len, api_error *err);

/*
 * POST /tokenize and /detokenize bodies, as vLLM's: {model, prompt} (a
 * string) or {model, messages, add_generation_prompt, chat_template_kwargs}
 * with add_special_tokens and return_token_strs; or, with DETOKENIZE,
 * {model, tokens} (token ids, into prompt_ids; not yet checked against the
 * vocabulary). Unknown fields are refused. Returns as api_parse_request().
 */
int api_parse_tokenize(bool detokenize, const char *body, size_t len, api_request **out, api_error *err);

/*
 * What the server does with a top-level request field of the OpenAI
 * completions and chat-completions schemas and of the extensions of
 * design.md section 3:
 *  - READ: implemented;
 *  - REFUSED: it would change what is generated and is not implemented:
 *    400 unsupported_value naming it, unless its value asks for nothing
 *    ("n": 1, "logit_bias": {}, "tools": [], "response_format":
 *    {"type":"text"}, false, null, ...);
 *  - IGNORED: it does not change what is generated ("user", "store", ...);
 *    its type is still checked.
 * A field in no row, or sent to the endpoint it does not belong to, is
 * refused like a REFUSED one. Implementing a refused field is turning its
 * row to READ and reading it in parse.c.
 */
typedef enum api_field_use { API_FIELD_READ, API_FIELD_REFUSED, API_FIELD_IGNORED } api_field_use;

typedef struct api_field_info {
    const char *name;
    bool completions, chat;   /* the endpoints it belongs to */
    api_field_use use;
} api_field_info;

/* The I-th row of the table into *out; false past the last row. */
bool api_field_get(size_t i, api_field_info *out);

#endif
