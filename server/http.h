/*
 * http: the HTTP server. libmicrohttpd runs inside the libuv loop in its
 * external-event mode: MHD's epoll fd is watched by a uv_poll and
 * MHD_get_timeout() drives a uv_timer, so MHD never starts a thread.
 *
 * A request is handed to the routes once its headers and body have arrived
 * (srv_http_handlers.on_request), or as soon as it is known to be over a
 * limit (body or header size), so the routes can refuse it. Such an early
 * refusal ends in a lingering close: the answer is sent while the rest of
 * the body is read and thrown away, up to linger_bytes or linger_s, so a
 * client still sending sees the answer rather than a reset connection.
 * The routes answer at once or later: until
 * they do, the connection is suspended (MHD_suspend_connection) and a
 * uv_poll watches its socket for the client closing it. A streamed response
 * is produced by MHD's content-reader callback from a buffer the routes
 * append to; when the buffer runs dry the connection is suspended again and
 * resumed by the next write. Every request ends with one on_done call, with
 * completed = false when the client went away or the connection failed.
 *
 * Threads: everything here runs on the loop thread.
 */
#ifndef QWEN3D_SERVER_HTTP_H
#define QWEN3D_SERVER_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

typedef struct srv_http srv_http;
typedef struct srv_req srv_req;

typedef struct srv_http_opts {
    const char *host;          /* numeric address or name; resolved once */
    int port;                  /* 0 = any free port */
    size_t max_body;           /* larger bodies are not kept: srv_req_body_too_large() */
    size_t max_header;         /* request line plus headers; larger: srv_req_header_too_large() (0 = 16 KiB) */
    unsigned connection_limit; /* connections beyond it are closed at once (0 = 1024) */
    unsigned idle_timeout_s;   /* a connection without traffic for this long is closed (0 = 60) */
    unsigned linger_s;         /* an early refusal reads the rest of the body this long at most (0 = no lingering) */
    uint64_t linger_bytes;     /* ... and this many bytes at most */
} srv_http_opts;

typedef struct srv_http_handlers {
    /* The request has arrived in full (or its body was too large). */
    void (*on_request)(void *user, srv_req *r);
    /* The request ended; R is invalid afterwards. */
    void (*on_done)(void *user, srv_req *r, bool completed);
} srv_http_handlers;

/* Starts listening. Returns 0, or a negative SRV_E* code with ERR filled. */
int srv_http_new(uv_loop_t *loop, const srv_http_opts *opts, const srv_http_handlers *handlers, void *user,
                 srv_http **out, char *err, size_t err_cap);
/*
 * Stops: every suspended request is resumed as failed, MHD is stopped (each
 * open request gets its on_done), the uv handles are closed. Free with
 * srv_http_free() after the loop has run the closes.
 */
void srv_http_close(srv_http *h);
void srv_http_free(srv_http *h);

/* The port actually bound. */
int srv_http_port(const srv_http *h);
/* Stops accepting connections; open connections go on. */
void srv_http_quiesce(srv_http *h);
/* Requests received and not yet ended. */
size_t srv_http_active(const srv_http *h);

/* ---- one request ---------------------------------------------------------- */

const char *srv_req_method(const srv_req *r);
const char *srv_req_path(const srv_req *r);
/* A request header (case-insensitive name), or NULL. */
const char *srv_req_header(const srv_req *r, const char *name);
const char *srv_req_body(const srv_req *r, size_t *len);
bool srv_req_body_too_large(const srv_req *r);
/* The request line and headers together are longer than max_header. */
bool srv_req_header_too_large(const srv_req *r);
/* Arrival time, srv_now() seconds. */
double srv_req_start(const srv_req *r);
/* The status sent (0 before a response). */
int srv_req_status(const srv_req *r);

void srv_req_set_user(srv_req *r, void *user);
void *srv_req_user(const srv_req *r);

/* Adds a response header (copied) to the response created next. */
void srv_req_add_header(srv_req *r, const char *name, const char *value);
/* Sends a complete response; the body is copied. Returns 0 or SRV_ENOMEM. */
int srv_req_respond(srv_req *r, int status, const char *content_type, const char *body, size_t len);
/* Starts a streamed response (chunked transfer encoding). */
int srv_req_stream_start(srv_req *r, int status, const char *content_type);
/* Appends bytes to the stream. Returns 0 or SRV_ENOMEM. */
int srv_req_stream_write(srv_req *r, const char *data, size_t len);
/* Ends the stream once the buffered bytes are sent. */
void srv_req_stream_end(srv_req *r);

#endif
