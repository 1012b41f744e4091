/*
 * options: `qwen3d serve` options (see options.h). One table describes every
 * option; the command line and the config file both go through it.
 *
 * Main thread.
 */
#include "server/options.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "server/cli/cli.h"

#define CMD "serve"

typedef enum opt_kind { OPT_STR, OPT_INT, OPT_FLAG } opt_kind;

typedef struct opt_def {
    const char *name;
    opt_kind kind;
    size_t offset;
    int64_t lo, hi;
    const char *arg, *help;
} opt_def;

#define STR(name, field, arg, help) {name, OPT_STR, offsetof(srv_config, field), 0, 0, arg, help}
#define INT(name, field, lo, hi, arg, help) {name, OPT_INT, offsetof(srv_config, field), lo, hi, arg, help}
#define FLAG(name, field, help) {name, OPT_FLAG, offsetof(srv_config, field), 0, 0, NULL, help}

static const opt_def OPTS[] = {
    STR("model", model, "DIR", "model folder (model.onnx, genai_config.json, tokenizer.json); required"),
    STR("model-name", model_name, "NAME", "model id served to clients (default: the folder's name)"),
    STR("host", host, "ADDR", "address to listen on (default 127.0.0.1)"),
    INT("port", port, 0, 65535, "N", "TCP port (default 8080; 0 = any free port, logged)"),
    INT("parallel", parallel, 1, 256, "N", "sessions generating at once (default 4)"),
    INT("ctx", ctx, 1, INT32_MAX, "N", "longest sequence per request (default: the model's context length)"),
    INT("queue", queue, 0, 1 << 20, "N", "requests that may wait for a session (default 64; more get 503)"),
    STR("api-key-file", api_key_file, "FILE", "require 'Authorization: Bearer KEY' with KEY read from FILE"),
    STR("cors-origin", cors_origin, "LIST",
        "comma-separated origins (scheme://host[:port], or *) whose pages may call the API from a browser "
        "(default: none)"),
    INT("max-body", max_body, 1024, 1 << 30, "BYTES", "largest request body (default 4194304; more get 413)"),
    INT("max-header-bytes", max_header, 1024, 1 << 20, "BYTES",
        "largest request line plus headers (default 16384; more get 431)"),
    INT("linger-time", linger_time, 0, 3600, "S",
        "read and drop the rest of a body refused with 413 or 431 for up to S s, so clients still "
        "sending see the answer (default 10; 0: close at once)"),
    INT("linger-bytes", linger_bytes, 0, INT64_MAX, "BYTES",
        "... and up to BYTES of it (default 67108864; 0: close at once)"),
    INT("max-connections", max_connections, 1, 65536, "N",
        "open connections at most (default 1024; more wait until one closes)"),
    INT("idle-timeout", idle_timeout, 1, 86400, "S",
        "close a connection after S seconds without traffic (default 120)"),
    INT("max-tokens", max_tokens, 0, INT32_MAX, "N",
        "largest max_tokens of a request, and the default's cap (default 0: the context)"),
    INT("kv-budget", kv_budget, 0, INT64_MAX, "BYTES",
        "KV cache bytes all sessions may reserve; requests wait for room (default: 3/4 of the memory available "
        "at start less the weights; 0: no budget)"),
    STR("sampling-defaults", sampling_defaults, "MODE",
        "sampling values of fields a request leaves out: 'model' (default), the model's genai_config.json; "
        "'openai', OpenAI's"),
    INT("request-timeout", request_timeout, 1, 86400, "S", "deadline of one request in seconds (default 600)"),
    INT("drain-delay", drain_delay, 0, 3600, "S",
        "on SIGTERM, first answer /health/ready 503 for S s while serving on (default 5; 0: drain at once)"),
    INT("drain-timeout", drain_timeout, 0, 3600, "S", "then, time given to running requests (default 30)"),
    INT("prefill-chunk", prefill_chunk, 1, 1 << 20, "N", "prompt tokens per scheduling step at most (default 512)"),
    INT("max-step-ms", max_step_ms, 0, 600000, "MS",
        "while streams decode, prompt tokens per step fit this step time (default 0: four decode steps, "
        "at least 200 ms)"),
    STR("cpus", cpus, "LIST", "run on these CPUs only, e.g. 0-3,8; memory from their NUMA nodes (default: all)"),
    INT("numa-node", numa_node, 0, CLI_NUMA_NODE_MAX, "N",
        "run on NUMA node N's CPUs, memory bound to node N (default: none)"),
    INT("prefix-cache-bytes", prefix_cache_bytes, 0, INT64_MAX, "BYTES",
        "KV bytes the prompt-prefix cache keeps, inside --kv-budget (default 0: a quarter of the budget, "
        "or 1 GiB without one)"),
    INT("kv-pool-bytes", kv_pool_bytes, -1, INT64_MAX, "BYTES",
        "idle KV memory kept, inside --kv-budget, so new sessions reuse touched pages (default 0: a quarter of "
        "the budget, or 1 GiB without one; -1: none)"),
    INT("prefix-min-tokens", prefix_min_tokens, 1, 1 << 20, "N", "shortest prompt the prefix cache keeps (default 64)"),
    FLAG("no-prefix-cache", no_prefix_cache, "do not keep or reuse prompt prefixes"),
    FLAG("log-prompts", log_prompts, "log prompt and completion text (off by default)"),
    FLAG("no-webui", no_webui, "do not serve the chat page (/), the status page (/status) or /status.json"),
    STR("log-level", log_level, "LEVEL", "debug, info, warn or error (default info)"),
};
#define N_OPTS (sizeof OPTS / sizeof OPTS[0])

void srv_config_usage(FILE *out)
{
    fprintf(out, "usage: qwen3d serve --model DIR [OPTIONS]\n\n"
                 "Serves the model over an OpenAI-compatible HTTP API.\n\n");
    for (size_t i = 0; i < N_OPTS; i++) {
        char left[48];
        snprintf(left, sizeof left, "--%s%s%s", OPTS[i].name, OPTS[i].arg ? " " : "", OPTS[i].arg ? OPTS[i].arg : "");
        fprintf(out, "  %-26s %s\n", left, OPTS[i].help);
    }
    fprintf(out, "  %-26s %s\n", "--config FILE", "read options from FILE: 'name = value' lines, '#' comments");
    fprintf(out, "\nEngine options (also as config keys, e.g. 'kv-mode = tensor', 'matmul-fp32 = true'):\n  %s\n",
            CLI_ENGINE_USAGE);
}

/*
 * A config key that is not in the table may be one of the engine options
 * every model-running command shares: they go through cli_engine_opt() as
 * "--KEY=VALUE", or "--KEY" for a flag set to true. Returns 0, 1 when KEY is
 * not an engine option, or 2 after printing an error.
 */
static int config_engine(srv_config *cfg, const char *key, const char *value)
{
    char opt[300];
    bool on = !strcmp(value, "true") || !strcmp(value, "yes") || !strcmp(value, "1");
    bool off = !strcmp(value, "false") || !strcmp(value, "no") || !strcmp(value, "0");
    eng_model_opts scratch = cfg->engine;
    int i = 1, r = 0;
    if (on || off) {
        /* A flag; "false" keeps the default, which every engine flag has off. */
        snprintf(opt, sizeof opt, "--%s", key);
        char *av[] = {(char *)CMD, opt, NULL};
        if (strcmp(key, "threads") != 0 && strcmp(key, "kv-mode") != 0 && strcmp(key, "kv-type") != 0)
            r = cli_engine_opt(CMD, 2, av, &i, &scratch);
        if (r > 0) {
            if (on)
                cfg->engine = scratch;
            return 0;
        }
    }
    snprintf(opt, sizeof opt, "--%s=%s", key, value);
    char *av[] = {(char *)CMD, opt, NULL};
    i = 1;
    r = cli_engine_opt(CMD, 2, av, &i, &cfg->engine);
    return r < 0 ? 2 : r > 0 ? 0 : 1;
}

static const opt_def *find_opt(const char *name, size_t len)
{
    for (size_t i = 0; i < N_OPTS; i++)
        if (strlen(OPTS[i].name) == len && !strncmp(OPTS[i].name, name, len))
            return &OPTS[i];
    return NULL;
}

/* Stores VALUE for D; WHERE names the source in errors ("--port" or "FILE:3: port"). */
static int apply(srv_config *cfg, const opt_def *d, const char *value, const char *where)
{
    char *base = (char *)cfg + d->offset;
    switch (d->kind) {
    case OPT_STR: {
        if (!*value)
            return cli_fail(CMD, "%s: empty value", where);
        char **dst = (char **)base;
        char *v = strdup(value);
        if (!v)
            return cli_fail(CMD, "out of memory");
        free(*dst);
        *dst = v;
        return 0;
    }
    case OPT_INT:
        if (!cli_parse_i64(value, d->lo, d->hi, (int64_t *)base))
            return cli_fail(CMD, "%s must be an integer in %lld..%lld, not '%s'", where, (long long)d->lo,
                            (long long)d->hi, value);
        return 0;
    case OPT_FLAG:
        if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes"))
            *(bool *)base = true;
        else if (!strcmp(value, "false") || !strcmp(value, "0") || !strcmp(value, "no"))
            *(bool *)base = false;
        else
            return cli_fail(CMD, "%s must be true or false, not '%s'", where, value);
        return 0;
    }
    return 2;
}

/*
 * One --cors-origin entry: "*", or an origin as browsers send it in the
 * Origin header (http or https, a host of letters, digits, dots and dashes
 * or a bracketed IPv6 address, an optional port, nothing after).
 */
static bool origin_ok(const char *s, size_t n)
{
    if (n == 1 && *s == '*')
        return true;
    size_t k = !strncmp(s, "http://", 7) ? 7 : !strncmp(s, "https://", 8) ? 8 : 0;
    if (!k || k >= n)
        return false;
    size_t h = k;
    if (s[h] == '[') {
        while (h < n && (isxdigit((unsigned char)s[h]) || s[h] == ':' || s[h] == '[' || s[h] == '.'))
            h++;
        if (h >= n || s[h++] != ']')
            return false;
    } else {
        while (h < n && (isalnum((unsigned char)s[h]) || s[h] == '.' || s[h] == '-'))
            h++;
        if (h == k)
            return false;
    }
    if (h < n && s[h] == ':') {
        size_t d = ++h;
        while (h < n && isdigit((unsigned char)s[h]))
            h++;
        if (h == d || h - d > 5)
            return false;
    }
    return h == n;
}

/* Checks every comma-separated entry of a --cors-origin LIST. */
static int check_origins(const char *list)
{
    for (const char *p = list;;) {
        size_t n = strcspn(p, ",");
        const char *e = p;
        size_t m = n;
        while (m && isspace((unsigned char)*e))
            e++, m--;
        while (m && isspace((unsigned char)e[m - 1]))
            m--;
        if (!origin_ok(e, m))
            return cli_fail(CMD, "--cors-origin: '%.*s' is not an origin (scheme://host[:port], e.g. "
                            "https://app.example.com, or *)", (int)m, e);
        if (!p[n])
            return 0;
        p += n + 1;
    }
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

static int read_config(srv_config *cfg, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_fail(CMD, "--config: cannot open '%s': %s", path, strerror(errno));
    char line[4096];
    int lineno = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc = cli_fail(CMD, "%s:%d: line too long", path, lineno);
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = cli_fail(CMD, "%s:%d: expected 'name = value'", path, lineno);
            break;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        size_t vl = strlen(value);
        if (vl >= 2 && ((value[0] == '"' && value[vl - 1] == '"') || (value[0] == '\'' && value[vl - 1] == '\''))) {
            value[vl - 1] = '\0';
            value++;
        }
        const opt_def *d = find_opt(key, strlen(key));
        char where[512];
        snprintf(where, sizeof where, "%s:%d: %s", path, lineno, key);
        if (d)
            rc = apply(cfg, d, value, where);
        else if ((rc = config_engine(cfg, key, value)) == 1)
            rc = cli_fail(CMD, "%s:%d: unknown key '%s'", path, lineno, key);
    }
    if (!rc && ferror(f))
        rc = cli_fail(CMD, "--config: cannot read '%s'", path);
    fclose(f);
    return rc;
}

/* One pass over ARGV. With ONLY_CONFIG, only --config and --help are acted on. */
static int parse_argv(int argc, char **argv, srv_config *cfg, bool only_config, const char **config_path)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (only_config) {
                srv_config_usage(stdout);
                return 1;
            }
            continue;
        }
        if (a[0] != '-' || a[1] != '-')
            return cli_fail(CMD, "unexpected argument '%s' (try qwen3d serve --help)", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const char *value = eq ? eq + 1 : NULL;
        bool is_config = nlen == 6 && !strncmp(name, "config", 6);
        const opt_def *d = is_config ? NULL : find_opt(name, nlen);
        if (!is_config && !d) {
            /* The engine options shared by every model-running command. */
            eng_model_opts scratch = cfg->engine;
            int r = cli_engine_opt(CMD, argc, argv, &i, only_config ? &scratch : &cfg->engine);
            if (r < 0)
                return 2;
            if (r > 0)
                continue;
            return cli_fail(CMD, "unknown option '%s' (try qwen3d serve --help)", a);
        }
        if (d && d->kind == OPT_FLAG && !value) {
            if (!only_config)
                *(bool *)((char *)cfg + d->offset) = true;
            continue;
        }
        if (!value) {
            if (i + 1 >= argc)
                return cli_fail(CMD, "option --%.*s needs a value", (int)nlen, name);
            value = argv[++i];
        }
        if (is_config) {
            if (only_config)
                *config_path = value;
            continue;
        }
        if (!only_config) {
            char where[64];
            snprintf(where, sizeof where, "--%s", d->name);
            int rc = apply(cfg, d, value, where);
            if (rc)
                return rc;
        }
    }
    return 0;
}

void srv_config_clear(srv_config *cfg)
{
    free(cfg->model);
    free(cfg->model_name);
    free(cfg->host);
    free(cfg->api_key_file);
    free(cfg->cors_origin);
    free(cfg->log_level);
    free(cfg->sampling_defaults);
    free(cfg->cpus);
    memset(cfg, 0, sizeof *cfg);
}

int srv_config_parse(int argc, char **argv, srv_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->port = 8080;
    cfg->parallel = 4;
    cfg->queue = 64;
    cfg->max_body = 4 << 20;
    cfg->max_header = 16 << 10;
    cfg->max_connections = 1024;
    cfg->idle_timeout = 120;
    cfg->request_timeout = 600;
    cfg->drain_delay = 5;
    cfg->drain_timeout = 30;
    cfg->linger_time = 10;
    cfg->linger_bytes = 64 << 20;
    cfg->prefill_chunk = 512;
    cfg->kv_budget = -1;
    cfg->numa_node = -1;
    cfg->prefix_min_tokens = 64;
    const char *config_path = NULL;
    int rc = parse_argv(argc, argv, cfg, true, &config_path);
    if (!rc && config_path)
        rc = read_config(cfg, config_path);
    if (!rc)
        rc = parse_argv(argc, argv, cfg, false, NULL);
    if (!rc && !cfg->model)
        rc = cli_fail(CMD, "--model DIR is required (try qwen3d serve --help)");
    if (!rc && cfg->log_level && strcmp(cfg->log_level, "debug") && strcmp(cfg->log_level, "info") &&
        strcmp(cfg->log_level, "warn") && strcmp(cfg->log_level, "error"))
        rc = cli_fail(CMD, "--log-level must be debug, info, warn or error, not '%s'", cfg->log_level);
    if (!rc && cfg->sampling_defaults && strcmp(cfg->sampling_defaults, "model") &&
        strcmp(cfg->sampling_defaults, "openai"))
        rc = cli_fail(CMD, "--sampling-defaults must be model or openai, not '%s'", cfg->sampling_defaults);
    if (!rc && cfg->cors_origin)
        rc = check_origins(cfg->cors_origin);
    if (!rc && !cfg->host && !(cfg->host = strdup("127.0.0.1")))
        rc = cli_fail(CMD, "out of memory");
    if (!rc && !cfg->model_name) {
        /* The folder's last component, without trailing slashes. */
        size_t n = strlen(cfg->model);
        while (n > 1 && cfg->model[n - 1] == '/')
            n--;
        size_t b = n;
        while (b > 0 && cfg->model[b - 1] != '/')
            b--;
        if (!(cfg->model_name = strndup(cfg->model + b, n - b)))
            rc = cli_fail(CMD, "out of memory");
    }
    if (rc)
        srv_config_clear(cfg);
    return rc;
}
