/*
 * toolcall: Qwen3's tool calls in generated text, turned into OpenAI's
 * `tool_calls`, one piece of text at a time.
 *
 * The model writes a call as
 *   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
 * (the form the chat template renders earlier calls in, and the one the
 * tools grammar of api/schema.h enforces). A parser fed the answer's text
 * (the content, after the reasoning is split off) hands back events in
 * order: content text, the start of a call (index, id, name) and fragments
 * of its arguments (ARGS as written, without the closing brace of the
 * wrapper). It holds back only what may still turn out to be a tag or the
 * wrapper's end, so the events of text fed in pieces equal those of the
 * same text fed at once: a stream's deltas concatenate to the one-shot
 * message.
 *
 * Content is the text outside the blocks with its leading and trailing
 * whitespace dropped (the newlines between calls and around them). A
 * "<tool_call>" not followed by the form above (unconstrained text) stays
 * content. A call cut short (max_tokens) keeps the arguments written so far.
 * Ids are "call_" and 24 letters and digits drawn from the request's seed
 * and the call's index: the same seed gives the same ids.
 *
 * Called by render.c (which builds the JSON of the events) on the
 * event-loop thread; a parser belongs to one response.
 */
#ifndef QWEN3D_API_TOOLCALL_H
#define QWEN3D_API_TOOLCALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum api_tc_kind {
    API_TC_CONTENT, /* TEXT: answer text outside the calls */
    API_TC_BEGIN,   /* a call starts: INDEX, ID, TEXT its function name */
    API_TC_ARGS,    /* TEXT: more of call INDEX's arguments */
} api_tc_kind;

typedef struct api_tc_event {
    api_tc_kind kind;
    int index;
    const char *id;
    const char *text;
    size_t len;
} api_tc_event;

typedef struct api_toolcalls api_toolcalls;

api_toolcalls *api_toolcalls_new(uint64_t seed);
void api_toolcalls_free(api_toolcalls *t);

/*
 * Feeds LEN more bytes of the answer (FINAL: the last, holding nothing
 * back) and sets *EV to the N events they decide; valid until the next
 * call. Returns 0, or -1 on out-of-memory.
 */
int api_toolcalls_feed(api_toolcalls *t, const char *text, size_t len, bool final, const api_tc_event **ev,
                       size_t *n);
/* Calls started so far. */
int api_toolcalls_count(const api_toolcalls *t);

/* Longest proper prefix of TAG that ends the N bytes at P: text a stream holds back. */
size_t api_partial_tag(const char *p, size_t n, const char *tag);

#endif
