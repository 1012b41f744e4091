/*
 * test_sampler: engine/sampler.c against its definitions.
 *
 * Every expectation is computed here from the definition: argmax by a plain
 * loop, filters on a fully sorted copy of the row, exact probabilities in
 * double. Frequencies of seeded draws are compared with those probabilities
 * by a chi-square statistic against its 0.1% quantile; the seeds are fixed,
 * so the outcome is deterministic.
 */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sampler.h"
#include "tests/check_main.h"

#define FULL_VOCAB 151936

/* ---- test data ----------------------------------------------------------- */

/* A private generator for test rows, independent of the sampler's. */
static uint64_t test_rng = 1;

static uint64_t next_u64(void)
{
    uint64_t z = (test_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double next_unit(void) { return (double)(next_u64() >> 11) * 0x1.0p-53; }

/* Logits uniform in [lo, hi); QUANT > 0 rounds them to multiples of QUANT to create ties. */
static void fill_row(float *x, size_t n, double lo, double hi, double quant)
{
    for (size_t i = 0; i < n; i++) {
        double v = lo + (hi - lo) * next_unit();
        if (quant > 0)
            v = floor(v / quant) * quant;
        x[i] = (float)v;
    }
}

static int32_t ref_argmax(const float *x, size_t n)
{
    int32_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int32_t)i;
    return best;
}

/* ---- reference distribution --------------------------------------------- */

static const float *sort_key;

/* Larger logit first, then lower id. */
static int cmp_desc(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (sort_key[a] != sort_key[b])
        return sort_key[a] > sort_key[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

/*
 * The probabilities of each id under P for the (already penalized) row X,
 * by the definitions in sampler.h: sort everything, cut top-k, renormalize,
 * cut the nucleus, cut by min-p, renormalize.
 */
static void ref_probs(const float *x, size_t n, const eng_sampling *p, double *prob)
{
    int32_t *ord = malloc(n * sizeof *ord);
    double *w = malloc(n * sizeof *w);
    ck_assert(ord && w);
    for (size_t i = 0; i < n; i++)
        ord[i] = (int32_t)i;
    sort_key = x;
    qsort(ord, n, sizeof *ord, cmp_desc);
    double m = x[ord[0]];
    for (size_t i = 0; i < n; i++)
        w[i] = exp(((double)x[ord[i]] - m) / p->temperature);
    size_t keep = n;
    if (p->top_k > 0 && (size_t)p->top_k < keep)
        keep = (size_t)p->top_k;
    if (p->top_p < 1.0f) {
        double z = 0, cum = 0;
        for (size_t i = 0; i < keep; i++)
            z += w[i];
        for (size_t i = 0; i < keep; i++) {
            cum += w[i];
            if (cum >= p->top_p * z) {
                keep = i + 1;
                break;
            }
        }
    }
    size_t kept = 0;
    double z = 0;
    for (size_t i = 0; i < keep; i++) {
        if (w[i] >= p->min_p * w[0]) {
            kept++;
            z += w[i];
        } else {
            w[i] = 0;
        }
    }
    ck_assert_uint_gt(kept, 0);
    for (size_t i = 0; i < n; i++)
        prob[i] = 0;
    for (size_t i = 0; i < keep; i++)
        prob[ord[i]] = w[i] / z;
    free(ord);
    free(w);
}

/* The 0.1% upper quantile of chi-square with DF degrees of freedom (Wilson-Hilferty). */
static double chi2_bound(size_t df)
{
    const double z = 3.0902; /* standard normal 0.999 quantile */
    double a = 2.0 / (9.0 * (double)df);
    double t = 1.0 - a + z * sqrt(a);
    return (double)df * t * t * t;
}

/*
 * Draws N times from one row with sampler S and checks the frequencies
 * against PROB: nothing outside the support, and a chi-square statistic over
 * the support below its 0.1% quantile.
 */
static void check_frequencies(eng_sampler *s, const float *x, size_t n, const double *prob,
                              size_t draws)
{
    size_t *count = calloc(n, sizeof *count);
    ck_assert_ptr_nonnull(count);
    for (size_t i = 0; i < draws; i++) {
        int32_t id = eng_sampler_sample(s, x);
        if (id < 0 || (size_t)id >= n)
            ck_abort_msg("draw %zu returned id %d", i, id);
        count[id]++;
    }
    double chi2 = 0;
    size_t support = 0;
    for (size_t i = 0; i < n; i++) {
        if (prob[i] == 0) {
            if (count[i] != 0)
                ck_abort_msg("id %zu drawn %zu times outside the support", i, count[i]);
            continue;
        }
        double e = prob[i] * (double)draws;
        if (e < 5.0)
            ck_abort_msg("test setup: expected count %g too small for chi-square", e);
        chi2 += ((double)count[i] - e) * ((double)count[i] - e) / e;
        support++;
    }
    if (support > 1) {
        double bound = chi2_bound(support - 1);
        ck_assert_msg(chi2 < bound, "chi-square %.2f over %zu ids exceeds %.2f", chi2, support, bound);
    }
    free(count);
}

/* eng_sampler_probs() against PROB: the same support, values within float rounding. */
static void check_probs(eng_sampler *s, const float *x, size_t n, const double *prob)
{
    float *got = malloc(n * sizeof *got);
    ck_assert_ptr_nonnull(got);
    eng_sampler_probs(s, x, got);
    /* Asserting only on failure keeps check's per-assertion bookkeeping
     * out of the loop. */
    for (size_t i = 0; i < n; i++) {
        double tol = 1e-7 + 2e-6 * prob[i];
        if ((prob[i] == 0) != (got[i] == 0) || !(fabs(got[i] - prob[i]) <= tol))
            ck_abort_msg("id %zu: probability %.9g, expected %.9g", i, (double)got[i], prob[i]);
    }
    free(got);
}

static eng_sampler *make(const eng_sampling *p, size_t n)
{
    eng_sampler *s = eng_sampler_new(p, n);
    ck_assert_ptr_nonnull(s);
    return s;
}

/* ---- greedy -------------------------------------------------------------- */

START_TEST(argmax_ties_and_nan)
{
    const float a[] = {1, 3, 3, 2};
    ck_assert_int_eq(eng_argmax(a, 4), 1);
    const float b[] = {NAN, -1, NAN, -1, 5, 5};
    ck_assert_int_eq(eng_argmax(b, 6), 4);
    const float c[] = {-INFINITY, -INFINITY};
    ck_assert_int_eq(eng_argmax(c, 2), 0);
    const float d[] = {0, INFINITY, 1};
    ck_assert_int_eq(eng_argmax(d, 3), 1);
    ck_assert_int_eq(eng_argmax(a, 0), 0);

    float x[1000];
    for (int t = 0; t < 50; t++) {
        fill_row(x, 1000, -4, 4, 0.5); /* many ties */
        ck_assert_int_eq(eng_argmax(x, 1000), ref_argmax(x, 1000));
    }
}
END_TEST

/* eng_argmax's definition: the first index of the largest non-NaN value (-0 equals +0), or 0 when none is above -inf. */
static int32_t ref_argmax_nan(const float *x, size_t n)
{
    float bv = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (x[i] > bv)
            bv = x[i];
    if (!(bv > -INFINITY))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] == bv)
            return (int32_t)i;
    return 0;
}

/* Every length around the scan's 16- and 4-wide steps, with ties, NaN, signed zeros and infinities anywhere. */
START_TEST(argmax_lengths)
{
    float x[80];
    uint64_t seed = 11;
    for (size_t n = 1; n <= 80; n++)
        for (int t = 0; t < 40; t++) {
            fill_row(x, n, -3, 3, 1.0); /* values -3..3: many ties */
            for (size_t i = 0; i < n; i++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                unsigned r = (unsigned)(seed >> 33) % 16;
                if (r == 0)
                    x[i] = NAN;
                else if (r == 1)
                    x[i] = -0.0f;
                else if (r == 2 && t % 4 == 0)
                    x[i] = -INFINITY;
                else if (r == 3 && t % 8 == 1)
                    x[i] = INFINITY;
                else if (t % 5 == 2)
                    x[i] = -fabsf(x[i]) - 1.0f; /* all negative: the zeros win */
            }
            ck_assert_msg(eng_argmax(x, n) == ref_argmax_nan(x, n), "n=%zu t=%d: %d, expected %d", n, t,
                          eng_argmax(x, n), ref_argmax_nan(x, n));
        }
}
END_TEST

/* The argmax of a row merged from the keys of its parts, split at the given cuts. */
static int32_t merged_argmax(const float *x, size_t n, const size_t *cuts, size_t n_cuts)
{
    uint64_t best = 0;
    size_t b = 0;
    for (size_t c = 0; c <= n_cuts; c++) {
        size_t e = c < n_cuts ? cuts[c] : n;
        uint64_t k = eng_argmax_key(x, b, e);
        best = k > best ? k : best;
        b = e;
    }
    return eng_argmax_key_id(best);
}

/* The split argmax of the fused LM head agrees with eng_argmax on every split. */
START_TEST(argmax_by_parts)
{
    static const float rows[][6] = {
        {1, 3, 3, 2, 0, 0},           {NAN, -1, NAN, -1, 5, 5},        {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY},
        {0, INFINITY, 1, INFINITY, 0, 0}, {-0.0f, 0.0f, -0.0f, -1, -2, -3}, {-2, -1, -0.0f, 0.0f, -1, -2},
        {NAN, NAN, NAN, NAN, NAN, NAN},  {NAN, -INFINITY, NAN, -7, NAN, -7}, {-1e30f, -1e-30f, -1e-45f, -1e-45f, -3, -1e30f},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++)
        for (size_t c1 = 0; c1 <= 6; c1++)
            for (size_t c2 = c1; c2 <= 6; c2++) {
                size_t cuts[2] = {c1, c2};
                ck_assert_msg(merged_argmax(rows[r], 6, cuts, 2) == eng_argmax(rows[r], 6), "row %zu cuts %zu,%zu",
                              r, c1, c2);
            }
    float x[1000];
    uint64_t seed = 7;
    for (int t = 0; t < 200; t++) {
        fill_row(x, 1000, -4, 4, 0.5); /* many ties */
        if (t % 3 == 0)
            x[t] = NAN;
        size_t cuts[4];
        for (int c = 0; c < 4; c++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            cuts[c] = (size_t)(seed >> 33) % 1001;
        }
        for (int i = 0; i < 4; i++) /* sorted */
            for (int j = i + 1; j < 4; j++)
                if (cuts[j] < cuts[i]) {
                    size_t tmp = cuts[i];
                    cuts[i] = cuts[j];
                    cuts[j] = tmp;
                }
        ck_assert_int_eq(merged_argmax(x, 1000, cuts, 4), eng_argmax(x, 1000));
    }
}
END_TEST

/* Settings that must all reduce to the argmax, lowest id on ties. */
START_TEST(greedy_equivalents)
{
    eng_sampling cases[3];
    for (int i = 0; i < 3; i++) {
        eng_sampling_default(&cases[i]);
        cases[i].seed = 77 + (uint64_t)i;
    }
    cases[0].temperature = 0.0f;
    cases[0].top_p = 0.5f; /* ignored when greedy */
    cases[1].temperature = 1.5f;
    cases[1].top_k = 1;
    cases[2].temperature = 2.0f;
    cases[2].top_p = 1e-6f;
    float x[2048];
    for (int c = 0; c < 3; c++) {
        eng_sampler *s = make(&cases[c], 2048);
        for (int t = 0; t < 40; t++) {
            fill_row(x, 2048, -8, 8, t % 2 ? 0.25 : 0);
            ck_assert_msg(eng_sampler_sample(s, x) == ref_argmax(x, 2048), "case %d trial %d", c, t);
        }
        eng_sampler_free(s);
    }
}
END_TEST

START_TEST(does_not_modify_logits)
{
    eng_sampling p;
    eng_sampling_default(&p);
    p.top_k = 20;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    float x[512], y[512];
    fill_row(x, 512, -5, 5, 0);
    memcpy(y, x, sizeof x);
    eng_sampler *s = make(&p, 512);
    int32_t hist[] = {1, 2, 3, 400};
    ck_assert_int_eq(eng_sampler_accept_prompt(s, hist, 4), 0);
    ck_assert_int_eq(eng_sampler_accept(s, 7), 0);
    for (int i = 0; i < 10; i++)
        (void)eng_sampler_sample(s, x);
    ck_assert(memcmp(x, y, sizeof x) == 0);
    eng_sampler_free(s);
}
END_TEST

/* ---- distributions ------------------------------------------------------- */

START_TEST(softmax_frequencies)
{
    enum { V = 8 };
    float x[V];
    double prob[V];
    fill_row(x, V, -1.5, 1.5, 0);
    eng_sampling p;
    eng_sampling_default(&p);
    p.temperature = 0.8f;
    p.seed = 12345;
    ref_probs(x, V, &p, prob);
    eng_sampler *s = make(&p, V);
    check_probs(s, x, V, prob);
    check_frequencies(s, x, V, prob, 20000);
    eng_sampler_free(s);
}
END_TEST

/* Top-k, top-p and min-p, each and together, on a small vocabulary. */
START_TEST(filter_frequencies)
{
    enum { V = 24 };
    float x[V];
    double prob[V];
    fill_row(x, V, -2, 2, 0);
    struct {
        float temperature, top_p, min_p;
        int32_t top_k;
    } cases[] = {
        {1.0f, 1.0f, 0.0f, 5},   {1.0f, 0.6f, 0.0f, 0},  {0.7f, 1.0f, 0.25f, 0},
        {1.3f, 0.8f, 0.0f, 10},  {1.0f, 0.9f, 0.3f, 8},  {2.0f, 0.5f, 0.0f, 0},
        {1.0f, 1.0f, 0.0f, 24},  {0.5f, 0.95f, 0.05f, 3},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        eng_sampling p;
        eng_sampling_default(&p);
        p.temperature = cases[c].temperature;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.top_k = cases[c].top_k;
        p.seed = 1000 + c;
        ref_probs(x, V, &p, prob);
        eng_sampler *s = make(&p, V);
        check_probs(s, x, V, prob);
        check_frequencies(s, x, V, prob, 30000);
        eng_sampler_free(s);
    }
}
END_TEST

/*
 * Wide, nearly flat rows: top-k through the heap and through quickselect,
 * and top-p with many candidates per histogram bin.
 */
START_TEST(wide_filter_frequencies)
{
    enum { V = 1500 };
    float *x = malloc(V * sizeof *x);
    double *prob = malloc(V * sizeof *prob);
    ck_assert(x && prob);
    fill_row(x, V, 0, 0.5, 0);
    struct {
        int32_t top_k;
        float top_p, min_p;
        size_t draws;
    } cases[] = {
        {50, 1.0f, 0.0f, 2500},    /* heap */
        {1100, 1.0f, 0.0f, 11000}, /* quickselect */
        {0, 0.4f, 0.0f, 6000},    /* nucleus of the whole row */
        {1200, 0.5f, 0.0f, 6000}, /* nucleus of a quickselected top-k */
        {0, 1.0f, 0.7f, 11000},    /* min-p alone */
        {0, 1.0f, 0.0f, 15000},    /* no filter: the block walk */
        {1100, 1.0f, 0.7f, 11000}, /* min-p after top-k */
        {0, 0.9f, 0.8f, 7000},     /* min-p after top-p */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        eng_sampling p;
        eng_sampling_default(&p);
        p.top_k = cases[c].top_k;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.seed = 99 + c;
        ref_probs(x, V, &p, prob);
        eng_sampler *s = make(&p, V);
        check_probs(s, x, V, prob);
        check_frequencies(s, x, V, prob, cases[c].draws);
        eng_sampler_free(s);
    }
    free(x);
    free(prob);
}
END_TEST

/* Ties at the top-k and top-p boundaries go to the lower ids. */
START_TEST(boundary_ties_prefer_low_ids)
{
    const float x[6] = {0, 1, 1, 1, 1, 0};
    eng_sampling p;
    eng_sampling_default(&p);
    p.top_k = 2;
    eng_sampler *s = make(&p, 6);
    for (int i = 0; i < 500; i++) {
        int32_t id = eng_sampler_sample(s, x);
        ck_assert(id == 1 || id == 2);
    }
    eng_sampler_free(s);
    /* Four equal ids: a nucleus of 0.5 (of the mass of ids 1..4 plus two
     * smaller ones) needs the first ids of the tie in id order. */
    double prob[6];
    p.top_k = 0;
    p.top_p = 0.5f;
    ref_probs(x, 6, &p, prob);
    s = make(&p, 6);
    for (int i = 0; i < 500; i++) {
        int32_t id = eng_sampler_sample(s, x);
        ck_assert_msg(prob[id] > 0, "id %d outside the nucleus", id);
    }
    ck_assert(prob[1] > 0 && prob[4] == 0);
    eng_sampler_free(s);
}
END_TEST

/* ---- penalties ----------------------------------------------------------- */

/* The definition: repetition over prompt and generated ids, then frequency
 * and presence over generated ones. */
static void ref_penalize(float *x, size_t n, const eng_sampling *p, const int32_t *prompt,
                         size_t n_prompt, const int32_t *gen, size_t n_gen)
{
    bool *seen = calloc(n, sizeof *seen);
    unsigned *count = calloc(n, sizeof *count);
    ck_assert(seen && count);
    for (size_t j = 0; j < n_prompt; j++)
        seen[prompt[j]] = true;
    for (size_t j = 0; j < n_gen; j++)
        count[gen[j]]++;
    for (size_t id = 0; id < n; id++) {
        if (seen[id] || count[id]) {
            if (x[id] > 0)
                x[id] /= p->repetition_penalty;
            else
                x[id] *= p->repetition_penalty;
        }
        if (count[id])
            x[id] -= (float)count[id] * p->frequency_penalty + p->presence_penalty;
    }
    free(seen);
    free(count);
}

START_TEST(penalties_small_distribution)
{
    enum { V = 6 };
    const float x[V] = {2.0f, -2.0f, 1.0f, 0.5f, 1.5f, -0.5f};
    const int32_t prompt[] = {0, 0, 5};
    const int32_t gen[] = {1, 1, 4, 5};
    eng_sampling p;
    eng_sampling_default(&p);
    p.repetition_penalty = 1.5f;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = -0.4f;
    p.seed = 4242;
    float y[V];
    memcpy(y, x, sizeof x);
    ref_penalize(y, V, &p, prompt, 3, gen, 4);
    double prob[V];
    ref_probs(y, V, &p, prob);
    eng_sampler *s = make(&p, V);
    ck_assert_int_eq(eng_sampler_accept_prompt(s, prompt, 3), 0);
    for (size_t i = 0; i < 4; i++)
        ck_assert_int_eq(eng_sampler_accept(s, gen[i]), 0);
    check_probs(s, x, V, prob);
    check_frequencies(s, x, V, prob, 30000);

    /* After a reset no penalty applies. */
    eng_sampler_reset(s);
    ref_probs(x, V, &p, prob);
    check_probs(s, x, V, prob);
    check_frequencies(s, x, V, prob, 30000);
    eng_sampler_free(s);
}
END_TEST

/* logit_bias: added before the penalties; +100 forces an id, -100 bans the argmax; bad entries refused. */
START_TEST(logit_bias_rows)
{
    enum { V = 6 };
    const float x[V] = {2.0f, -2.0f, 1.0f, 0.5f, 1.5f, -0.5f};
    const int32_t gen[] = {4, 4};
    const int32_t ids[] = {1, 4, 3};
    const float bias[] = {1.25f, -0.75f, 0.5f};
    eng_sampling p;
    eng_sampling_default(&p);
    p.repetition_penalty = 1.5f;
    p.frequency_penalty = 0.3f;
    p.seed = 99;
    float y[V];
    memcpy(y, x, sizeof x);
    for (size_t i = 0; i < 3; i++)
        y[ids[i]] += bias[i];
    ref_penalize(y, V, &p, NULL, 0, gen, 2);
    double prob[V];
    ref_probs(y, V, &p, prob);
    eng_sampler *s = make(&p, V);
    ck_assert_int_eq(eng_sampler_set_bias(s, ids, bias, 3), ENG_SAMP_OK);
    for (size_t i = 0; i < 2; i++)
        ck_assert_int_eq(eng_sampler_accept(s, gen[i]), 0);
    check_probs(s, x, V, prob);
    check_frequencies(s, x, V, prob, 30000);
    eng_sampler_free(s);

    /* Greedy: the bias decides where the raw argmax would not. */
    eng_sampling_default(&p);
    p.temperature = 0.0f;
    float row[512];
    fill_row(row, 512, -8, 8, 0);
    int32_t am = ref_argmax(row, 512), forced = (am + 17) % 512;
    s = make(&p, 512);
    ck_assert(eng_sampler_is_greedy(s));
    float up = ENG_LOGIT_BIAS_MAX, down = -ENG_LOGIT_BIAS_MAX;
    ck_assert_int_eq(eng_sampler_set_bias(s, &forced, &up, 1), ENG_SAMP_OK);
    ck_assert(!eng_sampler_is_greedy(s));
    ck_assert_int_eq(eng_sampler_sample(s, row), forced);
    ck_assert_int_eq(eng_sampler_sample_known(s, row, am), forced);
    ck_assert_int_eq(eng_sampler_set_bias(s, &am, &down, 1), ENG_SAMP_OK);
    float z[512];
    memcpy(z, row, sizeof z);
    z[am] = -INFINITY;
    ck_assert_int_eq(eng_sampler_sample(s, row), ref_argmax(z, 512));
    ck_assert_int_ne(eng_sampler_sample(s, row), am);

    /* Refused entries change nothing. */
    int32_t bad_id = 512, ok_id = 3;
    float too_big = 100.5f, nan = NAN;
    ck_assert_int_eq(eng_sampler_set_bias(s, &bad_id, &up, 1), ENG_SAMP_EBADID);
    ck_assert_int_eq(eng_sampler_set_bias(s, &ok_id, &too_big, 1), ENG_SAMP_ERANGE);
    ck_assert_int_eq(eng_sampler_set_bias(s, &ok_id, &nan, 1), ENG_SAMP_ERANGE);
    ck_assert_int_ne(eng_sampler_sample(s, row), am);
    ck_assert_int_eq(eng_sampler_set_bias(s, NULL, NULL, 0), ENG_SAMP_OK);
    ck_assert(eng_sampler_is_greedy(s));
    ck_assert_int_eq(eng_sampler_sample(s, row), am);
    eng_sampler_free(s);
}
END_TEST

START_TEST(penalties_greedy_random)
{
    enum { V = 500, NP = 40, NG = 30 };
    float x[V], y[V];
    int32_t prompt[NP], gen[NG];
    for (int t = 0; t < 60; t++) {
        eng_sampling p;
        eng_sampling_default(&p);
        p.temperature = 0.0f;
        p.repetition_penalty = (float)(0.5 + 1.5 * next_unit());
        p.frequency_penalty = (float)(-2 + 4 * next_unit());
        p.presence_penalty = (float)(-2 + 4 * next_unit());
        fill_row(x, V, -6, 6, 0);
        /* Prompt ids anywhere; generated ids from the top of the row, where
         * the penalties decide the argmax. */
        for (int i = 0; i < NP; i++)
            prompt[i] = (int32_t)(next_u64() % V);
        for (int i = 0; i < NG; i++) {
            do
                gen[i] = (int32_t)(next_u64() % V);
            while (x[gen[i]] < 3.0f);
        }
        gen[0] = ref_argmax(x, V);
        memcpy(y, x, sizeof x);
        ref_penalize(y, V, &p, prompt, NP, gen, NG);
        eng_sampler *s = make(&p, V);
        ck_assert_int_eq(eng_sampler_accept_prompt(s, prompt, NP), 0);
        for (int i = 0; i < NG; i++)
            ck_assert_int_eq(eng_sampler_accept(s, gen[i]), 0);
        ck_assert_int_eq(eng_sampler_sample(s, x), ref_argmax(y, V));
        eng_sampler_free(s);
    }
}
END_TEST

START_TEST(bad_ids_rejected)
{
    eng_sampling p;
    eng_sampling_default(&p);
    p.presence_penalty = 1.0f;
    eng_sampler *s = make(&p, 10);
    const int32_t bad[] = {1, 10};
    ck_assert_int_eq(eng_sampler_accept_prompt(s, bad, 2), ENG_SAMP_EBADID);
    ck_assert_int_eq(eng_sampler_accept(s, -1), ENG_SAMP_EBADID);
    ck_assert_int_eq(eng_sampler_accept(s, 10), ENG_SAMP_EBADID);
    ck_assert_int_eq(eng_sampler_accept(s, 9), 0);
    /* Nothing of the rejected prompt was recorded: id 1 has no penalty. */
    float x[10] = {0};
    x[1] = 1.0f;
    x[9] = 1.5f; /* 1.5 - presence 1.0 = 0.5 < 1.0 */
    p.temperature = 0;
    eng_sampler_free(s);
    s = make(&p, 10);
    ck_assert_int_eq(eng_sampler_accept_prompt(s, bad, 2), ENG_SAMP_EBADID);
    ck_assert_int_eq(eng_sampler_accept(s, 9), 0);
    ck_assert_int_eq(eng_sampler_sample(s, x), 1);
    eng_sampler_free(s);
    ck_assert_str_eq(eng_sampler_strerror(ENG_SAMP_EBADID), "token id outside the vocabulary");
}
END_TEST

/* ---- seeds --------------------------------------------------------------- */

static void run_sequence(eng_sampler *s, int32_t *out, size_t n, uint64_t row_seed)
{
    float x[300];
    test_rng = row_seed;
    for (size_t i = 0; i < n; i++) {
        fill_row(x, 300, -2, 2, 0);
        out[i] = eng_sampler_sample(s, x);
        ck_assert_int_eq(eng_sampler_accept(s, out[i]), 0);
    }
}

START_TEST(seeded_determinism)
{
    enum { N = 200 };
    int32_t a[N], b[N], c[N], d[N];
    eng_sampling p;
    eng_sampling_default(&p);
    p.top_p = 0.9f;
    p.frequency_penalty = 0.5f;
    p.seed = 31337;
    eng_sampler *s1 = make(&p, 300), *s2 = make(&p, 300);
    run_sequence(s1, a, N, 5);
    run_sequence(s2, b, N, 5);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    eng_sampler_reset(s1);
    run_sequence(s1, c, N, 5);
    ck_assert(memcmp(a, c, sizeof a) == 0);
    eng_sampler_free(s1);
    eng_sampler_free(s2);
    p.seed = 31338;
    s1 = make(&p, 300);
    run_sequence(s1, d, N, 5);
    ck_assert(memcmp(a, d, sizeof a) != 0);
    eng_sampler_free(s1);
}
END_TEST

/* ---- parameters ---------------------------------------------------------- */

static void set_field(eng_sampling *p, const char *field, float v)
{
    if (strcmp(field, "temperature") == 0)
        p->temperature = v;
    else if (strcmp(field, "top_p") == 0)
        p->top_p = v;
    else if (strcmp(field, "top_k") == 0)
        p->top_k = (int32_t)v;
    else if (strcmp(field, "min_p") == 0)
        p->min_p = v;
    else if (strcmp(field, "presence_penalty") == 0)
        p->presence_penalty = v;
    else if (strcmp(field, "frequency_penalty") == 0)
        p->frequency_penalty = v;
    else if (strcmp(field, "repetition_penalty") == 0)
        p->repetition_penalty = v;
    else
        ck_abort_msg("unknown field %s", field);
}

START_TEST(invalid_params_named)
{
    struct {
        const char *field;
        float value;
    } bad[] = {
        {"temperature", -0.1f},        {"temperature", 2.01f},       {"temperature", NAN},
        {"top_p", 0.0f},               {"top_p", 1.01f},             {"top_p", NAN},
        {"top_k", -1.0f},              {"min_p", -0.01f},            {"min_p", 1.5f},
        {"presence_penalty", 2.5f},    {"presence_penalty", -2.5f},  {"frequency_penalty", -3.0f},
        {"frequency_penalty", INFINITY}, {"repetition_penalty", 0.0f},
        {"repetition_penalty", 2.5f},  {"repetition_penalty", NAN},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        eng_sampling p;
        eng_sampling_default(&p);
        set_field(&p, bad[i].field, bad[i].value);
        eng_sampling_error err;
        ck_assert_int_eq(eng_sampling_validate(&p, &err), ENG_SAMP_ERANGE);
        ck_assert_ptr_nonnull(err.field);
        ck_assert_str_eq(err.field, bad[i].field);
        ck_assert_msg(strstr(err.message, bad[i].field) == err.message, "message '%s'", err.message);
        ck_assert_int_eq(eng_sampling_validate(&p, NULL), ENG_SAMP_ERANGE);
        ck_assert_ptr_null(eng_sampler_new(&p, 100));
    }

    /* The ends of each range are valid. */
    eng_sampling p;
    eng_sampling_default(&p);
    eng_sampling_error err;
    ck_assert_int_eq(eng_sampling_validate(&p, &err), 0);
    ck_assert_ptr_null(err.field);
    p.temperature = 2.0f;
    p.top_p = 1.0f;
    p.min_p = 1.0f;
    p.presence_penalty = -2.0f;
    p.frequency_penalty = 2.0f;
    p.repetition_penalty = 2.0f;
    p.top_k = 1000000;
    ck_assert_int_eq(eng_sampling_validate(&p, &err), 0);
    p.temperature = 0.0f;
    p.min_p = 0.0f;
    ck_assert_int_eq(eng_sampling_validate(&p, &err), 0);
    eng_sampler *s = make(&p, 10);
    eng_sampler_free(s);
    eng_sampler_free(NULL);
    ck_assert_ptr_null(eng_sampler_new(&p, 0));
    ck_assert_ptr_null(eng_sampler_new(NULL, 10));
}
END_TEST

/* NaN counts as -inf, +inf as the largest value; never a crash. */
START_TEST(non_finite_logits)
{
    eng_sampling p;
    eng_sampling_default(&p);
    p.top_p = 0.9f;
    p.top_k = 3;
    eng_sampler *s = make(&p, 5);
    const float a[5] = {NAN, 1, INFINITY, NAN, 2};
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(eng_sampler_sample(s, a), 2);
    const float b[5] = {NAN, NAN, NAN, NAN, NAN};
    ck_assert_int_eq(eng_sampler_sample(s, b), 0);
    const float c[5] = {-INFINITY, -INFINITY, 3, -INFINITY, -INFINITY};
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(eng_sampler_sample(s, c), 2);
    eng_sampler_free(s);
    /* Tiny temperatures behave as greedy. */
    p.temperature = 1e-30f;
    p.top_k = 0;
    p.top_p = 1.0f;
    s = make(&p, 5);
    const float d[5] = {0, 1, 3, 2.9999f, 1};
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(eng_sampler_sample(s, d), 2);
    eng_sampler_free(s);
}
END_TEST

/* ---- full vocabulary ----------------------------------------------------- */

/* Number of ids ranked before ID (larger logit, or equal and lower id). */
static size_t rank_of(const float *x, size_t n, int32_t id)
{
    size_t r = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] > x[id] || (x[i] == x[id] && (int32_t)i < id))
            r++;
    return r;
}

START_TEST(full_vocabulary_rows)
{
    const size_t V = FULL_VOCAB;
    float *x = malloc(V * sizeof *x), *y = malloc(V * sizeof *y);
    double *prob = malloc(V * sizeof *prob);
    ck_assert(x && y && prob);
    struct {
        const char *name;
        float temperature, top_p, min_p, rep, freq;
        int32_t top_k;
    } cases[] = {
        {"greedy", 0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0},
        {"temperature only", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0},
        {"top_k 40", 0.8f, 1.0f, 0.0f, 1.0f, 0.0f, 40},
        {"top_k 20000", 0.8f, 1.0f, 0.0f, 1.0f, 0.0f, 20000},
        {"top_p 0.95", 0.7f, 0.95f, 0.0f, 1.0f, 0.0f, 0},
        {"min_p 0.05", 1.0f, 1.0f, 0.05f, 1.0f, 0.0f, 0},
        {"all", 0.6f, 0.9f, 0.02f, 1.1f, 0.2f, 50},
        {"greedy penalized", 0.0f, 1.0f, 0.0f, 1.3f, 0.5f, 0},
    };
    enum { ROWS = 12, CHECKED = 2, PROMPT = 4096 };
    /* A long history: prompt ids for the repetition penalty, then the
     * generated ones. */
    int32_t *prompt = malloc(PROMPT * sizeof *prompt);
    ck_assert_ptr_nonnull(prompt);
    for (int i = 0; i < PROMPT; i++)
        prompt[i] = (int32_t)(next_u64() % V);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        eng_sampling p;
        eng_sampling_default(&p);
        p.temperature = cases[c].temperature;
        p.top_p = cases[c].top_p;
        p.min_p = cases[c].min_p;
        p.top_k = cases[c].top_k;
        p.repetition_penalty = cases[c].rep;
        p.frequency_penalty = cases[c].freq;
        p.seed = c;
        eng_sampler *s = make(&p, V);
        ck_assert_int_eq(eng_sampler_accept_prompt(s, prompt, PROMPT), 0);
        int32_t gen[ROWS];
        double secs = 0;
        for (int r = 0; r < ROWS; r++) {
            /* Logit-like rows: a bulk below 5 and a few large values. */
            fill_row(x, V, -10, 5, 0);
            for (int j = 0; j < 30; j++)
                x[next_u64() % V] = (float)(8 + 14 * next_unit());
            memcpy(y, x, V * sizeof *y);
            ref_penalize(y, V, &p, prompt, PROMPT, gen, (size_t)r);
            if (r < CHECKED) {
                if (p.temperature == 0) {
                    for (size_t i = 0; i < V; i++)
                        prob[i] = 0;
                    prob[ref_argmax(y, V)] = 1;
                } else {
                    ref_probs(y, V, &p, prob);
                }
                check_probs(s, x, V, prob);
            }
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            int32_t id = eng_sampler_sample(s, x);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            secs += (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            ck_assert_int_ge(id, 0);
            ck_assert_int_lt(id, (int32_t)V);
            if (p.temperature == 0)
                ck_assert_int_eq(id, ref_argmax(y, V));
            if (p.top_k > 0)
                ck_assert_uint_lt(rank_of(y, V, id), (size_t)p.top_k);
            ck_assert_int_eq(eng_sampler_accept(s, id), 0);
            gen[r] = id;
        }
        /* Informational only: no assertion on speed. */
        printf("sampler %-16s %.3f ms/token over %d rows of %zu\n", cases[c].name,
               1e3 * secs / ROWS, ROWS, V);
        eng_sampler_free(s);
    }
    free(prompt);
    free(x);
    free(y);
    free(prob);
}
END_TEST

/* ---- masked sampling ------------------------------------------------------ */

/*
 * A masked draw is the draw over the row with the disallowed ids at -inf,
 * for every setting (same seed, same history), and never leaves the mask;
 * a mask whose ids all have -inf or NaN logits gives its lowest id.
 */
START_TEST(masked_sampling)
{
    const size_t n = 1000, words = (n + 63) / 64;
    static const eng_sampling settings[] = {
        {.temperature = 0.0f, .top_p = 1.0f, .repetition_penalty = 1.0f},
        {.temperature = 0.8f, .top_p = 1.0f, .repetition_penalty = 1.0f},
        {.temperature = 1.0f, .top_p = 1.0f, .top_k = 5, .repetition_penalty = 1.0f},
        {.temperature = 1.0f, .top_p = 0.9f, .repetition_penalty = 1.0f},
        {.temperature = 1.0f, .top_p = 1.0f, .min_p = 0.2f, .repetition_penalty = 1.0f},
        {.temperature = 0.7f, .top_p = 1.0f, .repetition_penalty = 1.3f, .presence_penalty = 0.5f,
         .frequency_penalty = 0.5f},
        {.temperature = 0.0f, .top_p = 1.0f, .repetition_penalty = 1.5f},
    };
    float *x = malloc(n * sizeof *x), *ref = malloc(n * sizeof *ref);
    uint64_t *mask = calloc(words, sizeof *mask);
    ck_assert(x && ref && mask);
    const int32_t prompt[] = {3, 17, 500, 999};
    for (size_t si = 0; si < sizeof settings / sizeof *settings; si++) {
        eng_sampling p = settings[si];
        p.seed = 42 + si;
        eng_sampler *a = make(&p, n), *b = make(&p, n);
        ck_assert_int_eq(eng_sampler_accept_prompt(a, prompt, 4), 0);
        ck_assert_int_eq(eng_sampler_accept_prompt(b, prompt, 4), 0);
        for (int round = 0; round < 200; round++) {
            fill_row(x, n, -6.0, 6.0, round % 3 ? 0.0 : 0.5);
            memset(mask, 0, words * sizeof *mask);
            /* full words, empty words and sparse ones, a sparse tail */
            for (size_t i = 0; i < n; i++)
                if ((i / 64) % 3 == 0 || next_u64() % 7 == 0)
                    mask[i / 64] |= 1ull << (i % 64);
            for (size_t i = 0; i < n; i++)
                ref[i] = mask[i / 64] >> (i % 64) & 1 ? x[i] : -INFINITY;
            int32_t got = eng_sampler_sample_masked(a, x, mask), want = eng_sampler_sample(b, ref);
            ck_assert_msg(got == want, "setting %zu round %d: masked %d, reference %d", si, round, got, want);
            ck_assert(mask[got / 64] >> (got % 64) & 1);
            eng_sampler_accept(a, got);
            eng_sampler_accept(b, want);
        }
        /* every allowed logit -inf or NaN: the lowest allowed id, never the sampler's fallback 0 */
        for (size_t i = 0; i < n; i++)
            x[i] = 1.0f;
        memset(mask, 0, words * sizeof *mask);
        mask[2] = 1ull << 5 | 1ull << 9;
        x[133] = -INFINITY;
        x[137] = NAN;
        ck_assert_int_eq(eng_sampler_sample_masked(a, x, mask), 133);
        memset(mask, 0, words * sizeof *mask);
        ck_assert_int_eq(eng_sampler_sample_masked(a, x, mask), -1);
        eng_sampler_free(a);
        eng_sampler_free(b);
    }
    free(x);
    free(ref);
    free(mask);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("sampler");
    TCase *tc = tcase_create("greedy");
    tcase_add_test(tc, argmax_ties_and_nan);
    tcase_add_test(tc, argmax_lengths);
    tcase_add_test(tc, argmax_by_parts);
    tcase_add_test(tc, greedy_equivalents);
    tcase_add_test(tc, does_not_modify_logits);
    suite_add_tcase(su, tc);
    tc = tcase_create("distribution");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, softmax_frequencies);
    tcase_add_test(tc, filter_frequencies);
    tcase_add_test(tc, wide_filter_frequencies);
    tcase_add_test(tc, boundary_ties_prefer_low_ids);
    suite_add_tcase(su, tc);
    tc = tcase_create("penalties");
    tcase_add_test(tc, penalties_small_distribution);
    tcase_add_test(tc, penalties_greedy_random);
    tcase_add_test(tc, bad_ids_rejected);
    tcase_add_test(tc, logit_bias_rows);
    suite_add_tcase(su, tc);
    tc = tcase_create("params");
    tcase_add_test(tc, seeded_determinism);
    tcase_add_test(tc, invalid_params_named);
    tcase_add_test(tc, non_finite_logits);
    tcase_add_test(tc, masked_sampling);
    suite_add_tcase(su, tc);
    tc = tcase_create("full_vocabulary");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, full_vocabulary_rows);
    suite_add_tcase(su, tc);
    return qd_run_suite(su);
}
