/*
 * cmd_serve: `qwen3d serve`. Parses the options, starts the event loop with
 * the HTTP server, the scheduler (whose compute thread loads the model) and
 * the metrics, and runs until SIGTERM or SIGINT, then drains: no new
 * connections or generations, running requests get --drain-timeout seconds
 * to finish, the rest are ended with a final event, and the process exits 0.
 * After SIGTERM, once the model is loaded, the drain waits --drain-delay
 * seconds during which /health/ready answers 503 and everything is still
 * served, so balancers stop sending work before the listener closes.
 * SIGINT (someone at a terminal) drains at once; a second signal stops.
 *
 * systemd: READY=1 once the model is loaded, STATUS= lines as the state
 * changes, STOPPING=1 on SIGTERM, WATCHDOG=1 every half of
 * WATCHDOG_USEC while the loop runs and the compute thread is not stuck in
 * a step (srv_sched_heartbeat), so systemd restarts a daemon whose compute
 * thread hangs.
 *
 * Threads: the main thread runs the loop (the "loop thread" of the other
 * server/ files); sched.c starts the compute thread.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "engine/pool.h"
#include "server/cli/cli.h"
#include "server/options.h"
#include "server/error.h"
#include "server/fingerprint.h"
#include "server/http.h"
#include "server/keys.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/routes.h"
#include "server/sched.h"
#include "server/sysmem.h"
#include "server/webui.h"

#define CMD "serve"
/* After the drain timeout has ended every generation, the time left for their final events. */
#define FINAL_GRACE_MS 5000
#define DRAIN_POLL_MS 25

typedef struct serve {
    uv_loop_t loop;
    srv_config cfg;
    srv_metrics *metrics;
    srv_sched *sched;
    srv_routes *routes;
    srv_webui *webui;         /* NULL with --no-webui */
    srv_http *http;
    uv_signal_t sigterm, sigint, sighup;
    int argc;                 /* the command line, read again on SIGHUP */
    char **argv;
    uv_timer_t watchdog, drain_delay, drain_poll, drain_deadline;
    bool loaded, stopping, finished, deadline_passed;
    const char *stop_reason;  /* the signal's name */
    int exit_code;
    srv_sysmem mem;           /* read at start, before the model takes its share */
    srv_model_info info;      /* the loaded model's, once have_info */
    bool have_info, have_fingerprint;
    uv_work_t fingerprint_req;
    int fingerprint_rc;
    bool fingerprint_kept;   /* the model digest came from the cache folder */
    char cache_dir[4096];    /* the prepared-weights cache folder, which also keeps the digest; "" none */
    char fingerprint[SRV_FINGERPRINT_MAX], fingerprint_err[300];
} serve;

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/* Stops everything; uv_run returns once the handles have closed. */
static void finish(serve *sv)
{
    if (sv->finished)
        return;
    sv->finished = true;
    srv_http_close(sv->http);
    srv_sched_stop(sv->sched);
    srv_webui_close(sv->webui);
    close_handle((uv_handle_t *)&sv->sigterm);
    close_handle((uv_handle_t *)&sv->sigint);
    close_handle((uv_handle_t *)&sv->sighup);
    /* Closing the handles restored the default actions: a repeated SIGTERM
     * must not turn the orderly exit that follows into a kill. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    close_handle((uv_handle_t *)&sv->watchdog);
    close_handle((uv_handle_t *)&sv->drain_delay);
    close_handle((uv_handle_t *)&sv->drain_poll);
    close_handle((uv_handle_t *)&sv->drain_deadline);
}

static void on_drain_poll(uv_timer_t *t)
{
    serve *sv = t->data;
    if (srv_http_active(sv->http) == 0) {
        srv_log(SRV_LOG_INFO, "drained", "deadline_passed=%d", sv->deadline_passed);
        finish(sv);
    }
}

static void on_drain_deadline(uv_timer_t *t)
{
    serve *sv = t->data;
    if (!sv->deadline_passed) {
        int waiting = 0, running = 0;
        srv_sched_counts(sv->sched, &waiting, &running);
        srv_log(SRV_LOG_WARN, "drain_timeout", "waiting=%d running=%d action=end_generations", waiting, running);
        sv->deadline_passed = true;
        srv_sched_cancel_all(sv->sched);
        uv_timer_start(&sv->drain_deadline, on_drain_deadline, FINAL_GRACE_MS, 0);
        return;
    }
    srv_log(SRV_LOG_WARN, "drain_timeout", "requests=%zu action=close_connections", srv_http_active(sv->http));
    finish(sv);
}

static void start_drain(serve *sv)
{
    srv_log(SRV_LOG_INFO, "shutdown", "reason=%s active_requests=%zu drain_timeout_s=%lld", sv->stop_reason,
            sv->http ? srv_http_active(sv->http) : 0, (long long)sv->cfg.drain_timeout);
    srv_notify("STOPPING=1\nSTATUS=draining");
    if (!sv->http) {
        finish(sv);
        return;
    }
    srv_http_quiesce(sv->http);
    srv_routes_set_draining(sv->routes);
    uv_timer_start(&sv->drain_poll, on_drain_poll, 0, DRAIN_POLL_MS);
    uv_timer_start(&sv->drain_deadline, on_drain_deadline, (uint64_t)sv->cfg.drain_timeout * 1000, 0);
}

static void on_drain_delay(uv_timer_t *t) { start_drain(t->data); }

static void on_signal(uv_signal_t *s, int signum)
{
    serve *sv = s->data;
    const char *why = signum == SIGTERM ? "SIGTERM" : "SIGINT";
    if (sv->stopping) {
        srv_log(SRV_LOG_WARN, "shutdown", "reason=%s action=stop_now", why);
        finish(sv);
        return;
    }
    sv->stopping = true;
    sv->stop_reason = why;
    /* While the model loads no balancer sends work here: nothing to wait for. */
    if (signum != SIGTERM || !sv->cfg.drain_delay || !sv->loaded || !sv->http) {
        start_drain(sv);
        return;
    }
    srv_routes_set_stopping(sv->routes);
    srv_log(SRV_LOG_INFO, "not_ready", "reason=%s drain_delay_s=%lld active_requests=%zu", why,
            (long long)sv->cfg.drain_delay, srv_http_active(sv->http));
    srv_notifyf("STOPPING=1\nSTATUS=not ready; draining in %lld s", (long long)sv->cfg.drain_delay);
    uv_timer_start(&sv->drain_delay, on_drain_delay, (uint64_t)sv->cfg.drain_delay * 1000, 0);
}

static srv_log_level parse_level(const char *s)
{
    if (!s || !strcmp(s, "info"))
        return SRV_LOG_INFO;
    if (!strcmp(s, "debug"))
        return SRV_LOG_DEBUG;
    if (!strcmp(s, "warn"))
        return SRV_LOG_WARN;
    return SRV_LOG_ERROR;
}

/*
 * SIGHUP: reads the command line and its --config file again, and the
 * key file they name, and applies what may change while serving:
 * the API keys, --log-level, --log-prompts, --cors-origin, --max-tokens
 * and --request-timeout. Connections and running requests are untouched;
 * requests arriving from now on see the new values. Anything wrong (a bad
 * option, an unreadable key file, keys turned off) changes nothing and is
 * logged; the server serves on as before.
 */
static void on_sighup(uv_signal_t *s, int signum)
{
    (void)signum;
    serve *sv = s->data;
    srv_config next;
    char err[512], q[600];
    if (srv_config_parse(sv->argc, sv->argv, &next) != 0) {
        srv_log(SRV_LOG_ERROR, "reload_failed", "reason=\"the options or the --config file are invalid (see stderr); "
                "nothing changed\"");
        return;
    }
    srv_keys *keys = NULL;
    if (!next.api_key_file && sv->cfg.api_key_file) {
        srv_log(SRV_LOG_ERROR, "reload_failed", "reason=\"api-key-file is gone: keys cannot be turned off by a "
                "reload; nothing changed\"");
        goto out;
    }
    if (next.api_key_file && srv_keys_load(next.api_key_file, &keys, err, sizeof err) != 0) {
        srv_log(SRV_LOG_ERROR, "reload_failed", "reason=%s", srv_log_quote(q, sizeof q, err, strlen(err)));
        goto out;
    }
    size_t n_keys = srv_keys_count(keys);
    srv_routes_reload_opts ro = {
        .keys = keys,
        .cors_origins = next.cors_origin,
        .log_prompts = next.log_prompts,
        .request_timeout = (double)next.request_timeout,
        .max_tokens = next.max_tokens,
    };
    if (srv_routes_reload(sv->routes, &ro) != 0) {
        srv_keys_free(keys);
        srv_log(SRV_LOG_ERROR, "reload_failed", "reason=\"out of memory\"");
        goto out;
    }
    srv_log_set_level(parse_level(next.log_level));
    srv_log(SRV_LOG_INFO, "reloaded", "keys=%zu log_level=%s log_prompts=%d cors_origins=%s max_tokens=%lld "
            "request_timeout_s=%lld", n_keys, next.log_level ? next.log_level : "info", next.log_prompts,
            next.cors_origin ? srv_log_quote(q, sizeof q, next.cors_origin, strlen(next.cors_origin)) : "-",
            (long long)next.max_tokens, (long long)next.request_timeout);
out:
    srv_config_clear(&next);
}

static void on_watchdog(uv_timer_t *t)
{
    serve *sv = t->data;
    srv_sched_beat b;
    srv_sched_heartbeat(sv->sched, &b);
    if (!b.stuck)
        srv_notify("WATCHDOG=1");
}

/*
 * The KV budget when --kv-budget is not given: 3/4 of the memory available
 * at start (MemAvailable, or the cgroup's limit less its usage when that is
 * smaller) less the prepared weights. The quarter left over is for what is
 * not KV cache: the compute scratch, tokenizer encoders, the samplers' per
 * session scratch, the model file's page cache the embedding rows are read
 * from. Logs the figure and its parts. Returns 0, or -1 after saying why
 * there is no memory left for any KV cache.
 */
static int derive_kv_budget(serve *sv, const srv_model_info *info)
{
    srv_config *cfg = &sv->cfg;
    if (cfg->kv_budget >= 0) {
        srv_log(SRV_LOG_INFO, "kv_budget", "source=option budget_bytes=%lld%s", (long long)cfg->kv_budget,
                cfg->kv_budget ? "" : " unbounded=1");
        return 0;
    }
    const srv_sysmem *m = &sv->mem;
    cfg->kv_budget = 0;
    if (!m->available) {
        srv_log(SRV_LOG_WARN, "kv_budget", "source=none unbounded=1 reason=\"the memory available is unknown\"");
        return 0;
    }
    uint64_t left = m->available > info->weight_bytes ? m->available - info->weight_bytes : 0;
    uint64_t budget = left / 4 * 3;
    char cg[300];
    srv_log(SRV_LOG_INFO, "kv_budget",
            "source=derived budget_bytes=%llu rule=\"3/4 of (available - weights)\" available_bytes=%llu "
            "mem_available_bytes=%llu cgroup=%s cgroup_version=%d cgroup_limit_bytes=%llu cgroup_usage_bytes=%llu "
            "weight_bytes=%llu",
            (unsigned long long)budget, (unsigned long long)m->available, (unsigned long long)m->mem_available,
            srv_log_quote(cg, sizeof cg, m->cgroup, strlen(m->cgroup)), m->cgroup_version,
            (unsigned long long)m->cgroup_limit, (unsigned long long)m->cgroup_usage,
            (unsigned long long)info->weight_bytes);
    if (!budget) {
        srv_log(SRV_LOG_ERROR, "kv_budget", "error=\"no memory left for the KV cache\"");
        fprintf(stderr,
                "qwen3d: serve: no memory left for the KV cache: %llu bytes available, the weights take %llu; "
                "set --kv-budget\n",
                (unsigned long long)m->available, (unsigned long long)info->weight_bytes);
        return -1;
    }
    cfg->kv_budget = (int64_t)budget;
    srv_sched_set_kv_budget(sv->sched, budget);
    return 0;
}

static void become_ready(serve *sv);

/* Work pool: the system_fingerprint (build id and a digest of the model folder). */
static void fingerprint_work(uv_work_t *w)
{
    serve *sv = w->data;
    sv->fingerprint_rc = srv_fingerprint(PACKAGE_VERSION, sv->cfg.model, sv->cache_dir, sv->fingerprint,
                                         sizeof sv->fingerprint, &sv->fingerprint_kept, sv->fingerprint_err,
                                         sizeof sv->fingerprint_err);
}

static void fingerprint_done(uv_work_t *w, int status)
{
    serve *sv = w->data;
    char q[600];
    if (status != 0 || sv->fingerprint_rc != 0) {
        const char *why = status != 0 ? "the work was cancelled" : sv->fingerprint_err;
        srv_log(SRV_LOG_ERROR, "fingerprint_failed", "error=%s", srv_log_quote(q, sizeof q, why, strlen(why)));
        fprintf(stderr, "qwen3d: serve: %s\n", why);
        sv->exit_code = 1;
        finish(sv);
        return;
    }
    srv_log(SRV_LOG_INFO, "fingerprint", "digest=%s system_fingerprint=%s", sv->fingerprint_kept ? "kept" : "read",
            sv->fingerprint);
    sv->have_fingerprint = true;
    become_ready(sv);
}

/*
 * What the prepared-weights cache did, on the compute thread as the model
 * loads (state=writing when a new file goes to disk in the background), and
 * again on the writing thread once that file is written: a warning when it
 * could not help.
 */
static void log_prepared(void *ctx, const eng_prep_info *pi)
{
    (void)ctx;
    char qp[600], qn[600];
    bool warn = pi->state == ENG_PREP_UNSTORED || pi->state == ENG_PREP_REBUILT;
    srv_log(warn ? SRV_LOG_WARN : SRV_LOG_INFO, "prepared_cache", "state=%s path=%s note=%s",
            eng_prep_state_name(pi->state), srv_log_quote(qp, sizeof qp, pi->path, strlen(pi->path)),
            srv_log_quote(qn, sizeof qn, pi->note, strlen(pi->note)));
}

static void on_loaded(void *user, int status, const srv_model_info *info, const char *message)
{
    serve *sv = user;
    if (status != 0) {
        char q[600];
        srv_log(SRV_LOG_ERROR, "model_load_failed", "model=%s error=%s",
                srv_log_quote(q, sizeof q, sv->cfg.model, strlen(sv->cfg.model)),
                srv_log_quote(q + 300, 300, message, strlen(message)));
        fprintf(stderr, "qwen3d: serve: %s\n", message);
        srv_notifyf("STATUS=failed to load the model: %s", message);
        sv->exit_code = 1;
        finish(sv);
        return;
    }
    if (sv->finished)
        return;
    sv->info = *info;
    sv->have_info = true;
    become_ready(sv);
}

/*
 * The model is loaded and the fingerprint known (in either order): the
 * KV budget, then generation is accepted and systemd told READY.
 */
static void become_ready(serve *sv)
{
    if (!sv->have_info || !sv->have_fingerprint || sv->finished)
        return;
    const srv_model_info *info = &sv->info;
    char err[256], q[600];
    int src = derive_kv_budget(sv, info);
    if (!src && (src = srv_routes_set_loaded(sv->routes, info, sv->fingerprint, err, sizeof err)) != 0) {
        srv_log(SRV_LOG_ERROR, "sampling_defaults", "error=%s", srv_log_quote(q, sizeof q, err, strlen(err)));
        fprintf(stderr, "qwen3d: serve: %s (--sampling-defaults openai does without them)\n", err);
    }
    if (src) {
        sv->exit_code = 1;
        finish(sv);
        return;
    }
    sv->loaded = true;
    srv_webui_set_loaded(sv->webui, info, (uint64_t)sv->cfg.kv_budget);
    srv_metrics_set_model(sv->metrics, info->weight_bytes, info->load_seconds);
    srv_metrics_set_kv_budget(sv->metrics, (uint64_t)sv->cfg.kv_budget);
    srv_log(SRV_LOG_INFO, "model_loaded",
            "model=%s name=%s ctx=%lld vocab=%lld threads=%d weight_bytes=%llu in_place_bytes=%llu readahead_bytes=%llu "
            "load_ms=%.1f kv_bytes_full_ctx=%llu kv_budget=%llu",
            srv_log_quote(q, 300, sv->cfg.model, strlen(sv->cfg.model)), sv->cfg.model_name, (long long)info->ctx,
            (long long)info->vocab, info->threads, (unsigned long long)info->weight_bytes,
            (unsigned long long)info->in_place_bytes, (unsigned long long)info->readahead_bytes,
            info->load_seconds * 1e3,
            (unsigned long long)info->kv_bytes_full, (unsigned long long)sv->cfg.kv_budget);
    /* Without a budget, sessions that all grow to the full context could
     * need more memory than the machine has: say so once. */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t worst = info->kv_bytes_full * (uint64_t)sv->cfg.parallel;
    if (!sv->cfg.kv_budget && pages > 0 && page > 0 && worst > (uint64_t)pages * (uint64_t)page)
        srv_log(SRV_LOG_WARN, "kv_budget", "parallel=%lld kv_bytes_worst=%llu memory_bytes=%llu "
                "advice=\"set --kv-budget or lower --ctx or --parallel\"", (long long)sv->cfg.parallel,
                (unsigned long long)worst, (unsigned long long)pages * (unsigned long long)page);
    srv_notifyf("READY=1\nSTATUS=serving %s on port %d", sv->cfg.model_name, srv_http_port(sv->http));
}

int cmd_serve(int argc, char **argv)
{
    serve sv;
    memset(&sv, 0, sizeof sv);
    int rc = srv_config_parse(argc, argv, &sv.cfg);
    if (rc)
        return rc == 1 ? 0 : rc;
    srv_config *cfg = &sv.cfg;
    struct stat st;
    int st_rc = stat(cfg->model, &st);
    if (st_rc != 0 || !S_ISDIR(st.st_mode)) {
        if (st_rc != 0)
            cli_fail(CMD, "--model '%s': %s", cfg->model, strerror(errno));
        else
            cli_fail(CMD, "--model '%s' is not a folder", cfg->model);
        srv_config_clear(cfg);
        return 2;
    }
    srv_log_set_level(parse_level(cfg->log_level));
    /* Before any thread starts: every thread inherits the CPUs and the memory policy. */
    if ((rc = cli_place(CMD, &(cli_placement){cfg->cpus, cfg->numa_node}))) {
        srv_config_clear(cfg);
        return rc;
    }
    /* Before the model takes its share. */
    if (cfg->kv_budget < 0)
        srv_sysmem_read(NULL, &sv.mem);
    srv_keys *keys = NULL;
    char kerr[512];
    if (cfg->api_key_file && srv_keys_load(cfg->api_key_file, &keys, kerr, sizeof kerr) != 0) {
        cli_fail(CMD, "--api-key-file: %s", kerr);
        srv_config_clear(cfg);
        return 2;
    }
    size_t n_keys = srv_keys_count(keys);
    sv.argc = argc;
    sv.argv = argv;
    /* A client that closes its socket mid-write must not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);

    rc = 1;
    char err[256] = "";
    if (uv_loop_init(&sv.loop) != 0) {
        cli_fail(CMD, "cannot start the event loop");
        goto out_noloop;
    }
    uv_signal_init(&sv.loop, &sv.sigterm);
    uv_signal_init(&sv.loop, &sv.sigint);
    uv_signal_init(&sv.loop, &sv.sighup);
    uv_timer_init(&sv.loop, &sv.watchdog);
    uv_timer_init(&sv.loop, &sv.drain_delay);
    uv_timer_init(&sv.loop, &sv.drain_poll);
    uv_timer_init(&sv.loop, &sv.drain_deadline);
    sv.sigterm.data = sv.sigint.data = sv.sighup.data = &sv;
    sv.watchdog.data = sv.drain_delay.data = sv.drain_poll.data = sv.drain_deadline.data = &sv;

    if (!(sv.metrics = srv_metrics_new(PACKAGE_VERSION))) {
        cli_fail(CMD, "out of memory");
        goto out;
    }
    srv_metrics_set_model_name(sv.metrics, cfg->model_name);
    /* A step may run up to half of the watchdog's interval: see sched.c. */
    uint64_t wd = srv_notify_watchdog_usec();
    srv_sched_opts so = {
        .model_dir = cfg->model,
        .engine = cfg->engine,
        .parallel = (int)cfg->parallel,
        .queue = (int)cfg->queue,
        .ctx = cfg->ctx,
        .prefill_chunk = cfg->prefill_chunk,
        .step_target = (double)cfg->max_step_ms / 1e3,
        .prefix_bytes = (uint64_t)cfg->prefix_cache_bytes,
        .prefix_min = cfg->prefix_min_tokens,
        .kv_pool_bytes = cfg->kv_pool_bytes,
        .no_prefix_cache = cfg->no_prefix_cache,
        .kv_budget = cfg->kv_budget > 0 ? (uint64_t)cfg->kv_budget : 0, /* a derived one is set once loaded */
        .stall_cap = (double)wd / 2e6,
    };
    srv_webui_opts wo = {
        .model_name = cfg->model_name,
        .version = PACKAGE_VERSION,
        .kv_mode = eng_kv_mode_name(cfg->engine.kv_mode),
        .kv_type = kv_type_name(cfg->engine.kv_type),
        .parallel = cfg->parallel,
        .queue = cfg->queue,
    };
    if (!cfg->no_webui && !(sv.webui = srv_webui_new(&sv.loop, &wo, sv.metrics))) {
        cli_fail(CMD, "out of memory");
        goto out;
    }
    srv_routes_opts ro = {
        .model_name = cfg->model_name,
        .keys = keys,
        .cors_origins = cfg->cors_origin,
        .log_prompts = cfg->log_prompts,
        .request_timeout = (double)cfg->request_timeout,
        .max_tokens = cfg->max_tokens,
        .openai_sampling = cfg->sampling_defaults && !strcmp(cfg->sampling_defaults, "openai"),
        .webui = sv.webui,
    };
    srv_http_opts ho = {
        .host = cfg->host,
        .port = (int)cfg->port,
        .max_body = (size_t)cfg->max_body,
        .max_header = (size_t)cfg->max_header,
        .connection_limit = (unsigned)cfg->max_connections,
        .idle_timeout_s = (unsigned)cfg->idle_timeout,
        .linger_s = (unsigned)cfg->linger_time,
        .linger_bytes = (uint64_t)cfg->linger_bytes,
    };
    srv_http_handlers hh = {srv_routes_on_request, srv_routes_on_done};
    /* Listen first, so /health answers 503 while the model loads. */
    so.engine.prepared = log_prepared;
    so.engine.prepared_cache_background = true; /* ready before a new cache file is on disk */
    so.engine.prepared_cache = cli_prepared_cache(cfg->engine.prepared_cache);
    int src = srv_sched_new(&sv.loop, &so, sv.metrics, on_loaded, &sv, &sv.sched);
    if (src) {
        cli_fail(CMD, "%s", srv_strerror(src));
        goto out;
    }
    if (!(sv.routes = srv_routes_new(&ro, &sv.loop, sv.sched, sv.metrics))) {
        srv_keys_free(keys);
        cli_fail(CMD, "out of memory");
        goto out;
    }
    keys = NULL; /* the routes' now */
    if (srv_http_new(&sv.loop, &ho, &hh, sv.routes, &sv.http, err, sizeof err) != 0) {
        cli_fail(CMD, "%s", err);
        goto out;
    }
    char q[600];
    srv_log(SRV_LOG_INFO, "listening",
            "host=%s port=%d model=%s parallel=%lld queue=%lld auth=%s kv_mode=%s webui=%d pid=%ld version=%s "
            "keys=%zu",
            cfg->host, srv_http_port(sv.http), srv_log_quote(q, sizeof q, cfg->model, strlen(cfg->model)),
            (long long)cfg->parallel, (long long)cfg->queue, n_keys ? "bearer" : "none",
            eng_kv_mode_name(cfg->engine.kv_mode), sv.webui != NULL,
            (long)getpid(), PACKAGE_VERSION, n_keys);
    eng_placement pl;
    eng_pool_placement(&pl);
    srv_log(SRV_LOG_INFO, "placement", "cpus=%s cores=%d membind=%s numa_nodes=%s", pl.cpus, pl.cores,
            pl.membind ? "bind" : "first_touch", pl.mem_nodes);
    srv_notify("STATUS=loading the model");
    sv.fingerprint_req.data = &sv;
    snprintf(sv.cache_dir, sizeof sv.cache_dir, "%s", so.engine.prepared_cache ? so.engine.prepared_cache : "");
    if (uv_queue_work(&sv.loop, &sv.fingerprint_req, fingerprint_work, fingerprint_done) != 0) {
        cli_fail(CMD, "cannot start the model folder's digest");
        goto out;
    }
    uv_signal_start(&sv.sigterm, on_signal, SIGTERM);
    uv_signal_start(&sv.sigint, on_signal, SIGINT);
    uv_signal_start(&sv.sighup, on_sighup, SIGHUP);
    if (wd) {
        uint64_t every = wd / 2000;
        uv_timer_start(&sv.watchdog, on_watchdog, every ? every : 1, every ? every : 1);
    }
    uv_run(&sv.loop, UV_RUN_DEFAULT);
    rc = sv.exit_code;
    srv_log(SRV_LOG_INFO, "exit", "code=%d", rc);
out:
    finish(&sv);
    uv_run(&sv.loop, UV_RUN_DEFAULT);
    srv_http_free(sv.http);
    srv_sched_free(sv.sched);
    srv_routes_free(sv.routes);
    srv_webui_free(sv.webui);
    srv_metrics_free(sv.metrics);
    uv_loop_close(&sv.loop);
out_noloop:
    srv_keys_free(keys);
    srv_config_clear(cfg);
    return rc;
}
