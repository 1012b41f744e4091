/*
 * generate: `qwen3d generate`. Loads a model and runs one generation
 * (engine/gen.h): the prompt as one prefill step, then one step per
 * generated token. Prints the ids, or one
 * JSON object with --json; --dump-logits writes every produced logits row.
 * Runs on the main thread; kernels fan out over the model's compute pool.
 */
#include <errno.h>
#include <stddef.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/gen.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"
#include "server/cli/cli.h"

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

/* Parses a float option value strictly. */
static bool parse_float(const char *s, float *out)
{
    char *end = NULL;
    errno = 0;
    float v = strtof(s, &end);
    if (!*s || *end || errno)
        return false;
    *out = v;
    return true;
}

static int usage(FILE *f)
{
    fprintf(f, "usage: qwen3d generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]\n"
               "                       [--teacher-ids 4,5,6]\n"
               "                       [--dump-logits FILE] [--json]\n"
               "                       " CLI_ENGINE_USAGE " " CLI_PLACEMENT_USAGE "\n"
               "                       [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]\n"
               "                       [--repetition-penalty R] [--presence-penalty P] [--frequency-penalty F]\n");
    return 2;
}

typedef struct gen_opts {
    const char *model, *dump, *prompt_text;
    int64_t *prompt, *teacher;
    size_t n_prompt, n_teacher;
    int64_t max_tokens;
    eng_model_opts engine;
    cli_placement place;   /* --cpus, --numa-node */
    bool json, max_given;
    eng_sampling sampling;
    bool sampling_given, temperature_given;
} gen_opts;

/* The sampling options: 1 if argv[*i] was one, 2 after an error, 0 if not. */
static int parse_sampling_opt(int argc, char **argv, int *i, gen_opts *o)
{
    static const struct {
        const char *name;
        size_t offset;
    } floats[] = {
        {"temperature", offsetof(eng_sampling, temperature)},
        {"top-p", offsetof(eng_sampling, top_p)},
        {"min-p", offsetof(eng_sampling, min_p)},
        {"repetition-penalty", offsetof(eng_sampling, repetition_penalty)},
        {"presence-penalty", offsetof(eng_sampling, presence_penalty)},
        {"frequency-penalty", offsetof(eng_sampling, frequency_penalty)},
    };
    const char *v = NULL;
    int r;
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++) {
        if ((r = cli_opt(CMD, argc, argv, i, floats[k].name, &v)) == 0)
            continue;
        if (r < 0 || !parse_float(v, (float *)((char *)&o->sampling + floats[k].offset))) {
            if (r > 0)
                cli_fail(CMD, "--%s must be a number, not '%s'", floats[k].name, v);
            return 2;
        }
        o->sampling_given = true;
        if (k == 0)
            o->temperature_given = true;
        return 1;
    }
    int64_t n;
    if ((r = cli_opt(CMD, argc, argv, i, "top-k", &v)) != 0) {
        if (r < 0 || !cli_parse_i64(v, 0, INT32_MAX, &n))
            return r < 0 ? 2 : (cli_fail(CMD, "--top-k must be a non-negative integer, not '%s'", v), 2);
        o->sampling.top_k = (int32_t)n;
        o->sampling_given = true;
        return 1;
    }
    if ((r = cli_opt(CMD, argc, argv, i, "seed", &v)) != 0) {
        if (r < 0 || !cli_parse_i64(v, 0, INT64_MAX, &n))
            return r < 0 ? 2 : (cli_fail(CMD, "--seed must be a non-negative integer, not '%s'", v), 2);
        o->sampling.seed = (uint64_t)n;
        return 1;
    }
    return 0;
}

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
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "prompt", &v)) > 0) {
            o->prompt_text = v;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "teacher-ids", &v)) > 0) {
            free(o->teacher);
            if (parse_ids("teacher-ids", v, &o->teacher, &o->n_teacher))
                return 2;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "max-tokens", &v)) > 0) {
            if (!cli_parse_i64(v, 1, 1 << 24, &o->max_tokens))
                return cli_fail(CMD, "--max-tokens must be an integer in 1..16777216, not '%s'", v);
            o->max_given = true;
        } else if (!r && (r = cli_engine_opt(CMD, argc, argv, &i, &o->engine)) > 0) {
        } else if (!r && (r = cli_placement_opt(CMD, argc, argv, &i, &o->place)) > 0) {
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "dump-logits", &v)) > 0) {
            o->dump = v;
        } else if (!r && (r = parse_sampling_opt(argc, argv, &i, o)) != 0) {
            if (r == 2)
                return 2;
        } else if (r < 0) {
            return 2;
        } else if (cli_flag(argv, i, "json")) {
            o->json = true;
        } else if (cli_flag(argv, i, "help")) {
            usage(stdout);
            return 1;
        } else {
            return cli_fail(CMD, "unknown argument '%s'", argv[i]);
        }
    }
    if (!o->model)
        return cli_fail(CMD, "--model DIR is required");
    if (!!o->prompt_text == !!o->prompt)
        return cli_fail(CMD, "give exactly one of --prompt TEXT and --prompt-ids 1,2,3");
    if (o->prompt && !o->n_prompt)
        return cli_fail(CMD, "--prompt-ids needs at least one id");
    if (o->prompt_text && !*o->prompt_text)
        return cli_fail(CMD, "--prompt must not be empty");
    /* no sampling flag: greedy; a filter without a temperature samples at 1 */
    if (!o->sampling_given)
        o->sampling.temperature = 0.0f;
    else if (!o->temperature_given)
        o->sampling.temperature = 1.0f;
    eng_sampling_error se;
    if (eng_sampling_validate(&o->sampling, &se) != 0) {
        /* name the option as it was typed: top_p -> --top-p */
        char flag[64] = "";
        for (size_t k = 0; se.field && se.field[k] && k + 1 < sizeof flag; k++)
            flag[k] = se.field[k] == '_' ? '-' : se.field[k], flag[k + 1] = '\0';
        return cli_fail(CMD, "--%s: %s", flag, se.message);
    }
    if (!o->max_given)
        o->max_tokens = o->n_teacher ? (int64_t)o->n_teacher + 1 : 16;
    if (o->n_teacher && (int64_t)o->n_teacher < o->max_tokens - 1)
        return cli_fail(CMD, "--teacher-ids gives %zu ids; %lld decode steps need %lld", o->n_teacher,
                        (long long)o->max_tokens, (long long)(o->max_tokens - 1));
    return 0;
}

/* --prompt: its text encoded into o->prompt. */
static int encode_prompt(eng_tok *tok, gen_opts *o, eng_diag *diag)
{
    eng_tok_ids enc = {0};
    int er = eng_tok_encode(tok, o->prompt_text, strlen(o->prompt_text), 0, &enc);
    if (er != 0 || !enc.n) {
        eng_diag_add(diag, "--prompt: %s", er ? eng_tok_strerror(er) : "encodes to no tokens");
        eng_tok_ids_free(&enc);
        return -1;
    }
    o->prompt = malloc(enc.n * sizeof *o->prompt);
    if (!o->prompt) {
        eng_tok_ids_free(&enc);
        eng_diag_add(diag, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < enc.n; i++)
        o->prompt[i] = enc.ids[i];
    o->n_prompt = enc.n;
    eng_tok_ids_free(&enc);
    return 0;
}

/* The ids of option FLAG lie in the vocabulary [0, V). */
static int check_ids(const char *flag, const int64_t *ids, size_t n, int64_t V, eng_diag *diag)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= V) {
            eng_diag_add(diag, "%s: id %lld is outside the vocabulary [0, %lld)", flag, (long long)ids[i],
                         (long long)V);
            return -1;
        }
    return 0;
}

typedef struct gen_timings {
    double load_ms, prefill_ms, decode_ms; /* decode_ms: per step */
    const char *prepared;                  /* what the prepared-weights cache did (eng_prep_state_name) */
} gen_timings;

/* Prints the generation: JSON, its text (TEXT given), or its ids. */
static void print_result(const gen_opts *o, const int64_t *ids, size_t n_ids, const eng_tok_text *text,
                         const char *finish, const gen_timings *tm)
{
    if (o->json) {
        json_t *pj = json_array(), *gj = json_array();
        for (size_t i = 0; i < o->n_prompt; i++)
            json_array_append_new(pj, json_integer(o->prompt[i]));
        for (size_t i = 0; i < n_ids; i++)
            json_array_append_new(gj, json_integer(ids[i]));
        json_t *root = json_pack("{s:o, s:o, s:s, s:s, s:{s:f, s:f, s:f, s:f}, s:s}", "prompt_ids", pj, "ids", gj,
                                 "text", text && text->s ? text->s : "", "finish_reason", finish, "timings", "load_ms",
                                 tm->load_ms, "prefill_ms", tm->prefill_ms, "decode_ms", tm->decode_ms, "tokens_per_s",
                                 tm->decode_ms > 0 ? 1000.0 / tm->decode_ms : 0.0, "prepared_cache", tm->prepared);
        json_dumpf(root, stdout, JSON_COMPACT);
        putchar('\n');
        json_decref(root);
    } else if (text) {
        fwrite(text->s ? text->s : "", 1, text->len, stdout);
        printf("\n");
    } else {
        for (size_t i = 0; i < n_ids; i++)
            printf("%s%lld", i ? " " : "", (long long)ids[i]);
        printf("\n");
    }
}

int cmd_generate(int argc, char **argv)
{
    gen_opts o = {.engine = {.threads = 0}, .place = CLI_PLACEMENT_NONE};
    eng_sampling_default(&o.sampling);
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
    eng_gen *gen = NULL;
    eng_tok *tok = NULL;
    eng_tok_text text = {0};
    FILE *dump = NULL;
    int64_t *ids = NULL;
    size_t n_ids = 0;
    const char *finish = "length";

    if (cli_place(CMD, &o.place)) { /* before the model and the pool's threads */
        rc = 2;
        goto out;
    }
    cli_progress progress;
    cli_progress_init(&progress, o.json);
    double t0 = now_ms();
    if (cli_model_open(&progress, o.model, &o.engine, &m, &diag) != 0)
        goto out;
    /* The tokenizer is optional for id prompts: text is then left empty. */
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", eng_model_graph(m)->dir);
    if (o.prompt_text || access(tok_path, F_OK) == 0) {
        if (eng_tok_load(tok_path, &tok, &diag) != 0)
            goto out;
    }
    if (o.prompt_text && encode_prompt(tok, &o, &diag) != 0)
        goto out;
    double load_ms = now_ms() - t0;
    int64_t V = eng_model_geometry(m)->vocab;
    int64_t ctx = (int64_t)o.n_prompt + o.max_tokens;
    if (ctx > eng_model_max_context(m)) {
        eng_diag_add(&diag, "prompt of %zu ids + %lld new tokens exceeds the model's context of %lld", o.n_prompt,
                     (long long)o.max_tokens, (long long)eng_model_max_context(m));
        goto out;
    }
    if (check_ids("--prompt-ids", o.prompt, o.n_prompt, V, &diag) != 0 ||
        check_ids("--teacher-ids", o.teacher, o.n_teacher, V, &diag) != 0)
        goto out;
    /* The text is decoded from the ids at the end (special tokens included), so no detokenizer here. */
    eng_gen_params gp = {.prompt = o.prompt, .n_prompt = o.n_prompt, .max_tokens = o.max_tokens, .capacity = ctx,
                         .sampling = o.sampling, .teacher = o.n_teacher ? o.teacher : NULL, .n_teacher = o.n_teacher};
    gen = eng_gen_new(m, &gp, &diag);
    if (!gen)
        goto out;
    if (o.dump && !(dump = fopen(o.dump, "wb"))) {
        eng_diag_add(&diag, "--dump-logits: cannot create '%s': %s", o.dump, strerror(errno));
        goto out;
    }
    double prefill_ms = 0, decode_total = 0;
    for (;;) {
        double ts = now_ms();
        if (eng_gen_step(&gen, 1, NULL, &diag) != 0)
            goto out;
        double ms = now_ms() - ts;
        if (eng_gen_generated(gen) == 1)
            prefill_ms = ms;
        else
            decode_total += ms;
        const float *logits = eng_gen_logits(gen);
        if (dump && logits && fwrite(logits, sizeof(float), (size_t)V, dump) != (size_t)V) {
            eng_diag_add(&diag, "--dump-logits: write to '%s' failed", o.dump);
            goto out;
        }
        if (eng_gen_state(gen) != ENG_GEN_RUNNING)
            break;
    }
    if (eng_gen_state(gen) == ENG_GEN_STOP)
        finish = "stop";
    n_ids = (size_t)eng_gen_generated(gen);
    ids = malloc((n_ids + 1) * sizeof *ids);
    if (!ids) {
        eng_diag_add(&diag, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_ids; i++)
        ids[i] = eng_gen_ids(gen)[i];
    size_t n_steps = n_ids - 1;
    double decode_ms = n_steps ? decode_total / (double)n_steps : 0.0;
    if (dump && fclose(dump) != 0) {
        dump = NULL;
        eng_diag_add(&diag, "--dump-logits: cannot finish '%s'", o.dump);
        goto out;
    }
    dump = NULL;

    if (tok) {
        /* the end-of-sequence token ends the text; it is not part of it */
        size_t n_text = n_ids - (!strcmp(finish, "stop") ? 1 : 0);
        int32_t *id32 = malloc((n_text + 1) * sizeof *id32);
        for (size_t i = 0; id32 && i < n_text; i++)
            id32[i] = (int32_t)ids[i];
        int er = id32 ? eng_tok_decode(tok, id32, n_text, false, &text) : ENG_TOK_ENOMEM;
        free(id32);
        if (er != 0) {
            eng_diag_add(&diag, "cannot decode the generated ids: %s", eng_tok_strerror(er));
            goto out;
        }
    }
    eng_prep_info pi;
    eng_plan_prepared_cache(eng_model_plan(m), &pi);
    gen_timings tm = {load_ms, prefill_ms, decode_ms, eng_prep_state_name(pi.state)};
    print_result(&o, ids, n_ids, tok ? &text : NULL, finish, &tm);
    rc = 0;
out:
    if (dump)
        fclose(dump);
    eng_diag_print(&diag, stderr, "qwen3d: " CMD);
    eng_diag_clear(&diag);
    eng_gen_free(gen);
    eng_tok_text_free(&text);
    eng_tok_free(tok);
    eng_model_free(m);
    free(ids);
    free(o.prompt);
    free(o.teacher);
    return rc;
}
