/*
 * generate: `qwen3d generate`. Loads a model, runs the prompt as one prefill
 * call and then one call per generated token, feeding each step's present
 * KV as the next step's past (the graph's contract). Prints the ids, or one
 * JSON object with --json; --dump-logits writes every produced logits row.
 * Runs on the main thread; kernels fan out over the model's compute pool.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/runner.h"
#include "server/cli.h"

#define CMD "generate"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Parses "1,2,3" (commas and/or spaces) into a malloc'd array. */
static int parse_ids(const char *opt, const char *s, int64_t **out, size_t *n)
{
    size_t cap = 16, cnt = 0;
    int64_t *ids = malloc(cap * sizeof *ids);
    if (!ids)
        return cli_fail(CMD, "out of memory");
    const char *p = s;
    while (*p) {
        while (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long long v = strtoll(p, &end, 10);
        if (end == p || errno || v < 0 || (*end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n')) {
            free(ids);
            return cli_fail(CMD, "--%s: '%s' is not a list of non-negative token ids", opt, s);
        }
        if (cnt == cap) {
            int64_t *n2 = realloc(ids, (cap *= 2) * sizeof *ids);
            if (!n2) {
                free(ids);
                return cli_fail(CMD, "out of memory");
            }
            ids = n2;
        }
        ids[cnt++] = v;
        p = end;
    }
    *out = ids;
    *n = cnt;
    return 0;
}

static int64_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: qwen3d generate --model DIR --prompt-ids 1,2,3 [--max-tokens N] [--teacher-ids 4,5,6]\n"
               "                       [--threads N] [--dump-logits FILE] [--json] [--matmul-fp32]\n"
               "                       [--kv-mode persistent|tensor] [--kv-type f32|f16]\n");
    return 2;
}

typedef struct gen_opts {
    const char *model, *dump;
    int64_t *prompt, *teacher;
    size_t n_prompt, n_teacher;
    int64_t max_tokens;
    int64_t threads;
    bool json, matmul_fp32, max_given;
    eng_kv_mode kv_mode;
    kv_type kv_type;
} gen_opts;

static int parse_args(int argc, char **argv, gen_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r = 0;
        if ((r = cli_opt(CMD, argc, argv, &i, "model", &v)) > 0) {
            o->model = v;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "prompt-ids", &v)) > 0) {
            free(o->prompt);
            if (parse_ids("prompt-ids", v, &o->prompt, &o->n_prompt))
                return 2;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "teacher-ids", &v)) > 0) {
            free(o->teacher);
            if (parse_ids("teacher-ids", v, &o->teacher, &o->n_teacher))
                return 2;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "max-tokens", &v)) > 0) {
            if (!cli_parse_i64(v, 1, 1 << 24, &o->max_tokens))
                return cli_fail(CMD, "--max-tokens must be an integer in 1..16777216, not '%s'", v);
            o->max_given = true;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "threads", &v)) > 0) {
            if (!cli_parse_i64(v, 1, 1024, &o->threads))
                return cli_fail(CMD, "--threads must be an integer in 1..1024, not '%s'", v);
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "dump-logits", &v)) > 0) {
            o->dump = v;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "kv-mode", &v)) > 0) {
            if (eng_kv_mode_parse(v, &o->kv_mode) != 0)
                return cli_fail(CMD, "--kv-mode must be persistent or tensor, not '%s'", v);
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "kv-type", &v)) > 0) {
            if (kv_type_parse(v, &o->kv_type) != 0)
                return cli_fail(CMD, "--kv-type must be f32 or f16, not '%s'", v);
        } else if (r < 0) {
            return 2;
        } else if (cli_flag(argv, i, "json")) {
            o->json = true;
        } else if (cli_flag(argv, i, "matmul-fp32")) {
            o->matmul_fp32 = true;
        } else if (cli_flag(argv, i, "help")) {
            usage(stdout);
            return 1;
        } else {
            return cli_fail(CMD, "unknown argument '%s'", argv[i]);
        }
    }
    if (!o->model)
        return cli_fail(CMD, "--model DIR is required");
    if (!o->prompt || !o->n_prompt)
        return cli_fail(CMD, "--prompt-ids with at least one id is required");
    if (!o->max_given)
        o->max_tokens = o->n_teacher ? (int64_t)o->n_teacher + 1 : 16;
    if (o->n_teacher && (int64_t)o->n_teacher < o->max_tokens - 1)
        return cli_fail(CMD, "--teacher-ids gives %zu ids; %lld decode steps need %lld", o->n_teacher,
                        (long long)o->max_tokens, (long long)(o->max_tokens - 1));
    return 0;
}

int cmd_generate(int argc, char **argv)
{
    gen_opts o = {.threads = 1};
    int rc = parse_args(argc, argv, &o);
    if (rc) {
        free(o.prompt);
        free(o.teacher);
        return rc == 1 ? 0 : rc;
    }
    rc = 1;
    eng_diag diag;
    eng_diag_init(&diag);
    eng_model *m = NULL;
    eng_session *s = NULL;
    FILE *dump = NULL;
    int64_t *ids = NULL;
    double *step_ms = NULL;
    size_t n_ids = 0;
    const char *finish = "length";

    double t0 = now_ms();
    eng_model_opts mo = {.threads = (int)o.threads, .matmul_fp32 = o.matmul_fp32, .kv_mode = o.kv_mode,
                         .kv_type = o.kv_type};
    if (eng_model_open(o.model, &mo, &m, &diag) != 0)
        goto out;
    double load_ms = now_ms() - t0;
    int64_t V = eng_model_geometry(m)->vocab;
    int64_t ctx = (int64_t)o.n_prompt + o.max_tokens;
    if (ctx > eng_model_max_context(m)) {
        eng_diag_add(&diag, "prompt of %zu ids + %lld new tokens exceeds the model's context of %lld", o.n_prompt,
                     (long long)o.max_tokens, (long long)eng_model_max_context(m));
        goto out;
    }
    s = eng_session_new(m, ctx, &diag);
    if (!s)
        goto out;
    if (o.dump && !(dump = fopen(o.dump, "wb"))) {
        eng_diag_add(&diag, "--dump-logits: cannot create '%s': %s", o.dump, strerror(errno));
        goto out;
    }
    ids = malloc((size_t)o.max_tokens * sizeof *ids);
    step_ms = malloc((size_t)o.max_tokens * sizeof *step_ms);
    if (!ids || !step_ms) {
        eng_diag_add(&diag, "out of memory");
        goto out;
    }

    const float *logits = NULL;
    double t1 = now_ms();
    if (eng_session_feed(s, o.prompt, o.n_prompt, &logits, &diag) != 0)
        goto out;
    double prefill_ms = now_ms() - t1;
    double decode_total = 0;
    for (;;) {
        if (dump && fwrite(logits, sizeof(float), (size_t)V, dump) != (size_t)V) {
            eng_diag_add(&diag, "--dump-logits: write to '%s' failed", o.dump);
            goto out;
        }
        int64_t next = argmax(logits, V);
        ids[n_ids++] = next;
        /* teacher forcing compares runtimes step by step, so it never stops early */
        if (!o.n_teacher && eng_model_is_eos(m, next)) {
            finish = "stop";
            break;
        }
        if ((int64_t)n_ids >= o.max_tokens)
            break;
        int64_t feed = o.n_teacher ? o.teacher[n_ids - 1] : next;
        double ts = now_ms();
        if (eng_session_feed(s, &feed, 1, &logits, &diag) != 0)
            goto out;
        step_ms[n_ids - 1] = now_ms() - ts;
        decode_total += step_ms[n_ids - 1];
    }
    size_t n_steps = n_ids - 1;
    double decode_ms = n_steps ? decode_total / (double)n_steps : 0.0;
    if (dump && fclose(dump) != 0) {
        dump = NULL;
        eng_diag_add(&diag, "--dump-logits: cannot finish '%s'", o.dump);
        goto out;
    }
    dump = NULL;

    if (o.json) {
        json_t *pj = json_array(), *gj = json_array();
        for (size_t i = 0; i < o.n_prompt; i++)
            json_array_append_new(pj, json_integer(o.prompt[i]));
        for (size_t i = 0; i < n_ids; i++)
            json_array_append_new(gj, json_integer(ids[i]));
        json_t *root = json_pack("{s:o, s:o, s:s, s:s, s:{s:f, s:f, s:f, s:f}}", "prompt_ids", pj, "ids", gj,
                                 "text", "", "finish_reason", finish, "timings", "load_ms", load_ms, "prefill_ms",
                                 prefill_ms, "decode_ms", decode_ms, "tokens_per_s",
                                 decode_ms > 0 ? 1000.0 / decode_ms : 0.0);
        json_dumpf(root, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(root);
    } else {
        for (size_t i = 0; i < n_ids; i++)
            printf("%s%lld", i ? " " : "", (long long)ids[i]);
        printf("\n");
    }
    rc = 0;
out:
    if (dump)
        fclose(dump);
    eng_diag_print(&diag, stderr, "qwen3d: " CMD);
    eng_diag_clear(&diag);
    eng_session_free(s);
    eng_model_free(m);
    free(ids);
    free(step_ms);
    free(o.prompt);
    free(o.teacher);
    return rc;
}
