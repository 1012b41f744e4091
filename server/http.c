/*
 * http: libmicrohttpd driven by the libuv loop (see http.h).
 *
 * MHD runs with MHD_USE_EPOLL and no internal thread: a uv_poll on MHD's
 * epoll fd and a uv_timer armed from MHD_get_timeout() call MHD_run(). Code
 * that changes a connection's state outside MHD's callbacks (resuming it)
 * only arms the timer at 0 ms, so MHD_run() never re-enters itself.
 *
 * A srv_req is referenced by its MHD request (until the completed
 * callback) and by its streamed response, if any (until MHD frees the
 * response); it is freed when both are gone. The disconnect watch is a
 * separately allocated uv_poll, closed before the connection is resumed,
 * so MHD alone owns the socket whenever it may close it.
 *
 * Lingering close. MHD can answer a request before its body has arrived,
 * but it then closes the socket at once; a client still sending gets a
 * reset, and the reset makes the kernel drop the answer it had not read
 * yet (Node's fetch reports "other side closed"). So an early refusal does
 * not go through MHD: the connection is suspended, which makes its socket
 * ours until it is resumed; the answer is written by hand with
 * "Connection: close", the write side is shut (the client sees the end of
 * the answer), and whatever the client still sends is read and dropped
 * until it closes or linger_bytes or linger_s run out. Then the socket is
 * shut both ways and the connection resumed: MHD reads the end of the
 * stream and closes it; when a bound cut the client off, that close is a
 * reset (SO_LINGER 0). The connection keeps its slot meanwhile, so
 * --max-connections still counts it, for linger_s at most.
 *
 * Threads: loop thread only.
 */
#include "server/http.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/error.h"
#include "server/log.h"

/* Response headers the routes may add: the web UI's, CORS, X-Request-Id, ... */
#define MAX_HEADERS 24
#define STREAM_BLOCK (16 * 1024)
/* Longest wait between two MHD runs (see run()). */
#define RUN_CEILING_MS 1000
/* Lingering: bytes read per recv, and recv calls per wakeup (so one flood does not hold the loop). */
#define LINGER_CHUNK (16 * 1024)
#define LINGER_READS 64

typedef struct header {
    char *name, *value;
} header;

/* The handles of one lingering close; freed once both have closed. */
typedef struct linger_state {
    uv_poll_t poll;
    uv_timer_t timer;
    srv_req *r;
    int fd;
    int open;                      /* handles not yet closed */
    uint64_t bytes;                /* read and dropped */
    double t_start;
    bool eof;
} linger_state;

struct srv_req {
    srv_http *h;
    struct MHD_Connection *conn;   /* NULL once MHD is done with the request */
    srv_req *prev, *next;          /* h's list of live requests */
    int refs;
    char *method, *path;
    double t_start;
    char *body;
    size_t body_len, body_cap;
    bool too_large, header_too_large, dispatched;
    bool early;                    /* refused before its body arrived: answered by a lingering close */
    linger_state *lg;              /* the lingering close under way */
    bool linger_sent, linger_done; /* the whole answer was written; the lingering is over */
    void *user;
    int status;
    header headers[MAX_HEADERS];
    int n_headers;
    struct MHD_Response *resp;     /* created, not yet queued */
    bool queued;
    bool suspended, client_gone;
    uv_poll_t *watch;
    /* streaming, or the bytes of a lingering answer */
    bool streaming, stream_ended;
    char *out;
    size_t out_len, out_off, out_cap;
};

struct srv_http {
    uv_loop_t *loop;
    struct MHD_Daemon *d;
    uv_poll_t poll;
    uv_timer_t timer;
    bool handles_open;
    srv_http_handlers handlers;
    void *user;
    size_t max_body, max_header;
    unsigned linger_s;
    uint64_t linger_bytes;
    int port;
    size_t active;
    unsigned n_conns;              /* MHD's connections after the last run */
    srv_req *live;
    bool quiesced;
};

/* ---- driving MHD ----------------------------------------------------------- */

static void on_timer(uv_timer_t *t);

static unsigned n_connections(srv_http *h)
{
    const union MHD_DaemonInfo *i = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return i ? i->num_connections : 0;
}

/*
 * One MHD_run, then the timer for the next. MHD takes its listening socket
 * out of its epoll set while the connection limit is reached and puts it
 * back only at the start of a run: a run that closed connections is
 * followed by another at once, or nothing would ever accept again (the
 * clients waiting to connect cannot wake the loop). The wait is also capped,
 * so no other state MHD only re-checks at the start of a run can stall it.
 */
static void run(srv_http *h)
{
    if (!h->d)
        return;
    MHD_run(h->d);
    unsigned n = n_connections(h);
    uint64_t wait = n < h->n_conns ? 0 : RUN_CEILING_MS;
    h->n_conns = n;
    MHD_UNSIGNED_LONG_LONG to = 0;
    if (MHD_get_timeout(h->d, &to) == MHD_YES && (uint64_t)to < wait)
        wait = (uint64_t)to;
    uv_timer_start(&h->timer, on_timer, wait, 0);
}

static void on_timer(uv_timer_t *t) { run(t->data); }

static void on_poll(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    run(p->data);
}

/* Makes MHD run soon, outside the current callback. */
static void kick(srv_http *h)
{
    if (h->handles_open)
        uv_timer_start(&h->timer, on_timer, 0, 0);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[512], q[600];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    /* Said whenever the access handler drops a connection whose client left;
     * the request's own log line already tells. */
    if (strstr(msg, "Application reported internal error"))
        return;
    srv_log(SRV_LOG_WARN, "http_error", "message=%s", srv_log_quote(q, sizeof q, msg, n));
}

/* ---- requests ------------------------------------------------------------ */

static void req_unref(srv_req *r)
{
    if (--r->refs > 0)
        return;
    srv_http *h = r->h;
    if (r->prev)
        r->prev->next = r->next;
    else if (h->live == r)
        h->live = r->next;
    if (r->next)
        r->next->prev = r->prev;
    for (int i = 0; i < r->n_headers; i++) {
        free(r->headers[i].name);
        free(r->headers[i].value);
    }
    if (r->resp)
        MHD_destroy_response(r->resp);
    free(r->method);
    free(r->path);
    free(r->body);
    free(r->out);
    free(r);
}

static void on_watch_closed(uv_handle_t *hd) { free(hd); }

static void watch_stop(srv_req *r)
{
    if (!r->watch)
        return;
    uv_poll_stop(r->watch);
    uv_close((uv_handle_t *)r->watch, on_watch_closed);
    r->watch = NULL;
}

static void on_linger_closed(uv_handle_t *hd)
{
    linger_state *lg = hd->data;
    if (--lg->open == 0)
        free(lg);
}

static void linger_stop(srv_req *r)
{
    linger_state *lg = r->lg;
    if (!lg)
        return;
    r->lg = NULL;
    uv_poll_stop(&lg->poll);
    uv_close((uv_handle_t *)&lg->poll, on_linger_closed);
    uv_close((uv_handle_t *)&lg->timer, on_linger_closed);
}

static void req_resume(srv_req *r)
{
    if (!r->suspended || !r->conn)
        return;
    watch_stop(r);
    linger_stop(r);
    r->suspended = false;
    MHD_resume_connection(r->conn);
    kick(r->h);
}

static void on_watch(uv_poll_t *w, int status, int events)
{
    srv_req *r = w->data;
    uv_os_fd_t fd;
    if (uv_fileno((uv_handle_t *)w, &fd) != 0)
        return;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) {
        /* The client sent more (a pipelined request): it is there; MHD reads it later. */
        watch_stop(r);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) && status == 0 &&
        !(events & UV_DISCONNECT))
        return;
    r->client_gone = true;
    req_resume(r);
}

/* Watches a suspended connection's socket for the client closing it. */
static void watch_start(srv_req *r)
{
    if (r->watch || !r->conn)
        return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return;
    uv_poll_t *w = malloc(sizeof *w);
    if (!w)
        return;
    if (uv_poll_init_socket(r->h->loop, w, ci->connect_fd) != 0) {
        free(w);
        return;
    }
    w->data = r;
    if (uv_poll_start(w, UV_READABLE | UV_DISCONNECT, on_watch) != 0) {
        uv_close((uv_handle_t *)w, on_watch_closed);
        return;
    }
    r->watch = w;
}

/* Suspends the connection; WATCH: and watches it for the client leaving. */
static void suspend(srv_req *r, bool watch)
{
    if (r->suspended)
        return;
    MHD_suspend_connection(r->conn);
    r->suspended = true;
    if (watch)
        watch_start(r);
}

/* ---- lingering close (see the top of this file) ---------------------------- */

static bool lingering(const srv_http *h) { return h->linger_s > 0 && h->linger_bytes > 0; }

/* Ends the lingering close of R and hands the connection back to MHD to close. */
static void linger_end(srv_req *r, const char *why)
{
    linger_state *lg = r->lg;
    int fd = lg->fd;
    bool normal = !strcmp(why, "eof") || !strcmp(why, "reset");
    srv_log(normal ? SRV_LOG_DEBUG : SRV_LOG_INFO, "linger_end", "reason=%s answered=%d bytes=%llu ms=%.0f", why,
            r->linger_sent, (unsigned long long)lg->bytes, (srv_now() - lg->t_start) * 1e3);
    linger_stop(r);
    r->linger_done = true;
    /* Cut on a bound (or an error) while the client still sends: the close
     * must reset the connection. An ordinary close would not, when the
     * receive queue happens to be empty: Linux sends no window update after
     * SHUT_RD, so a client stalled on a zero window never sends the data
     * that would reset the orphaned socket, and it waits out
     * tcp_fin_timeout (60 s) still writing. */
    if (!normal) {
        struct linger hard = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
    }
    /* MHD's next read sees the end of the stream, and it closes the connection. */
    shutdown(fd, SHUT_RDWR);
    req_resume(r);
}

static void on_linger_timer(uv_timer_t *t)
{
    linger_state *lg = t->data;
    linger_end(lg->r, "time");
}

static void on_linger_poll(uv_poll_t *p, int status, int events)
{
    linger_state *lg = p->data;
    srv_req *r = lg->r;
    if (status < 0) {
        linger_end(r, "error");
        return;
    }
    if ((events & UV_WRITABLE) && !r->linger_sent) {
        ssize_t n = send(lg->fd, r->out + r->out_off, r->out_len - r->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            linger_end(r, errno == ECONNRESET || errno == EPIPE ? "reset" : "error");
            return;
        }
        if (n > 0)
            r->out_off += (size_t)n;
        if (r->out_off == r->out_len) {
            r->linger_sent = true;
            /* The client sees the end of the answer at once. */
            shutdown(lg->fd, SHUT_WR);
            if (lg->eof) {
                linger_end(r, "eof");
                return;
            }
            uv_poll_start(p, UV_READABLE, on_linger_poll);
        }
    }
    if (!(events & UV_READABLE) || lg->eof)
        return;
    char buf[LINGER_CHUNK];
    for (int i = 0; i < LINGER_READS; i++) {
        ssize_t n = recv(lg->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
            lg->bytes += (uint64_t)n;
            if (lg->bytes > r->h->linger_bytes) {
                linger_end(r, "bytes");
                return;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n < 0) {
            linger_end(r, errno == ECONNRESET ? "reset" : "error");
            return;
        }
        /* The client has sent all it will: the answer may still be on its way. */
        lg->eof = true;
        if (r->linger_sent)
            linger_end(r, "eof");
        else
            uv_poll_start(p, UV_WRITABLE, on_linger_poll);
        return;
    }
}

/* The whole of an answer written by hand, into r->out: status line, headers, body. */
static bool raw_answer(srv_req *r, int status, const char *content_type, const char *body, size_t len)
{
    char date[48];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", gmtime_r(&now, &tm));
    /* 256: the status line and the fixed headers with their values. */
    size_t cap = 256 + strlen(content_type) + len;
    for (int i = 0; i < r->n_headers; i++)
        cap += strlen(r->headers[i].name) + strlen(r->headers[i].value) + 4;
    char *o = malloc(cap);
    if (!o)
        return false;
    size_t n = (size_t)snprintf(o, cap,
                                "HTTP/1.1 %d %s\r\nDate: %s\r\nConnection: close\r\nContent-Type: %s\r\n"
                                "Content-Length: %zu\r\n",
                                status, MHD_get_reason_phrase_for((unsigned)status), date, content_type, len);
    for (int i = 0; i < r->n_headers; i++)
        n += (size_t)snprintf(o + n, cap - n, "%s: %s\r\n", r->headers[i].name, r->headers[i].value);
    n += (size_t)snprintf(o + n, cap - n, "\r\n");
    memcpy(o + n, body, len);
    free(r->out);
    r->out = o;
    r->out_len = n + len;
    r->out_off = 0;
    r->out_cap = cap;
    return true;
}

/*
 * Sends the answer to an early refusal by a lingering close. Returns false
 * when it cannot start (out of memory); the answer then goes through MHD.
 */
static bool linger_start(srv_req *r, int status, const char *content_type, const char *body, size_t len)
{
    srv_http *h = r->h;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    linger_state *lg = ci ? calloc(1, sizeof *lg) : NULL;
    if (!lg || !raw_answer(r, status, content_type, body, len)) {
        free(lg);
        return false;
    }
    /* One poll handle per socket: the disconnect watch goes first. */
    watch_stop(r);
    if (uv_poll_init_socket(h->loop, &lg->poll, ci->connect_fd) != 0) {
        free(lg);
        return false;
    }
    uv_timer_init(h->loop, &lg->timer);
    lg->poll.data = lg->timer.data = lg;
    lg->open = 2;
    lg->r = r;
    lg->fd = ci->connect_fd;
    lg->t_start = srv_now();
    suspend(r, false);
    r->lg = lg;
    r->status = status;
    uv_poll_start(&lg->poll, UV_READABLE | UV_WRITABLE, on_linger_poll);
    uv_timer_start(&lg->timer, on_linger_timer, (uint64_t)h->linger_s * 1000, 0);
    return true;
}

static srv_req *req_new(srv_http *h, struct MHD_Connection *c, const char *method, const char *url)
{
    srv_req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->h = h;
    r->conn = c;
    r->refs = 1;
    r->t_start = srv_now();
    r->method = strdup(method);
    r->path = strdup(url);
    if (!r->method || !r->path) {
        free(r->method);
        free(r->path);
        free(r);
        return NULL;
    }
    r->next = h->live;
    if (h->live)
        h->live->prev = r;
    h->live = r;
    return r;
}

static void add_headers(srv_req *r, struct MHD_Response *resp)
{
    for (int i = 0; i < r->n_headers; i++)
        MHD_add_response_header(resp, r->headers[i].name, r->headers[i].value);
}

/* After the routes had their say: send what they produced, or wait for it. */
static enum MHD_Result answer(srv_req *r)
{
    if (r->lg || r->linger_done)
        return MHD_YES;
    if (r->resp) {
        struct MHD_Response *resp = r->resp;
        r->resp = NULL;
        r->queued = true;
        enum MHD_Result ret = MHD_queue_response(r->conn, (unsigned)r->status, resp);
        MHD_destroy_response(resp);
        return ret;
    }
    if (r->queued)
        return MHD_YES;
    suspend(r, true);
    return MHD_YES;
}

static enum MHD_Result add_header_size(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
    (void)kind;
    /* "Name: value\r\n" */
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4;
    return MHD_YES;
}

/* Bytes of the request line and headers as the client sent them (give or take whitespace). */
static size_t head_size(struct MHD_Connection *c, const char *method, const char *url, const char *version)
{
    size_t n = strlen(method) + strlen(url) + strlen(version) + 4;
    MHD_get_connection_values(c, MHD_HEADER_KIND, add_header_size, &n);
    return n;
}

/* Whether the client may send a body after these headers. */
static bool body_follows(struct MHD_Connection *c, const char *method)
{
    if (!strcmp(method, MHD_HTTP_METHOD_HEAD))
        return false;
    if (MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING))
        return true;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return cl && strcmp(cl, "0") != 0;
}

/*
 * Hands a request over a limit to the routes before (the rest of) its body
 * has arrived. While the client may still be sending, their answer goes out
 * by a lingering close.
 */
static enum MHD_Result refuse_early(srv_http *h, srv_req *r, bool more_body)
{
    r->early = more_body && lingering(h);
    r->dispatched = true;
    h->handlers.on_request(h->user, r);
    return answer(r);
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                 const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    srv_http *h = cls;
    srv_req *r = *con_cls;
    if (!r) {
        if (!(r = req_new(h, c, method, url)))
            return MHD_NO;
        *con_cls = r;
        h->active++;
        /* Headers over the limit (MHD's memory pool stops only far larger
         * ones) are refused with the body unread. */
        if (head_size(c, method, url, version) > h->max_header) {
            r->header_too_large = true;
            return refuse_early(h, r, body_follows(c, method));
        }
        /* A declared body over the limit is refused before it is sent. */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            errno = 0;
            char *end;
            unsigned long long v = strtoull(cl, &end, 10);
            if (errno || *end || v > h->max_body) {
                r->too_large = true;
                return refuse_early(h, r, body_follows(c, method));
            }
        }
        return MHD_YES;
    }
    if (r->linger_done)
        return MHD_NO;
    if (*upload_size) {
        if (!r->too_large && !r->header_too_large) {
            size_t n = *upload_size;
            if (r->body_len + n > h->max_body) {
                r->too_large = true;
                free(r->body);
                r->body = NULL;
                r->body_len = r->body_cap = 0;
                /* A chunked body (its length was not known up front):
                 * refused now, not once it ends, which it may never do.
                 * Without lingering, it is read to its end and refused then. */
                if (lingering(h)) {
                    *upload_size = 0;
                    return refuse_early(h, r, true);
                }
            } else {
                if (r->body_len + n + 1 > r->body_cap) {
                    size_t cap = r->body_cap ? r->body_cap : 1024;
                    while (cap < r->body_len + n + 1)
                        cap *= 2;
                    char *b = realloc(r->body, cap);
                    if (!b)
                        return MHD_NO;
                    r->body = b;
                    r->body_cap = cap;
                }
                memcpy(r->body + r->body_len, upload, n);
                r->body_len += n;
                r->body[r->body_len] = '\0';
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->client_gone)
        return MHD_NO;
    if (!r->dispatched) {
        r->dispatched = true;
        h->handlers.on_request(h->user, r);
    }
    return answer(r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c;
    srv_http *h = cls;
    srv_req *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    watch_stop(r);
    linger_stop(r);
    r->suspended = false;
    h->active--;
    /* A lingering answer ends with the connection cut: it completed if it was all sent. */
    bool completed = r->early ? r->linger_sent : toe == MHD_REQUEST_TERMINATED_COMPLETED_OK && !r->client_gone;
    r->client_gone = r->client_gone || !completed;
    if (r->dispatched)
        h->handlers.on_done(h->user, r, completed);
    r->conn = NULL;
    req_unref(r);
}

/* ---- streamed responses --------------------------------------------------- */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_req *r = cls;
    if (r->client_gone || !r->conn)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    size_t avail = r->out_len - r->out_off;
    if (avail) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, r->out + r->out_off, n);
        r->out_off += n;
        if (r->out_off == r->out_len)
            r->out_off = r->out_len = 0;
        return (ssize_t)n;
    }
    if (r->stream_ended)
        return MHD_CONTENT_READER_END_OF_STREAM;
    /* Nothing to send yet: sleep until the next write resumes us. */
    suspend(r, true);
    return 0;
}

static void stream_free(void *cls) { req_unref(cls); }

/* ---- the routes' side ---------------------------------------------------- */

const char *srv_req_method(const srv_req *r) { return r->method; }
const char *srv_req_path(const srv_req *r) { return r->path; }
bool srv_req_body_too_large(const srv_req *r) { return r->too_large; }
bool srv_req_header_too_large(const srv_req *r) { return r->header_too_large; }
double srv_req_start(const srv_req *r) { return r->t_start; }
int srv_req_status(const srv_req *r) { return r->status; }
void srv_req_set_user(srv_req *r, void *user) { r->user = user; }
void *srv_req_user(const srv_req *r) { return r->user; }

const char *srv_req_header(const srv_req *r, const char *name)
{
    return r->conn ? MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name) : NULL;
}

const char *srv_req_body(const srv_req *r, size_t *len)
{
    *len = r->body_len;
    return r->body ? r->body : "";
}

void srv_req_add_header(srv_req *r, const char *name, const char *value)
{
    if (r->n_headers >= MAX_HEADERS)
        return;
    header *hd = &r->headers[r->n_headers];
    hd->name = strdup(name);
    hd->value = strdup(value);
    if (!hd->name || !hd->value) {
        free(hd->name);
        free(hd->value);
        return;
    }
    r->n_headers++;
}

int srv_req_respond(srv_req *r, int status, const char *content_type, const char *body, size_t len)
{
    if (r->queued || r->resp || r->lg || r->linger_done || !r->conn)
        return 0;
    if (r->early && linger_start(r, status, content_type, body, len))
        return 0;
    r->early = false;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return SRV_ENOMEM;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    add_headers(r, resp);
    r->resp = resp;
    r->status = status;
    req_resume(r);
    return 0;
}

int srv_req_stream_start(srv_req *r, int status, const char *content_type)
{
    if (r->queued || r->resp || !r->conn)
        return 0;
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK, stream_read, r, stream_free);
    if (!resp)
        return SRV_ENOMEM;
    r->refs++;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Accel-Buffering", "no");
    add_headers(r, resp);
    r->resp = resp;
    r->status = status;
    r->streaming = true;
    req_resume(r);
    return 0;
}

int srv_req_stream_write(srv_req *r, const char *data, size_t len)
{
    if (!r->streaming || r->stream_ended || r->client_gone || !len)
        return 0;
    if (r->out_len + len > r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap : 4096;
        while (cap < r->out_len + len)
            cap *= 2;
        char *o = realloc(r->out, cap);
        if (!o)
            return SRV_ENOMEM;
        r->out = o;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, data, len);
    r->out_len += len;
    req_resume(r);
    return 0;
}

void srv_req_stream_end(srv_req *r)
{
    if (!r->streaming)
        return;
    r->stream_ended = true;
    req_resume(r);
}

/* ---- the server ------------------------------------------------------------ */

/*
 * MHD's per-connection memory: it holds the request line and headers while
 * they are parsed, then the buffers of the body and of the response; it
 * gets MAX_HEADER plus room for those buffers, so headers a little over the
 * limit still reach on_access() and get the API's 431 body.
 */
static size_t pool_bytes(size_t max_header)
{
    return max_header + max_header / 4 + STREAM_BLOCK + 4096;
}

int srv_http_new(uv_loop_t *loop, const srv_http_opts *o, const srv_http_handlers *handlers, void *user,
                 srv_http **out, char *err, size_t err_cap)
{
    *out = NULL;
    srv_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, err_cap, "out of memory");
        return SRV_ENOMEM;
    }
    h->loop = loop;
    h->handlers = *handlers;
    h->user = user;
    h->max_body = o->max_body;
    h->max_header = o->max_header ? o->max_header : 16 * 1024;
    h->linger_s = o->linger_s;
    h->linger_bytes = o->linger_bytes;

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    int g = getaddrinfo(o->host, NULL, &hints, &ai);
    if (g != 0 || !ai) {
        snprintf(err, err_cap, "--host '%s': %s", o->host, g ? gai_strerror(g) : "no address");
        free(h);
        return SRV_ECONFIG;
    }
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof sa);
    memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
    bool v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (v6)
        ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)o->port);
    else
        ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)o->port);

    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG | (v6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_access, h, MHD_OPTION_EXTERNAL_LOGGER,
                            on_mhd_log, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_CONNECTION_LIMIT,
                            o->connection_limit ? o->connection_limit : 1024u, MHD_OPTION_CONNECTION_TIMEOUT,
                            o->idle_timeout_s ? o->idle_timeout_s : 60u, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            pool_bytes(h->max_header), MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, err_cap, "cannot listen on %s port %d: %s", o->host, o->port,
                 errno ? strerror(errno) : "libmicrohttpd failed to start");
        free(h);
        return SRV_EHTTP;
    }
    const union MHD_DaemonInfo *pi = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = pi ? pi->port : o->port;
    const union MHD_DaemonInfo *ei = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD);
    if (!ei || uv_poll_init(loop, &h->poll, ei->epoll_fd) != 0 || uv_timer_init(loop, &h->timer) != 0) {
        snprintf(err, err_cap, "cannot watch the HTTP server's events");
        MHD_stop_daemon(h->d);
        free(h);
        return SRV_ELOOP;
    }
    h->poll.data = h;
    h->timer.data = h;
    h->handles_open = true;
    uv_poll_start(&h->poll, UV_READABLE, on_poll);
    kick(h);
    *out = h;
    return 0;
}

int srv_http_port(const srv_http *h) { return h->port; }
size_t srv_http_active(const srv_http *h) { return h->active; }

void srv_http_quiesce(srv_http *h)
{
    if (!h->d || h->quiesced)
        return;
    h->quiesced = true;
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

void srv_http_close(srv_http *h)
{
    if (!h)
        return;
    if (h->d) {
        /* MHD must not be stopped with suspended connections: resume each as failed. */
        for (srv_req *r = h->live; r; r = r->next)
            if (r->suspended) {
                r->client_gone = true;
                req_resume(r);
            }
        if (h->handles_open) {
            uv_poll_stop(&h->poll);
            uv_timer_stop(&h->timer);
        }
        MHD_run(h->d);
        MHD_stop_daemon(h->d);
        h->d = NULL;
    }
    if (h->handles_open) {
        uv_close((uv_handle_t *)&h->poll, NULL);
        uv_close((uv_handle_t *)&h->timer, NULL);
        h->handles_open = false;
    }
}

void srv_http_free(srv_http *h)
{
    if (!h)
        return;
    srv_http_close(h);
    free(h);
}
