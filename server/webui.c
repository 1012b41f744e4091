/*
 * webui: the chat and status pages, their files and /status.json (see
 * webui.h).
 *
 * The history behind /status.json is read from the daemon's own Prometheus
 * exposition (srv_metrics_render) rather than from the metrics' internals:
 * the page then shows exactly what a scraper sees, and metrics that other
 * parts of the daemon add later under the names design.md fixes (the
 * prefix cache's, the KV usage ratio) appear without a change here. A
 * render is a few kilobytes every SRV_WEBUI_SAMPLE_S seconds.
 *
 * Each sample keeps the counters and the cumulative histogram buckets; a
 * point of the history is the interval between two samples: generated
 * tokens over its length, and the quantiles of the latencies observed in
 * it, interpolated within buckets as Prometheus' histogram_quantile does.
 *
 * Threads: loop thread only (the metrics lock themselves).
 */
#include "server/webui.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include "kernels/krn.h"
#include "server/log.h"
#include "server/webui_assets.h"

/* The page may load its own files and talk to its own origin, nothing else;
 * no inline script or style, no framing, and no DOM text sinks for scripts. */
#define CSP                                                                                                  \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "         \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; require-trusted-types-for 'script'"
#define STATUS_PATH "/status.json"
#define MAX_BUCKETS 32

/* The series read from each exposition; a missing one is absent, not 0. */
enum {
    S_GEN_TOKENS,
    S_PROMPT_TOKENS,
    S_REQUESTS,
    S_SESSIONS,
    S_WAITING,
    S_KV_BYTES,
    S_KV_RATIO,
    S_PFX_HITS,
    S_PFX_MISSES,
    S_PFX_TOKENS,
    S_PFX_BYTES,
    S_RSS,
    S_COUNT
};
static const char *const SERIES[S_COUNT] = {
    "qwen3d_generation_tokens_total", "qwen3d_prompt_tokens_total", "qwen3d_requests_total",
    "qwen3d_sessions_active",         "qwen3d_requests_waiting",    "qwen3d_kv_cache_bytes",
    "qwen3d_kv_cache_usage_ratio",    "qwen3d_prefix_cache_hits_total", "qwen3d_prefix_cache_misses_total",
    "qwen3d_prefix_cache_tokens_total", "qwen3d_prefix_cache_bytes", "process_resident_memory_bytes",
};

enum { H_TTFT, H_ITL, H_COUNT };
static const char *const HISTS[H_COUNT] = {"qwen3d_time_to_first_token_seconds",
                                           "qwen3d_inter_token_latency_seconds"};

/* A histogram's upper bounds, ascending, +Inf last: fixed by the first exposition read. */
typedef struct bounds {
    double le[MAX_BUCKETS];
    int n;
} bounds;

typedef struct sample {
    double mono;                        /* srv_now() seconds */
    double wall;                        /* seconds since the epoch */
    double v[S_COUNT];                  /* summed over label sets */
    bool has[S_COUNT];
    double cum[H_COUNT][MAX_BUCKETS];   /* cumulative counts per bound */
} sample;

struct srv_webui {
    uv_timer_t timer;
    bool timer_open;
    srv_metrics *metrics;
    char *model_name, *version, *kv_mode, *kv_type;
    int64_t parallel, queue;
    uint64_t kv_budget;
    bool loaded;
    srv_model_info info;
    char kernels[KRN_DESCRIBE_LEN];
    double started;                     /* srv_now() at creation */
    bounds hb[H_COUNT];
    sample ring[SRV_WEBUI_HISTORY + 1]; /* SRV_WEBUI_HISTORY intervals */
    int head, n;                        /* oldest sample, samples held */
};

/* ---- reading the exposition -------------------------------------------------- */

/* The value of label NAME in LABELS ("a=\"x\",b=\"y\""), into BUF; false when absent. */
static bool label_value(const char *labels, size_t len, const char *name, char *buf, size_t cap)
{
    size_t nl = strlen(name);
    const char *p = labels, *end = labels + len;
    while (p < end) {
        const char *eq = memchr(p, '=', (size_t)(end - p));
        if (!eq || eq + 1 >= end || eq[1] != '"')
            return false;
        const char *v = eq + 2, *q = v;
        while (q < end && *q != '"')
            q += *q == '\\' ? 2 : 1;
        if (q >= end)
            return false;
        if ((size_t)(eq - p) == nl && !memcmp(p, name, nl)) {
            size_t vl = (size_t)(q - v);
            if (vl >= cap)
                return false;
            memcpy(buf, v, vl);
            buf[vl] = '\0';
            return true;
        }
        p = q + 1;
        if (p < end && *p == ',')
            p++;
    }
    return false;
}

/* Per histogram, the (le, cumulative count) pairs of one exposition, summed per le. */
typedef struct raw_hist {
    double le[MAX_BUCKETS], count[MAX_BUCKETS];
    int n;
} raw_hist;

static void raw_add(raw_hist *h, double le, double count)
{
    for (int i = 0; i < h->n; i++)
        if (h->le[i] == le) {
            h->count[i] += count;
            return;
        }
    if (h->n < MAX_BUCKETS) {
        h->le[h->n] = le;
        h->count[h->n++] = count;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Reads the series and histograms of TEXT into S; the first call fixes the bounds. */
static void parse_exposition(srv_webui *w, const char *text, sample *s)
{
    raw_hist raw[H_COUNT];
    memset(raw, 0, sizeof raw);
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        const char *next = eol ? eol + 1 : line + len;
        if (len == 0 || line[0] == '#') {
            line = next;
            continue;
        }
        size_t nl = strcspn(line, "{ ");
        if (nl > len)
            nl = len;
        const char *labels = NULL, *rest = line + nl;
        size_t labels_len = 0;
        if (*rest == '{') {
            labels = rest + 1;
            const char *close = memchr(labels, '}', len - nl - 1);
            if (!close) {
                line = next;
                continue;
            }
            labels_len = (size_t)(close - labels);
            rest = close + 1;
        }
        char *vend;
        double v = strtod(rest, &vend);
        if (vend == rest || isnan(v)) {
            line = next;
            continue;
        }
        for (int i = 0; i < S_COUNT; i++)
            if (strlen(SERIES[i]) == nl && !memcmp(line, SERIES[i], nl)) {
                s->v[i] += v;
                s->has[i] = true;
            }
        for (int h = 0; h < H_COUNT; h++) {
            size_t hl = strlen(HISTS[h]);
            char le[32];
            if (nl == hl + 7 && !memcmp(line, HISTS[h], hl) && !memcmp(line + hl, "_bucket", 7) && labels &&
                label_value(labels, labels_len, "le", le, sizeof le))
                raw_add(&raw[h], strtod(le, NULL), v);
        }
        line = next;
    }
    for (int h = 0; h < H_COUNT; h++) {
        bounds *b = &w->hb[h];
        if (b->n == 0 && raw[h].n > 0) {
            memcpy(b->le, raw[h].le, (size_t)raw[h].n * sizeof *b->le);
            b->n = raw[h].n;
            qsort(b->le, (size_t)b->n, sizeof *b->le, cmp_double);
        }
        for (int i = 0; i < b->n; i++)
            for (int k = 0; k < raw[h].n; k++)
                if (raw[h].le[k] == b->le[i])
                    s->cum[h][i] = raw[h].count[k];
    }
}

static double wall_now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

/* A sample of the metrics now; false when out of memory. */
static bool take_sample(srv_webui *w, sample *s)
{
    memset(s, 0, sizeof *s);
    s->mono = srv_now();
    s->wall = wall_now();
    char *text = srv_metrics_render(w->metrics, NULL);
    if (!text)
        return false;
    parse_exposition(w, text, s);
    free(text);
    return true;
}

static void on_sample(uv_timer_t *t)
{
    srv_webui *w = t->data;
    sample s;
    if (!take_sample(w, &s))
        return;
    int cap = SRV_WEBUI_HISTORY + 1;
    if (w->n < cap) {
        w->ring[(w->head + w->n++) % cap] = s;
    } else {
        w->ring[w->head] = s;
        w->head = (w->head + 1) % cap;
    }
}

/* ---- life cycle ------------------------------------------------------------ */

srv_webui *srv_webui_new(uv_loop_t *loop, const srv_webui_opts *opts, srv_metrics *metrics)
{
    srv_webui *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->metrics = metrics;
    w->model_name = strdup(opts->model_name ? opts->model_name : "");
    w->version = strdup(opts->version ? opts->version : "");
    w->kv_mode = strdup(opts->kv_mode ? opts->kv_mode : "");
    w->kv_type = strdup(opts->kv_type ? opts->kv_type : "");
    if (!w->model_name || !w->version || !w->kv_mode || !w->kv_type)
        goto fail;
    w->parallel = opts->parallel;
    w->queue = opts->queue;
    w->started = srv_now();
    if (uv_timer_init(loop, &w->timer) != 0)
        goto fail;
    w->timer_open = true;
    w->timer.data = w;
    /* The first sample now, so the first interval ends SRV_WEBUI_SAMPLE_S later. */
    on_sample(&w->timer);
    uv_timer_start(&w->timer, on_sample, SRV_WEBUI_SAMPLE_S * 1000, SRV_WEBUI_SAMPLE_S * 1000);
    return w;
fail:
    srv_webui_close(w);
    srv_webui_free(w);
    return NULL;
}

void srv_webui_close(srv_webui *w)
{
    if (w && w->timer_open && !uv_is_closing((uv_handle_t *)&w->timer))
        uv_close((uv_handle_t *)&w->timer, NULL);
}

void srv_webui_free(srv_webui *w)
{
    if (!w)
        return;
    free(w->model_name);
    free(w->version);
    free(w->kv_mode);
    free(w->kv_type);
    free(w);
}

void srv_webui_set_loaded(srv_webui *w, const srv_model_info *info, uint64_t kv_budget)
{
    if (!w)
        return;
    w->loaded = true;
    w->info = *info;
    w->kv_budget = kv_budget;
    krn_describe(w->kernels, sizeof w->kernels);
}

/* ---- /status.json ------------------------------------------------------------ */

/* The Q-quantile of the observations between two cumulative bucket rows, or NAN when there were none. */
static double quantile(const bounds *b, const double *prev, const double *cur, double q)
{
    if (b->n == 0)
        return NAN;
    double total = cur[b->n - 1] - (prev ? prev[b->n - 1] : 0);
    if (total <= 0)
        return NAN;
    double rank = q * total, below = 0;
    for (int i = 0; i < b->n; i++) {
        double c = cur[i] - (prev ? prev[i] : 0);
        if (c >= rank) {
            if (isinf(b->le[i]))
                return i > 0 ? b->le[i - 1] : NAN;
            double lo = i > 0 ? b->le[i - 1] : 0, in = c - below;
            return in > 0 ? lo + (b->le[i] - lo) * (rank - below) / in : b->le[i];
        }
        below = c;
    }
    return NAN;
}

/* A number, or null for NAN (no data in that interval). */
static json_t *num(double x)
{
    return isnan(x) ? json_null() : json_real(round(x * 1000.0) / 1000.0);
}

static json_t *model_json(const srv_webui *w)
{
    if (!w->loaded)
        return json_null();
    const srv_model_info *i = &w->info;
    const eng_geometry *g = &i->geometry;
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:f, s:i, s:s, s:s, s:s, s:s}", "name",
                     w->model_name, "context_length", (json_int_t)i->ctx, "vocab", (json_int_t)i->vocab, "layers",
                     (json_int_t)g->layers, "hidden", (json_int_t)g->hidden, "heads", (json_int_t)g->heads,
                     "kv_heads", (json_int_t)g->kv_heads, "head_size", (json_int_t)g->head_size, "intermediate",
                     (json_int_t)g->intermediate, "weight_bytes", (json_int_t)i->weight_bytes, "load_seconds",
                     round(i->load_seconds * 1000.0) / 1000.0, "threads", i->threads, "kernel_level",
                     krn_active()->level_name, "kernels", w->kernels, "kv_mode", w->kv_mode, "kv_type", w->kv_type);
}

/* The present values: a fresh sample. */
static json_t *now_json(const srv_webui *w, const sample *s)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    static const struct {
        const char *key;
        int series;
    } KEYS[] = {
        {"sessions_active", S_SESSIONS},     {"requests_waiting", S_WAITING}, {"kv_cache_bytes", S_KV_BYTES},
        {"requests_total", S_REQUESTS},      {"prompt_tokens_total", S_PROMPT_TOKENS},
        {"generation_tokens_total", S_GEN_TOKENS}, {"resident_bytes", S_RSS},
    };
    for (size_t k = 0; k < sizeof KEYS / sizeof *KEYS; k++)
        json_object_set_new(o, KEYS[k].key, s->has[KEYS[k].series] ? json_integer((json_int_t)s->v[KEYS[k].series])
                                                                    : json_null());
    double ratio = s->has[S_KV_RATIO] ? s->v[S_KV_RATIO]
                   : w->kv_budget && s->has[S_KV_BYTES] ? s->v[S_KV_BYTES] / (double)w->kv_budget
                                                         : NAN;
    json_object_set_new(o, "kv_cache_usage_ratio", num(ratio));
    json_t *pfx = json_null();
    if (s->has[S_PFX_HITS] || s->has[S_PFX_BYTES]) {
        pfx = json_object();
        static const struct {
            const char *key;
            int series;
        } PFX[] = {{"hits_total", S_PFX_HITS}, {"misses_total", S_PFX_MISSES}, {"tokens_total", S_PFX_TOKENS},
                   {"bytes", S_PFX_BYTES}};
        for (size_t k = 0; pfx && k < sizeof PFX / sizeof *PFX; k++)
            json_object_set_new(pfx, PFX[k].key, s->has[PFX[k].series] ? json_integer((json_int_t)s->v[PFX[k].series])
                                                                       : json_null());
    }
    json_object_set_new(o, "prefix_cache", pfx);
    json_object_set_new(o, "uptime_s", json_real(round((s->mono - w->started) * 10.0) / 10.0));
    json_object_set_new(o, "time", json_real(round(s->wall * 1000.0) / 1000.0));
    return o;
}

/* Column arrays, one entry per interval between two consecutive samples. */
static json_t *history_json(const srv_webui *w)
{
    enum { C_T, C_TPS, C_PTPS, C_TTFT50, C_TTFT95, C_ITL50, C_ITL95, C_SESS, C_WAIT, C_KV, C_COUNT };
    static const char *const NAMES[C_COUNT] = {"t",           "tokens_per_s", "prompt_tokens_per_s",
                                               "ttft_p50_ms", "ttft_p95_ms",  "itl_p50_ms",
                                               "itl_p95_ms",  "sessions_active", "requests_waiting",
                                               "kv_cache_bytes"};
    json_t *o = json_pack("{s:i, s:i}", "interval_s", SRV_WEBUI_SAMPLE_S, "points_max", SRV_WEBUI_HISTORY);
    json_t *col[C_COUNT];
    for (int c = 0; c < C_COUNT; c++)
        col[c] = json_array();
    int cap = SRV_WEBUI_HISTORY + 1;
    for (int k = 1; k < w->n; k++) {
        const sample *a = &w->ring[(w->head + k - 1) % cap], *b = &w->ring[(w->head + k) % cap];
        double dt = b->mono - a->mono;
        json_array_append_new(col[C_T], json_real(round(b->wall * 1000.0) / 1000.0));
        json_array_append_new(col[C_TPS], num(dt > 0 ? (b->v[S_GEN_TOKENS] - a->v[S_GEN_TOKENS]) / dt : NAN));
        json_array_append_new(col[C_PTPS], num(dt > 0 ? (b->v[S_PROMPT_TOKENS] - a->v[S_PROMPT_TOKENS]) / dt : NAN));
        json_array_append_new(col[C_TTFT50], num(1e3 * quantile(&w->hb[H_TTFT], a->cum[H_TTFT], b->cum[H_TTFT], 0.5)));
        json_array_append_new(col[C_TTFT95], num(1e3 * quantile(&w->hb[H_TTFT], a->cum[H_TTFT], b->cum[H_TTFT], 0.95)));
        json_array_append_new(col[C_ITL50], num(1e3 * quantile(&w->hb[H_ITL], a->cum[H_ITL], b->cum[H_ITL], 0.5)));
        json_array_append_new(col[C_ITL95], num(1e3 * quantile(&w->hb[H_ITL], a->cum[H_ITL], b->cum[H_ITL], 0.95)));
        json_array_append_new(col[C_SESS], num(b->has[S_SESSIONS] ? b->v[S_SESSIONS] : NAN));
        json_array_append_new(col[C_WAIT], num(b->has[S_WAITING] ? b->v[S_WAITING] : NAN));
        json_array_append_new(col[C_KV], num(b->has[S_KV_BYTES] ? b->v[S_KV_BYTES] : NAN));
    }
    for (int c = 0; c < C_COUNT; c++)
        if (o && col[c])
            json_object_set_new(o, NAMES[c], col[c]);
        else
            json_decref(col[c]);
    return o;
}

static char *status_json(srv_webui *w)
{
    sample now;
    if (!take_sample(w, &now))
        return NULL;
    json_t *server = json_pack("{s:s, s:I, s:I, s:I, s:I}", "version", w->version, "parallel", (json_int_t)w->parallel,
                               "queue", (json_int_t)w->queue, "kv_budget_bytes", (json_int_t)w->kv_budget,
                               "kv_bytes_full_context", (json_int_t)(w->loaded ? w->info.kv_bytes_full : 0));
    json_t *root = json_pack("{s:o, s:o, s:o, s:o}", "model", model_json(w), "server", server, "now",
                             now_json(w, &now), "history", history_json(w));
    if (!root)
        return NULL;
    /* 15 digits: seconds since the epoch to the millisecond, and no binary noise on rounded values. */
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(15));
    json_decref(root);
    return s;
}

/* ---- serving --------------------------------------------------------------- */

static const srv_webui_asset *find_asset(const char *path)
{
    for (size_t i = 0; i < srv_webui_n_assets; i++)
        if (!strcmp(srv_webui_assets[i].path, path))
            return &srv_webui_assets[i];
    return NULL;
}

bool srv_webui_match(const srv_webui *w, const char *path, bool *needs_key)
{
    if (!w)
        return false;
    *needs_key = !strcmp(path, STATUS_PATH);
    return *needs_key || find_asset(path) != NULL;
}

/* The next comma-separated item of a header list at *P: its bounds, without surrounding spaces. */
static bool next_item(const char **p, const char **item, size_t *len)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t' || *s == ',')
        s++;
    if (!*s)
        return false;
    const char *e = s + strcspn(s, ",");
    *p = e;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
        e--;
    *item = s;
    *len = (size_t)(e - s);
    return true;
}

/* Accept-Encoding lists gzip (or x-gzip) without q=0. */
static bool accepts_gzip(const char *h)
{
    const char *item;
    size_t len;
    while (h && next_item(&h, &item, &len)) {
        char buf[64];
        if (len >= sizeof buf)
            continue;
        memcpy(buf, item, len);
        buf[len] = '\0';
        char *params = strchr(buf, ';');
        if (params)
            *params++ = '\0';
        size_t name = strcspn(buf, " \t");
        if (!((name == 4 && !strncasecmp(buf, "gzip", 4)) || (name == 6 && !strncasecmp(buf, "x-gzip", 6))))
            continue;
        for (char *p = params; p && *p;) {
            p += strspn(p, " \t;");
            if ((p[0] == 'q' || p[0] == 'Q') && p[1] == '=')
                return strtod(p + 2, NULL) > 0;
            p += strcspn(p, ";");
        }
        return true;
    }
    return false;
}

/* If-None-Match names ETAG (weak comparison, as RFC 9110 asks for it) or is "*". */
static bool etag_matches(const char *h, const char *etag)
{
    const char *item;
    size_t len;
    while (h && next_item(&h, &item, &len)) {
        if (len == 1 && item[0] == '*')
            return true;
        if (len > 2 && !strncmp(item, "W/", 2)) {
            item += 2;
            len -= 2;
        }
        if (len == strlen(etag) && !memcmp(item, etag, len))
            return true;
    }
    return false;
}

static void security_headers(srv_req *r)
{
    srv_req_add_header(r, "Content-Security-Policy", CSP);
    srv_req_add_header(r, "X-Content-Type-Options", "nosniff");
    srv_req_add_header(r, "Referrer-Policy", "no-referrer");
}

void srv_webui_respond(srv_webui *w, srv_req *r)
{
    const char *path = srv_req_path(r);
    security_headers(r);
    srv_req_add_header(r, "Cache-Control", "no-cache");
    if (!strcmp(path, STATUS_PATH)) {
        char *body = status_json(w);
        if (!body) {
            static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                      "\"param\":null,\"code\":\"out_of_memory\"}}";
            srv_req_respond(r, 500, "application/json", oom, sizeof oom - 1);
            return;
        }
        srv_req_respond(r, 200, "application/json", body, strlen(body));
        free(body);
        return;
    }
    const srv_webui_asset *a = find_asset(path);
    bool gz = a->gz && accepts_gzip(srv_req_header(r, "Accept-Encoding"));
    const char *etag = gz ? a->etag_gz : a->etag;
    srv_req_add_header(r, "ETag", etag);
    srv_req_add_header(r, "Vary", "Accept-Encoding");
    if (etag_matches(srv_req_header(r, "If-None-Match"), etag)) {
        srv_req_respond(r, 304, a->type, "", 0);
        return;
    }
    if (gz)
        srv_req_add_header(r, "Content-Encoding", "gzip");
    srv_req_respond(r, 200, a->type, gz ? (const char *)a->gz : (const char *)a->data, gz ? a->gz_len : a->len);
}
