/*
 * bench: `qwen3d bench`. Measures load, time to first token, prefill and
 * decode speed for each prompt length, and decode speed at fixed context
 * lengths (the cache filled synthetically, so no long prefill is needed),
 * with the KV bytes the engine moved per decoded token and the memory held.
 * Prints one JSON object per case with --json. Never asserts on speed.
 * Runs on the main thread; kernels fan out over the model's compute pool.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/gen.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "kernels/checked.h"
#include "server/cli/cli.h"

#define CMD "bench"
#define MAX_LIST 16

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%llu %llu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Percentile by nearest rank of a sorted array. */
static double pct(const double *sorted, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static int parse_list(const char *opt, const char *s, int64_t *out, size_t *n, int64_t lo, int64_t hi)
{
    *n = 0;
    char *dup = strdup(s), *save = NULL;
    for (char *t = strtok_r(dup, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_LIST || !cli_parse_i64(t, lo, hi, &out[*n])) {
            free(dup);
            return cli_fail(CMD, "--%s: '%s' must be up to %d integers in %lld..%lld, comma separated", opt, s,
                            MAX_LIST, (long long)lo, (long long)hi);
        }
        (*n)++;
    }
    free(dup);
    if (!*n)
        return cli_fail(CMD, "--%s needs at least one value", opt);
    return 0;
}

typedef struct bench_opts {
    const char *model;
    int64_t prompts[MAX_LIST], contexts[MAX_LIST], batches[MAX_LIST];
    size_t n_prompts, n_contexts, n_batches;
    bool prompts_given, contexts_given;
    int64_t gen, repeat, context_steps;
    bool json, profile;
    eng_model_opts engine;
    cli_placement place;   /* --cpus, --numa-node */
} bench_opts;

static void prompt_ids(int64_t *ids, int64_t n, int64_t vocab)
{
    /* deterministic ids spread over the ordinary vocabulary */
    uint64_t x = 88172645463325252ull;
    int64_t span = vocab > 151643 ? 151643 : vocab;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        ids[i] = (int64_t)(x % (uint64_t)span);
    }
}

typedef struct case_result {
    double ttft_ms, prefill_ms, decode_median, decode_p90;
    double kv_per_token;
    uint64_t kv_committed;
} case_result;

/*
 * The run's progress line (a terminal only, see cli_progress): the case, its
 * place in the run, and the time left at the rates measured so far, per
 * prompt token of prefill and per decode step.
 */
typedef struct bench_progress {
    cli_progress line;
    char where[96];                   /* "prompt 512 (case 1 of 5), run 2 of 3" */
    double prefill_ms, decode_ms;     /* measured so far */
    int64_t prefill_toks, decode_steps;
    int64_t toks_left, steps_left;    /* still to run */
} bench_progress;

static void progress_draw(bench_progress *b, bool final, const char *doing)
{
    if (!b->line.on)
        return;
    char left[48] = "";
    bool rates = (!b->toks_left || b->prefill_toks) && (!b->steps_left || b->decode_steps);
    if (rates && (b->toks_left || b->steps_left)) {
        double ms = (b->toks_left ? (double)b->toks_left * b->prefill_ms / (double)b->prefill_toks : 0) +
                    (b->steps_left ? (double)b->steps_left * b->decode_ms / (double)b->decode_steps : 0);
        if (ms >= 1000)
            snprintf(left, sizeof left, ", about %.0f s left", ms / 1000.0);
    }
    cli_progress_text(&b->line, final, "bench: %s: %s%s", b->where, doing, left);
}

static void progress_prefill(bench_progress *b, int64_t tokens, double ms)
{
    b->prefill_ms += ms;
    b->prefill_toks += tokens;
    b->toks_left -= tokens;
}

/*
 * A greedy generation of PROMPT, as the daemon makes it (the argmax taken
 * inside the LM head), that never stops before max_tokens: speed, not text.
 */
static eng_gen *bench_gen(eng_model *m, const int64_t *prompt, size_t n, int64_t max_tokens, int64_t capacity,
                          eng_diag *d)
{
    eng_gen_params p = {.prompt = prompt, .n_prompt = n, .max_tokens = max_tokens, .capacity = capacity,
                        .ignore_eos = true};
    eng_sampling_default(&p.sampling);
    p.sampling.temperature = 0.0f;
    return eng_gen_new(m, &p, d);
}

/* Runs STEPS steps of G, timing each into TIMES; B shows them. */
static int timed_steps(eng_gen *g, int64_t steps, double *times, bench_progress *b, eng_diag *d)
{
    for (int64_t i = 0; i < steps; i++) {
        double t0 = now_ms();
        if (eng_gen_step(&g, 1, NULL, d) != 0)
            return -1;
        times[i] = now_ms() - t0;
        b->decode_ms += times[i];
        b->decode_steps++;
        b->steps_left--;
        char doing[64];
        snprintf(doing, sizeof doing, "decode %lld of %lld", (long long)i + 1, (long long)steps);
        progress_draw(b, false, doing);
    }
    return 0;
}

/* Prints OBJ, a case's row (consumed), with EXTRA's keys (its profile or options) added, as one JSON line. */
static void print_json_row(json_t *obj, json_t *extra)
{
    if (obj && extra)
        json_object_update(obj, extra);
    if (obj)
        json_dumpf(obj, stdout, JSON_COMPACT);
    putchar('\n');
    json_decref(obj);
}

/*
 * Time per op kind over one phase: the entries now minus those at its start
 * (`before`, n_before of them; NULL for none), per `per` (the prompt for
 * prefill, so its figures are totals; 1 per step for decode).
 */
static void print_profile(json_t *obj, const char *key, const char *title, const eng_prof_entry *now, size_t n,
                          const eng_prof_entry *before, size_t n_before, double per, bool json)
{
    double ns[32], total = 0;
    for (size_t i = 0; i < n; i++) {
        ns[i] = (double)now[i].ns;
        for (size_t j = 0; j < n_before; j++)
            if (before[j].op == now[i].op)
                ns[i] -= (double)before[j].ns;
        total += ns[i];
    }
    json_t *p = json_object();
    if (!json)
        printf("  %s:\n", title);
    for (size_t i = 0; i < n; i++) {
        double ms = ns[i] / 1e6 / (per > 0 ? per : 1);
        if (json)
            json_object_set_new(p, now[i].op, json_real(ms));
        else if (ns[i] > 0)
            printf("    %-34s %9.3f  %5.1f%%\n", now[i].op, ms, 100.0 * ns[i] / (total > 0 ? total : 1));
    }
    if (json)
        json_object_set_new(obj, key, p);
    else
        json_decref(p);
}

static int usage(FILE *f)
{
    fprintf(f, "usage: qwen3d bench --model DIR [--prompt-len 32,512] [--gen 128] [--repeat R]\n"
               "                    [--contexts 128,1024,4096] [--context-steps N] [--batch 1,2,4,8,16]\n"
               "                    [--profile] [--json]\n"
               "                    " CLI_ENGINE_USAGE " " CLI_PLACEMENT_USAGE "\n");
    return 2;
}

static int parse_args(int argc, char **argv, bench_opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int r = 0;
        if ((r = cli_opt(CMD, argc, argv, &i, "model", &v)) > 0) {
            o->model = v;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "prompt-len", &v)) > 0) {
            if (parse_list("prompt-len", v, o->prompts, &o->n_prompts, 1, 1 << 20))
                return 2;
            o->prompts_given = true;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "contexts", &v)) > 0) {
            if (!strcmp(v, "none"))
                o->n_contexts = 0;
            else if (parse_list("contexts", v, o->contexts, &o->n_contexts, 1, 1 << 20))
                return 2;
            o->contexts_given = true;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "batch", &v)) > 0) {
            if (parse_list("batch", v, o->batches, &o->n_batches, 1, 256))
                return 2;
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "gen", &v)) > 0) {
            if (!cli_parse_i64(v, 1, 1 << 20, &o->gen))
                return cli_fail(CMD, "--gen must be an integer in 1..1048576, not '%s'", v);
        } else if (!r && (r = cli_engine_opt(CMD, argc, argv, &i, &o->engine)) > 0) {
        } else if (!r && (r = cli_placement_opt(CMD, argc, argv, &i, &o->place)) > 0) {
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "repeat", &v)) > 0) {
            if (!cli_parse_i64(v, 1, 1000, &o->repeat))
                return cli_fail(CMD, "--repeat must be an integer in 1..1000, not '%s'", v);
        } else if (!r && (r = cli_opt(CMD, argc, argv, &i, "context-steps", &v)) > 0) {
            if (!cli_parse_i64(v, 1, 100000, &o->context_steps))
                return cli_fail(CMD, "--context-steps must be an integer in 1..100000, not '%s'", v);
        } else if (r < 0) {
            return 2;
        } else if (cli_flag(argv, i, "json")) {
            o->json = true;
        } else if (cli_flag(argv, i, "profile")) {
            o->profile = true;
        } else if (cli_flag(argv, i, "help")) {
            usage(stdout);
            return 1;
        } else {
            return cli_fail(CMD, "unknown argument '%s'", argv[i]);
        }
    }
    if (!o->model)
        return cli_fail(CMD, "--model DIR is required");
    /* --batch measures batches alone unless the other cases are asked for too */
    if (o->n_batches && !o->contexts_given)
        o->n_contexts = 0;
    return 0;
}

/*
 * Leaves B caches of P + GEN positions, every page touched, in the model's KV
 * pool, raising (never lowering) its budget to hold them, so the timed runs
 * start in pages touched before, as a daemon's sessions do once it has served
 * a while. A fresh page's first-touch fault costs about a prompt token's
 * compute per row under some hypervisors, and would fall on the first run only.
 * IDS holds B prompts of P ids (one when B is 1).
 */
static int warm_kv_pool(eng_model *m, const int64_t *ids, int64_t P, int64_t gen, size_t B, eng_diag *d)
{
    uint64_t need = ck_mul_sat_u64(eng_model_kv_bytes(m, P + gen), B);
    if (need > eng_model_kv_pool_budget(m))
        eng_model_set_kv_pool_budget(m, need);
    eng_gen **g = calloc(B, sizeof *g);
    int rc = g ? 0 : -1;
    if (!g)
        eng_diag_add(d, "out of memory");
    for (size_t i = 0; g && i < B && rc == 0; i++)
        if (!(g[i] = bench_gen(m, ids + (size_t)P * i, (size_t)P, gen, P + gen, d)) ||
            eng_session_fill_synthetic(eng_gen_session(g[i]), P + gen - 1, d) != 0)
            rc = -1;
    for (size_t i = 0; g && i < B; i++)
        eng_gen_free(g[i]);
    free(g);
    return rc;
}

/* What the cases of one bench run share. */
typedef struct bench_run {
    const bench_opts *o;
    eng_model *m;
    bench_progress bp;
    double *times;     /* room for every step of a case */
    int64_t *ids;      /* the prompt, as long as the longest */
    double load_ms;
    uint64_t prepared;
    uint64_t in_place;            /* weight bytes read in place from the mapped files (eng_plan_in_place_bytes) */
    const char *prepared_cache;   /* what the prepared-weights cache did (eng_prep_state_name) */
    int64_t limit;     /* the model's context */
    int case_no, n_cases;
} bench_run;

/* A prompt case: o->repeat generations of a P-token prompt; prints its row. */
static int prompt_case(bench_run *b, int64_t P, eng_diag *d)
{
    const bench_opts *o = b->o;
    eng_gen *g = NULL;
    json_t *row = NULL;
    if (P + o->gen > b->limit) {
        eng_diag_add(d, "--prompt-len %lld + --gen %lld exceeds the model's context of %lld", (long long)P,
                     (long long)o->gen, (long long)b->limit);
        goto fail;
    }
    double ttft[1000], prefill[1000];
    size_t n_times = 0;
    uint64_t moved = 0, committed = 0;
    row = json_object();
    b->case_no++;
    if (warm_kv_pool(b->m, b->ids, P, o->gen, 1, d) != 0)
        goto fail;
    for (int64_t r = 0; r < o->repeat; r++) {
        snprintf(b->bp.where, sizeof b->bp.where, "prompt %lld (case %d of %d), run %lld of %lld", (long long)P, b->case_no,
                 b->n_cases, (long long)r + 1, (long long)o->repeat);
        progress_draw(&b->bp, true, "prefill");
        g = bench_gen(b->m, b->ids, (size_t)P, o->gen, P + o->gen, d);
        if (!g)
            goto fail;
        eng_exec *x = eng_session_exec(eng_gen_session(g));
        eng_exec_set_profiling(x, o->profile && r == o->repeat - 1);
        /* The prefill step ends with the first token: its time is the time to first token. */
        double a = now_ms();
        if (eng_gen_step(&g, 1, NULL, d) != 0)
            goto fail;
        ttft[r] = now_ms() - a;
        prefill[r] = ttft[r];
        progress_prefill(&b->bp, P, prefill[r]);
        eng_prof_entry at_prefill[32];
        size_t n_at_prefill = eng_exec_profile(x, at_prefill, 32);
        uint64_t before = eng_session_kv_bytes_moved(eng_gen_session(g));
        if (timed_steps(g, o->gen - 1 > 0 ? o->gen - 1 : 0, b->times + n_times, &b->bp, d) != 0)
            goto fail;
        n_times += (size_t)(o->gen - 1);
        moved += eng_session_kv_bytes_moved(eng_gen_session(g)) - before;
        committed = eng_session_kv_bytes_committed(eng_gen_session(g));
        if (o->profile && r == o->repeat - 1) {
            eng_prof_entry at_end[32];
            size_t n_end = eng_exec_profile(x, at_end, 32);
            print_profile(row, "profile_prefill_ms", "prefill profile (ms for the prompt, share)", at_prefill,
                          n_at_prefill, NULL, 0, 1, o->json);
            if (o->gen > 1)
                print_profile(row, "profile_decode_ms_per_token", "decode profile (ms per token, share)", at_end,
                              n_end, at_prefill, n_at_prefill, (double)(o->gen - 1), o->json);
        }
        eng_gen_free(g);
        g = NULL;
    }
    qsort(b->times, n_times, sizeof *b->times, cmp_double);
    qsort(ttft, (size_t)o->repeat, sizeof(double), cmp_double);
    qsort(prefill, (size_t)o->repeat, sizeof(double), cmp_double);
    double med = pct(b->times, n_times, 0.5), p90 = pct(b->times, n_times, 0.9);
    double ttft_med = pct(ttft, (size_t)o->repeat, 0.5), pre_med = pct(prefill, (size_t)o->repeat, 0.5);
    double per_token = n_times ? (double)moved / (double)n_times : 0;
    cli_progress_clear(&b->bp.line);
    if (o->json) {
        json_t *obj = json_pack("{s:s, s:I, s:I, s:I, s:s, s:s, s:f, s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:s}",
                                "case", "prompt", "prompt_len", (json_int_t)P, "gen", (json_int_t)o->gen,
                                "threads", (json_int_t)eng_pool_threads(eng_model_pool(b->m)), "kv_mode", eng_kv_mode_name(o->engine.kv_mode),
                                "kv_type", kv_type_name(o->engine.kv_type), "load_ms", b->load_ms, "prepared_bytes",
                                (json_int_t)b->prepared, "rss_bytes", (json_int_t)rss_bytes(), "ttft_ms", ttft_med,
                                "prefill_tokens_per_s", pre_med > 0 ? (double)P * 1000.0 / pre_med : 0.0,
                                "decode_ms_median", med, "decode_ms_p90", p90, "decode_tokens_per_s",
                                med > 0 ? 1000.0 / med : 0.0, "kv_bytes_copied_per_token", per_token,
                                "kv_bytes_committed", (json_int_t)committed, "prepared_cache", b->prepared_cache);
        json_object_set_new(row, "repeat", json_integer(o->repeat));
        json_object_set_new(row, "in_place_bytes", json_integer((json_int_t)b->in_place));
        print_json_row(obj, row);
    } else {
        printf("prompt %5lld: ttft %8.2f ms, prefill %8.1f tok/s, decode median %7.3f ms (p90 %7.3f) = %7.1f tok/s, "
               "kv bytes/token %.0f, kv committed %llu, rss %llu\n",
               (long long)P, ttft_med, pre_med > 0 ? (double)P * 1000.0 / pre_med : 0.0, med, p90,
               med > 0 ? 1000.0 / med : 0.0, per_token, (unsigned long long)committed,
               (unsigned long long)rss_bytes());
    }
    json_decref(row);
    fflush(stdout);
    return 0;
fail:
    eng_gen_free(g);
    json_decref(row);
    return -1;
}

/* A context case: decode steps after a synthetic context of C tokens; prints its row. */
static int context_case(bench_run *b, int64_t C, eng_diag *d)
{
    const bench_opts *o = b->o;
    eng_gen *g = NULL;
    if (C + o->context_steps + 1 > b->limit) {
        eng_diag_add(d, "context %lld + %lld steps exceeds the model's context of %lld", (long long)C,
                     (long long)o->context_steps, (long long)b->limit);
        goto fail;
    }
    snprintf(b->bp.where, sizeof b->bp.where, "context %lld (case %d of %d)", (long long)C, ++b->case_no, b->n_cases);
    progress_draw(&b->bp, true, "filling the cache");
    /* The first step feeds one id after the synthetic context, every later one its sampled id. */
    g = bench_gen(b->m, b->ids, 1, o->context_steps, C + o->context_steps + 1, d);
    if (!g || eng_session_fill_synthetic(eng_gen_session(g), C, d) != 0)
        goto fail;
    eng_session *cs = eng_gen_session(g);
    /* The steps' own profile: the synthetic fill runs no op, and the profile starts here. */
    eng_exec *x = eng_session_exec(cs);
    eng_exec_set_profiling(x, o->profile);
    eng_prof_entry at_start[32];
    size_t n_at_start = eng_exec_profile(x, at_start, 32);
    uint64_t before = eng_session_kv_bytes_moved(cs);
    if (timed_steps(g, o->context_steps, b->times, &b->bp, d) != 0)
        goto fail;
    uint64_t moved = eng_session_kv_bytes_moved(cs) - before;
    uint64_t committed = eng_session_kv_bytes_committed(cs);
    eng_prof_entry at_end[32];
    size_t n_end = eng_exec_profile(x, at_end, 32);
    eng_gen_free(g);
    g = NULL;
    qsort(b->times, (size_t)o->context_steps, sizeof *b->times, cmp_double);
    double med = pct(b->times, (size_t)o->context_steps, 0.5), p90 = pct(b->times, (size_t)o->context_steps, 0.9);
    double per_token = (double)moved / (double)o->context_steps;
    cli_progress_clear(&b->bp.line);
    json_t *prof = json_object();
    if (o->profile) {
        char title[80];
        snprintf(title, sizeof title, "context %lld decode profile (ms per token, share)", (long long)C);
        print_profile(prof, "profile_decode_ms_per_token", title, at_end, n_end, at_start, n_at_start,
                      (double)o->context_steps, o->json);
    }
    if (o->json) {
        /* The context is filled without running the model: no prefill to time (ttft_ms and
         * prefill_tokens_per_s are null). */
        json_t *obj = json_pack("{s:s, s:I, s:I, s:I, s:s, s:s, s:f, s:I, s:n, s:n, s:f, s:f, s:f, s:f, s:I, s:I}",
                                "case", "context", "context", (json_int_t)C, "steps", (json_int_t)o->context_steps,
                                "threads", (json_int_t)eng_pool_threads(eng_model_pool(b->m)), "kv_mode",
                                eng_kv_mode_name(o->engine.kv_mode), "kv_type", kv_type_name(o->engine.kv_type),
                                "load_ms", b->load_ms, "prepared_bytes", (json_int_t)b->prepared, "ttft_ms",
                                "prefill_tokens_per_s", "decode_ms_median", med, "decode_ms_p90", p90,
                                "decode_tokens_per_s", med > 0 ? 1000.0 / med : 0.0, "kv_bytes_copied_per_token",
                                per_token, "kv_bytes_committed", (json_int_t)committed, "rss_bytes",
                                (json_int_t)rss_bytes());
        print_json_row(obj, prof);
    } else {
        printf("context %5lld: decode median %7.3f ms (p90 %7.3f) = %7.1f tok/s, kv bytes/token %.0f, "
               "kv committed %llu\n",
               (long long)C, med, p90, med > 0 ? 1000.0 / med : 0.0, per_token, (unsigned long long)committed);
    }
    json_decref(prof);
    fflush(stdout);
    return 0;
fail:
    eng_gen_free(g);
    return -1;
}

/*
 * B sessions decoding together: every step runs one id of each in one pass
 * of the model (as the daemon's scheduler does with B streams). Each
 * session has its own prompt of --prompt-len's first length, all prefilled
 * in one step; then --gen - 1 decode steps of all B are timed. Its JSON row
 * repeats the run's load.
 */
static int batch_case(bench_run *b, size_t B, eng_diag *d)
{
    const bench_opts *o = b->o;
    eng_model *m = b->m;
    double *times = b->times;
    int64_t P = o->prompts[0], V = eng_model_geometry(m)->vocab;
    if (P + o->gen > eng_model_max_context(m)) {
        eng_diag_add(d, "--prompt-len %lld + --gen %lld exceeds the model's context of %lld", (long long)P,
                     (long long)o->gen, (long long)eng_model_max_context(m));
        return -1;
    }
    int rc = -1;
    eng_gen **g = calloc(B, sizeof *g);
    int64_t *ids = malloc((size_t)P * B * sizeof *ids);
    if (!g || !ids) {
        eng_diag_add(d, "out of memory");
        goto out;
    }
    /* distinct prompts: the same pseudo-random stream, one slice per session */
    prompt_ids(ids, P * (int64_t)B, V);
    if (warm_kv_pool(m, ids, P, o->gen, B, d) != 0)
        goto out;
    for (size_t i = 0; i < B; i++)
        if (!(g[i] = bench_gen(m, ids + (size_t)P * i, (size_t)P, o->gen, P + o->gen, d)))
            goto out;
    /* every session of the batch runs through the model's one executor */
    eng_exec *x = eng_session_exec(eng_gen_session(g[0]));
    eng_exec_set_profiling(x, o->profile);
    double t0 = now_ms();
    if (eng_gen_step(g, B, NULL, d) != 0)
        goto out;
    double ttft = now_ms() - t0;
    eng_prof_entry at_prefill[32], at_end[32];
    size_t n_at_prefill = eng_exec_profile(x, at_prefill, 32);
    uint64_t moved = 0;
    for (size_t i = 0; i < B; i++)
        moved -= eng_session_kv_bytes_moved(eng_gen_session(g[i]));
    int64_t steps = o->gen - 1;
    for (int64_t k = 0; k < steps; k++) {
        double a = now_ms();
        if (eng_gen_step(g, B, NULL, d) != 0)
            goto out;
        times[k] = now_ms() - a;
    }
    size_t n_end = eng_exec_profile(x, at_end, 32);
    eng_exec_set_profiling(x, false);
    for (size_t i = 0; i < B; i++)
        moved += eng_session_kv_bytes_moved(eng_gen_session(g[i]));
    qsort(times, (size_t)steps, sizeof *times, cmp_double);
    double med = pct(times, (size_t)steps, 0.5), p90 = pct(times, (size_t)steps, 0.9);
    double tps = med > 0 ? 1000.0 * (double)B / med : 0.0;
    json_t *prof = json_object();
    if (o->profile && steps > 0) {
        char title[80];
        snprintf(title, sizeof title, "batch %zu decode profile (ms per step of the batch, share)", B);
        print_profile(prof, "profile_decode_ms_per_step", title, at_end, n_end, at_prefill, n_at_prefill,
                      (double)steps, o->json);
    }
    if (o->json) {
        /* ttft_ms: the one step that prefills every prompt of the batch. */
        json_t *obj = json_pack("{s:s, s:I, s:I, s:I, s:I, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I}", "case",
                                "batch", "batch", (json_int_t)B, "prompt_len", (json_int_t)P, "gen",
                                (json_int_t)o->gen, "threads", (json_int_t)eng_pool_threads(eng_model_pool(m)),
                                "load_ms", b->load_ms, "prepared_bytes", (json_int_t)b->prepared, "ttft_ms", ttft,
                                "prefill_tokens_per_s", ttft > 0 ? (double)P * (double)B * 1000.0 / ttft : 0.0,
                                "decode_ms_median", med, "decode_ms_p90", p90, "decode_tokens_per_s", tps,
                                "kv_bytes_copied_per_token", steps > 0 ? (double)moved / (double)steps / (double)B : 0.0,
                                "rss_bytes", (json_int_t)rss_bytes());
        print_json_row(obj, prof);
    } else {
        printf("batch %3zu: prompt %lld each, prefill of all %8.1f ms, decode step median %7.3f ms (p90 %7.3f) = "
               "%7.1f tok/s in all\n",
               B, (long long)P, ttft, med, p90, tps);
    }
    json_decref(prof);
    fflush(stdout);
    rc = 0;
out:
    for (size_t i = 0; g && i < B; i++)
        eng_gen_free(g[i]);
    free(g);
    free(ids);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    bench_opts o = {.prompts = {32, 512}, .n_prompts = 2, .contexts = {128, 1024, 4096}, .n_contexts = 3,
                    .gen = 128, .repeat = 3, .context_steps = 32, .engine = {.threads = 0}, .place = CLI_PLACEMENT_NONE};
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : rc;
    rc = 1;
    eng_diag d;
    eng_diag_init(&d);
    bench_run b = {.o = &o};

    if (cli_place(CMD, &o.place)) { /* before the model and the pool's threads */
        rc = 2;
        goto out;
    }
    cli_progress_init(&b.bp.line, o.json);
    double t0 = now_ms();
    if (cli_model_open(&b.bp.line, o.model, &o.engine, &b.m, &d) != 0)
        goto out;
    b.load_ms = now_ms() - t0;
    size_t n_prompt_cases = o.n_batches && !o.prompts_given ? 0 : o.n_prompts;
    b.n_cases = (int)n_prompt_cases + (int)o.n_contexts;
    for (size_t i = 0; i < n_prompt_cases; i++) {
        b.bp.toks_left += o.prompts[i] * o.repeat;
        b.bp.steps_left += (o.gen - 1) * o.repeat;
    }
    b.bp.steps_left += (int64_t)o.n_contexts * o.context_steps;
    int64_t V = eng_model_geometry(b.m)->vocab;
    b.limit = eng_model_max_context(b.m);
    b.prepared = eng_plan_prepared_bytes(eng_model_plan(b.m));
    b.in_place = eng_plan_in_place_bytes(eng_model_plan(b.m));
    eng_prep_info pi;
    eng_plan_prepared_cache(eng_model_plan(b.m), &pi);
    b.prepared_cache = eng_prep_state_name(pi.state);
    size_t max_steps = (size_t)(o.gen * o.repeat > o.context_steps ? o.gen * o.repeat : o.context_steps);
    b.times = malloc(max_steps * sizeof *b.times);
    int64_t max_prompt = 1;
    for (size_t i = 0; i < o.n_prompts; i++)
        if (o.prompts[i] > max_prompt)
            max_prompt = o.prompts[i];
    b.ids = malloc((size_t)max_prompt * sizeof *b.ids);
    if (!b.times || !b.ids) {
        eng_diag_add(&d, "out of memory");
        goto out;
    }
    prompt_ids(b.ids, max_prompt, V);
    if (!o.json) {
        char placement[256];
        eng_pool_describe(eng_model_pool(b.m), placement, sizeof placement);
        printf("compute pool: %s\n", placement);
        eng_pool_describe_placement(placement, sizeof placement);
        printf("placement: %s\n", placement);
        printf("model %s: load %.1f ms (prepared cache %s), prepared weights %llu bytes, read in place %llu bytes, "
               "%lld threads, kv %s/%s\n",
               o.model, b.load_ms, b.prepared_cache, (unsigned long long)b.prepared, (unsigned long long)b.in_place,
               (long long)eng_pool_threads(eng_model_pool(b.m)),
               eng_kv_mode_name(o.engine.kv_mode), kv_type_name(o.engine.kv_type));
    }
    for (size_t i = 0; i < n_prompt_cases; i++)
        if (prompt_case(&b, o.prompts[i], &d) != 0)
            goto out;
    for (size_t i = 0; i < o.n_contexts; i++)
        if (context_case(&b, o.contexts[i], &d) != 0)
            goto out;
    for (size_t i = 0; i < o.n_batches; i++)
        if (batch_case(&b, (size_t)o.batches[i], &d) != 0)
            goto out;
    rc = 0;
out:
    cli_progress_clear(&b.bp.line);
    eng_diag_print(&d, stderr, "qwen3d: " CMD);
    eng_diag_clear(&d);
    eng_model_free(b.m);
    free(b.times);
    free(b.ids);
    return rc;
}
