/*
 * cli: shared argument parsing and the progress line of the subcommands (see
 * cli.h). Runs on the main thread; argument parsing before any other thread
 * exists.
 */
#include "server/cli/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/pool.h"

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "qwen3d: %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (!s || !*s)
        return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

int cli_opt(const char *cmd, int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *a = argv[*i];
    if (a[0] != '-' || a[1] != '-')
        return 0;
    size_t n = strlen(name);
    if (strncmp(a + 2, name, n) != 0)
        return 0;
    if (a[2 + n] == '=') {
        *value = a + 3 + n;
        return 1;
    }
    if (a[2 + n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        cli_fail(cmd, "option --%s needs a value", name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

bool cli_flag(char **argv, int i, const char *name)
{
    const char *a = argv[i];
    return a[0] == '-' && a[1] == '-' && strcmp(a + 2, name) == 0;
}

int cli_engine_opt(const char *cmd, int argc, char **argv, int *i, eng_model_opts *o)
{
    const char *v = NULL;
    int r;
    int64_t n;
    if ((r = cli_opt(cmd, argc, argv, i, "threads", &v)) != 0) {
        if (r > 0 && !cli_parse_i64(v, 1, 1024, &n)) {
            cli_fail(cmd, "--threads must be an integer in 1..1024, not '%s'", v);
            return -1;
        }
        o->threads = r > 0 ? (int)n : o->threads;
        return r;
    }
    if ((r = cli_opt(cmd, argc, argv, i, "kv-mode", &v)) != 0) {
        if (r > 0 && eng_kv_mode_parse(v, &o->kv_mode) != 0) {
            cli_fail(cmd, "--kv-mode must be persistent or tensor, not '%s'", v);
            return -1;
        }
        return r;
    }
    if ((r = cli_opt(cmd, argc, argv, i, "kv-type", &v)) != 0) {
        if (r > 0 && kv_type_parse(v, &o->kv_type) != 0) {
            cli_fail(cmd, "--kv-type must be f32, f16 or q8, not '%s'", v);
            return -1;
        }
        return r;
    }
    if ((r = cli_opt(cmd, argc, argv, i, "prepared-cache", &v)) != 0) {
        /* A copy: a config file's value lives in a buffer of the caller's (one folder per process). */
        static char folder[4096];
        if (r > 0 && (!*v || strlen(v) >= sizeof folder)) {
            cli_fail(cmd, "--prepared-cache must name a folder (shorter than %zu bytes) or be off", sizeof folder);
            return -1;
        }
        if (r > 0) {
            snprintf(folder, sizeof folder, "%s", v);
            o->prepared_cache = folder;
        }
        return r;
    }
    if (cli_flag(argv, *i, "matmul-fp32")) {
        o->matmul_fp32 = true;
        return 1;
    }
    if (cli_flag(argv, *i, "no-fusion")) {
        o->no_fusion = true;
        return 1;
    }
    if (cli_flag(argv, *i, "no-readahead")) {
        o->no_readahead = true;
        return 1;
    }
    return 0;
}

const char *cli_prepared_cache(const char *opt)
{
    static char dir[4096];
    const char *v = opt ? opt : getenv("QWEN3D_PREPARED_CACHE"), *e;
    int n = -1;
    if (v && *v)
        return v;
    if ((e = getenv("CACHE_DIRECTORY")) && *e)
        n = snprintf(dir, sizeof dir, "%.*s", (int)strcspn(e, ":"), e); /* systemd's CacheDirectory=, its first */
    else if ((e = getenv("XDG_CACHE_HOME")) && *e == '/')
        n = snprintf(dir, sizeof dir, "%s/qwen3d", e);
    else if ((e = getenv("HOME")) && *e == '/')
        n = snprintf(dir, sizeof dir, "%s/.cache/qwen3d", e);
    return n > 0 && (size_t)n < sizeof dir ? dir : "";
}

int cli_placement_opt(const char *cmd, int argc, char **argv, int *i, cli_placement *p)
{
    const char *v = NULL;
    int r;
    if ((r = cli_opt(cmd, argc, argv, i, "cpus", &v)) != 0) {
        if (r > 0)
            p->cpus = v;
        return r;
    }
    if ((r = cli_opt(cmd, argc, argv, i, "numa-node", &v)) > 0 &&
        !cli_parse_i64(v, 0, CLI_NUMA_NODE_MAX, &p->numa_node)) {
        cli_fail(cmd, "--numa-node must be an integer in 0..%d, not '%s'", CLI_NUMA_NODE_MAX, v);
        return -1;
    }
    return r;
}

int cli_place(const char *cmd, const cli_placement *p)
{
    char err[512];
    if (eng_pool_place(p->cpus, (int)p->numa_node, err, sizeof err) != 0)
        return cli_fail(cmd, "%s", err);
    return 0;
}

/* ---- progress line ---- */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void cli_progress_init(cli_progress *p, bool json)
{
    *p = (cli_progress){.on = !json && isatty(STDERR_FILENO), .t0 = mono_s(), .last = -1};
}

double cli_progress_elapsed(const cli_progress *p)
{
    return mono_s() - p->t0;
}

void cli_progress_text(cli_progress *p, bool final, const char *fmt, ...)
{
    if (!p->on)
        return;
    double t = mono_s();
    if (!final && p->drawn && t - p->last < 0.1)
        return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* Carriage return and erase-to-end-of-line: the line replaces the previous one. */
    fprintf(stderr, "\r\033[K%s", line);
    fflush(stderr);
    p->drawn = true;
    p->last = t;
}

void cli_progress_bytes(cli_progress *p, const char *what, uint64_t done, uint64_t total)
{
    if (!p->on)
        return;
    double gib = 1024.0 * 1024 * 1024, mib = 1024.0 * 1024;
    double unit = total >= gib ? gib : mib, el = cli_progress_elapsed(p);
    char left[48] = "";
    /* The rate so far; only once there is one to speak of. */
    double secs = done ? el * (double)(total - done) / (double)done : 0;
    if (done && done < total && el >= 0.5 && secs >= 1)
        snprintf(left, sizeof left, ", about %.0f s left", secs);
    cli_progress_text(p, done == 0 || done >= total, "%s: %.1f of %.1f %s (%.0f%%)%s", what, (double)done / unit,
                      (double)total / unit, unit == gib ? "GiB" : "MiB",
                      total ? 100.0 * (double)done / (double)total : 100.0, left);
}

void cli_progress_cb(void *ctx, uint64_t done, uint64_t total)
{
    cli_progress *p = ctx;
    cli_progress_bytes(p, p->what, done, total);
}

void cli_progress_clear(cli_progress *p)
{
    if (p->on && p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->drawn = false;
}

int cli_model_open(cli_progress *p, const char *dir, const eng_model_opts *opts, eng_model **out, eng_diag *diag)
{
    char what[320];
    eng_model_opts o = *opts;
    if (p->on) {
        snprintf(what, sizeof what, "loading %s", dir);
        p->what = what;
        o.progress = cli_progress_cb;
        o.progress_ctx = p;
        cli_progress_text(p, true, "%s", what);
    }
    o.prepared_cache = cli_prepared_cache(o.prepared_cache);
    int rc = eng_model_open(dir, &o, out, diag);
    cli_progress_clear(p);
    p->what = NULL;
    eng_prep_info pi;
    if (rc == 0 && (eng_plan_prepared_cache(eng_model_plan(*out), &pi), pi.state == ENG_PREP_UNSTORED))
        fprintf(stderr, "qwen3d: warning: the prepared weights were not cached (%s); the next load packs them again\n",
                pi.note);
    return rc;
}
