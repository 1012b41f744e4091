/*
 * sse: server-sent events framing of a streamed response: each JSON chunk
 * becomes "data: {json}\n\n" and the stream ends with "data: [DONE]\n\n",
 * as OpenAI streams do.
 *
 * Loop thread (it writes into a srv_req).
 */
#ifndef QWEN3D_SERVER_SSE_H
#define QWEN3D_SERVER_SSE_H

#include "server/http.h"

#define SRV_SSE_CONTENT_TYPE "text/event-stream"

/* Writes one event carrying JSON. Returns 0 or SRV_ENOMEM. */
int srv_sse_event(srv_req *r, const char *json);
/* Writes the closing "[DONE]" event and ends the stream. */
int srv_sse_done(srv_req *r);

#endif
