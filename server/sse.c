/*
 * sse: SSE framing (see sse.h). Loop thread.
 */
#include "server/sse.h"

#include <stdlib.h>
#include <string.h>

#include "server/error.h"

int srv_sse_event(srv_req *r, const char *json)
{
    size_t n = strlen(json);
    char *ev = malloc(n + 8);
    if (!ev)
        return SRV_ENOMEM;
    /* JSON text from jansson's compact dump holds no raw newline, so one
     * data line carries it whole. */
    memcpy(ev, "data: ", 6);
    memcpy(ev + 6, json, n);
    memcpy(ev + 6 + n, "\n\n", 2);
    int rc = srv_req_stream_write(r, ev, n + 8);
    free(ev);
    return rc;
}

int srv_sse_done(srv_req *r)
{
    static const char done[] = "data: [DONE]\n\n";
    int rc = srv_req_stream_write(r, done, sizeof done - 1);
    srv_req_stream_end(r);
    return rc;
}
