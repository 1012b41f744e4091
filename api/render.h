/*
 * render: the OpenAI response shapes as JSON text. One-shot bodies for
 * non-streaming completions, chat completions and GET /v1/models, and an
 * api_stream that turns the text pieces of one generation into the JSON of
 * the stream's chunks (the server frames them as SSE events).
 *
 * For chat, the generated text is split into reasoning_content and content
 * with api_chat_split_reasoning(); the stream applies the same split
 * incrementally, holding back a tail that could still become a "<think>" or
 * "</think>" tag or the newlines around it, so the concatenated deltas equal
 * the non-streaming fields. (Not for text with a second "</think>": the
 * one-shot split keeps only what follows the last one, which a stream
 * cannot take back.) With tools (api_meta.tool_calls), the answer's
 * <tool_call> blocks become tool_calls, streamed as OpenAI's deltas
 * (api/toolcall.h): the first of a call carries its index, id, type, name
 * and empty arguments, the later ones pieces of the arguments.
 *
 * Called on the event-loop thread; an api_stream belongs to one request.
 */
#ifndef QWEN3D_API_RENDER_H
#define QWEN3D_API_RENDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/parse.h"
#include "engine/tokenizer.h"

typedef struct api_usage {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens;  /* prompt tokens reused from the prefix cache (prompt_tokens_details) */
} api_usage;

/*
 * Per-request timings reported in the `timings` object, printed to three
 * decimals. ttft_ms counts from the request's arrival, so it is the time
 * spent parsing and tokenizing plus queue_ms plus prompt_ms.
 */
typedef struct api_timings {
    double queue_ms;             /* submitted -> admitted to a session */
    double prompt_ms;            /* admitted -> first token: the prefill */
    double ttft_ms;              /* arrival of the request's last byte -> first token */
    double decode_tokens_per_s;  /* tokens after the first / their time */
    double tpot_ms;              /* first token -> last / (completion tokens - 1); 0 below 2 tokens */
} api_timings;

/* What a response names: id, creation time and the served model. */
typedef struct api_meta {
    const char *id;
    int64_t created;
    const char *model;
    const char *fingerprint;  /* system_fingerprint; NULL: left out */
    /* chat with tools: <tool_call> blocks of the answer become tool_calls
     * (api/toolcall.h), ids drawn from TOOL_SEED, finish_reason "stop"
     * becomes "tool_calls" when there is one */
    bool tool_calls;
    uint64_t tool_seed;
} api_meta;

/*
 * The log-probabilities a response reports (the `logprobs` of a choice):
 * completions' {tokens, token_logprobs, top_logprobs, text_offset}, chat's
 * {content: [{token, logprob, bytes, top_logprobs}]}. Token strings are the
 * tokenizer's bytes of each id (lossy UTF-8; chat's `bytes` are exact).
 * Completions' top_logprobs hold the TOP most likely tokens and the chosen
 * one (up to TOP + 1 entries, as OpenAI's); chat's the TOP most likely. A
 * log-probability of -inf is reported as -9999 (JSON has no infinity); a
 * NAN one (an echoed prompt's first token) as null. text_offset counts
 * Unicode characters of the choice's text before the token (the text holds
 * the echoed prompt first); a token that ends inside a character counts from
 * the character it starts.
 */
typedef struct api_logprobs {
    const eng_tok *tok;
    int top;                   /* completions: logprobs (0-5); chat: top_logprobs (0-20) */
    const eng_token_lp *lps;   /* [n]: the echoed prompt's tokens first, then the generated ones */
    size_t n;
    size_t n_prompt;           /* of those, echoed prompt tokens (special tokens count in its text) */
} api_logprobs;

/* One choice of a response: its whole text, why it ended and its logprobs (NULL: null). */
typedef struct api_choice {
    const char *text;
    size_t len;
    const char *finish_reason;
    const api_logprobs *lp;
} api_choice;

/*
 * The seed of the tool-call ids of choice INDEX of a request whose tool seed
 * is SEED: SEED itself for choice 0, a different one for every other index,
 * so the choices' ids differ and repeat with the seed.
 */
uint64_t api_choice_tool_seed(uint64_t seed, size_t index);

/*
 * Non-streaming body of a finished request of KIND with N choices (indexes
 * 0..N-1 in the order given), malloc'd; NULL on out-of-memory. With tools,
 * choice i's ids come from api_choice_tool_seed(META's tool_seed, i).
 * api_render_result() is the body of one choice, LP its logprobs.
 */
char *api_render_choices(api_kind kind, const api_meta *meta, const api_choice *choices, size_t n,
                         const api_usage *usage, const api_timings *timings);
char *api_render_result(api_kind kind, const api_meta *meta, const char *text, size_t len, const char *finish_reason,
                        const api_usage *usage, const api_timings *timings, const api_logprobs *lp);

/*
 * GET /v1/models for one model of MAX_LEN tokens of context, with the
 * sampling values requests that leave a field out get (DEFAULTS; NULL while
 * the model loads: left out) and where they come from (SOURCE: "model" or
 * "openai").
 */
char *api_render_models(const char *model, int64_t created, int64_t max_len, const eng_sampling *defaults,
                        const char *source);

/*
 * POST /tokenize: {count, max_model_len, tokens} and, with TOK, each id's
 * token string in token_strs (lossy UTF-8). POST /detokenize: {prompt}.
 */
char *api_render_tokens(const int32_t *ids, size_t n, int64_t max_model_len, const eng_tok *tok);
char *api_render_detokenized(const char *text, size_t len);

typedef struct api_stream api_stream;

/*
 * A stream for one response; META's strings are copied. INCLUDE_USAGE:
 * stream_options.include_usage. With n > 1 choices a response has one
 * stream per choice, each told its index (0 by default) before anything is
 * fed, whose chunks the caller interleaves as they come. Setting the index
 * returns 0 or API_ENOMEM.
 */
api_stream *api_stream_new(api_kind kind, const api_meta *meta, bool include_usage);
int api_stream_set_index(api_stream *s, int index);
void api_stream_free(api_stream *s);

/*
 * The chunk JSON texts produced so far are handed out one at a time:
 * api_stream_next() returns the next (malloc'd, the caller frees it) or NULL
 * when none is pending.
 *
 * api_stream_begin() queues the opening chunk (chat: the assistant role).
 * api_stream_text() feeds LEN bytes of new text and queues at most one
 * chunk with what can be sent now. api_stream_end() flushes the held-back
 * text, then queues the final chunk with FINISH_REASON and, when usage was
 * asked for, the usage chunk; TIMINGS goes in the last chunk. With USAGE
 * and TIMINGS NULL (a choice that is not the response's last to end) it
 * queues the choice's final chunk alone.
 * Each returns 0 or API_ENOMEM.
 */
int api_stream_begin(api_stream *s);
/*
 * Log-probabilities of N more tokens (LP's tok and top say how to render
 * them; its lps and n are ignored), PROMPT when they are an echoed prompt's:
 * they go out with the next chunk that carries text, or with the final
 * chunk, so the chunks' logprobs joined are the one-shot body's.
 */
int api_stream_logprobs(api_stream *s, const api_logprobs *lp, const eng_token_lp *lps, size_t n, bool prompt);
int api_stream_text(api_stream *s, const char *text, size_t len);
int api_stream_end(api_stream *s, const char *finish_reason, const api_usage *usage, const api_timings *timings);
char *api_stream_next(api_stream *s);

/* Tool calls (api_meta.tool_calls) a stream sent so far, or that a chat answer's TEXT holds; -1 on out-of-memory. */
int api_stream_tool_calls(const api_stream *s);
int api_text_tool_calls(const char *text, size_t len);

#endif
