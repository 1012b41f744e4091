/*
 * cli: the qwen3d subcommands and the small argument helpers they share.
 * Each cmd_* function gets argv after the subcommand name, prints errors as one
 * line on stderr, and returns the process exit code.
 */
#ifndef QWEN3D_SERVER_CLI_H
#define QWEN3D_SERVER_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/runner.h"

int cmd_inspect(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* Prints "qwen3d: CMD: message" to stderr; returns 2 (usage) for convenience. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Strict integer parse of an option value: whole string, in [lo, hi]. */
bool cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);

/*
 * Matches argv[*i] against "--NAME" or "--NAME=VALUE". On a match sets *value
 * (consuming the next argument if needed) and returns 1; returns 0 if not this
 * option, -1 if the value is missing (after printing the error).
 */
int cli_opt(const char *cmd, int argc, char **argv, int *i, const char *name, const char **value);
/* Matches a flag without value ("--json"). */
bool cli_flag(char **argv, int i, const char *name);

/*
 * The engine options every model-running command shares: --threads N,
 * --kv-mode persistent|tensor, --kv-type f32|f16|q8, --matmul-fp32, --no-fusion,
 * --prepared-cache DIR|off, --no-readahead.
 * Returns 1 if argv[*i] was one (consumed), 0 if not, -1 after printing an
 * error.
 */
int cli_engine_opt(const char *cmd, int argc, char **argv, int *i, eng_model_opts *o);
/*
 * The prepared-weights cache folder of a command: OPT (--prepared-cache),
 * else $QWEN3D_PREPARED_CACHE, else systemd's $CACHE_DIRECTORY
 * (CacheDirectory=), else $XDG_CACHE_HOME/qwen3d, else $HOME/.cache/qwen3d;
 * "off" stays "off", and "" means none could be named (the load then warns).
 * The default lives in a static buffer: main thread, before other threads.
 */
const char *cli_prepared_cache(const char *opt);
/*
 * Placement (--cpus LIST, --numa-node N) of the commands that make a compute
 * pool: cli_placement_opt() matches argv[*i] as cli_engine_opt() does;
 * cli_place() applies it to the whole process (eng_pool_place) before any
 * thread starts, and returns 0, or 2 after printing one error line.
 */
typedef struct cli_placement {
    const char *cpus;      /* NULL: no CPU list */
    int64_t numa_node;     /* -1: none */
} cli_placement;
#define CLI_PLACEMENT_NONE ((cli_placement){NULL, -1})
#define CLI_NUMA_NODE_MAX 4095
int cli_placement_opt(const char *cmd, int argc, char **argv, int *i, cli_placement *p);
int cli_place(const char *cmd, const cli_placement *p);
#define CLI_PLACEMENT_USAGE "[--cpus LIST] [--numa-node N]"
/*
 * Progress of long work (a model load, synth writing weights, a bench run) on
 * stderr: one line redrawn in place, at most ten times a second besides its
 * first and last state, erased before other output and at the end. Drawn only
 * when stderr is a terminal and the command prints no JSON, so what a pipe,
 * a file or a JSON reader receives is exactly what it was without it.
 */
typedef struct cli_progress {
    bool on;
    const char *what;   /* the line's label: "loading DIR", "writing DIR/model.onnx.data" */
    double t0, last;    /* seconds (monotonic) at the start and at the last draw */
    bool drawn;         /* a line is on screen */
} cli_progress;

void cli_progress_init(cli_progress *p, bool json);
/* Bytes of byte-counted work: "WHAT: 1.2 of 2.5 GiB (48%), about 6 s left". */
void cli_progress_bytes(cli_progress *p, const char *what, uint64_t done, uint64_t total);
/* The same as a callback for the engine (eng_progress_fn, eng_ow_progress_fn); CTX is the cli_progress. */
void cli_progress_cb(void *ctx, uint64_t done, uint64_t total);
/* Free text; FINAL forces the draw (the throttle skips the others). */
void cli_progress_text(cli_progress *p, bool final, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Erases the line, if any (before printing elsewhere, and when the work ends). */
void cli_progress_clear(cli_progress *p);
/* Seconds since cli_progress_init. */
double cli_progress_elapsed(const cli_progress *p);

/* eng_model_open, with the load drawn on P (see cli_progress_init) and erased when it ends. */
int cli_model_open(cli_progress *p, const char *dir, const eng_model_opts *opts, eng_model **out, eng_diag *diag);

#define CLI_ENGINE_USAGE                                                                                   \
    "[--threads N] [--kv-mode persistent|tensor] [--kv-type f32|f16|q8] [--matmul-fp32] [--no-fusion] "      \
    "[--prepared-cache DIR|off] [--no-readahead]"

#endif
