/*
 * sse: server-sent events framing of a streamed response: each JSON chunk
 * becomes "data: {json}\n\n" and the stream ends with "data: [DONE]\n\n",
 * as OpenAI streams do.
 *
 * srv_sse_format() is pure and may run on any thread; the writers run on
 * the loop thread (they write into a srv_req).
 */
#ifndef QWEN3D_SERVER_SSE_H
#define QWEN3D_SERVER_SSE_H

#include <stddef.h>

#include "server/http.h"

#define SRV_SSE_CONTENT_TYPE "text/event-stream"

/*
 * The event carrying the N bytes of DATA: one "data: " line per line of
 * DATA (a line ends at "\r\n", "\r" or "\n", as the SSE parser reads them),
 * then the blank line that ends the event. A client joins the lines with
 * "\n", so DATA without "\r" arrives unchanged (jansson's compact JSON
 * never holds a raw line break at all). NUL bytes are dropped: they cannot
 * travel in an event. Returns the malloc'd text (*len bytes, NUL-terminated)
 * or NULL on out-of-memory.
 */
char *srv_sse_format(const char *data, size_t n, size_t *len);

/* Writes one event carrying JSON. Returns 0 or SRV_ENOMEM. */
int srv_sse_event(srv_req *r, const char *json);
/* Writes the closing "[DONE]" event and ends the stream. */
int srv_sse_done(srv_req *r);

#endif
