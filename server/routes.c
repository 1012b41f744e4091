/*
 * routes: the endpoints of the HTTP API (see routes.h).
 *
 * Each request gets a `call` holding its endpoint, id and, for generations,
 * the job and, per choice (n, best_of), its stream renderer or its kept
 * text. The job's callback relays text as it arrives; srv_routes_on_done()
 * is the single place where a request ends.
 *
 * A generation's prompt is chat-templated and tokenized on libuv's work pool
 * (tokenize_work), not on the loop: a prompt of megabytes takes a second or
 * more, and the loop serves every other connection meanwhile. The call then
 * lives until the after-work callback (tokenized), which frees it itself
 * when the request ended in the meantime.
 *
 * Prompts tokenize in parallel, each work-pool thread with an encoder of
 * its own taken from a small free list (encoders hold what an encoding
 * writes; the tokenizer itself is only read), so a short prompt does not
 * wait behind a long one.
 *
 * Threads: loop thread only, except tokenize_work, which touches only its
 * call's request, ids and error, the read-only options, model info and
 * tokenizer, and the encoder free list under enc_mu.
 */
#include "server/routes.h"

#include <ctype.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api/chat_template.h"
#include "api/error.h"
#include "api/parse.h"
#include "api/render.h"
#include "server/error.h"
#include "server/fingerprint.h"
#include "server/log.h"
#include "server/sse.h"

#define JSON_TYPE "application/json"
#define METRICS_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* max_tokens of a completion request that does not say (OpenAI's default). */
#define DEFAULT_COMPLETION_TOKENS 16
/* A client's X-Request-Id: at most this many characters from [A-Za-z0-9._:-]. */
#define REQ_ID_MAX 128
/* What a CORS preflight allows, and how long a browser may keep the answer. */
#define CORS_METHODS "GET, POST, OPTIONS"
#define CORS_HEADERS "Authorization, Content-Type, X-Request-Id"
#define CORS_MAX_AGE "600"
#define ENC_KEEP 16 /* idle encoders kept (libuv's pool has 4 threads unless UV_THREADPOOL_SIZE says more) */

struct srv_routes {
    srv_routes_opts o;
    char *model_name;
    srv_keys *keys;           /* NULL: no authentication */
    uv_loop_t *loop;
    srv_sched *sched;
    srv_metrics *metrics;
    bool loaded, stopping, draining;
    int tokenizing;           /* calls on the work pool; the queue closes for draining when none is left */
    pthread_mutex_t enc_mu;   /* guards the encoder free list */
    eng_tok_enc *enc_free[ENC_KEEP]; /* idle encoders, one per work-pool thread that tokenized */
    int n_enc_free;
    srv_model_info info;
    eng_sampling defaults;    /* for sampling fields a request leaves out */
    const char *defaults_source; /* "model" or "openai" */
    int64_t created;          /* the model's "created" in /v1/models */
    uint64_t id_base, id_seq;
    char fingerprint[SRV_FINGERPRINT_MAX]; /* system_fingerprint of responses */
    char **origins;           /* --cors-origin entries; "*" allows any */
    size_t n_origins;
};

/* A request's choices are a job's (the update carries them all). */
_Static_assert(API_MAX_CHOICES <= SRV_MAX_CHOICES, "a request's choices must fit a job's");

/* One choice's output on the loop side (n, best_of). */
typedef struct call_choice {
    api_stream *st;           /* streaming: its chunks */
    bool ended;               /* streaming: its final chunk went out */
    char *text;               /* non-streaming (or --log-prompts): the whole text so far */
    size_t len, cap;
    eng_token_lp *lps;        /* non-streaming: the logprobs so far, the echoed prompt's first */
    size_t n_lps, cap_lps, n_prompt_lps;
} call_choice;

typedef struct call {
    srv_routes *rt;
    srv_req *r;
    srv_endpoint ep;
    char id[48];
    char req_id[REQ_ID_MAX + 1]; /* the client's X-Request-Id, or id: echoed and logged */
    bool has_key;             /* authorized by one of the API keys: */
    srv_key_id key;           /* its name (logs, metrics) and prefix-cache scope */
    double t_received;        /* srv_now() when the request had fully arrived: latencies count from here */
    /* generations */
    api_kind kind;
    bool stream, include_usage, finished;
    bool log_prompts;         /* --log-prompts when the request arrived (SIGHUP may change it) */
    srv_job *job;
    int n_out;                /* choices returned (n) */
    int n_cand;               /* choices generated (best_of; n_out when absent) */
    call_choice ch[API_MAX_CHOICES];
    int64_t created;
    bool text_lost;           /* out of memory while keeping the text (or its logprobs) */
    /* logprobs and echo */
    bool logprobs, echo, echo_sent;
    bool tool_calls;          /* the answer's <tool_call> blocks become tool_calls (api_meta) */
    bool called;              /* and it made one (finish_reason tool_calls) */
    uint64_t tool_seed;
    int top_logprobs;
    char *echo_text;          /* the prompt as text, with echo */
    size_t echo_len;
    int64_t n_prompt, n_generated, n_cached;
    srv_finish finish;
    double ttft_ms;
    /* generations, from parsing until the job is submitted */
    api_request *q;
    uv_work_t work;           /* tokenize_work */
    bool tokenizing;          /* on the work pool: `tokenized` frees the call if it is gone */
    bool gone;                /* the request ended while tokenizing */
    eng_tok *tok;
    eng_tok_ids ids;
    eng_grammar *grammar;     /* response_format's, until the job takes it */
    api_error err;
    int rc;
    double tokenize_s;        /* chat template and tokenizer, on the work pool */
} call;

static void free_origins(srv_routes *rt)
{
    for (size_t i = 0; i < rt->n_origins; i++)
        free(rt->origins[i]);
    free(rt->origins);
    rt->origins = NULL;
    rt->n_origins = 0;
}

/* The comma-separated LIST (checked by the options) as rt->origins. */
static int set_origins(srv_routes *rt, const char *list)
{
    free_origins(rt);
    if (!list)
        return 0;
    size_t n = 1;
    for (const char *p = list; *p; p++)
        n += *p == ',';
    if (!(rt->origins = calloc(n, sizeof *rt->origins)))
        return -1;
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        const char *e = p;
        while (len && isspace((unsigned char)*e))
            e++, len--;
        while (len && isspace((unsigned char)e[len - 1]))
            len--;
        if (!(rt->origins[rt->n_origins++] = strndup(e, len)))
            return -1;
        p = strchr(p, ',');
        if (!p)
            return 0;
    }
}

srv_routes *srv_routes_new(const srv_routes_opts *opts, uv_loop_t *loop, srv_sched *sched, srv_metrics *metrics)
{
    srv_routes *rt = calloc(1, sizeof *rt);
    if (!rt)
        return NULL;
    pthread_mutex_init(&rt->enc_mu, NULL);
    rt->o = *opts;
    rt->model_name = strdup(opts->model_name);
    rt->keys = opts->keys;
    rt->o.keys = NULL;
    if (!rt->model_name) {
        srv_routes_free(rt);
        return NULL;
    }
    if (set_origins(rt, opts->cors_origins) != 0) {
        srv_routes_free(rt);
        return NULL;
    }
    rt->loop = loop;
    rt->sched = sched;
    rt->metrics = metrics;
    rt->created = (int64_t)time(NULL);
    if (getrandom(&rt->id_base, sizeof rt->id_base, 0) != (ssize_t)sizeof rt->id_base)
        rt->id_base = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull;
    return rt;
}

void srv_routes_free(srv_routes *rt)
{
    if (!rt)
        return;
    for (int i = 0; i < rt->n_enc_free; i++)
        eng_tok_enc_free(rt->enc_free[i]);
    pthread_mutex_destroy(&rt->enc_mu);
    free_origins(rt);
    free(rt->model_name);
    srv_keys_free(rt->keys);
    free(rt);
}

int srv_routes_set_loaded(srv_routes *rt, const srv_model_info *info, const char *fingerprint, char *err,
                          size_t errlen)
{
    eng_sampling d;
    const char *source = "openai";
    if (rt->o.openai_sampling || !info->config || !info->config->search.present)
        eng_sampling_default(&d);
    else if (eng_genai_config_sampling(info->config, &d, err, errlen) != 0)
        return -1;
    else
        source = "model";
    srv_log(SRV_LOG_INFO, "sampling_defaults",
            "source=%s temperature=%g top_p=%g top_k=%d min_p=%g presence_penalty=%g frequency_penalty=%g "
            "repetition_penalty=%g",
            source, (double)d.temperature, (double)d.top_p, (int)d.top_k, (double)d.min_p,
            (double)d.presence_penalty, (double)d.frequency_penalty, (double)d.repetition_penalty);
    rt->defaults = d;
    rt->defaults_source = source;
    rt->loaded = true;
    rt->info = *info;
    snprintf(rt->fingerprint, sizeof rt->fingerprint, "%s", fingerprint);
    return 0;
}

int srv_routes_reload(srv_routes *rt, const srv_routes_reload_opts *o)
{
    char **origins = rt->origins;
    size_t n_origins = rt->n_origins;
    rt->origins = NULL;
    rt->n_origins = 0;
    if (set_origins(rt, o->cors_origins) != 0) {
        free_origins(rt);
        rt->origins = origins;
        rt->n_origins = n_origins;
        return -1;
    }
    for (size_t i = 0; i < n_origins; i++)
        free(origins[i]);
    free(origins);
    if (o->keys) {
        srv_keys_free(rt->keys);
        rt->keys = o->keys;
    }
    rt->o.log_prompts = o->log_prompts;
    rt->o.request_timeout = o->request_timeout;
    rt->o.max_tokens = o->max_tokens;
    return 0;
}

void srv_routes_set_stopping(srv_routes *rt) { rt->stopping = true; }

/* Requests being tokenized were accepted before the drain: the scheduler's
 * queue closes once they are submitted, as it would have with tokenization
 * on the loop. */
void srv_routes_set_draining(srv_routes *rt)
{
    rt->stopping = rt->draining = true;
    if (!rt->tokenizing)
        srv_sched_close_queue(rt->sched);
}

/* A 64-bit mix of the id base and a counter: unique per process, not guessable. */
static uint64_t next_random(srv_routes *rt)
{
    uint64_t z = rt->id_base + 0x9e3779b97f4a7c15ull * ++rt->id_seq;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- responses ------------------------------------------------------------- */

static void respond_json(call *c, int status, const char *json)
{
    srv_req_respond(c->r, status, JSON_TYPE, json, strlen(json));
}

/*
 * A 503 promises that the request did not run, so a balancer may send it to
 * another replica (deploy/nginx/qwen3d.conf retries 503s): every 503 comes
 * before a request gets a slot. A request that had one and was then cut
 * (drain deadline, deadline during prefill) answers `status` 500 with the
 * same error instead; 0 keeps the error's own status.
 */
static void respond_error_status(call *c, const api_error *e, int status)
{
    if (!status)
        status = api_error_status(e->code);
    char *body = api_error_body(e);
    if (status == 503 && (e->code == API_EOVERLOADED || e->code == API_ELOADING))
        srv_req_add_header(c->r, "Retry-After", "1");
    if (status == 401)
        srv_req_add_header(c->r, "WWW-Authenticate", "Bearer");
    respond_json(c, status, body ? body : "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                                          "\"param\":null,\"code\":\"out_of_memory\"}}");
    free(body);
}

static void respond_error(call *c, const api_error *e)
{
    respond_error_status(c, e, 0);
}

static void fail(call *c, int code, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void fail(call *c, int code, const char *param, const char *fmt, ...)
{
    api_error e;
    api_error_set(&e, code, param, NULL);
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e.message, sizeof e.message, fmt, ap);
        va_end(ap);
    }
    respond_error(c, &e);
}

/* ---- simple endpoints ------------------------------------------------------ */

/*
 * /health/live: the loop answers (it does, here) and the compute thread is
 * not stuck in a step, the watchdog's test. /health/ready: besides, the
 * model is loaded, SIGTERM has not come and the queue has room, so a
 * balancer may send work. /health: 200 once the model is loaded, 503
 * before, from SIGTERM on and while the compute thread is stuck.
 */
static void do_health(call *c)
{
    srv_routes *rt = c->rt;
    srv_sched_beat b;
    srv_sched_heartbeat(rt->sched, &b);
    if (b.stuck) {
        /* No API error code says it; the body has the API's error shape. */
        char body[300];
        snprintf(body, sizeof body,
                 "{\"error\":{\"message\":\"the compute thread has been in one step for %.1f s, longer than its "
                 "bound of %.1f s\",\"type\":\"server_error\",\"param\":null,\"code\":\"compute_stuck\"}}",
                 b.step_s, b.bound_s);
        respond_json(c, 503, body);
    } else if (c->ep == SRV_EP_HEALTH_LIVE) {
        respond_json(c, 200, "{\"status\":\"ok\"}");
    } else if (rt->stopping) {
        fail(c, API_ESHUTDOWN, NULL, NULL);
    } else if (!rt->loaded) {
        fail(c, API_ELOADING, NULL, NULL);
    } else if (c->ep == SRV_EP_HEALTH_READY && srv_sched_full(rt->sched)) {
        fail(c, API_EOVERLOADED, NULL, "the request queue is full; this server takes no more work now");
    } else {
        respond_json(c, 200, "{\"status\":\"ok\"}");
    }
}

static void do_metrics(call *c)
{
    size_t len = 0;
    char *text = srv_metrics_render(c->rt->metrics, &len);
    if (!text) {
        fail(c, API_ENOMEM, NULL, NULL);
        return;
    }
    srv_req_respond(c->r, 200, METRICS_TYPE, text, len);
    free(text);
}

static void do_models(call *c)
{
    srv_routes *rt = c->rt;
    char *body = api_render_models(rt->model_name, rt->created, rt->loaded ? rt->info.ctx : 0,
                                   rt->loaded ? &rt->defaults : NULL, rt->defaults_source);
    if (!body) {
        fail(c, API_ENOMEM, NULL, NULL);
        return;
    }
    respond_json(c, 200, body);
    free(body);
}

/* ---- generations ------------------------------------------------------------ */

static const char *finish_reason(srv_finish f)
{
    return f == SRV_FINISH_STOP ? "stop" : "length";
}

static void log_text(call *c, const char *what, const char *text, size_t len)
{
    char q[1500];
    srv_log(SRV_LOG_INFO, what, "id=%s text=%s", c->id, srv_log_quote(q, sizeof q, text, len));
}

static void flush_stream(call *c, api_stream *st)
{
    char *chunk;
    while ((chunk = api_stream_next(st))) {
        srv_sse_event(c->r, chunk);
        free(chunk);
    }
}

/* A job that ended without a normal finish: the error the client sees. */
static void job_error(const srv_job_update *u, api_error *e)
{
    if (u->finish == SRV_FINISH_SHUTDOWN)
        api_error_set(e, API_ESHUTDOWN, NULL, "the server is shutting down; the generation was cut short");
    else if (u->finish == SRV_FINISH_DEADLINE)
        api_error_set(e, API_ETIMEOUT, NULL, "the request's deadline passed before generation started");
    else
        api_error_set(e, API_EINTERNAL, NULL, "generation failed: %s", u->message[0] ? u->message : "internal error");
}

/* Appends LEN bytes to a choice's whole text. */
static void keep_text(call *c, call_choice *ch, const char *text, size_t len)
{
    if (!len)
        return;
    if (ch->len + len + 1 > ch->cap) {
        size_t cap = ch->cap ? ch->cap : 256;
        while (cap < ch->len + len + 1)
            cap *= 2;
        char *t = realloc(ch->text, cap);
        if (!t) {
            c->text_lost = true;
            return;
        }
        ch->text = t;
        ch->cap = cap;
    }
    memcpy(ch->text + ch->len, text, len);
    ch->len += len;
    ch->text[ch->len] = '\0';
}

/* Appends N logprobs to a choice's own (non-streaming responses). */
static void keep_lps(call *c, call_choice *ch, const eng_token_lp *lps, size_t n)
{
    if (!n)
        return;
    if (ch->n_lps + n > ch->cap_lps) {
        size_t cap = ch->cap_lps ? ch->cap_lps : 64;
        while (cap < ch->n_lps + n)
            cap *= 2;
        eng_token_lp *l = realloc(ch->lps, cap * sizeof *l);
        if (!l) {
            c->text_lost = true;
            return;
        }
        ch->lps = l;
        ch->cap_lps = cap;
    }
    memcpy(ch->lps + ch->n_lps, lps, n * sizeof *lps);
    ch->n_lps += n;
}

/* The echoed prompt leads every choice's text: as soon as its logprobs are in, when they were asked for. */
static void echo_prompt(call *c, const srv_job_update *u, const api_logprobs *how)
{
    if (!c->echo || c->echo_sent || (c->logprobs && !u->prompt_lps))
        return;
    c->echo_sent = true;
    size_t n = c->logprobs ? (size_t)u->n_prompt : 0;
    for (int i = 0; i < c->n_cand; i++) {
        call_choice *ch = &c->ch[i];
        if (c->stream) {
            api_stream_logprobs(ch->st, how, u->prompt_lps, n, true);
            api_stream_text(ch->st, c->echo_text, c->echo_len);
            continue;
        }
        keep_text(c, ch, c->echo_text, c->echo_len);
        keep_lps(c, ch, u->prompt_lps, n);
        ch->n_prompt_lps = n;
    }
}

/* A choice that ended by itself (or by a deadline, after it produced text). */
static bool normal_finish(srv_finish f, int64_t n_generated)
{
    return f == SRV_FINISH_STOP || f == SRV_FINISH_LENGTH || (f == SRV_FINISH_DEADLINE && n_generated > 0);
}

/*
 * One choice's new output: streamed, or kept for the body (and, with
 * --log-prompts, the log). A streamed choice that ends before the others
 * ends its own stream now; the last one carries the usage and timings
 * (end_streams).
 */
static void choice_output(call *c, int i, const srv_choice_update *cu, const api_logprobs *how, bool done)
{
    call_choice *ch = &c->ch[i];
    if (c->stream) {
        if (c->logprobs)
            api_stream_logprobs(ch->st, how, cu->lps, cu->n_lps, false);
        if (cu->len)
            api_stream_text(ch->st, cu->text, cu->len);
        if (!done && !ch->ended && normal_finish(cu->finish, cu->n_generated)) {
            api_stream_end(ch->st, finish_reason(cu->finish), NULL, NULL);
            ch->ended = true;
        }
        flush_stream(c, ch->st);
    } else if (c->logprobs) {
        keep_lps(c, ch, cu->lps, cu->n_lps);
    }
    if (!c->stream || c->log_prompts)
        keep_text(c, ch, cu->text, cu->len);
}

/* The final chunks of the streams still open, the last with USAGE and T. */
static void end_streams(call *c, const srv_job_update *u, const api_usage *usage, const api_timings *t)
{
    int last = -1;
    for (int i = 0; i < c->n_cand; i++)
        if (!c->ch[i].ended)
            last = i;
    for (int i = 0; i < c->n_cand; i++) {
        call_choice *ch = &c->ch[i];
        if (ch->ended)
            continue;
        api_stream_end(ch->st, finish_reason(u->choices[i].finish), i == last ? usage : NULL, i == last ? t : NULL);
        ch->ended = true;
        flush_stream(c, ch->st);
    }
}

/* Whether a choice of a finished request made a tool call (request_finished_total's "tool_calls"). */
static bool made_tool_call(const call *c)
{
    for (int i = 0; c->tool_calls && i < c->n_cand; i++) {
        const call_choice *ch = &c->ch[i];
        if (c->stream ? api_stream_tool_calls(ch->st) > 0 : ch->text && api_text_tool_calls(ch->text, ch->len) > 0)
            return true;
    }
    return false;
}

/*
 * The order in which candidates become choices: by index, or with best_of
 * the N_OUT with the highest cumulative log-probability, best first (the
 * lower index first on a tie), as OpenAI returns them.
 */
static void choice_order(const srv_job_update *u, int n_cand, int n_out, int *order)
{
    for (int i = 0; i < n_cand; i++)
        order[i] = i;
    if (n_out == n_cand)
        return;
    for (int i = 1; i < n_cand; i++)
        for (int k = i; k > 0 && u->choices[order[k]].cum_logprob > u->choices[order[k - 1]].cum_logprob; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
}

/* The non-streaming body of a finished request: its n choices (best_of's best), each with its logprobs. */
static char *render_choices(call *c, const srv_job_update *u, const api_usage *usage, const api_timings *t)
{
    int order[API_MAX_CHOICES];
    api_choice out[API_MAX_CHOICES];
    api_logprobs lp[API_MAX_CHOICES];
    choice_order(u, c->n_cand, c->n_out, order);
    for (int i = 0; i < c->n_out; i++) {
        const call_choice *ch = &c->ch[order[i]];
        lp[i] = (api_logprobs){.tok = c->tok, .top = c->top_logprobs, .lps = ch->lps, .n = ch->n_lps,
                               .n_prompt = ch->n_prompt_lps};
        out[i] = (api_choice){ch->text ? ch->text : "", ch->len, finish_reason(u->choices[order[i]].finish),
                              c->logprobs ? &lp[i] : NULL};
    }
    api_meta meta = {.id = c->id, .created = c->created, .model = c->rt->model_name,
                     .fingerprint = c->rt->fingerprint, .tool_calls = c->tool_calls, .tool_seed = c->tool_seed};
    return api_render_choices(c->kind, &meta, out, (size_t)c->n_out, usage, t);
}

static void on_job(srv_job *job, void *user)
{
    call *c = user;
    srv_job_update u;
    srv_job_take(job, &u);
    c->n_prompt = u.n_prompt;
    c->n_generated = u.n_generated;
    c->n_cached = u.n_cached;
    if (u.ttft_ms > 0)
        c->ttft_ms = u.ttft_ms;
    api_logprobs how = {.tok = c->tok, .top = c->top_logprobs};
    echo_prompt(c, &u, &how);
    for (int i = 0; i < u.n_choices && i < c->n_cand; i++)
        choice_output(c, i, &u.choices[i], &how, u.done);
    srv_job_update_clear(&u);
    if (!u.done)
        return;
    c->finished = true;
    c->finish = u.finish;
    for (int i = 0; c->log_prompts && i < c->n_cand; i++)
        log_text(c, "completion_text", c->ch[i].text ? c->ch[i].text : "", c->ch[i].len);
    api_usage usage = {u.n_prompt, u.n_generated, u.n_cached};
    api_timings t = {u.queue_ms, u.prompt_ms, u.ttft_ms, u.decode_tokens_per_s, u.tpot_ms};
    /* A deadline that passed mid-generation ends the text like max_tokens does. */
    bool normal = normal_finish(u.finish, u.n_generated);
    if (c->stream) {
        if (normal) {
            end_streams(c, &u, &usage, &t);
            c->called = made_tool_call(c);
        } else {
            api_error e;
            job_error(&u, &e);
            char *body = api_error_body(&e);
            if (body)
                srv_sse_event(c->r, body);
            free(body);
        }
        srv_sse_done(c->r);
        return;
    }
    if (!normal || c->text_lost) {
        api_error e;
        if (c->text_lost)
            api_error_set(&e, API_ENOMEM, NULL, NULL);
        else
            job_error(&u, &e);
        respond_error_status(c, &e, u.started && api_error_status(e.code) == 503 ? 500 : 0);
        return;
    }
    c->called = made_tool_call(c);
    char *body = render_choices(c, &u, &usage, &t);
    if (!body) {
        fail(c, API_ENOMEM, NULL, NULL);
        return;
    }
    respond_json(c, 200, body);
    free(body);
}

/*
 * Whose cached prompt prefixes C's job may reuse and add to (the prefix
 * cache's scope; see the README's cross-tenant policy): the API key's
 * scope (its name, or a salted digest of an unnamed key), so no tenant's
 * prefix speeds up, or is read by, another; "" without keys.
 */
static const char *job_scope(const call *c)
{
    return c->has_key ? c->key.scope : "";
}

/* Any thread: an idle encoder, or a new one (NULL when out of memory). */
static eng_tok_enc *take_encoder(srv_routes *rt)
{
    eng_tok_enc *enc = NULL;
    pthread_mutex_lock(&rt->enc_mu);
    if (rt->n_enc_free)
        enc = rt->enc_free[--rt->n_enc_free];
    pthread_mutex_unlock(&rt->enc_mu);
    return enc ? enc : eng_tok_enc_new();
}

/* Any thread: keeps ENC for the next prompt, or frees it when ENC_KEEP are idle already. */
static void return_encoder(srv_routes *rt, eng_tok_enc *enc)
{
    if (!enc)
        return;
    pthread_mutex_lock(&rt->enc_mu);
    if (rt->n_enc_free < ENC_KEEP) {
        rt->enc_free[rt->n_enc_free++] = enc;
        enc = NULL;
    }
    pthread_mutex_unlock(&rt->enc_mu);
    eng_tok_enc_free(enc);
}

/* The prompt of a parsed request as token ids; fills E on failure. */
static int prompt_ids(call *c, const api_request *q, eng_tok_ids *ids, api_error *e)
{
    srv_routes *rt = c->rt;
    if (q->kind == API_KIND_COMPLETION && q->prompt_ids) {
        for (size_t i = 0; i < q->n_prompt_ids; i++)
            if (q->prompt_ids[i] >= rt->info.vocab) {
                char p[48];
                snprintf(p, sizeof p, "prompt[%zu]", i);
                return api_error_set(e, API_EPROMPT, p, "token id %" PRId32 " is outside the vocabulary [0, %" PRId64 ")",
                                     q->prompt_ids[i], rt->info.vocab);
            }
        ids->ids = malloc((q->n_prompt_ids ? q->n_prompt_ids : 1) * sizeof *ids->ids);
        if (!ids->ids)
            return api_error_set(e, API_ENOMEM, NULL, NULL);
        memcpy(ids->ids, q->prompt_ids, q->n_prompt_ids * sizeof *ids->ids);
        ids->n = ids->cap = q->n_prompt_ids;
        return 0;
    }
    char *rendered = NULL;
    const char *text = q->prompt;
    size_t len = q->prompt_len;
    if (q->kind == API_KIND_CHAT) {
        int rc = api_request_render(q, c->ep == SRV_EP_TOKENIZE ? q->add_generation_prompt : true, &rendered, &len, e);
        if (rc)
            return rc;
        text = rendered;
    }
    if (c->log_prompts)
        log_text(c, "prompt_text", text, len);
    eng_tok_enc *enc = take_encoder(rt);
    int rc = enc ? eng_tok_encode_with(c->tok, enc, text, len, 0, ids) : ENG_TOK_ENOMEM;
    return_encoder(rt, enc);
    free(rendered);
    if (rc)
        return api_error_set(e, rc == ENG_TOK_ENOMEM ? API_ENOMEM : API_EPROMPT,
                             q->kind == API_KIND_CHAT ? "messages" : "prompt", "cannot tokenize the prompt: %s",
                             eng_tok_strerror(rc));
    return 0;
}

/* The prompt as the echoed text: as sent, or its ids decoded (special tokens included). */
static int echo_text(call *c, const api_request *q, api_error *e)
{
    if (q->prompt) {
        c->echo_text = malloc(q->prompt_len + 1);
        if (!c->echo_text)
            return api_error_set(e, API_ENOMEM, NULL, NULL);
        memcpy(c->echo_text, q->prompt, q->prompt_len + 1);
        c->echo_len = q->prompt_len;
        return 0;
    }
    eng_tok_text t = {0};
    int rc = eng_tok_decode(c->tok, q->prompt_ids, q->n_prompt_ids, false, &t);
    /* ids the model has but the tokenizer does not (a padded vocabulary) echo as nothing */
    for (size_t i = 0; rc == ENG_TOK_EBADID && i < q->n_prompt_ids; i++) {
        int r1 = eng_tok_decode(c->tok, &q->prompt_ids[i], 1, false, &t);
        if (r1 == ENG_TOK_ENOMEM)
            rc = r1;
        else if (i + 1 == q->n_prompt_ids)
            rc = 0;
    }
    if (rc) {
        eng_tok_text_free(&t);
        return api_error_set(e, API_ENOMEM, NULL, NULL);
    }
    c->echo_text = t.s ? t.s : strdup("");
    c->echo_len = t.len;
    return c->echo_text ? 0 : api_error_set(e, API_ENOMEM, NULL, NULL);
}

/* The per-choice output of C. */
static void call_choices_free(call *c)
{
    for (int i = 0; i < API_MAX_CHOICES; i++) {
        api_stream_free(c->ch[i].st);
        free(c->ch[i].text);
        free(c->ch[i].lps);
        c->ch[i] = (call_choice){0};
    }
}

static void call_free(call *c)
{
    call_choices_free(c);
    free(c->echo_text);
    api_request_free(c->q);
    eng_tok_ids_free(&c->ids);
    eng_grammar_free(c->grammar);
    free(c);
}

/* Work pool: the prompt as ids into c->ids, or its error into c->err. */
static void tokenize_work(uv_work_t *w)
{
    call *c = w->data;
    double t0 = srv_now();
    c->rc = prompt_ids(c, c->q, &c->ids, &c->err);
    if (!c->rc)
        c->rc = api_request_tools_grammar(c->q, c->tok, &c->grammar, &c->err);
    if (!c->rc && c->q->echo)
        c->rc = echo_text(c, c->q, &c->err);
    c->tokenize_s = srv_now() - t0;
}

/* The checks that need the prompt's length, then the job. */
static void submit(call *c)
{
    srv_routes *rt = c->rt;
    api_request *q = c->q;
    api_kind kind = c->kind;
    eng_tok_ids *ids = &c->ids;
    api_error e;
    int64_t *ids64 = NULL;
    srv_job *job = NULL;
    int64_t n = (int64_t)ids->n, ctx = rt->info.ctx;
    if (n == 0) {
        api_error_set(&e, API_EPROMPT, kind == API_KIND_CHAT ? "messages" : "prompt", "the prompt is empty");
        goto reject;
    }
    if (n >= ctx) {
        api_error_set(&e, API_ECONTEXT, kind == API_KIND_CHAT ? "messages" : "prompt",
                      "this model's maximum context length is %" PRId64 " tokens; the prompt has %" PRId64
                      " tokens, leaving no room to generate",
                      ctx, n);
        goto reject;
    }
    int64_t max_tokens = q->max_tokens, limit = rt->o.max_tokens;
    if (limit > 0 && max_tokens > limit) {
        api_error_set(&e, API_ERANGE, "max_tokens",
                      "'max_tokens' must be at most %" PRId64 " on this server, not %" PRId64, limit, max_tokens);
        goto reject;
    }
    if (max_tokens > 0 && n + max_tokens > ctx) {
        api_error_set(&e, API_ECONTEXT, "max_tokens",
                      "this model's maximum context length is %" PRId64 " tokens; the request asks for %" PRId64
                      " (%" PRId64 " in the prompt, %" PRId64 " to generate)",
                      ctx, n + max_tokens, n, max_tokens);
        goto reject;
    }
    for (size_t i = 0; i < q->n_bias; i++)
        if (q->bias_ids[i] >= rt->info.vocab) {
            api_error_set(&e, API_ERANGE, "logit_bias",
                          "'logit_bias' names token id %" PRId32 ", outside the vocabulary [0, %" PRId64 ")",
                          q->bias_ids[i], rt->info.vocab);
            goto reject;
        }
    if (max_tokens < 0) {
        max_tokens = kind == API_KIND_COMPLETION && ctx - n > DEFAULT_COMPLETION_TOKENS ? DEFAULT_COMPLETION_TOKENS
                                                                                         : ctx - n;
        if (limit > 0 && max_tokens > limit)
            max_tokens = limit;
    }
    if (!q->seed_given)
        q->sampling.seed = next_random(rt);
    ids64 = malloc((size_t)n * sizeof *ids64);
    if (!ids64) {
        api_error_set(&e, API_ENOMEM, NULL, NULL);
        goto reject;
    }
    for (int64_t i = 0; i < n; i++)
        ids64[i] = ids->ids[i];
    srv_job_params p = {
        .prompt = ids64,
        .n_prompt = (size_t)n,
        .max_tokens = max_tokens,
        .sampling = q->sampling,
        .stop = (const char *const *)q->stop,
        .n_stop = q->n_stop,
        .deadline = srv_req_start(c->r) + rt->o.request_timeout,
        .t_received = c->t_received,
        .id = c->id,
        .grammar = c->grammar,
        .scope = job_scope(c),
        .key_name = c->has_key ? c->key.name : NULL,
        .logprobs = q->logprobs,
        .top_logprobs = q->top_logprobs,
        /* max_tokens 0 is a generation that only feeds its prompt: the engine allows it with these */
        .echo_logprobs = q->echo && (q->logprobs || max_tokens == 0),
        .bias_ids = q->bias_ids,
        .bias = q->bias,
        .n_bias = q->n_bias,
        .n_choices = q->best_of,
        .rank = q->best_of > q->n,
    };
    job = srv_job_new(&p, on_job, c);
    if (!job) {
        api_error_set(&e, API_ENOMEM, NULL, NULL);
        goto reject;
    }
    c->grammar = NULL; /* the job's now */
    c->stream = q->stream;
    c->include_usage = q->include_usage;
    c->logprobs = q->logprobs;
    c->top_logprobs = q->top_logprobs;
    c->echo = q->echo;
    /* tool calls are parsed out of the answer when the model may make them; their ids follow the seed */
    c->tool_calls = q->tool_choice != API_TOOL_CHOICE_NONE;
    c->tool_seed = q->sampling.seed;
    c->created = (int64_t)time(NULL);
    c->n_prompt = n;
    c->n_out = q->n;
    c->n_cand = q->best_of;
    for (int i = 0; c->stream && i < c->n_cand; i++) {
        api_meta meta = {.id = c->id, .created = c->created, .model = rt->model_name, .fingerprint = rt->fingerprint,
                         .tool_calls = c->tool_calls, .tool_seed = c->tool_seed};
        if (!(c->ch[i].st = api_stream_new(kind, &meta, q->include_usage)) || api_stream_set_index(c->ch[i].st, i)) {
            api_error_set(&e, API_ENOMEM, NULL, NULL);
            goto reject;
        }
    }
    int rc = srv_sched_submit(rt->sched, job);
    if (rc == SRV_ECHOICES) {
        const char *param = q->best_of > q->n ? "best_of" : "n";
        api_error_set(&e, API_ERANGE, param,
                      "'%s' of %d asks for more choices than this server runs at once (--parallel %d): each choice "
                      "decodes in a row of the batch of its own",
                      param, q->best_of, srv_sched_parallel(rt->sched));
        goto reject;
    }
    if (rc == SRV_EKVBUDGET) {
        api_error_set(&e, API_EKVBUDGET, "max_tokens",
                      "this request needs %" PRIu64 " bytes of KV cache for %d choice(s) of %" PRId64
                      " tokens, more than the server's budget of %" PRIu64 " bytes; ask for fewer tokens or choices",
                      (uint64_t)q->best_of * srv_sched_kv_bytes(rt->sched, n + max_tokens), q->best_of,
                      n + max_tokens, srv_sched_kv_budget(rt->sched));
        goto reject;
    }
    if (rc) {
        int code = rc == SRV_EFULL ? API_EOVERLOADED : rc == SRV_ELOADING ? API_ELOADING : API_ESHUTDOWN;
        api_error_set(&e, code, NULL, NULL);
        goto reject;
    }
    c->job = job;
    if (c->stream) {
        srv_req_stream_start(c->r, 200, SRV_SSE_CONTENT_TYPE);
        for (int i = 0; i < c->n_cand; i++) {
            api_stream_begin(c->ch[i].st);
            flush_stream(c, c->ch[i].st);
        }
    }
    srv_log(SRV_LOG_DEBUG, "job_submitted",
            "id=%s prompt_tokens=%" PRId64 " max_tokens=%" PRId64 " n=%d best_of=%d stream=%d tokenize_ms=%.3f "
            "since_received_ms=%.3f",
            c->id, n, max_tokens, c->n_out, c->n_cand, c->stream, c->tokenize_s * 1e3,
            (srv_now() - c->t_received) * 1e3);
    free(ids64);
    return;
reject:
    if (job)
        srv_job_release(job);
    call_choices_free(c);
    free(ids64);
    respond_error(c, &e);
}

/* POST /tokenize, once tokenize_work has the ids. */
static void respond_tokens(call *c)
{
    char *body = api_render_tokens(c->ids.ids, c->ids.n, c->rt->info.ctx, c->q->return_token_strs ? c->tok : NULL);
    if (!body) {
        fail(c, API_ENOMEM, NULL, NULL);
        return;
    }
    respond_json(c, 200, body);
    free(body);
}

/* POST /detokenize: short work (no more ids than a body holds), done on the loop. */
static void do_detokenize(call *c)
{
    size_t blen = 0;
    const char *body = srv_req_body(c->r, &blen);
    api_request *q = NULL;
    api_error e;
    eng_tok_text t = {0};
    eng_tok *tok = srv_sched_tokenizer(c->rt->sched);
    if (api_parse_tokenize(true, body, blen, &q, &e) != 0) {
        respond_error(c, &e);
        return;
    }
    if (q->model && strcmp(q->model, c->rt->model_name) != 0) {
        api_error_set(&e, API_EMODEL, "model", "the model '%.80s' does not exist; this server serves '%.80s'",
                      q->model, c->rt->model_name);
        goto done;
    }
    for (size_t i = 0; i < q->n_prompt_ids; i++) {
        size_t len;
        if (!eng_tok_token_bytes(tok, q->prompt_ids[i], &len)) {
            char p[48];
            snprintf(p, sizeof p, "tokens[%zu]", i);
            api_error_set(&e, API_EPROMPT, p, "token id %" PRId32 " is not in the tokenizer's vocabulary [0, %zu)",
                          q->prompt_ids[i], eng_tok_n_ids(tok));
            goto done;
        }
    }
    /* as vLLM's: special tokens are kept, so /tokenize's ids round-trip */
    if (eng_tok_decode(tok, q->prompt_ids, q->n_prompt_ids, false, &t) != 0) {
        api_error_set(&e, API_ENOMEM, NULL, NULL);
        goto done;
    }
    char *out = api_render_detokenized(t.s, t.len);
    if (!out) {
        api_error_set(&e, API_ENOMEM, NULL, NULL);
        goto done;
    }
    respond_json(c, 200, out);
    free(out);
    eng_tok_text_free(&t);
    api_request_free(q);
    return;
done:
    eng_tok_text_free(&t);
    api_request_free(q);
    respond_error(c, &e);
}

/* Loop thread, after tokenize_work (or its cancellation, once the request is gone). */
static void tokenized(uv_work_t *w, int status)
{
    (void)status;
    call *c = w->data;
    srv_routes *rt = c->rt;
    c->tokenizing = false;
    rt->tokenizing--;
    if (c->gone) {
        call_free(c);
    } else {
        if (c->rc)
            respond_error(c, &c->err);
        else if (c->ep == SRV_EP_TOKENIZE)
            respond_tokens(c);
        else
            submit(c);
        /* The prompt's text and ids are not needed while it generates. */
        api_request_free(c->q);
        c->q = NULL;
        eng_tok_ids_free(&c->ids);
    }
    if (rt->draining && !rt->tokenizing)
        srv_sched_close_queue(rt->sched);
}

static void do_generate(call *c, api_kind kind)
{
    srv_routes *rt = c->rt;
    if (rt->draining) {
        fail(c, API_ESHUTDOWN, NULL, NULL);
        return;
    }
    if (!rt->loaded) {
        fail(c, API_ELOADING, NULL, NULL);
        return;
    }
    size_t blen = 0;
    const char *body = srv_req_body(c->r, &blen);
    api_error e;
    int rc = c->ep == SRV_EP_TOKENIZE ? api_parse_tokenize(false, body, blen, &c->q, &e)
                                      : api_parse_request(kind, body, blen, &rt->defaults, &c->q, &e);
    if (rc != 0) {
        respond_error(c, &e);
        return;
    }
    if (c->ep == SRV_EP_TOKENIZE)
        kind = c->q->kind;
    if (c->q->model && strcmp(c->q->model, rt->model_name) != 0) {
        fail(c, API_EMODEL, "model", "the model '%.80s' does not exist; this server serves '%.80s'", c->q->model,
             rt->model_name);
        return;
    }
    c->kind = kind;
    c->log_prompts = rt->o.log_prompts;
    c->tok = srv_sched_tokenizer(rt->sched);
    c->work.data = c;
    if (uv_queue_work(rt->loop, &c->work, tokenize_work, tokenized) != 0) {
        fail(c, API_EINTERNAL, NULL, NULL);
        return;
    }
    c->tokenizing = true;
    rt->tokenizing++;
}

/* ---- dispatch -------------------------------------------------------------- */

/* An endpoint's method and whether it needs the API key; its path is srv_endpoint_name(ep). */
typedef struct route {
    srv_endpoint ep;
    const char *method;  /* GET also answers HEAD */
    bool auth;
} route;

static bool request_id_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n == REQ_ID_MAX || !(isalnum((unsigned char)s[n]) || s[n] == '.' || s[n] == '_' || s[n] == ':' ||
                                 s[n] == '-'))
            return false;
    return n > 0;
}

/*
 * The request's id for logs and the X-Request-Id answer: the client's when
 * it is well formed, else the generated one (c->id). A malformed one is not
 * an error, as a proxy may add ids of its own kind; it is replaced, and the
 * replacement logged.
 */
static void take_request_id(call *c)
{
    const char *h = srv_req_header(c->r, "X-Request-Id");
    if (h && request_id_ok(h)) {
        snprintf(c->req_id, sizeof c->req_id, "%s", h);
    } else {
        snprintf(c->req_id, sizeof c->req_id, "%s", c->id);
        if (h)
            srv_log(SRV_LOG_INFO, "request_id_replaced", "id=%s reason=\"X-Request-Id is not 1..%d characters of "
                    "[A-Za-z0-9._:-]\" length=%zu", c->id, REQ_ID_MAX, strlen(h));
    }
    srv_req_add_header(c->r, "X-Request-Id", c->req_id);
}

static bool origin_allowed(const srv_routes *rt, const char *origin)
{
    for (size_t i = 0; i < rt->n_origins; i++)
        if (!strcmp(rt->origins[i], "*") || !strcmp(rt->origins[i], origin))
            return true;
    return false;
}

/*
 * CORS: a request from a page of an allowed origin gets the headers that
 * let the page read the answer (whatever the answer, errors and streams
 * too). Returns whether the request came from an allowed origin.
 */
static bool cors_headers(call *c)
{
    const char *origin = srv_req_header(c->r, "Origin");
    if (!c->rt->n_origins)
        return false;
    /* The answer depends on the Origin: caches must keep them apart. */
    srv_req_add_header(c->r, "Vary", "Origin");
    if (!origin || !origin_allowed(c->rt, origin))
        return false;
    srv_req_add_header(c->r, "Access-Control-Allow-Origin", origin);
    srv_req_add_header(c->r, "Access-Control-Expose-Headers", "X-Request-Id");
    return true;
}

/*
 * OPTIONS: a CORS preflight from an allowed origin is answered 204 with
 * what may be sent; one from any other origin gets 403 (and no CORS
 * headers, so the browser refuses). OPTIONS without an Origin is not CORS:
 * 204 with the methods of the path.
 */
static void do_options(call *c, const route *rte, bool cors_ok)
{
    if (cors_ok) {
        srv_req_add_header(c->r, "Access-Control-Allow-Methods", CORS_METHODS);
        srv_req_add_header(c->r, "Access-Control-Allow-Headers", CORS_HEADERS);
        srv_req_add_header(c->r, "Access-Control-Max-Age", CORS_MAX_AGE);
    } else if (srv_req_header(c->r, "Origin")) {
        char o[300];
        const char *origin = srv_req_header(c->r, "Origin");
        fail(c, API_ECORS, NULL, "the origin %s may not call this API (the server's --cors-origin does not list it)",
             srv_log_quote(o, sizeof o, origin, strlen(origin)));
        return;
    }
    srv_req_add_header(c->r, "Allow", !strcmp(rte->method, "GET") ? "GET, HEAD, OPTIONS" : "POST, OPTIONS");
    srv_req_respond(c->r, 204, JSON_TYPE, "", 0);
}

static const route ROUTES[] = {
    {SRV_EP_COMPLETIONS, "POST", true},
    {SRV_EP_CHAT, "POST", true},
    {SRV_EP_MODELS, "GET", true},
    {SRV_EP_HEALTH, "GET", false},
    {SRV_EP_HEALTH_LIVE, "GET", false},
    {SRV_EP_HEALTH_READY, "GET", false},
    {SRV_EP_METRICS, "GET", false},
    {SRV_EP_TOKENIZE, "POST", true},
    {SRV_EP_DETOKENIZE, "POST", true},
};

/* Whether the request carries one of the keys (always, without keys); C keeps which. */
static bool authorized(srv_routes *rt, call *c)
{
    if (!rt->keys)
        return true;
    const char *h = srv_req_header(c->r, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    while (*h == ' ')
        h++;
    c->has_key = srv_keys_match(rt->keys, h, strlen(h), &c->key);
    return c->has_key;
}

void srv_routes_on_request(void *user, srv_req *r)
{
    srv_routes *rt = user;
    call *c = calloc(1, sizeof *c);
    if (!c) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":\"out_of_memory\"}}";
        srv_req_respond(r, 500, JSON_TYPE, oom, sizeof oom - 1);
        return;
    }
    c->rt = rt;
    c->r = r;
    c->ep = SRV_EP_OTHER;
    /* The HTTP layer calls us once the last byte of the body is in. */
    c->t_received = srv_now();
    srv_req_set_user(r, c);
    const char *path = srv_req_path(r), *method = srv_req_method(r);
    const route *rte = NULL;
    for (size_t i = 0; i < sizeof ROUTES / sizeof *ROUTES; i++)
        if (!strcmp(path, srv_endpoint_name(ROUTES[i].ep)))
            rte = &ROUTES[i];
    if (rte)
        c->ep = rte->ep;
    /* The web UI's pages and files (no key), and its /status.json (an API call). */
    route page = {SRV_EP_OTHER, "GET", false};
    if (!rte && srv_webui_match(rt->o.webui, path, &page.auth))
        rte = &page;
    snprintf(c->id, sizeof c->id, "%s-%016" PRIx64, c->ep == SRV_EP_CHAT ? "chatcmpl" : c->ep == SRV_EP_COMPLETIONS ? "cmpl" : "req",
             next_random(rt));
    take_request_id(c);
    bool cors_ok = cors_headers(c);

    if (srv_req_header_too_large(r)) {
        fail(c, API_EHEADER, NULL, "the request line and headers are larger than the server's limit");
        return;
    }
    if (srv_req_body_too_large(r)) {
        fail(c, API_EBODY, NULL, "the request body is larger than the server's limit");
        return;
    }
    if (!rte) {
        fail(c, API_ENOTFOUND, NULL, "no endpoint %.100s %.200s", method, path);
        return;
    }
    if (!strcmp(method, "OPTIONS")) {
        do_options(c, rte, cors_ok);
        return;
    }
    bool get = !strcmp(rte->method, "GET");
    if (strcmp(method, rte->method) != 0 && !(get && !strcmp(method, "HEAD"))) {
        srv_req_add_header(r, "Allow", get ? "GET, HEAD" : rte->method);
        fail(c, API_EMETHOD, NULL, "%.100s is not allowed on %s; use %s", method, path, rte->method);
        return;
    }
    if (rte->auth && !authorized(rt, c)) {
        fail(c, API_EAUTH, NULL, "missing or invalid API key: send 'Authorization: Bearer KEY'");
        return;
    }
    switch (rte->ep) {
    case SRV_EP_COMPLETIONS: do_generate(c, API_KIND_COMPLETION); break;
    case SRV_EP_CHAT: do_generate(c, API_KIND_CHAT); break;
    case SRV_EP_MODELS: do_models(c); break;
    case SRV_EP_HEALTH:
    case SRV_EP_HEALTH_LIVE:
    case SRV_EP_HEALTH_READY: do_health(c); break;
    case SRV_EP_METRICS: do_metrics(c); break;
    case SRV_EP_TOKENIZE: do_generate(c, API_KIND_COMPLETION); break;
    case SRV_EP_DETOKENIZE:
        if (!c->rt->loaded)
            fail(c, API_ELOADING, NULL, NULL);
        else
            do_detokenize(c);
        break;
    default:
        if (rte == &page)
            srv_webui_respond(rt->o.webui, r);
        else
            fail(c, API_ENOTFOUND, NULL, NULL);
        break;
    }
}

/* request_finished_total's reason: a job that did not end before its client left was cancelled. */
static const char *finished_reason(const call *c)
{
    if (!c->finished)
        return "cancelled";
    switch (c->finish) {
    case SRV_FINISH_STOP: return c->called ? "tool_calls" : "stop";
    case SRV_FINISH_LENGTH: return finish_reason(c->finish);
    case SRV_FINISH_CANCELLED: return "cancelled";
    /* The client saw the text so far end as with max_tokens. */
    case SRV_FINISH_DEADLINE: return c->n_generated > 0 ? "length" : "error";
    default: return "error";
    }
}

void srv_routes_on_done(void *user, srv_req *r, bool completed)
{
    srv_routes *rt = user;
    call *c = srv_req_user(r);
    if (!c)
        return;
    double secs = srv_now() - c->t_received;
    /* 499: the client closed the connection before any response was sent. */
    int status = srv_req_status(r) ? srv_req_status(r) : 499;
    srv_metrics_request(rt->metrics, c->ep, status, secs, c->has_key ? c->key.name : NULL);
    if (c->job) {
        srv_metrics_finished(rt->metrics, finished_reason(c), c->has_key ? c->key.name : NULL);
        srv_job_cancel(c->job);
        srv_job_release(c->job);
    }
    bool gen = c->ep == SRV_EP_COMPLETIONS || c->ep == SRV_EP_CHAT;
    char path[300], method[40];
    srv_log_quote(path, sizeof path, srv_req_path(r), strlen(srv_req_path(r)));
    srv_log_quote(method, sizeof method, srv_req_method(r), strlen(srv_req_method(r)));
    srv_log_level level = gen || status >= 500 || !completed ? SRV_LOG_INFO : SRV_LOG_DEBUG;
    if (gen && c->job)
        srv_log(level, "request",
                "id=%s request_id=%s key=%s method=%s path=%s status=%d completed=%d stream=%d duration_ms=%.1f "
                "prompt_tokens=%" PRId64 " cached_tokens=%" PRId64 " completion_tokens=%" PRId64
                " finish=%s ttft_ms=%.1f",
                c->id, c->req_id, c->has_key ? c->key.name : "-", method, path, status, completed, c->stream,
                secs * 1e3, c->n_prompt, c->n_cached, c->n_generated,
                c->finished ? srv_finish_name(c->finish) : "cancelled", c->ttft_ms);
    else
        srv_log(level, "request",
                "id=%s request_id=%s key=%s method=%s path=%s status=%d completed=%d duration_ms=%.1f", c->id,
                c->req_id, c->has_key ? c->key.name : "-", method, path, status, completed, secs * 1e3);
    srv_req_set_user(r, NULL);
    if (c->tokenizing) {
        /* `tokenized` frees the call; a tokenization not yet started is skipped. */
        c->gone = true;
        c->r = NULL;
        uv_cancel((uv_req_t *)&c->work);
        return;
    }
    call_free(c);
}
