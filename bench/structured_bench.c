/*
 * structured_bench: the decode step of a model with and without a JSON
 * Schema constraint, and the grammar's mask time per token inside it.
 *
 * For each case of a schema file (the format of tests/grammar/schemas.json)
 * it runs one constrained generation (eng_gen with the schema's grammar, a
 * fixed chat prompt, greedy or --temperature T with a fixed seed) to its
 * end, timing every decode step and the masks in it
 * (eng_gen_mask_seconds), then an unconstrained greedy generation of the
 * same number of tokens (end-of-sequence ignored), timing its steps. Then
 * two tool-call cases the same way, compiled as the daemon compiles
 * tool_choice "required" (the file's object schemas as functions fn_0,
 * fn_1, ..., as tests/serve/tools.js offers them) and a named function
 * (fn_0 alone): the <tool_call> wrapper, the name and the parameter
 * schema (skipped with --cases, which takes the first N schemas). It
 * prints per case the tokens, the mask time per token and the median steps
 * with and without the schema, then the medians over all cases and their
 * ratio, with the kernel level. Without a schema the greedy argmax is fused
 * into the LM head, as the daemon does; with one it cannot be, and the mask
 * is computed on the step's thread: both costs are in the ratio.
 *
 * --repeat N runs each case's pair N times, constrained and plain in
 * turn (each constrained run with a fresh matcher, so its first-use cost
 * counts every time), and takes the medians over all of them.
 *
 * Wall time: other work on a shared machine inflates both columns alike,
 * but their ratio is only a figure for that run. Never asserts on speed.
 *
 *   make bench/structured_bench
 *   bench/structured_bench --model DIR --schemas ../tests/serve/structured-schemas.json \
 *       [--threads N] [--temperature T] [--max-tokens N] [--cases N] [--repeat N]
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/schema.h"
#include "engine/gen.h"
#include "kernels/krn.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Runs G to its end; appends each decode step's seconds to STEPS (grown as needed). */
static int run(eng_gen *g, double **steps, size_t *n, size_t *cap)
{
    eng_diag d;
    eng_diag_init(&d);
    while (eng_gen_state(g) == ENG_GEN_RUNNING) {
        bool decode = eng_gen_prefilled(g);
        double t0 = now_s();
        if (eng_gen_step(&g, 1, NULL, &d) != 0) {
            fprintf(stderr, "structured_bench: %s\n", d.n_kept ? d.lines[0] : eng_gen_error(g));
            eng_diag_clear(&d);
            return -1;
        }
        double dt = now_s() - t0;
        if (!decode)
            continue;
        if (*n == *cap) {
            *cap = *cap ? *cap * 2 : 1024;
            if (!(*steps = realloc(*steps, *cap * sizeof **steps)))
                return -1;
        }
        (*steps)[(*n)++] = dt;
    }
    eng_diag_clear(&d);
    if (eng_gen_state(g) == ENG_GEN_ERROR) {
        fprintf(stderr, "structured_bench: %s\n", eng_gen_error(g));
        return -1;
    }
    return 0;
}

/* What every case shares, and the decode steps of all cases so far. */
typedef struct bench {
    eng_model *m;
    eng_tok *tok;
    eng_gvocab *gv;
    const int64_t *prompt;
    size_t n_prompt;
    int64_t max_tokens;
    float temperature;
    int repeat;
    eng_diag *d;
    double *all_c, *all_p, mask_s;
    size_t n_all_c, n_all_p, cap_c, cap_p;
    int64_t masks;
} bench;

/*
 * One case: a generation constrained by G (taken, freed here) to its end,
 * then an unconstrained greedy one of as many tokens; prints the case's
 * line. Returns 0, or 1 when a generation failed.
 */
static int bench_case(bench *b, const char *name, eng_grammar *g)
{
    eng_gen_params p = {.prompt = b->prompt, .n_prompt = b->n_prompt, .max_tokens = b->max_tokens, .tok = b->tok,
                        .grammar = g, .gvocab = b->gv};
    eng_sampling_default(&p.sampling);
    p.sampling.temperature = b->temperature;
    p.sampling.seed = 1;
    size_t c0 = b->n_all_c, p0 = b->n_all_p;
    int64_t n_masks = 0, tokens = 0;
    double ms = 0;
    /* constrained and plain runs alternate, so load that comes and goes falls on both */
    for (int r = 0; r < b->repeat; r++) {
        eng_gen *gen = eng_gen_new(b->m, &p, b->d);
        if (!gen || run(gen, &b->all_c, &b->n_all_c, &b->cap_c) != 0) {
            eng_gen_free(gen);
            eng_grammar_free(g);
            return 1;
        }
        int64_t n = 0;
        tokens = eng_gen_generated(gen);
        ms += eng_gen_mask_seconds(gen, &n);
        n_masks += n;
        eng_gen_free(gen);
        eng_gen_params q = {.prompt = b->prompt, .n_prompt = b->n_prompt, .max_tokens = tokens, .ignore_eos = true};
        eng_sampling_default(&q.sampling);
        q.sampling.temperature = 0.0f;
        if (!(gen = eng_gen_new(b->m, &q, b->d)) || run(gen, &b->all_p, &b->n_all_p, &b->cap_p) != 0) {
            eng_gen_free(gen);
            eng_grammar_free(g);
            return 1;
        }
        eng_gen_free(gen);
    }
    eng_grammar_free(g);
    b->mask_s += ms;
    b->masks += n_masks;
    /* medians of this case's steps: copies, so the pooled arrays keep their order */
    size_t nc = b->n_all_c - c0, np = b->n_all_p - p0;
    double *tc = malloc((nc + 1) * sizeof *tc), *tp = malloc((np + 1) * sizeof *tp);
    if (!tc || !tp) {
        free(tc);
        free(tp);
        return 1;
    }
    memcpy(tc, b->all_c + c0, nc * sizeof *tc);
    memcpy(tp, b->all_p + p0, np * sizeof *tp);
    double mc = median(tc, nc), mp = median(tp, np);
    printf("%-44.44s %6lld %12.1f %14.3f %14.3f %7.3f\n", name, (long long)tokens,
           n_masks ? ms / (double)n_masks * 1e6 : 0.0, mc * 1e3, mp * 1e3, mp > 0 ? mc / mp : 0);
    free(tc);
    free(tp);
    return 0;
}

int main(int argc, char **argv)
{
    krn_init(); /* the machine's best kernels, as qwen3d does, before any thread */
    const char *model_dir = NULL, *schemas = NULL;
    int threads = 0, max_cases = 1 << 30, repeat = 1;
    float temperature = 0.0f;
    int64_t max_tokens = 400;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc)
            model_dir = argv[++i];
        else if (!strcmp(argv[i], "--schemas") && i + 1 < argc)
            schemas = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--temperature") && i + 1 < argc)
            temperature = strtof(argv[++i], NULL);
        else if (!strcmp(argv[i], "--max-tokens") && i + 1 < argc)
            max_tokens = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc)
            max_cases = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc)
            repeat = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: structured_bench --model DIR --schemas FILE [--threads N] [--temperature T] "
                            "[--max-tokens N] [--cases N] [--repeat N]\n");
            return 2;
        }
    }
    if (!model_dir || !schemas || max_tokens < 1 || repeat < 1) {
        fprintf(stderr, "structured_bench: --model and --schemas are required, --max-tokens and --repeat at least 1\n");
        return 2;
    }
    eng_diag d;
    eng_diag_init(&d);
    eng_model_opts mo = {.threads = threads};
    eng_model *m = NULL;
    eng_tok *tok = NULL;
    if (eng_model_open(model_dir, &mo, &m, &d) != 0 || eng_tok_load(model_dir, &tok, &d) != 0) {
        eng_diag_print(&d, stderr, "structured_bench");
        return 1;
    }
    json_error_t je;
    json_t *cases = json_load_file(schemas, 0, &je);
    if (!json_is_array(cases)) {
        fprintf(stderr, "structured_bench: %s: %s\n", schemas, je.text);
        return 1;
    }
    const eng_genai_config *cfg = eng_model_config(m);
    int32_t eos[ENG_MAX_EOS];
    for (int i = 0; i < cfg->n_eos; i++)
        eos[i] = (int32_t)cfg->eos_token_id[i];
    int64_t V = eng_model_geometry(m)->vocab;
    eng_gvocab *gv = eng_gvocab_new(tok, (size_t)V, eos, (size_t)cfg->n_eos);
    static const char chat[] = "<|im_start|>user\nAnswer with JSON.<|im_end|>\n<|im_start|>assistant\n";
    eng_tok_ids ids = {0};
    if (!gv || eng_tok_encode(tok, chat, sizeof chat - 1, 0, &ids) != 0) {
        fprintf(stderr, "structured_bench: out of memory\n");
        return 1;
    }
    int64_t *prompt = malloc(ids.n * sizeof *prompt);
    for (size_t i = 0; i < ids.n; i++)
        prompt[i] = ids.ids[i];
    const eng_geometry *geo = eng_model_geometry(m);
    printf("structured_bench: %s, %lld layers, hidden %lld, %d threads, kernels %s, temperature %g, prompt %zu "
           "tokens\n",
           model_dir, (long long)geo->layers, (long long)geo->hidden, eng_pool_threads(eng_model_pool(m)),
           krn_active()->level_name, (double)temperature, ids.n);
    printf("%-44s %6s %12s %14s %14s %7s\n", "case", "tokens", "mask_us/tok", "step_ms schema", "step_ms plain",
           "ratio");
    bench b = {.m = m, .tok = tok, .gv = gv, .prompt = prompt, .n_prompt = ids.n, .max_tokens = max_tokens,
               .temperature = temperature, .repeat = repeat, .d = &d};
    int status = 0;
    size_t n_cases = json_array_size(cases);
    for (size_t ci = 0; ci < n_cases && (int)ci < max_cases && !status; ci++) {
        const json_t *c = json_array_get(cases, ci);
        eng_grammar *g = NULL;
        api_schema_error err;
        int rc = json_is_true(json_object_get(c, "json_object"))
                     ? api_schema_json_object(&g, &err)
                     : api_schema_compile(json_object_get(c, "schema"), &g, &err);
        if (rc) {
            fprintf(stderr, "structured_bench: case %zu: %s\n", ci, err.message);
            status = 1;
            break;
        }
        status = bench_case(&b, json_string_value(json_object_get(c, "name")), g);
    }
    /*
     * Tool calls as the daemon compiles them for tool_choice "required"
     * (every object schema of the file a function fn_I, as
     * tests/serve/tools.js offers them) and for a named function (the
     * first object schema alone): the <tool_call> wrapper, the name and
     * the function's parameter schema.
     */
    int32_t open_id = eng_tok_added_id(tok, "<tool_call>"), close_id = eng_tok_added_id(tok, "</tool_call>");
    size_t n_fn = 0;
    const char *fn0_name = "";
    api_tool_spec *fns = calloc(n_cases + 1, sizeof *fns);
    char(*names)[24] = calloc(n_cases + 1, sizeof *names);
    for (size_t ci = 0; fns && names && ci < n_cases; ci++) {
        const json_t *c = json_array_get(cases, ci), *sch = json_object_get(c, "schema");
        const char *type = json_string_value(json_object_get(sch, "type"));
        if (!type || strcmp(type, "object"))
            continue;
        if (!n_fn)
            fn0_name = json_string_value(json_object_get(c, "name"));
        snprintf(names[n_fn], sizeof names[n_fn], "fn_%zu", n_fn);
        fns[n_fn] = (api_tool_spec){.name = names[n_fn], .parameters = sch};
        n_fn++;
    }
    if (!fns || !names) {
        fprintf(stderr, "structured_bench: out of memory\n");
        status = 1;
    } else if (!status && (open_id < 0 || close_id < 0)) {
        fprintf(stderr, "structured_bench: the tokenizer has no <tool_call> and </tool_call> tokens\n");
        status = 1;
    }
    for (int k = 0; k < 2 && !status && n_fn && max_cases >= 1 << 30; k++) {
        eng_grammar *g = NULL;
        api_schema_error err;
        char name[64];
        size_t nf = k ? 1 : n_fn;
        if (k)
            snprintf(name, sizeof name, "tool call, named fn_0 (%s)", fn0_name);
        else
            snprintf(name, sizeof name, "tool call, required of %zu functions", n_fn);
        if (api_schema_tools(fns, nf, API_TOOLS_REQUIRED, false, open_id, close_id, &g, &err)) {
            fprintf(stderr, "structured_bench: %s: %s\n", name, err.message);
            status = 1;
            break;
        }
        status = bench_case(&b, name, g);
    }
    free(fns);
    free(names);
    if (!status) {
        double mc = median(b.all_c, b.n_all_c), mp = median(b.all_p, b.n_all_p);
        printf("%-44s %6zu %12.1f %14.3f %14.3f %7.3f\n", "all cases (median of every decode step)", b.n_all_c,
               b.masks ? b.mask_s / (double)b.masks * 1e6 : 0.0, mc * 1e3, mp * 1e3, mp > 0 ? mc / mp : 0);
    } else {
        eng_diag_print(&d, stderr, "structured_bench");
    }
    free(b.all_c);
    free(b.all_p);
    free(prompt);
    eng_tok_ids_free(&ids);
    eng_gvocab_free(gv);
    json_decref(cases);
    eng_tok_free(tok);
    eng_model_free(m);
    eng_diag_clear(&d);
    return status;
}
