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
 * --kv-mode persistent|tensor, --kv-type f32|f16, --matmul-fp32, --no-fusion.
 * Returns 1 if argv[*i] was one (consumed), 0 if not, -1 after printing an
 * error.
 */
int cli_engine_opt(const char *cmd, int argc, char **argv, int *i, eng_model_opts *o);
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

#define CLI_ENGINE_USAGE "[--threads N] [--kv-mode persistent|tensor] [--kv-type f32|f16] [--matmul-fp32] [--no-fusion]"

#endif
