/*
 * structured_bench: the decode step of a model with and without a JSON
 * Schema constraint, and the grammar's mask time per token inside it.
 *
 * For each case of a schema file (the format of tests/grammar/schemas.json)
 * it runs one constrained generation (eng_gen with the schema's grammar, a
 * fixed chat prompt, greedy or --temperature T with a fixed seed) to its
 * end, timing every decode step and the masks in it
 * (eng_gen_mask_seconds), then an unconstrained greedy generation of the
 * same number of tokens (end-of-sequence ignored), timing its steps. It
 * prints per case the tokens, the mask time per token and the median steps
 * with and without the schema, then the medians over all cases and their
 * ratio, with the kernel level. Without a schema the greedy argmax is fused
 * into the LM head, as the daemon does; with one it cannot be, and the mask
 * is computed on the step's thread: both costs are in the ratio.
 *
 * Wall time: other work on a shared machine inflates both columns alike,
 * but their ratio is only a figure for that run. Never asserts on speed.
 *
 *   make bench/structured_bench
 *   bench/structured_bench --model DIR --schemas ../tests/serve/structured-schemas.json \
 *       [--threads N] [--temperature T] [--max-tokens N] [--cases N]
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

int main(int argc, char **argv)
{
    krn_init(); /* the machine's best kernels, as qwen3d does, before any thread */
    const char *model_dir = NULL, *schemas = NULL;
    int threads = 0, max_cases = 1 << 30;
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
        else {
            fprintf(stderr, "usage: structured_bench --model DIR --schemas FILE [--threads N] [--temperature T] "
                            "[--max-tokens N] [--cases N]\n");
            return 2;
        }
    }
    if (!model_dir || !schemas || max_tokens < 1) {
        fprintf(stderr, "structured_bench: --model and --schemas are required\n");
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
    double *all_c = NULL, *all_p = NULL, mask_s = 0;
    size_t n_all_c = 0, n_all_p = 0, cap_c = 0, cap_p = 0;
    int64_t masks = 0;
    int status = 0;
    for (size_t ci = 0; ci < json_array_size(cases) && (int)ci < max_cases && !status; ci++) {
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
        eng_gen_params p = {.prompt = prompt, .n_prompt = ids.n, .max_tokens = max_tokens, .tok = tok,
                            .grammar = g, .gvocab = gv};
        eng_sampling_default(&p.sampling);
        p.sampling.temperature = temperature;
        p.sampling.seed = 1;
        size_t c0 = n_all_c, p0 = n_all_p;
        eng_gen *gen = eng_gen_new(m, &p, &d);
        if (!gen || run(gen, &all_c, &n_all_c, &cap_c) != 0) {
            status = 1;
            eng_gen_free(gen);
            eng_grammar_free(g);
            break;
        }
        int64_t n_masks = 0, tokens = eng_gen_generated(gen);
        double ms = eng_gen_mask_seconds(gen, &n_masks);
        mask_s += ms;
        masks += n_masks;
        eng_gen_free(gen);
        eng_grammar_free(g);
        eng_gen_params q = {.prompt = prompt, .n_prompt = ids.n, .max_tokens = tokens, .ignore_eos = true};
        eng_sampling_default(&q.sampling);
        q.sampling.temperature = 0.0f;
        if (!(gen = eng_gen_new(m, &q, &d)) || run(gen, &all_p, &n_all_p, &cap_p) != 0) {
            status = 1;
            eng_gen_free(gen);
            break;
        }
        eng_gen_free(gen);
        /* medians of this case's steps: copies, so the pooled arrays keep their order */
        size_t nc = n_all_c - c0, np = n_all_p - p0;
        double *tc = malloc((nc + 1) * sizeof *tc), *tp = malloc((np + 1) * sizeof *tp);
        memcpy(tc, all_c + c0, nc * sizeof *tc);
        memcpy(tp, all_p + p0, np * sizeof *tp);
        double mc = median(tc, nc), mp = median(tp, np);
        printf("%-44.44s %6lld %12.1f %14.3f %14.3f %7.3f\n", json_string_value(json_object_get(c, "name")),
               (long long)tokens, n_masks ? ms / (double)n_masks * 1e6 : 0.0, mc * 1e3, mp * 1e3, mp > 0 ? mc / mp : 0);
        free(tc);
        free(tp);
    }
    if (!status) {
        double mc = median(all_c, n_all_c), mp = median(all_p, n_all_p);
        printf("%-44s %6zu %12.1f %14.3f %14.3f %7.3f\n", "all cases (median of every decode step)", n_all_c,
               masks ? mask_s / (double)masks * 1e6 : 0.0, mc * 1e3, mp * 1e3, mp > 0 ? mc / mp : 0);
    } else {
        eng_diag_print(&d, stderr, "structured_bench");
    }
    free(all_c);
    free(all_p);
    free(prompt);
    eng_tok_ids_free(&ids);
    eng_gvocab_free(gv);
    json_decref(cases);
    eng_tok_free(tok);
    eng_model_free(m);
    eng_diag_clear(&d);
    return status;
}
