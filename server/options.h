/*
 * options: the options of `qwen3d serve`, from the command line and from a
 * --config file of "key = value" lines using the same names (command-line
 * values win). Every value is checked strictly: integers whole and in
 * range, no unknown options or keys, errors naming the option or the
 * file:line at fault.
 *
 * Main thread, before the server starts.
 */
#ifndef QWEN3D_SERVER_OPTIONS_H
#define QWEN3D_SERVER_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/runner.h"
#include "server/cli/cli.h"

typedef struct srv_config {
    char *model;            /* --model DIR (required) */
    char *model_name;       /* --model-name: the id clients send; default the folder's base name */
    char *host;             /* --host, default 127.0.0.1 */
    int64_t port;           /* --port, default 8080; 0 picks a free port (logged) */
    int64_t parallel;       /* --parallel, default 4 */
    int64_t ctx;            /* --ctx, default 0 = the model's context length */
    int64_t queue;          /* --queue, default 64 */
    char *api_key_file;     /* --api-key-file */
    char *cors_origin;      /* --cors-origin LIST: origins browsers may call the API from (default none) */
    int64_t max_body;       /* --max-body bytes, default 4 MiB */
    int64_t max_header;     /* --max-header-bytes: request line and headers, default 16 KiB */
    int64_t max_connections; /* --max-connections, default 1024 */
    int64_t idle_timeout;   /* --idle-timeout seconds without traffic on a connection, default 120 */
    int64_t max_tokens;     /* --max-tokens per request, default 0 = up to the context */
    int64_t kv_budget;      /* --kv-budget bytes of KV cache for all sessions; 0 = no budget;
                               default -1: derived from the memory available at start (cmd_serve) */
    char *sampling_defaults; /* --sampling-defaults model|openai: what fields a request leaves out take (default model) */
    int64_t request_timeout; /* --request-timeout seconds, default 600 */
    int64_t drain_delay;    /* --drain-delay seconds not ready but serving after SIGTERM, default 5 */
    int64_t drain_timeout;  /* --drain-timeout seconds, default 30 */
    int64_t linger_time;    /* --linger-time seconds an early refusal reads the rest of a body, default 10 */
    int64_t linger_bytes;   /* --linger-bytes it reads at most, default 64 MiB */
    int64_t prefill_chunk;  /* --prefill-chunk tokens, default 512 */
    int64_t max_step_ms;    /* --max-step-ms, 0: four decode steps, at least 200 ms */
    int64_t prefix_cache_bytes; /* 0: a quarter of the KV budget */
    int64_t prefix_min_tokens;
    int64_t kv_pool_bytes;  /* --kv-pool-bytes: 0 = a quarter of the KV budget, -1 = none */
    bool no_prefix_cache;
    bool log_prompts;       /* --log-prompts */
    bool no_webui;          /* --no-webui: no chat page, status page or /status.json */
    char *log_level;        /* --log-level debug|info|warn|error */
    char *cpus;             /* --cpus LIST: the CPUs of this replica (default: all) */
    int64_t numa_node;      /* --numa-node N: its NUMA node, memory included (default -1: none) */
    eng_model_opts engine;  /* --threads (default one per physical core), --kv-mode, ...: cli_engine_opt() */
} srv_config;

/*
 * Fills CFG from ARGV (after the subcommand) and the --config file it
 * names. Returns 0, 1 after printing --help to stdout, or 2 after printing
 * one error line to stderr.
 */
int srv_config_parse(int argc, char **argv, srv_config *cfg);
void srv_config_clear(srv_config *cfg);

/* Prints the serve usage. */
void srv_config_usage(FILE *out);

#endif
