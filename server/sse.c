/*
 * sse: SSE framing (see sse.h). srv_sse_format() is pure; the writers run
 * on the loop thread.
 */
#include "server/sse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/error.h"

char *srv_sse_format(const char *data, size_t n, size_t *len)
{
    /* Worst case: every byte a line break, each becoming "\ndata: ". */
    static const char prefix[] = "data: ";
    size_t pl = sizeof prefix - 1;
    if (n > (SIZE_MAX - pl - 3) / (pl + 1))
        return NULL;
    char *ev = malloc(pl + n * (pl + 1) + 3);
    if (!ev)
        return NULL;
    size_t w = 0;
    memcpy(ev, prefix, pl);
    w = pl;
    for (size_t i = 0; i < n; i++) {
        char c = data[i];
        if (c == '\0')
            continue;
        if (c == '\r' || c == '\n') {
            if (c == '\r' && i + 1 < n && data[i + 1] == '\n')
                i++;
            ev[w++] = '\n';
            memcpy(ev + w, prefix, pl);
            w += pl;
            continue;
        }
        ev[w++] = c;
    }
    ev[w++] = '\n';
    ev[w++] = '\n';
    ev[w] = '\0';
    *len = w;
    return ev;
}

int srv_sse_event(srv_req *r, const char *json)
{
    size_t len = 0;
    char *ev = srv_sse_format(json, strlen(json), &len);
    if (!ev)
        return SRV_ENOMEM;
    int rc = srv_req_stream_write(r, ev, len);
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
