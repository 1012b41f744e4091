/*
 * qwen3d: entry point. Chooses the kernels (krn_init) and dispatches to the
 * subcommand named by argv[1]; each subcommand lives in server/cli/cmd_*.c and
 * owns its options.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "kernels/krn.h"
#include "server/cli/cli.h"

typedef int (*cmd_fn)(int argc, char **argv);

static const struct {
    const char *name;
    cmd_fn fn;
    const char *summary;
} commands[] = {
    {"inspect", cmd_inspect, "print the graph inventory, geometry and weight bytes of a model"},
    {"generate", cmd_generate, "run a prompt through a model and generate tokens (greedy unless sampling is asked)"},
    {"bench", cmd_bench, "measure load, time to first token, prefill and decode speed, KV bytes and memory"},
    {"synth", cmd_synth, "write a synthetic Qwen3 model folder with deterministic random weights"},
    {"tokenize", cmd_tokenize, "encode text to token ids, or decode ids to text, with a model's tokenizer"},
    {"serve", cmd_serve, "serve the model over an OpenAI-compatible HTTP API (SSE streaming, metrics)"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: qwen3d COMMAND [OPTIONS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nqwen3d COMMAND --help shows the options of one command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("%s\n", PACKAGE_STRING);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (strcmp(argv[1], commands[i].name))
            continue;
        /* Once, on this thread, before any command starts a thread (kernels/krn.h). */
        if (krn_init() == KRN_EENV) {
            char line[KRN_DESCRIBE_LEN];
            krn_describe(line, sizeof line);
            fprintf(stderr,
                    "qwen3d: warning: an unknown name in QWEN3D_KERNELS, QWEN3D_CPU_HIDE or QWEN3D_PREFETCH "
                    "was ignored: %s\n",
                    line);
        }
        return commands[i].fn(argc - 1, argv + 1);
    }
    fprintf(stderr, "qwen3d: unknown command '%s' (try qwen3d --help)\n", argv[1]);
    return 2;
}
