/*
 * sched: the compute thread, the job queue and the batching scheduler
 * (see sched.h).
 *
 * Thread rules:
 *  - The loop thread (the owner of the uv loop) calls srv_sched_new/stop/
 *    free, srv_sched_submit, srv_sched_close_queue, srv_sched_cancel_all,
 *    srv_job_cancel and srv_job_take, and runs the job callbacks and the
 *    loaded callback from the async handle.
 *  - The compute thread loads the model and the tokenizer, owns every
 *    eng_gen (the `slot`s: session, sampler, stop strings, detokenizer) and
 *    is the only caller of eng_gen_step, so one step runs on the pool at a
 *    time. It touches no socket and no uv handle except through
 *    uv_async_send.
 *  - The compute pool's workers run only the slices of plan steps the
 *    compute thread hands them.
 *  - `mu` guards the waiting queue and the running list, the ready list, the
 *    flags (loaded, closed, stopping) and each job's output fields (text,
 *    counters, state, finish, timings). A job's inputs are immutable after
 *    srv_job_new; its `cancel` flag is atomic; `fn`/`user` are loop-thread
 *    only.
 *  - A job lives while a reference is held: the caller's, the scheduler's
 *    (from submit until the job ends) and the ready list's (while the job
 *    waits for its callback).
 *  - The compute thread only reads the tokenizer (streaming decode); the
 *    routes encode with it on libuv's work pool, each thread with an
 *    encoder of its own (eng_tok_encode_with).
 *  - The heartbeat (beat_*) is written by the compute thread alone, as
 *    atomics, and read by the loop thread (srv_sched_heartbeat).
 */
#include "server/sched.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/gen.h"
#include "engine/runner.h"
#include "server/error.h"
#include "server/log.h"

/*
 * The heartbeat's bound. The watchdog must tell a compute thread stuck in a
 * step from a busy one, so a step counts as stuck once it has run longer than
 *
 *     clamp(STALL_FACTOR x the step's tokens x the longest time per token
 *           of the last STALL_HISTORY steps, floor, cap)
 *
 * Per token, because a step feeds a prefill chunk of up to --prefill-chunk
 * tokens or a single decode token: a long prefill after a run of decode
 * steps must not look stuck. A decode step has the largest time per token
 * (a prefill shares each weight read among its tokens), so after decode
 * steps the estimate errs long for a prefill, not short. The factor absorbs
 * noise: other processes on the cores, first touches of mapped weights.
 * The floor covers the first steps, with no history yet, and steps too
 * short to time well. The cap (opts.stall_cap: half of the systemd
 * watchdog interval) bounds the wait however slow the recent steps were: a
 * hung step stops the pings at most half an interval after it began, and
 * systemd restarts the daemon at most one and a half intervals after it
 * began. The floor is lowered to the cap when the cap is smaller.
 */
#define STALL_FACTOR 8.0
#define STALL_FLOOR_S 10.0
#define STALL_CAP_S 15.0 /* the cap without systemd's watchdog: half the shipped unit's WatchdogSec */
#define STALL_HISTORY 32

/*
 * The prompt budget of a step. Decode rows always run (every running stream
 * gets its next token each step); prompt tokens fill the rest of the step:
 *  - no stream decoding: up to --prefill-chunk, since nobody waits on the
 *    step but the prompts themselves (a lone request's TTFT);
 *  - streams decoding: as many as fit the step target (--max-step-ms, or
 *    STEP_TARGET_FACTOR decode steps, at least STEP_TARGET_MIN_S) from the
 *    measured cost of a decode step of that many rows and of one prompt
 *    token, but at least PROMPT_MIN_TOKENS, so prompts advance under any
 *    decode load.
 * Prompt tokens go to the prefilling jobs oldest first. So a flood of long
 * prompts slows the running streams by a bounded factor, and a crowd of
 * streams cannot hold a new prompt back.
 *
 * Why a few long steps rather than many short ones: a prompt token costs
 * the same compute in any step, so the chunking sets only where the cost
 * falls. Thin chunks stretch every step while any prompt is pending, and
 * with streams ending and starting all the time that is most steps: at 8
 * clients with 104-token prompts and 64-token answers, a bound of twice the
 * decode step made most inter-token gaps double ones and queued prompts
 * behind each other for seconds. With the default, a short prompt is read
 * in one step, a rare long gap for the streams, and their usual gap stays
 * the decode step.
 */
#define STEP_MODEL_ROWS 256
#define STEP_TARGET_FACTOR 4.0
#define STEP_TARGET_MIN_S 0.200
#define PROMPT_MIN_TOKENS 8
#define PROMPT_FIRST_TOKENS 32 /* before a prompt token's cost is measured */
#define EWMA 0.2

typedef enum job_state { JOB_NEW, JOB_WAITING, JOB_RUNNING, JOB_DONE } job_state;

/* One choice of a job: its output not yet taken and its state (under s->mu). */
typedef struct job_choice {
    char *text;                  /* new text not yet taken */
    size_t len, cap;
    eng_token_lp *lps;           /* its logprobs not yet taken */
    size_t n_lps, cap_lps;
    int64_t n_generated;
    srv_finish finish;           /* SRV_FINISH_NONE while it runs */
    double cum_logprob;
} job_choice;

struct srv_job {
    atomic_int refs;
    srv_sched *s;                /* set by submit */
    /* inputs: immutable after srv_job_new */
    int64_t *prompt;             /* [n_prompt] */
    int32_t *prompt32;           /* [n_prompt], for the sampler's penalties */
    size_t n_prompt;
    int64_t max_tokens;
    eng_sampling sampling;
    char **stop;                 /* [n_stop] */
    size_t n_stop;
    double deadline;
    double t_received;
    char *id;
    char *scope;
    char *key_name;              /* or NULL: no API keys */
    size_t key_row;              /* key_name's metrics row, looked up at submission */
    eng_grammar *grammar;        /* or NULL */
    bool logprobs, echo_logprobs;
    int top_logprobs;
    int32_t *bias_ids;           /* [n_bias] */
    float *bias;
    size_t n_bias;
    int n_choices;               /* 1..SRV_MAX_CHOICES */
    bool rank;
    uint64_t kv_need;            /* KV bytes its sessions reserve; set by submit, then immutable */
    /* loop thread only */
    srv_job_fn fn;
    void *user;
    /* compute thread only */
    int live;                    /* its slots (choices running) */
    bool forked;                 /* its other choices forked from the first */
    /* any thread */
    atomic_int cancel;           /* 0, or the srv_finish to end with */
    /* under s->mu */
    job_state state;
    srv_job *prev, *next;        /* waiting queue or running list */
    srv_job *ready_next;
    bool in_ready;
    job_choice *ch;              /* [n_choices] */
    eng_token_lp *prompt_lps;    /* the echoed prompt's, until taken */
    int64_t n_generated;         /* every choice's ids */
    int64_t most_generated;      /* the longest choice's */
    int64_t n_cached;
    srv_finish finish;
    char message[160];
    double t_submit, t_admit, t_first, t_last, t_end;
};

typedef struct job_list {
    srv_job *head, *tail;
    int n;
} job_list;

struct srv_sched {
    uv_loop_t *loop;
    uv_async_t async;
    bool async_open;
    pthread_t thread;
    bool thread_started;
    srv_sched_opts opts;
    char *model_dir;
    srv_metrics *metrics;
    srv_sched_loaded_fn loaded_fn;
    void *loaded_user;

    /* written by the compute thread before `loaded` is set, then read-only */
    eng_model *model;
    eng_tok *tok;
    eng_gvocab *gvocab;          /* the tokenizer's vocabulary for grammars */
    srv_model_info info;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    job_list waiting, running;
    srv_job *ready_head, *ready_tail;
    bool loaded, load_failed, load_report;  /* load_report: the loop has not been told yet */
    char load_message[512];
    bool closed, stopping;

    eng_prefix *prefix;                 /* compute thread only; NULL: off */
    bool prefix_made;                   /* compute thread only */
    eng_prefix_stats prefix_st;         /* under mu: a copy after each step */

    /* step times, for the prompt budget (compute thread only): EWMAs in seconds */
    double dec_s[STEP_MODEL_ROWS + 1]; /* a decode-only step of B rows (0: not measured yet) */
    double tok_s;                      /* one more prompt token in a step (0: not measured yet) */

    /* the heartbeat: the compute thread writes, the loop reads */
    atomic_uint_fast64_t beat_start_ns;  /* CLOCK_MONOTONIC when the current step began; 0 between steps */
    atomic_uint_fast64_t beat_tokens;    /* the tokens it feeds */
    atomic_uint_fast64_t beat_cost_ns;   /* the longest time per token of the last STALL_HISTORY steps */
    uint64_t cost_ns[STALL_HISTORY];     /* compute thread only: those times */
    unsigned n_costs;
    bool stuck_logged;                   /* loop thread only */
};

/*
 * One row of the batch: a choice of a running job and the generation that
 * produces it (compute thread only). A job's first choice gets its slot at
 * admission, the others when they fork from it after its prefill.
 */
typedef struct slot {
    srv_job *job;
    int choice;
    eng_gen *gen;                /* NULL until set up */
    double t_admit, t_first, t_prev;
} slot;

const char *srv_finish_name(srv_finish f)
{
    switch (f) {
    case SRV_FINISH_NONE: return "none";
    case SRV_FINISH_STOP: return "stop";
    case SRV_FINISH_LENGTH: return "length";
    case SRV_FINISH_CANCELLED: return "cancelled";
    case SRV_FINISH_DEADLINE: return "deadline";
    case SRV_FINISH_SHUTDOWN: return "shutdown";
    case SRV_FINISH_ERROR: return "error";
    }
    return "none";
}

/* ---- jobs ---------------------------------------------------------------- */

srv_job *srv_job_new(const srv_job_params *p, srv_job_fn fn, void *user)
{
    srv_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancel, 0);
    j->n_prompt = p->n_prompt;
    j->prompt = malloc((p->n_prompt ? p->n_prompt : 1) * sizeof *j->prompt);
    j->prompt32 = malloc((p->n_prompt ? p->n_prompt : 1) * sizeof *j->prompt32);
    j->id = strdup(p->id ? p->id : "-");
    j->scope = strdup(p->scope ? p->scope : "");
    j->key_name = p->key_name ? strdup(p->key_name) : NULL;
    j->stop = calloc(p->n_stop ? p->n_stop : 1, sizeof *j->stop);
    j->n_choices = p->n_choices > 1 ? p->n_choices : 1;
    j->rank = p->rank;
    j->ch = j->n_choices <= SRV_MAX_CHOICES ? calloc((size_t)j->n_choices, sizeof *j->ch) : NULL;
    if (!j->prompt || !j->prompt32 || !j->id || !j->scope || !j->stop || !j->ch || (p->key_name && !j->key_name))
        goto fail;
    for (size_t i = 0; i < p->n_prompt; i++) {
        j->prompt[i] = p->prompt[i];
        j->prompt32[i] = (int32_t)p->prompt[i];
    }
    for (size_t i = 0; i < p->n_stop; i++) {
        if (!(j->stop[i] = strdup(p->stop[i])))
            goto fail;
        j->n_stop = i + 1;
    }
    if (p->n_bias) {
        j->bias_ids = malloc(p->n_bias * sizeof *j->bias_ids);
        j->bias = malloc(p->n_bias * sizeof *j->bias);
        if (!j->bias_ids || !j->bias)
            goto fail;
        memcpy(j->bias_ids, p->bias_ids, p->n_bias * sizeof *j->bias_ids);
        memcpy(j->bias, p->bias, p->n_bias * sizeof *j->bias);
        j->n_bias = p->n_bias;
    }
    j->logprobs = p->logprobs;
    j->top_logprobs = p->top_logprobs;
    j->echo_logprobs = p->echo_logprobs;
    j->max_tokens = p->max_tokens;
    j->grammar = p->grammar;
    j->sampling = p->sampling;
    j->deadline = p->deadline;
    j->t_received = p->t_received;
    j->fn = fn;
    j->user = user;
    return j;
fail:
    srv_job_release(j);
    return NULL;
}

void srv_job_release(srv_job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1)
        return;
    free(j->prompt);
    free(j->prompt32);
    for (size_t i = 0; i < j->n_stop; i++)
        free(j->stop[i]);
    free(j->stop);
    free(j->id);
    free(j->scope);
    free(j->key_name);
    eng_grammar_free(j->grammar);
    for (int c = 0; j->ch && c < j->n_choices; c++) {
        free(j->ch[c].text);
        free(j->ch[c].lps);
    }
    free(j->ch);
    free(j->bias_ids);
    free(j->bias);
    free(j->prompt_lps);
    free(j);
}

static void list_push(job_list *l, srv_job *j)
{
    j->prev = l->tail;
    j->next = NULL;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    l->n++;
}

static void list_remove(job_list *l, srv_job *j)
{
    if (j->prev)
        j->prev->next = j->next;
    else
        l->head = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        l->tail = j->prev;
    j->prev = j->next = NULL;
    l->n--;
}

/* Queues J for its callback on the loop thread (mu held). */
static void push_ready(srv_sched *s, srv_job *j)
{
    if (j->in_ready)
        return;
    j->in_ready = true;
    j->ready_next = NULL;
    atomic_fetch_add(&j->refs, 1);
    if (s->ready_tail)
        s->ready_tail->ready_next = j;
    else
        s->ready_head = j;
    s->ready_tail = j;
}

/* Appends text to a choice's pending output (mu held). Returns false on out-of-memory. */
static bool append_text(job_choice *c, const char *t, size_t n)
{
    if (!n)
        return true;
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 64;
        while (cap < c->len + n + 1)
            cap *= 2;
        char *p = realloc(c->text, cap);
        if (!p)
            return false;
        c->text = p;
        c->cap = cap;
    }
    memcpy(c->text + c->len, t, n);
    c->len += n;
    c->text[c->len] = '\0';
    return true;
}

/* Ends a job that never got a slot (mu held); drops the scheduler's reference. */
static void end_unstarted(srv_sched *s, srv_job *j, srv_finish why)
{
    j->state = JOB_DONE;
    j->finish = why;
    j->t_end = srv_now();
    push_ready(s, j);
    atomic_fetch_sub(&j->refs, 1); /* the scheduler's; the caller and the ready list still hold theirs */
}

void srv_job_cancel(srv_job *j)
{
    j->fn = NULL;
    j->user = NULL;
    int expected = 0;
    atomic_compare_exchange_strong(&j->cancel, &expected, SRV_FINISH_CANCELLED);
    srv_sched *s = j->s;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    if (j->state == JOB_WAITING) {
        list_remove(&s->waiting, j);
        end_unstarted(s, j, SRV_FINISH_CANCELLED);
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void srv_job_take(srv_job *j, srv_job_update *u)
{
    memset(u, 0, sizeof *u);
    srv_sched *s = j->s;
    if (s)
        pthread_mutex_lock(&s->mu);
    u->n_choices = j->n_choices;
    for (int c = 0; c < j->n_choices; c++) {
        job_choice *jc = &j->ch[c];
        u->choices[c] = (srv_choice_update){.text = jc->text, .len = jc->len, .lps = jc->lps, .n_lps = jc->n_lps,
                                            .n_generated = jc->n_generated, .finish = jc->finish,
                                            .cum_logprob = jc->cum_logprob};
        jc->text = NULL;
        jc->len = jc->cap = 0;
        jc->lps = NULL;
        jc->n_lps = jc->cap_lps = 0;
    }
    u->prompt_lps = j->prompt_lps;
    j->prompt_lps = NULL;
    u->n_prompt = (int64_t)j->n_prompt;
    u->n_generated = j->n_generated;
    u->n_cached = j->n_cached;
    u->done = j->state == JOB_DONE;
    u->finish = j->finish;
    snprintf(u->message, sizeof u->message, "%s", j->message);
    u->started = j->t_admit > 0;
    if (u->started)
        u->queue_ms = (j->t_admit - j->t_submit) * 1e3;
    if (j->t_first > 0) {
        u->prompt_ms = (j->t_first - j->t_admit) * 1e3;
        u->ttft_ms = (j->t_first - j->t_received) * 1e3;
    }
    /* The choices decode in the same steps: a choice's time per token is the request's. */
    int64_t firsts = 0;
    for (int c = 0; c < j->n_choices; c++)
        firsts += j->ch[c].n_generated > 0;
    if (j->most_generated > 1 && j->t_last > j->t_first) {
        u->decode_tokens_per_s = (double)(j->n_generated - firsts) / (j->t_last - j->t_first);
        u->tpot_ms = (j->t_last - j->t_first) * 1e3 / (double)(j->most_generated - 1);
    }
    if (s)
        pthread_mutex_unlock(&s->mu);
}

void srv_job_update_clear(srv_job_update *u)
{
    for (int c = 0; c < u->n_choices; c++) {
        srv_choice_update *cu = &u->choices[c];
        free(cu->text);
        free(cu->lps);
        cu->text = NULL;
        cu->lps = NULL;
        cu->len = cu->n_lps = 0;
    }
    free(u->prompt_lps);
    u->prompt_lps = NULL;
}

/* ---- loop side ------------------------------------------------------------ */

static void deliver(srv_sched *s)
{
    pthread_mutex_lock(&s->mu);
    srv_job *list = s->ready_head;
    s->ready_head = s->ready_tail = NULL;
    bool report = s->load_report;
    s->load_report = false;
    pthread_mutex_unlock(&s->mu);

    if (report && s->loaded_fn) {
        if (s->load_failed)
            s->loaded_fn(s->loaded_user, -1, NULL, s->load_message);
        else
            s->loaded_fn(s->loaded_user, 0, &s->info, NULL);
    }
    while (list) {
        srv_job *j = list;
        pthread_mutex_lock(&s->mu);
        list = j->ready_next;
        j->ready_next = NULL;
        j->in_ready = false;
        pthread_mutex_unlock(&s->mu);
        if (j->fn)
            j->fn(j, j->user);
        srv_job_release(j);
    }
}

static void on_async(uv_async_t *h)
{
    deliver(h->data);
}

/* The session capacity of a job: its prompt and max_tokens, at most the context. */
static int64_t job_capacity(const srv_sched *s, int64_t tokens)
{
    return tokens < s->info.ctx ? tokens : s->info.ctx;
}

uint64_t srv_sched_kv_bytes(srv_sched *s, int64_t tokens)
{
    pthread_mutex_lock(&s->mu);
    bool loaded = s->loaded;
    pthread_mutex_unlock(&s->mu);
    /* The model is read-only once loaded. */
    return loaded ? eng_model_kv_bytes(s->model, job_capacity(s, tokens)) : 0;
}

uint64_t srv_sched_kv_budget(const srv_sched *s) { return s->opts.kv_budget; }
int srv_sched_parallel(const srv_sched *s) { return s->opts.parallel; }

static bool full_locked(const srv_sched *s)
{
    return s->waiting.n + s->running.n >= s->opts.parallel + s->opts.queue;
}

bool srv_sched_full(srv_sched *s)
{
    pthread_mutex_lock(&s->mu);
    bool full = full_locked(s);
    pthread_mutex_unlock(&s->mu);
    return full;
}

void srv_sched_set_kv_budget(srv_sched *s, uint64_t bytes)
{
    pthread_mutex_lock(&s->mu);
    s->opts.kv_budget = bytes;
    pthread_mutex_unlock(&s->mu);
}

int srv_sched_submit(srv_sched *s, srv_job *j)
{
    int rc = 0;
    j->key_row = srv_metrics_key_row(s->metrics, j->key_name);
    pthread_mutex_lock(&s->mu);
    if (s->closed)
        rc = SRV_ESHUTDOWN;
    else if (!s->loaded)
        rc = SRV_ELOADING;
    if (!rc && j->n_choices > s->opts.parallel)
        rc = SRV_ECHOICES;
    if (!rc) {
        /* Every choice has a session of its own. */
        j->kv_need = (uint64_t)j->n_choices *
                     eng_model_kv_bytes(s->model, job_capacity(s, (int64_t)j->n_prompt + j->max_tokens));
        if (s->opts.kv_budget && j->kv_need > s->opts.kv_budget)
            rc = SRV_EKVBUDGET;
        else if (full_locked(s))
            rc = SRV_EFULL;
    }
    if (!rc) {
        j->s = s;
        j->t_submit = srv_now();
        if (j->t_received <= 0)
            j->t_received = j->t_submit;
        j->state = JOB_WAITING;
        atomic_fetch_add(&j->refs, 1);
        list_push(&s->waiting, j);
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void srv_sched_close_queue(srv_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->closed = true;
    pthread_mutex_unlock(&s->mu);
}

/* mu held */
static void cancel_all_locked(srv_sched *s)
{
    while (s->waiting.head) {
        srv_job *j = s->waiting.head;
        list_remove(&s->waiting, j);
        end_unstarted(s, j, SRV_FINISH_SHUTDOWN);
    }
    for (srv_job *j = s->running.head; j; j = j->next) {
        int expected = 0;
        atomic_compare_exchange_strong(&j->cancel, &expected, SRV_FINISH_SHUTDOWN);
    }
    pthread_cond_signal(&s->cv);
}

void srv_sched_cancel_all(srv_sched *s)
{
    pthread_mutex_lock(&s->mu);
    /* A job submitted later (its prompt was still being tokenized) ends too. */
    s->closed = true;
    cancel_all_locked(s);
    pthread_mutex_unlock(&s->mu);
    uv_async_send(&s->async);
}

void srv_sched_counts(srv_sched *s, int *waiting, int *running)
{
    pthread_mutex_lock(&s->mu);
    *waiting = s->waiting.n;
    *running = s->running.n;
    pthread_mutex_unlock(&s->mu);
}

/* ---- heartbeat (see STALL_FACTOR) ------------------------------------------ */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Compute thread: a step feeding TOKENS begins. */
static void beat_begin(srv_sched *s, size_t tokens)
{
    atomic_store(&s->beat_tokens, tokens ? tokens : 1);
    atomic_store(&s->beat_start_ns, now_ns());
}

/* Compute thread: the step has ended; its time per token joins the history. */
static void beat_end(srv_sched *s)
{
    uint64_t t0 = atomic_exchange(&s->beat_start_ns, 0);
    s->cost_ns[s->n_costs++ % STALL_HISTORY] = (now_ns() - t0) / atomic_load(&s->beat_tokens);
    uint64_t most = 0;
    unsigned n = s->n_costs < STALL_HISTORY ? s->n_costs : STALL_HISTORY;
    for (unsigned i = 0; i < n; i++)
        if (s->cost_ns[i] > most)
            most = s->cost_ns[i];
    atomic_store(&s->beat_cost_ns, most);
}

void srv_sched_heartbeat(srv_sched *s, srv_sched_beat *b)
{
    uint64_t t0 = atomic_load(&s->beat_start_ns);
    double tokens = (double)atomic_load(&s->beat_tokens);
    double cap = s->opts.stall_cap, floor = cap < STALL_FLOOR_S ? cap : STALL_FLOOR_S;
    double bound = STALL_FACTOR * tokens * (double)atomic_load(&s->beat_cost_ns) / 1e9;
    b->bound_s = bound < floor ? floor : bound > cap ? cap : bound;
    b->step_s = t0 ? (double)(now_ns() - t0) / 1e9 : 0;
    b->stuck = t0 && b->step_s > b->bound_s;
    if (b->stuck != s->stuck_logged) {
        s->stuck_logged = b->stuck;
        if (b->stuck)
            srv_log(SRV_LOG_ERROR, "compute_stuck", "step_s=%.1f bound_s=%.1f tokens=%.0f", b->step_s, b->bound_s,
                    tokens);
        else
            srv_log(SRV_LOG_WARN, "compute_recovered", "busy_s=%.1f", b->step_s);
    }
}

#ifdef QD_TEST_HOOKS
/*
 * A test-only hook, compiled into tests/serve/qwen3d-hooks alone (built
 * with QD_TEST_HOOKS by `make check`, never installed): while the file
 * named by $QWEN3D_TEST_STALL exists, the step that has begun does not go
 * on, except that a file holding a number N lets N steps through first
 * (counted from when it appeared), so a test can stop the compute thread
 * at a known step. A hook in the production binary, even behind an option,
 * could hang a daemon by mistake; this one cannot be reached there at all.
 */
static void test_stall(void)
{
    static long passed; /* steps let through since the file appeared */
    const char *path = getenv("QWEN3D_TEST_STALL");
    FILE *f;
    while (path && (f = fopen(path, "r"))) {
        long n = 0;
        if (fscanf(f, "%ld", &n) != 1)
            n = 0;
        fclose(f);
        if (passed < n) {
            passed++;
            return;
        }
        nanosleep(&(struct timespec){.tv_nsec = 10 * 1000 * 1000}, NULL);
    }
    passed = 0;
}
#endif

eng_tok *srv_sched_tokenizer(srv_sched *s)
{
    pthread_mutex_lock(&s->mu);
    eng_tok *t = s->loaded ? s->tok : NULL;
    pthread_mutex_unlock(&s->mu);
    return t;
}

/* ---- compute thread -------------------------------------------------------- */

static void wake_loop(srv_sched *s)
{
    uv_async_send(&s->async);
}

typedef struct tok_loader {
    const char *dir;
    pthread_t thread;
    eng_tok *tok;
    eng_diag diag;
    int rc;
} tok_loader;

static void *load_tokenizer(void *arg)
{
    tok_loader *t = arg;
    t->rc = eng_tok_load(t->dir, &t->tok, &t->diag);
    return NULL;
}

static int load(srv_sched *s)
{
    double t0 = srv_now();
    eng_diag diag;
    eng_diag_init(&diag);
    eng_model_opts mo = s->opts.engine;
    int rc = -1;
    /* The tokenizer (mostly JSON parsing) loads on its own thread while the
     * model's weights are mapped and repacked: ready sooner. */
    tok_loader tl = {.dir = s->model_dir};
    eng_diag_init(&tl.diag);
    bool tl_thread = pthread_create(&tl.thread, NULL, load_tokenizer, &tl) == 0;
    if (!tl_thread)
        load_tokenizer(&tl);
    int mrc = eng_model_open(s->model_dir, &mo, &s->model, &diag);
    if (tl_thread)
        pthread_join(tl.thread, NULL);
    s->tok = tl.tok;
    if (mrc != 0 || tl.rc != 0) {
        for (size_t i = 0; i < tl.diag.n_kept; i++)
            eng_diag_add(&diag, "%s", tl.diag.lines[i]);
        eng_diag_clear(&tl.diag);
        goto out;
    }
    eng_diag_clear(&tl.diag);
    int64_t max_ctx = eng_model_max_context(s->model);
    if (s->opts.ctx > max_ctx) {
        eng_diag_add(&diag, "--ctx %lld exceeds the model's context length of %lld", (long long)s->opts.ctx,
                     (long long)max_ctx);
        goto out;
    }
    const eng_geometry *g = eng_model_geometry(s->model);
    /* Grammars' masks need each token's bytes in a trie: built once for the model. */
    const eng_genai_config *cfg = eng_model_config(s->model);
    int32_t eos[ENG_MAX_EOS];
    for (int i = 0; i < cfg->n_eos; i++)
        eos[i] = (int32_t)cfg->eos_token_id[i];
    if (!(s->gvocab = eng_gvocab_new(s->tok, (size_t)g->vocab, eos, (size_t)cfg->n_eos))) {
        eng_diag_add(&diag, "out of memory for the grammar vocabulary");
        goto out;
    }
    s->info.ctx = s->opts.ctx > 0 ? s->opts.ctx : max_ctx;
    s->info.vocab = g->vocab;
    s->info.weight_bytes = eng_plan_prepared_bytes(eng_model_plan(s->model));
    s->info.in_place_bytes = eng_plan_in_place_bytes(eng_model_plan(s->model));
    s->info.readahead_bytes = eng_plan_readahead_bytes(eng_model_plan(s->model));
    s->info.load_seconds = srv_now() - t0;
    s->info.threads = eng_pool_threads(eng_model_pool(s->model));
    s->info.kv_bytes_full = eng_model_kv_bytes(s->model, s->info.ctx);
    s->info.config = eng_model_config(s->model);
    s->info.geometry = *g;
    rc = 0;
out:
    pthread_mutex_lock(&s->mu);
    if (rc == 0) {
        s->loaded = true;
    } else {
        s->load_failed = true;
        s->closed = true;
        snprintf(s->load_message, sizeof s->load_message, "%s",
                 diag.n_kept ? diag.lines[0] : "cannot load the model");
    }
    s->load_report = true;
    pthread_mutex_unlock(&s->mu);
    eng_diag_clear(&diag);
    wake_loop(s);
    return rc;
}

static void slot_free(slot *sl)
{
    eng_gen_free(sl->gen);
    memset(sl, 0, sizeof *sl);
}

/*
 * The prefix cache's figures, for srv_sched_prefix_stats and the metrics.
 * Published after every lookup and every put, before the job concerned
 * shows its first token or its end: whatever a client sees after a
 * response, the cache's figures already count it.
 */
static void publish_prefix(srv_sched *s)
{
    if (!s->prefix)
        return;
    eng_prefix_stats st;
    eng_prefix_get_stats(s->prefix, &st);
    pthread_mutex_lock(&s->mu);
    s->prefix_st = st;
    pthread_mutex_unlock(&s->mu);
    srv_metrics_set_prefix(s->metrics, &st);
}

/* Creates the generation of a newly admitted job's first choice; false with MSG on failure. */
static bool slot_setup(srv_sched *s, slot *sl, char *msg, size_t msg_cap)
{
    srv_job *j = sl->job;
    eng_diag diag;
    eng_diag_init(&diag);
    eng_gen_params p = {.prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_tokens,
                        .capacity = job_capacity(s, (int64_t)j->n_prompt + j->max_tokens), .sampling = j->sampling,
                        .stop = (const char *const *)j->stop, .n_stop = j->n_stop, .tok = s->tok,
                        .logprobs = j->logprobs || j->rank, .top_logprobs = j->top_logprobs, .bias_ids = j->bias_ids,
                        .bias = j->bias, .n_bias = j->n_bias, .prompt_logprobs = j->echo_logprobs};
    p.prefix = s->prefix;
    p.scope = j->scope;
    p.grammar = j->grammar;
    p.gvocab = s->gvocab;
    sl->gen = eng_gen_new(s->model, &p, &diag);
    if (!sl->gen)
        snprintf(msg, msg_cap, "%s", diag.n_kept ? diag.lines[0] : "out of memory for a session");
    eng_diag_clear(&diag);
    if (sl->gen) {
        pthread_mutex_lock(&s->mu);
        j->n_cached = (int64_t)eng_gen_reused(sl->gen);
        pthread_mutex_unlock(&s->mu);
    }
    publish_prefix(s);
    return sl->gen != NULL;
}

/*
 * Adds the step's logprobs (a sampled token's, to choice C; the echoed
 * prompt's, to the job) to J's pending ones (mu held); false on
 * out-of-memory.
 */
static bool append_logprobs(srv_sched *s, srv_job *j, job_choice *c, const eng_gen *g)
{
    const eng_gen_event *ev = eng_gen_last(g);
    const eng_token_lp *plp = ev->prefilled ? eng_gen_prompt_logprobs(g) : NULL;
    if (plp && !j->prompt_lps) {
        if (!(j->prompt_lps = malloc(j->n_prompt * sizeof *plp)))
            return false;
        memcpy(j->prompt_lps, plp, j->n_prompt * sizeof *plp);
    }
    /* An ending end-of-sequence id is not text, and has no place in the text's logprobs. */
    if (!j->logprobs || ev->token < 0 || (ev->finish == ENG_GEN_STOP && eng_model_is_eos(s->model, ev->token)))
        return true;
    if (c->n_lps == c->cap_lps) {
        size_t cap = c->cap_lps ? c->cap_lps * 2 : 16;
        eng_token_lp *n = realloc(c->lps, cap * sizeof *n);
        if (!n)
            return false;
        c->lps = n;
        c->cap_lps = cap;
    }
    eng_token_lp *e = &c->lps[c->n_lps++];
    e->id = ev->token;
    e->logprob = ev->logprob;
    e->n_top = ev->n_top;
    memcpy(e->top_ids, ev->top_ids, sizeof e->top_ids);
    memcpy(e->top_lps, ev->top_lps, sizeof e->top_lps);
    return true;
}

/*
 * Publishes a choice's new text and token count to the loop, and with STEP
 * the logprobs of the step that produced them (not for the text an outside
 * end releases, whose event still names the last step's token).
 */
static void publish(srv_sched *s, slot *sl, const char *text, size_t len, bool step)
{
    srv_job *j = sl->job;
    pthread_mutex_lock(&s->mu);
    job_choice *c = &j->ch[sl->choice];
    size_t had = c->n_lps;
    bool had_prompt = j->prompt_lps != NULL;
    bool ok = append_text(c, text, len) && (!step || !sl->gen || append_logprobs(s, j, c, sl->gen));
    /* a token's logprobs may come before its text (an incomplete character) */
    bool news = len || c->n_lps != had || (j->prompt_lps && !had_prompt);
    if (sl->gen) {
        int64_t n = eng_gen_generated(sl->gen);
        j->n_generated += n - c->n_generated;
        c->n_generated = n;
        if (n > j->most_generated)
            j->most_generated = n;
        if (j->rank)
            c->cum_logprob = eng_gen_cum_logprob(sl->gen);
    }
    if (sl->t_first > 0 && (j->t_first <= 0 || sl->t_first < j->t_first))
        j->t_first = sl->t_first;
    if (sl->t_prev > j->t_last)
        j->t_last = sl->t_prev;
    if (news && ok)
        push_ready(s, j);
    pthread_mutex_unlock(&s->mu);
    if (news && ok)
        wake_loop(s);
}

/*
 * The rows of the batch (compute thread only): a slot per running choice,
 * the rows the running jobs reserved (each all its choices' from admission,
 * so its forks always find room) and the KV bytes they reserved.
 */
typedef struct batch {
    slot *slots;                 /* [cap] */
    eng_gen **gens;              /* [cap], a step's argument */
    int n, cap;
    int rows;
    uint64_t kv_used;
} batch;

/*
 * Ends the choice of SL and frees its generation; the job ends with its
 * last choice. A deadline still releases the text held back for stop
 * strings. A choice that ends any other way than STOP or LENGTH ends the
 * whole job: its reason goes into the job's cancel flag, which ends the
 * sibling choices before the next step.
 */
static void slot_finish(srv_sched *s, batch *b, slot *sl, srv_finish why, const char *message)
{
    srv_job *j = sl->job;
    if (why == SRV_FINISH_DEADLINE && sl->gen) {
        eng_gen_end(sl->gen);
        const eng_gen_event *ev = eng_gen_last(sl->gen);
        publish(s, sl, ev->text, ev->len, false);
    }
    bool normal = why == SRV_FINISH_STOP || why == SRV_FINISH_LENGTH;
    if (!normal) {
        int expected = 0;
        atomic_compare_exchange_strong(&j->cancel, &expected, (int)why);
    }
    bool done = --j->live == 0;
    /* The session goes to the prefix cache before the end is seen, so a
     * client's next request, or its scrape, finds the prompt there. */
    eng_gen_free(sl->gen);
    sl->gen = NULL;
    publish_prefix(s);
    pthread_mutex_lock(&s->mu);
    j->ch[sl->choice].finish = why;
    if (!normal && j->finish == SRV_FINISH_NONE)
        j->finish = why;
    if (message && !j->message[0])
        snprintf(j->message, sizeof j->message, "%s", message);
    int64_t n_generated = j->n_generated;
    double decode_s = j->t_first > 0 ? j->t_last - j->t_first : -1;
    if (done) {
        list_remove(&s->running, j);
        j->state = JOB_DONE;
        if (j->finish == SRV_FINISH_NONE) {
            /* a sibling's failed fork, when the first choice ended in the same step */
            int cf = atomic_load(&j->cancel);
            j->finish = cf ? (srv_finish)cf : why;
        }
        j->t_admit = sl->t_admit;
        j->t_end = srv_now();
    }
    push_ready(s, j);
    pthread_mutex_unlock(&s->mu);
    wake_loop(s);
    if (why == SRV_FINISH_ERROR && message)
        srv_log(SRV_LOG_ERROR, "generation_failed", "id=%s choice=%d error=\"%s\"", j->id, sl->choice, message);
    slot_free(sl);
    if (done) {
        srv_metrics_job_done(s->metrics, (int64_t)j->n_prompt, n_generated, decode_s, j->key_row);
        b->kv_used -= j->kv_need;
        b->rows -= j->n_choices;
        srv_job_release(j);
    }
}

/*
 * Right after the step that prefilled a job's first choice (SL), its other
 * choices fork from it: each copies the prompt's KV rows once and samples
 * its first id from the same logits with its own seed. Their slots were
 * reserved at admission. A fork that fails ends the job with an error. A
 * job that generates nothing (max_tokens 0, an echo) has nothing to fork:
 * its other choices end as its first does.
 */
static void fork_choices(srv_sched *s, batch *b, slot *sl)
{
    srv_job *j = sl->job;
    if (j->forked || j->n_choices == 1 || eng_gen_state(sl->gen) == ENG_GEN_ERROR)
        return;
    j->forked = true;
    if (j->max_tokens == 0) {
        pthread_mutex_lock(&s->mu);
        for (int c = 1; c < j->n_choices; c++)
            j->ch[c].finish = SRV_FINISH_LENGTH;
        pthread_mutex_unlock(&s->mu);
        return;
    }
    for (int c = 1; c < j->n_choices; c++) {
        eng_sampling sp = j->sampling;
        sp.seed += (uint64_t)c;
        eng_diag diag;
        eng_diag_init(&diag);
        eng_gen *g = eng_gen_fork(sl->gen, &sp, &diag);
        if (!g) {
            pthread_mutex_lock(&s->mu);
            if (!j->message[0])
                snprintf(j->message, sizeof j->message, "choice %d: %s", c,
                         diag.n_kept ? diag.lines[0] : "out of memory for a session");
            pthread_mutex_unlock(&s->mu);
            eng_diag_clear(&diag);
            int expected = 0;
            atomic_compare_exchange_strong(&j->cancel, &expected, SRV_FINISH_ERROR);
            return;
        }
        eng_diag_clear(&diag);
        b->slots[b->n++] = (slot){.job = j, .choice = c, .gen = g, .t_admit = sl->t_admit};
        j->live++;
    }
}

/* The measured time of a decode-only step of ROWS rows (the nearest measured size below), 0 if none. */
static double decode_time(const srv_sched *s, size_t rows)
{
    if (rows > STEP_MODEL_ROWS)
        rows = STEP_MODEL_ROWS;
    for (size_t b = rows; b > 0; b--)
        if (s->dec_s[b] > 0)
            return s->dec_s[b] * (double)rows / (double)b;
    return 0;
}

static size_t prompt_budget(const srv_sched *s, size_t decoding)
{
    size_t cap = s->opts.prefill_chunk > 0 ? (size_t)s->opts.prefill_chunk : SIZE_MAX;
    if (!decoding)
        return cap == SIZE_MAX ? 0 : cap;
    double dec = decode_time(s, decoding);
    if (dec <= 0 || s->tok_s <= 0)
        return cap < PROMPT_FIRST_TOKENS ? cap : PROMPT_FIRST_TOKENS;
    double target = s->opts.step_target;
    if (target <= 0)
        target = STEP_TARGET_FACTOR * dec > STEP_TARGET_MIN_S ? STEP_TARGET_FACTOR * dec : STEP_TARGET_MIN_S;
    double fit = (target - dec) / s->tok_s;
    size_t n = fit < PROMPT_MIN_TOKENS ? PROMPT_MIN_TOKENS : fit > (double)cap ? cap : (size_t)fit;
    return n;
}

static void ewma(double *v, double x)
{
    *v = *v > 0 ? *v + EWMA * (x - *v) : x;
}

/* Learns from a step of DEC decode rows and PROMPT prompt tokens that took T seconds. */
static void learn_step(srv_sched *s, size_t dec, size_t prompt, double t)
{
    if (!prompt) {
        if (dec)
            ewma(&s->dec_s[dec < STEP_MODEL_ROWS ? dec : STEP_MODEL_ROWS], t);
        return;
    }
    double base = decode_time(s, dec ? dec : 1);
    if (base > 0 && t > base)
        ewma(&s->tok_s, (t - base) / (double)prompt);
}

/* The ids the next step feeds: one per decoding slot, and prompt ids within BUDGET (0: no limit). */
static size_t step_tokens(const slot *slots, int n, size_t budget)
{
    size_t dec = 0, prompt = 0;
    for (int i = 0; i < n; i++) {
        if (eng_gen_prefilled(slots[i].gen))
            dec++;
        else
            prompt += slots[i].job->n_prompt - eng_gen_prompt_fed(slots[i].gen);
    }
    return dec + (budget && prompt > budget ? budget : prompt);
}

/*
 * After a step: the metrics and the delivery of what SL's generation
 * produced. Returns the reason its job ended, or SRV_FINISH_NONE.
 */
static srv_finish after_step(srv_sched *s, slot *sl, double now, char *msg, size_t msg_cap)
{
    srv_job *j = sl->job;
    const eng_gen_event *ev = eng_gen_last(sl->gen);
    /* A request's prompt, first token and prefill count once, at its first choice. */
    if (ev->prefilled && sl->choice == 0)
        srv_metrics_prompt_tokens(s->metrics, j->n_prompt, j->key_row);
    if (ev->token >= 0) {
        if (eng_gen_generated(sl->gen) == 1) {
            sl->t_first = now;
            if (sl->choice == 0) {
                srv_metrics_ttft(s->metrics, now - j->t_received, j->key_row);
                srv_metrics_prefill(s->metrics, now - sl->t_admit, j->key_row);
            }
        } else {
            srv_metrics_inter_token(s->metrics, now - sl->t_prev, j->key_row);
        }
        sl->t_prev = now;
        srv_metrics_generation_tokens(s->metrics, 1, j->key_row);
    }
    publish(s, sl, ev->text, ev->len, true);
    switch (ev->finish) {
    case ENG_GEN_RUNNING: return SRV_FINISH_NONE;
    case ENG_GEN_STOP: return SRV_FINISH_STOP;
    case ENG_GEN_LENGTH: return SRV_FINISH_LENGTH;
    case ENG_GEN_ERROR:
    case ENG_GEN_ENDED: break;
    }
    snprintf(msg, msg_cap, "%s", *eng_gen_error(sl->gen) ? eng_gen_error(sl->gen) : "the engine failed");
    return SRV_FINISH_ERROR;
}

/*
 * One engine step for every running slot, batched: each prefilled
 * generation decodes one id, and generations still reading their prompt
 * share the step's prompt budget (prompt_budget, see PROMPT_MIN_TOKENS) in
 * the order they were admitted. Jobs whose first choice the step prefilled
 * fork their other choices; ended choices are finished and removed.
 */
static void step_all(srv_sched *s, batch *b)
{
    slot *slots = b->slots;
    int n = b->n;
    size_t decoding = 0;
    for (int i = 0; i < n; i++) {
        b->gens[i] = slots[i].gen;
        decoding += eng_gen_prefilled(slots[i].gen);
    }
    eng_gen_budget budget = {.prefill_tokens = prompt_budget(s, decoding)};
    eng_diag diag;
    eng_diag_init(&diag);
    beat_begin(s, step_tokens(slots, n, budget.prefill_tokens));
#ifdef QD_TEST_HOOKS
    test_stall();
#endif
    double t0 = srv_now();
    eng_gen_step(b->gens, (size_t)n, &budget, &diag);
    double now = srv_now();
    beat_end(s);
    eng_diag_clear(&diag);
    size_t fed = 0;
    for (int i = 0; i < n; i++)
        fed += eng_gen_last(slots[i].gen)->prompt_fed;
    learn_step(s, decoding, fed, now - t0);
    srv_metrics_step(s->metrics, decoding, fed, now - t0);
    for (int i = 0; i < n; i++)
        if (eng_gen_last(slots[i].gen)->prefilled)
            fork_choices(s, b, &slots[i]);
    int kept = 0;
    for (int i = 0; i < b->n; i++) {
        char msg[160] = "";
        srv_finish f = after_step(s, &slots[i], now, msg, sizeof msg);
        if (f == SRV_FINISH_NONE) {
            slots[kept++] = slots[i];
            continue;
        }
        slot_finish(s, b, &slots[i], f, f == SRV_FINISH_ERROR ? msg : NULL);
    }
    b->n = kept;
}

/*
 * The prefix cache, made at the first admission (mu held): by then the
 * loop has set the KV budget the daemon derived once the model was loaded,
 * whose quarter is the cache's default budget.
 */
static void make_prefix(srv_sched *s)
{
    if (s->prefix_made)
        return;
    s->prefix_made = true;
    int64_t pool = s->opts.kv_pool_bytes;
    uint64_t pool_bytes = pool < 0   ? 0
                          : pool > 0 ? (uint64_t)pool
                          : s->opts.kv_budget ? s->opts.kv_budget / 4 : ENG_KV_POOL_DEFAULT;
    eng_model_set_kv_pool_budget(s->model, pool_bytes);
    if (s->opts.no_prefix_cache)
        return;
    uint64_t bytes = s->opts.prefix_bytes ? s->opts.prefix_bytes
                     : s->opts.kv_budget ? s->opts.kv_budget / 4 : (uint64_t)1 << 30;
    size_t min = s->opts.prefix_min > 0 ? (size_t)s->opts.prefix_min : 64;
    s->prefix = eng_prefix_new(s->model, bytes, min);
    if (!s->prefix)
        srv_log(SRV_LOG_WARN, "prefix_cache_off", "reason=\"out of memory\"");
    else
        srv_log(SRV_LOG_INFO, "prefix_cache", "bytes=%llu min_tokens=%zu", (unsigned long long)bytes, min);
}

static uint64_t prefix_bytes(const srv_sched *s)
{
    eng_prefix_stats st = {0};
    if (s->prefix)
        eng_prefix_get_stats(s->prefix, &st);
    return st.bytes;
}

/* Memory kept while idle: the prefix cache's entries and the KV pool's caches. */
static uint64_t idle_bytes(const srv_sched *s)
{
    return prefix_bytes(s) + eng_model_kv_pool_bytes(s->model);
}

void srv_sched_prefix_stats(srv_sched *s, eng_prefix_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->prefix_st;
    pthread_mutex_unlock(&s->mu);
}

static void update_gauges(srv_sched *s, const slot *slots, int n)
{
    publish_prefix(s);
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++)
        if (slots[i].gen)
            bytes += eng_session_kv_bytes_committed(eng_gen_session(slots[i].gen));
    srv_metrics_set_sessions(s->metrics, n, bytes);
}

static void *compute_main(void *arg)
{
    srv_sched *s = arg;
    pthread_setname_np(pthread_self(), "qwen3d-compute");
    if (load(s) != 0)
        return NULL;
    batch b = {.cap = s->opts.parallel};
    b.slots = calloc((size_t)b.cap, sizeof *b.slots);
    b.gens = calloc((size_t)b.cap, sizeof *b.gens);
    if (!b.slots || !b.gens) {
        free(b.slots);
        free(b.gens);
        eng_prefix_free(s->prefix);
        s->prefix = NULL;
        srv_log(SRV_LOG_ERROR, "compute_failed", "error=\"out of memory\"");
        pthread_mutex_lock(&s->mu);
        s->closed = true;
        cancel_all_locked(s);
        pthread_mutex_unlock(&s->mu);
        wake_loop(s);
        return NULL;
    }
    int last_waiting = -1;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int admitted = 0;
        while (s->waiting.head) {
            srv_job *j = s->waiting.head;
            /* First come, first served: a job whose choices do not fit the
             * free rows or the KV budget yet holds the ones behind it back too. */
            if (b.rows + j->n_choices > b.cap)
                break;
            make_prefix(s);
            if (s->opts.kv_budget && b.kv_used + j->kv_need + idle_bytes(s) > s->opts.kv_budget) {
                /* The KV pool and then the prefix cache live inside the KV budget: they give way to a
                 * running session. */
                uint64_t room = s->opts.kv_budget > b.kv_used + j->kv_need ? s->opts.kv_budget - b.kv_used - j->kv_need
                                                                           : 0;
                uint64_t cached = prefix_bytes(s);
                eng_model_kv_pool_shrink(s->model, room > cached ? room - cached : 0);
                uint64_t pooled = eng_model_kv_pool_bytes(s->model);
                if (s->prefix)
                    eng_prefix_shrink(s->prefix, room > pooled ? room - pooled : 0);
                if (b.n > 0 && b.kv_used + j->kv_need + idle_bytes(s) > s->opts.kv_budget)
                    break;
            }
            b.kv_used += j->kv_need;
            b.rows += j->n_choices;
            list_remove(&s->waiting, j);
            list_push(&s->running, j);
            j->state = JOB_RUNNING;
            j->live = 1;
            b.slots[b.n++] = (slot){.job = j, .t_admit = srv_now()};
            admitted++;
        }
        int waiting = s->waiting.n;
        if (b.n == 0) {
            /* The last waiting job may have been cancelled since the gauge
             * was set: set it before sleeping (the metrics lock nests
             * inside mu). */
            if (waiting != last_waiting) {
                srv_metrics_set_waiting(s->metrics, waiting);
                last_waiting = waiting;
            }
            bool stop = s->stopping;
            if (!stop)
                pthread_cond_wait(&s->cv, &s->mu);
            pthread_mutex_unlock(&s->mu);
            if (stop)
                break;
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        if (waiting != last_waiting || admitted) {
            srv_metrics_set_waiting(s->metrics, waiting);
            last_waiting = waiting;
        }

        /* Cancellations (of a job, or by a sibling choice's failure),
         * deadlines and set-up of new arrivals, before any step. */
        double now = srv_now();
        for (int i = 0; i < b.n;) {
            slot *sl = &b.slots[i];
            srv_job *j = sl->job;
            srv_finish why = (srv_finish)atomic_load(&j->cancel);
            char msg[160] = "";
            if (!why && j->deadline > 0 && now >= j->deadline)
                why = SRV_FINISH_DEADLINE;
            if (!why && !sl->gen) {
                srv_metrics_queue_wait(s->metrics, sl->t_admit - j->t_submit, j->key_row);
                if (!slot_setup(s, sl, msg, sizeof msg))
                    why = SRV_FINISH_ERROR;
            }
            if (!why) {
                i++;
                continue;
            }
            slot_finish(s, &b, sl, why, msg[0] ? msg : NULL);
            memmove(&b.slots[i], &b.slots[i + 1], (size_t)(b.n - i - 1) * sizeof *b.slots);
            b.n--;
        }
        if (b.n == 0) {
            update_gauges(s, b.slots, 0);
            continue;
        }
        step_all(s, &b);
        update_gauges(s, b.slots, b.n);
    }
    update_gauges(s, b.slots, 0);
    srv_metrics_set_waiting(s->metrics, 0);
    free(b.slots);
    free(b.gens);
    eng_prefix_free(s->prefix);
    s->prefix = NULL;
    return NULL;
}

/* ---- life cycle ------------------------------------------------------------- */

int srv_sched_new(uv_loop_t *loop, const srv_sched_opts *opts, srv_metrics *metrics, srv_sched_loaded_fn loaded,
                  void *user, srv_sched **out)
{
    *out = NULL;
    srv_sched *s = calloc(1, sizeof *s);
    if (!s)
        return SRV_ENOMEM;
    s->loop = loop;
    s->opts = *opts;
    if (s->opts.parallel < 1)
        s->opts.parallel = 1;
    if (s->opts.queue < 0)
        s->opts.queue = 0;
    if (s->opts.stall_cap <= 0)
        s->opts.stall_cap = STALL_CAP_S;
    s->metrics = metrics;
    s->loaded_fn = loaded;
    s->loaded_user = user;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->model_dir = strdup(opts->model_dir);
    if (!s->model_dir) {
        srv_sched_free(s);
        return SRV_ENOMEM;
    }
    s->opts.model_dir = s->model_dir;
    if (uv_async_init(loop, &s->async, on_async) != 0) {
        srv_sched_free(s);
        return SRV_ELOOP;
    }
    s->async.data = s;
    s->async_open = true;
    if (pthread_create(&s->thread, NULL, compute_main, s) != 0) {
        /* The handle is closed by srv_sched_stop(); the caller frees after the loop ran. */
        *out = s;
        return SRV_ETHREAD;
    }
    s->thread_started = true;
    *out = s;
    return 0;
}

void srv_sched_stop(srv_sched *s)
{
    if (!s)
        return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->closed = true;
        s->stopping = true;
        cancel_all_locked(s);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
        s->thread_started = false;
    }
    /* The last updates are delivered now: the handle is closed next. */
    deliver(s);
    if (s->async_open) {
        uv_close((uv_handle_t *)&s->async, NULL);
        s->async_open = false;
    }
}

void srv_sched_free(srv_sched *s)
{
    if (!s)
        return;
    srv_sched_stop(s);
    while (s->ready_head) {
        srv_job *j = s->ready_head;
        s->ready_head = j->ready_next;
        srv_job_release(j);
    }
    eng_gvocab_free(s->gvocab);
    eng_tok_free(s->tok);
    eng_model_free(s->model);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->model_dir);
    free(s);
}
