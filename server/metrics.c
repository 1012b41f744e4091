/*
 * metrics: counters, gauges and histograms of the daemon and their
 * Prometheus text exposition (see metrics.h). Every field is guarded by
 * `mu`; rendering copies nothing out of order, so a scrape is one snapshot.
 *
 * Any thread.
 */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Bucket upper bounds, in seconds; +Inf is implied. */
static const double TTFT_BOUNDS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double ITL_BOUNDS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5};
static const double DURATION_BOUNDS[] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
static const double QUEUE_BOUNDS[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
/* Per step, in rows and tokens; 0 counts the steps that had none. */
static const double BATCH_BOUNDS[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256};
static const double PREFILL_STEP_BOUNDS[] = {0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
/* A decode step of one small session takes milliseconds, a step with a long prompt chunk seconds. */
static const double STEP_BOUNDS[] = {0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};

/* Token counts of one request. */
static const double TOKEN_BOUNDS[] = {1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};

#define MAX_BOUNDS 16
#define MAX_CODES 16
/* Key names with series of their own (every request-level family); more count under "other". */
#define MAX_KEYS 64
#define KEY_NAME_MAX 64

#define REASON_ENUM(r) REASON_##r,
enum { SRV_FINISHED_REASONS(REASON_ENUM) N_REASONS };
#undef REASON_ENUM
#define REASON_NAME(r) #r,
static const char *const REASONS[N_REASONS] = {SRV_FINISHED_REASONS(REASON_NAME)};
#undef REASON_NAME

typedef struct histogram {
    const double *bounds;
    size_t n_bounds;
    uint64_t counts[MAX_BOUNDS + 1]; /* per bucket, not cumulative; last is +Inf */
    uint64_t count;
    double sum;
} histogram;

/* The request-level histograms, a set per API key name. */
typedef enum {
    RH_TTFT,
    RH_ITL,
    RH_DURATION,
    RH_QUEUE,
    RH_PREFILL,
    RH_PROMPT_LEN,
    RH_GEN_LEN,
    RH_DECODE,
    RH_COUNT
} request_hist;

/* What one API key's requests (all requests without keys) have counted. */
typedef struct key_row {
    char key[KEY_NAME_MAX + 1];   /* "" without keys */
    uint64_t finished[N_REASONS];
    uint64_t prompt_tokens, generation_tokens;
    histogram h[RH_COUNT];
} key_row;

typedef struct code_count {
    int code;
    uint64_t n;
} code_count;

struct srv_metrics {
    pthread_mutex_t mu;
    char version[64];
    code_count requests[SRV_EP_COUNT][MAX_CODES];
    histogram batch, prefill_step;
    histogram step_decode, step_prompt; /* step times: decode rows only, or prompt tokens fed too */
    int64_t sessions_active, requests_waiting;
    uint64_t kv_bytes, weight_bytes;
    eng_prefix_stats prefix;
    double load_seconds;
    double start_time;
    char model_name[256];
    uint64_t kv_budget;
    key_row keys[MAX_KEYS + 1]; /* the last absorbs key names beyond MAX_KEYS */
    size_t n_keys;
    key_row none; /* rendered, all zero, until the first request makes a row */
};

const char *srv_endpoint_name(srv_endpoint ep)
{
    static const char *const names[SRV_EP_COUNT] = {
#define SRV_EP_PATH(name, path) [SRV_EP_##name] = path,
        SRV_ENDPOINTS(SRV_EP_PATH)
#undef SRV_EP_PATH
        [SRV_EP_OTHER] = "other",
    };
    return ep < SRV_EP_COUNT ? names[ep] : "other";
}

static void hist_init(histogram *h, const double *bounds, size_t n)
{
    h->bounds = bounds;
    h->n_bounds = n < MAX_BOUNDS ? n : MAX_BOUNDS;
}

#define HIST_INIT(h, bounds) hist_init(h, bounds, sizeof bounds / sizeof *bounds)

static void hist_observe(histogram *h, double v)
{
    size_t i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

/* An empty row counting the requests of the key named KEY ("" without keys). */
static void key_row_init(key_row *row, const char *key)
{
    memset(row, 0, sizeof *row);
    snprintf(row->key, sizeof row->key, "%s", key);
    HIST_INIT(&row->h[RH_TTFT], TTFT_BOUNDS);
    HIST_INIT(&row->h[RH_ITL], ITL_BOUNDS);
    HIST_INIT(&row->h[RH_DURATION], DURATION_BOUNDS);
    HIST_INIT(&row->h[RH_QUEUE], QUEUE_BOUNDS);
    HIST_INIT(&row->h[RH_PREFILL], TTFT_BOUNDS);
    HIST_INIT(&row->h[RH_PROMPT_LEN], TOKEN_BOUNDS);
    HIST_INIT(&row->h[RH_GEN_LEN], TOKEN_BOUNDS);
    HIST_INIT(&row->h[RH_DECODE], DURATION_BOUNDS);
}

srv_metrics *srv_metrics_new(const char *version)
{
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    snprintf(m->version, sizeof m->version, "%s", version ? version : "");
    key_row_init(&m->none, "");
    HIST_INIT(&m->batch, BATCH_BOUNDS);
    HIST_INIT(&m->prefill_step, PREFILL_STEP_BOUNDS);
    HIST_INIT(&m->step_decode, STEP_BOUNDS);
    HIST_INIT(&m->step_prompt, STEP_BOUNDS);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    m->start_time = (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
    return m;
}

void srv_metrics_free(srv_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

#define LOCKED(stmt)                   \
    do {                               \
        pthread_mutex_lock(&m->mu);    \
        stmt;                          \
        pthread_mutex_unlock(&m->mu);  \
    } while (0)

/* KEY's row (NULL: ""), made on first use; the mutex is held. */
static key_row *key_row_of(srv_metrics *m, const char *key)
{
    if (!key)
        key = "";
    size_t i = 0;
    while (i < m->n_keys && i < MAX_KEYS && strcmp(m->keys[i].key, key) != 0)
        i++;
    if (i == m->n_keys) {
        key_row_init(&m->keys[i], i < MAX_KEYS ? key : "other");
        m->n_keys++;
    }
    return &m->keys[i];
}

void srv_metrics_request(srv_metrics *m, srv_endpoint ep, int status, double seconds, const char *key)
{
    if (ep >= SRV_EP_COUNT)
        ep = SRV_EP_OTHER;
    pthread_mutex_lock(&m->mu);
    code_count *row = m->requests[ep];
    for (size_t i = 0; i < MAX_CODES; i++) {
        /* Codes take the first free slot; the last slot absorbs any overflow. */
        if (row[i].code == status || row[i].code == 0 || i == MAX_CODES - 1) {
            if (row[i].code == 0)
                row[i].code = status;
            row[i].n++;
            break;
        }
    }
    if (ep == SRV_EP_COMPLETIONS || ep == SRV_EP_CHAT)
        hist_observe(&key_row_of(m, key)->h[RH_DURATION], seconds);
    pthread_mutex_unlock(&m->mu);
}

size_t srv_metrics_key_row(srv_metrics *m, const char *key)
{
    size_t row;
    LOCKED(row = (size_t)(key_row_of(m, key) - m->keys));
    return row;
}

void srv_metrics_prompt_tokens(srv_metrics *m, uint64_t n, size_t row)
{
    if (row <= MAX_KEYS)
        LOCKED(m->keys[row].prompt_tokens += n);
}

void srv_metrics_generation_tokens(srv_metrics *m, uint64_t n, size_t row)
{
    if (row <= MAX_KEYS)
        LOCKED(m->keys[row].generation_tokens += n);
}
/* Observes V in histogram H of key row ROW. */
static void row_observe(srv_metrics *m, size_t row, request_hist h, double v)
{
    if (row <= MAX_KEYS)
        LOCKED(hist_observe(&m->keys[row].h[h], v));
}

void srv_metrics_ttft(srv_metrics *m, double s, size_t row) { row_observe(m, row, RH_TTFT, s); }
void srv_metrics_prefill(srv_metrics *m, double s, size_t row) { row_observe(m, row, RH_PREFILL, s); }
void srv_metrics_inter_token(srv_metrics *m, double s, size_t row) { row_observe(m, row, RH_ITL, s); }
void srv_metrics_queue_wait(srv_metrics *m, double s, size_t row) { row_observe(m, row, RH_QUEUE, s); }
void srv_metrics_set_waiting(srv_metrics *m, int64_t n) { LOCKED(m->requests_waiting = n); }
void srv_metrics_step(srv_metrics *m, uint64_t rows, uint64_t prompt_tokens, double seconds)
{
    LOCKED(hist_observe(&m->batch, (double)rows); hist_observe(&m->prefill_step, (double)prompt_tokens);
           hist_observe(prompt_tokens ? &m->step_prompt : &m->step_decode, seconds));
}

void srv_metrics_set_sessions(srv_metrics *m, int64_t active, uint64_t kv_bytes)
{
    LOCKED(m->sessions_active = active; m->kv_bytes = kv_bytes);
}

void srv_metrics_set_prefix(srv_metrics *m, const eng_prefix_stats *st)
{
    LOCKED(m->prefix = *st);
}

void srv_metrics_set_model(srv_metrics *m, uint64_t weight_bytes, double load_seconds)
{
    LOCKED(m->weight_bytes = weight_bytes; m->load_seconds = load_seconds);
}

void srv_metrics_set_model_name(srv_metrics *m, const char *name)
{
    LOCKED(snprintf(m->model_name, sizeof m->model_name, "%s", name ? name : ""));
}

void srv_metrics_set_kv_budget(srv_metrics *m, uint64_t bytes) { LOCKED(m->kv_budget = bytes); }

void srv_metrics_finished(srv_metrics *m, const char *reason, const char *key)
{
    size_t r = REASON_error;
    for (size_t i = 0; i < N_REASONS; i++)
        if (reason && !strcmp(reason, REASONS[i]))
            r = i;
    LOCKED(key_row_of(m, key)->finished[r]++);
}

void srv_metrics_job_done(srv_metrics *m, int64_t n_prompt, int64_t n_generated, double decode_s, size_t row)
{
    if (row > MAX_KEYS)
        return;
    pthread_mutex_lock(&m->mu);
    histogram *h = m->keys[row].h;
    hist_observe(&h[RH_PROMPT_LEN], (double)n_prompt);
    hist_observe(&h[RH_GEN_LEN], (double)n_generated);
    if (decode_s >= 0)
        hist_observe(&h[RH_DECODE], decode_s);
    pthread_mutex_unlock(&m->mu);
}

/* ---- exposition ---------------------------------------------------------- */

typedef struct out {
    char *p;
    size_t n, cap;
    bool oom;
} out;

static void outf(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outf(out *o, const char *fmt, ...)
{
    if (o->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(o->p + o->n, o->cap - o->n, fmt, ap);
        va_end(ap);
        if (k < 0) {
            o->oom = true;
            return;
        }
        if ((size_t)k < o->cap - o->n) {
            o->n += (size_t)k;
            return;
        }
        size_t cap = o->cap * 2 + (size_t)k;
        char *np = realloc(o->p, cap);
        if (!np) {
            o->oom = true;
            return;
        }
        o->p = np;
        o->cap = cap;
    }
}

static void family(out *o, const char *name, const char *type, const char *help)
{
    outf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A histogram's samples, without the family's header; LABELS ("" or 'a="b",...') go before le. */
static void hist_samples(out *o, const char *name, const char *labels, const histogram *h)
{
    const char *sep = *labels ? "," : "";
    uint64_t cum = 0;
    for (size_t i = 0; i < h->n_bounds; i++) {
        cum += h->counts[i];
        outf(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, h->bounds[i], (unsigned long long)cum);
    }
    cum += h->counts[h->n_bounds];
    outf(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)cum);
    if (*labels)
        outf(o, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, labels, h->sum, name, labels,
             (unsigned long long)h->count);
    else
        outf(o, "%s_sum %.9g\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
}

static void hist_render_labels(out *o, const char *name, const char *help, const char *labels, const histogram *h)
{
    family(o, name, "histogram", help);
    hist_samples(o, name, labels, h);
}

/* S as a label value (backslash, quote and newline escaped) into BUF. */
static const char *label_value(char *buf, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s && n + 3 < cap; s++) {
        if (*s == '\\' || *s == '"' || *s == '\n')
            buf[n++] = '\\';
        buf[n++] = *s == '\n' ? 'n' : *s;
    }
    buf[n] = '\0';
    return buf;
}

/* The key rows to render: every key's, or before any request one row of zeros. */
static const key_row *key_rows(const srv_metrics *m, size_t *n)
{
    *n = m->n_keys ? m->n_keys : 1;
    return m->n_keys ? m->keys : &m->none;
}

/* ',key_name="NAME"' for a key's row into BUF, "" for the row of requests without keys. */
static const char *key_label(char *buf, size_t cap, const key_row *row)
{
    char v[2 * KEY_NAME_MAX + 2];
    if (!row->key[0])
        return "";
    snprintf(buf, cap, ",key_name=\"%s\"", label_value(v, sizeof v, row->key));
    return buf;
}

/* Request-level histogram H, a series set per API key name. LABELS: model_name. */
static void hist_render_keys(out *o, const char *name, const char *help, const char *labels, const srv_metrics *m,
                             request_hist h)
{
    size_t n;
    const key_row *rows = key_rows(m, &n);
    char key[2 * KEY_NAME_MAX + 16], all[1024];
    family(o, name, "histogram", help);
    for (size_t i = 0; i < n; i++) {
        snprintf(all, sizeof all, "%s%s", labels, key_label(key, sizeof key, &rows[i]));
        hist_samples(o, name, all, &rows[i].h[h]);
    }
}

/* The token counters, a series per API key name. LABELS: model_name. */
static void render_tokens(out *o, const srv_metrics *m, const char *labels)
{
    size_t n;
    const key_row *rows = key_rows(m, &n);
    char key[2 * KEY_NAME_MAX + 16];
    family(o, "qwen3d_prompt_tokens_total", "counter", "Prompt tokens prefilled, by API key name.");
    for (size_t i = 0; i < n; i++)
        outf(o, "qwen3d_prompt_tokens_total{%s%s} %llu\n", labels, key_label(key, sizeof key, &rows[i]),
             (unsigned long long)rows[i].prompt_tokens);
    family(o, "qwen3d_generation_tokens_total", "counter", "Tokens generated, by API key name.");
    for (size_t i = 0; i < n; i++)
        outf(o, "qwen3d_generation_tokens_total{%s%s} %llu\n", labels, key_label(key, sizeof key, &rows[i]),
             (unsigned long long)rows[i].generation_tokens);
}

/* The request-level families dashboards read (see the README's table of vLLM names). LABELS: model_name. */
static void render_requests(out *o, const srv_metrics *m, const char *labels)
{
    family(o, "qwen3d_request_finished_total", "counter",
           "Generation requests ended, by finish reason (cancelled: the client left; error: the server failed "
           "or stopped) and API key name.");
    size_t n;
    const key_row *rows = key_rows(m, &n);
    char key[2 * KEY_NAME_MAX + 16];
    for (size_t i = 0; i < n; i++)
        for (size_t r = 0; r < N_REASONS; r++)
            outf(o, "qwen3d_request_finished_total{%s,finished_reason=\"%s\"%s} %llu\n", labels, REASONS[r],
                 key_label(key, sizeof key, &rows[i]), (unsigned long long)rows[i].finished[r]);
    hist_render_keys(o, "qwen3d_request_prompt_tokens", "Prompt tokens of each request that got a session.", labels,
                     m, RH_PROMPT_LEN);
    hist_render_keys(o, "qwen3d_request_generation_tokens", "Tokens generated by each request that got a session.",
                     labels, m, RH_GEN_LEN);
    hist_render_keys(o, "qwen3d_request_decode_seconds",
                     "Decode time of each request: from its first generated token to its last.", labels, m, RH_DECODE);
    if (m->kv_budget) {
        family(o, "qwen3d_kv_cache_usage_ratio", "gauge",
               "KV cache committed by active sessions over the KV budget (--kv-budget), 0 to 1.");
        outf(o, "qwen3d_kv_cache_usage_ratio{%s} %.6f\n", labels, (double)m->kv_bytes / (double)m->kv_budget);
    }
}

/* Resident set size from /proc/self/statm (pages), 0 if unreadable. */
static uint64_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, rss = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%llu %llu", &size, &rss) != 2)
        rss = 0;
    fclose(f);
    return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}

static double cpu_seconds(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

char *srv_metrics_render(srv_metrics *m, size_t *len)
{
    out o = {.cap = 8192};
    o.p = malloc(o.cap);
    if (!o.p)
        return NULL;
    o.p[0] = '\0';
    pthread_mutex_lock(&m->mu);
    /* Every qwen3d_ series carries the served model's name, as vLLM's do (design.md section 3). */
    char model[600], ml[640], kind[680];
    label_value(model, sizeof model, m->model_name);
    snprintf(ml, sizeof ml, "model_name=\"%s\"", model);
    family(&o, "qwen3d_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (int ep = 0; ep < SRV_EP_COUNT; ep++)
        for (size_t i = 0; i < MAX_CODES && m->requests[ep][i].code; i++)
            outf(&o, "qwen3d_requests_total{%s,endpoint=\"%s\",code=\"%d\"} %llu\n", ml, srv_endpoint_name(ep),
                 m->requests[ep][i].code, (unsigned long long)m->requests[ep][i].n);
    render_requests(&o, m, ml);
    render_tokens(&o, m, ml);
    const struct {
        const char *name, *help;
        request_hist h;
    } request_hists[] = {
        {"qwen3d_time_to_first_token_seconds",
         "Time from the request's arrival (its last byte) to the first generated token.", RH_TTFT},
        {"qwen3d_inter_token_latency_seconds", "Time between consecutive tokens of one request.", RH_ITL},
        {"qwen3d_request_duration_seconds",
         "Duration of generation requests, from their arrival to the end of the response.", RH_DURATION},
        {"qwen3d_queue_wait_seconds", "Time requests waited in the queue before getting a session.", RH_QUEUE},
        {"qwen3d_prefill_seconds", "Time from getting a session to the first generated token (the prompt's prefill).",
         RH_PREFILL},
    };
    for (size_t i = 0; i < sizeof request_hists / sizeof *request_hists; i++)
        hist_render_keys(&o, request_hists[i].name, request_hists[i].help, ml, m, request_hists[i].h);
    const struct {
        const char *name, *help;
        const histogram *h;
    } hists[] = {
        {"qwen3d_batch_size",
         "Sessions that decoded a token in one step of the model (0: a step of prompt tokens only).", &m->batch},
        {"qwen3d_prefill_tokens_per_step",
         "Prompt tokens fed in one step of the model, beside its decode rows (0: a decode-only step).",
         &m->prefill_step},
    };
    for (size_t i = 0; i < sizeof hists / sizeof *hists; i++)
        hist_render_labels(&o, hists[i].name, hists[i].help, ml, hists[i].h);
    family(&o, "qwen3d_step_seconds", "histogram",
           "Duration of one step of the model: kind \"decode\", decode rows only; \"prompt\", prompt tokens fed too.");
    snprintf(kind, sizeof kind, "%s,kind=\"decode\"", ml);
    hist_samples(&o, "qwen3d_step_seconds", kind, &m->step_decode);
    snprintf(kind, sizeof kind, "%s,kind=\"prompt\"", ml);
    hist_samples(&o, "qwen3d_step_seconds", kind, &m->step_prompt);
    family(&o, "qwen3d_sessions_active", "gauge", "Sessions generating now.");
    outf(&o, "qwen3d_sessions_active{%s} %lld\n", ml, (long long)m->sessions_active);
    family(&o, "qwen3d_requests_waiting", "gauge", "Requests queued for a session.");
    outf(&o, "qwen3d_requests_waiting{%s} %lld\n", ml, (long long)m->requests_waiting);
    family(&o, "qwen3d_kv_cache_bytes", "gauge", "Memory committed to the KV caches of active sessions.");
    outf(&o, "qwen3d_kv_cache_bytes{%s} %llu\n", ml, (unsigned long long)m->kv_bytes);
    const eng_prefix_stats *pf = &m->prefix;
    const struct {
        const char *name, *type, *help;
        uint64_t v;
    } prefix[] = {
        {"qwen3d_prefix_cache_hits_total", "counter", "Requests that reused a cached prompt prefix.", pf->hits},
        {"qwen3d_prefix_cache_misses_total", "counter", "Requests that found no cached prompt prefix to reuse.",
         pf->misses},
        {"qwen3d_prefix_cache_tokens_total", "counter", "Prompt tokens reused from the prefix cache, not prefilled.",
         pf->tokens},
        {"qwen3d_prefix_cache_evictions_total", "counter", "Prefix cache entries dropped to keep within its budget.",
         pf->evictions},
        {"qwen3d_prefix_cache_bytes", "gauge", "Memory committed to the prefix cache's entries.", pf->bytes},
    };
    for (size_t i = 0; i < sizeof prefix / sizeof *prefix; i++) {
        family(&o, prefix[i].name, prefix[i].type, prefix[i].help);
        outf(&o, "%s{%s} %llu\n", prefix[i].name, ml, (unsigned long long)prefix[i].v);
    }
    family(&o, "qwen3d_model_weight_bytes", "gauge", "Resident bytes of the prepared model weights.");
    outf(&o, "qwen3d_model_weight_bytes{%s} %llu\n", ml, (unsigned long long)m->weight_bytes);
    family(&o, "qwen3d_model_load_seconds", "gauge", "Time the model took to load and prepare.");
    outf(&o, "qwen3d_model_load_seconds{%s} %.6f\n", ml, m->load_seconds);
    family(&o, "qwen3d_build_info", "gauge", "Build information; the value is always 1.");
    outf(&o, "qwen3d_build_info{version=\"%s\",%s} 1\n", m->version, ml);
    double start = m->start_time;
    pthread_mutex_unlock(&m->mu);

    family(&o, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
    outf(&o, "process_resident_memory_bytes %llu\n", (unsigned long long)resident_bytes());
    family(&o, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
    outf(&o, "process_cpu_seconds_total %.6f\n", cpu_seconds());
    family(&o, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
    outf(&o, "process_start_time_seconds %.3f\n", start);
    if (o.oom) {
        free(o.p);
        return NULL;
    }
    if (len)
        *len = o.n;
    return o.p;
}
