/*
 * sampler: penalties, temperature, top-k, top-p, min-p and the draw over one
 * row of logits (see sampler.h for the order and the semantics).
 *
 * Called by the scheduler for each generated token; an eng_sampler is used
 * by one thread at a time. The cost per token is O(V) with small constants,
 * reading the caller's row in place (penalties work on a copy, touching only
 * the ids in the history):
 *   - greedy: one argmax pass;
 *   - top-k: a heap of k entries (small k) or a quickselect (large k), then
 *     the other filters on those k candidates only;
 *   - min-p alone: a threshold on the distance from the maximum, no exp;
 *   - top-p on the whole row: one exp pass that also builds a histogram of
 *     probability mass by distance from the maximum, so only the candidates
 *     of the bin where the cumulative mass crosses top_p are sorted;
 *   - no filter: one exp pass and the draw over the whole row.
 */
#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

const char *eng_sampler_strerror(int err)
{
    switch (err) {
#define ENG_SAMP_STR(name, value, msg) \
    case value:                        \
        return msg;
        ENG_SAMP_ERRORS(ENG_SAMP_STR)
#undef ENG_SAMP_STR
    }
    return "unknown sampler error";
}

/* One vocabulary entry while filtering: its (penalized) logit, its
 * unnormalized probability once computed, and its id. */
typedef struct cand {
    float x;
    float e;
    int32_t id;
} cand;

/*
 * The histogram that locates the top-p boundary: bin b holds the entries
 * whose distance from the maximum, d = (max - x) / T in nats, lies in
 * [b / BIN_SCALE, (b + 1) / BIN_SCALE); the last bin takes everything
 * farther (relative probability below e^-64).
 */
#define N_BINS 1024
#define BIN_SCALE 16.0f

/* Whole-row exp passes keep the sum of each block of this many ids, so the
 * draw finds its block first and then walks at most BLOCK entries. */
#define BLOCK 64

/* Top-k uses a heap up to this k and a quickselect above it. */
#define HEAP_MAX_K 1024

/* A history word: bit 31 = seen in the prompt or generated; the low 31
 * bits count the generated occurrences (saturating). */
#define HIST_SEEN 0x80000000u
#define HIST_COUNT 0x7fffffffu

struct eng_sampler {
    eng_sampling p;
    size_t n_vocab;
    bool penalties;   /* any penalty differs from its neutral value */
    cand *cand;       /* [n_vocab] candidates of the current row */
    float *e;         /* [n_vocab] unnormalized probabilities of a whole row */
    double *blk;      /* [n_vocab / BLOCK + 1] sums of e per block of BLOCK ids */
    float *pen;       /* [n_vocab] penalized or biased copy of the row, only with either */
    uint32_t *hist;   /* [n_vocab] history words, only with penalties */
    float *masked;    /* [n_vocab] the row with disallowed ids at -inf, on first masked sample */
    int32_t *ids;     /* [n_ids] the ids whose history word is non-zero */
    size_t n_ids, cap_ids;
    int32_t *bias_ids; /* [n_bias] logit_bias, applied to a copy of the row in pen */
    float *bias;
    size_t n_bias;
    uint64_t rng[4];  /* xoshiro256** state */
    double mass[N_BINS];
};

/* ---- parameters ---------------------------------------------------------- */

void eng_sampling_default(eng_sampling *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->top_k = 0;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
}

static int range_error(eng_sampling_error *err, const char *field, const char *range, double v)
{
    if (err) {
        err->field = field;
        snprintf(err->message, sizeof err->message, "%s must be in %s, got %g", field, range, v);
    }
    return ENG_SAMP_ERANGE;
}

int eng_sampling_validate(const eng_sampling *p, eng_sampling_error *err)
{
    if (err) {
        err->field = NULL;
        err->message[0] = '\0';
    }
    /* Written as "not inside" so that NaN fails every check. */
    if (!(p->temperature >= 0.0f && p->temperature <= 2.0f))
        return range_error(err, "temperature", "[0, 2]", p->temperature);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return range_error(err, "top_p", "(0, 1]", p->top_p);
    if (p->top_k < 0) {
        if (err) {
            err->field = "top_k";
            snprintf(err->message, sizeof err->message, "top_k must be >= 0 (0 = off), got %ld",
                     (long)p->top_k);
        }
        return ENG_SAMP_ERANGE;
    }
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return range_error(err, "min_p", "[0, 1]", p->min_p);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return range_error(err, "presence_penalty", "[-2, 2]", p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return range_error(err, "frequency_penalty", "[-2, 2]", p->frequency_penalty);
    if (!(p->repetition_penalty > 0.0f && p->repetition_penalty <= 2.0f))
        return range_error(err, "repetition_penalty", "(0, 2]", p->repetition_penalty);
    return ENG_SAMP_OK;
}

/* ---- random numbers: splitmix64 seeds xoshiro256** ----------------------- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t st[4])
{
    uint64_t r = rotl64(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl64(st[3], 45);
    return r;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t st[4]) { return (double)(rng_next(st) >> 11) * 0x1.0p-53; }

static void rng_seed(uint64_t st[4], uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        st[i] = splitmix64(&x);
}

/* ---- life cycle and history ---------------------------------------------- */

eng_sampler *eng_sampler_new(const eng_sampling *p, size_t n_vocab)
{
    if (!p || eng_sampling_validate(p, NULL) != ENG_SAMP_OK)
        return NULL;
    if (n_vocab == 0 || n_vocab > INT32_MAX || n_vocab > SIZE_MAX / sizeof(cand))
        return NULL;
    eng_sampler *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->penalties = p->repetition_penalty != 1.0f || p->presence_penalty != 0.0f ||
                   p->frequency_penalty != 0.0f;
    s->cand = malloc(n_vocab * sizeof *s->cand);
    s->e = malloc(n_vocab * sizeof *s->e);
    s->blk = malloc((n_vocab / BLOCK + 1) * sizeof *s->blk);
    if (!s->cand || !s->e || !s->blk)
        goto fail;
    if (s->penalties) {
        s->hist = calloc(n_vocab, sizeof *s->hist);
        s->pen = malloc(n_vocab * sizeof *s->pen);
        if (!s->hist || !s->pen)
            goto fail;
    }
    rng_seed(s->rng, p->seed);
    return s;
fail:
    eng_sampler_free(s);
    return NULL;
}

void eng_sampler_free(eng_sampler *s)
{
    if (!s)
        return;
    free(s->cand);
    free(s->e);
    free(s->blk);
    free(s->pen);
    free(s->hist);
    free(s->masked);
    free(s->ids);
    free(s->bias_ids);
    free(s->bias);
    free(s);
}

int eng_sampler_set_bias(eng_sampler *s, const int32_t *ids, const float *bias, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= s->n_vocab)
            return ENG_SAMP_EBADID;
        if (!(bias[i] >= -ENG_LOGIT_BIAS_MAX && bias[i] <= ENG_LOGIT_BIAS_MAX))
            return ENG_SAMP_ERANGE;
    }
    int32_t *bi = n ? malloc(n * sizeof *bi) : NULL;
    float *bv = n ? malloc(n * sizeof *bv) : NULL;
    float *pen = n && !s->pen ? malloc(s->n_vocab * sizeof *pen) : NULL;
    if (n && (!bi || !bv || (!s->pen && !pen))) {
        free(bi);
        free(bv);
        free(pen);
        return ENG_SAMP_ENOMEM;
    }
    if (pen)
        s->pen = pen;
    if (n) {
        memcpy(bi, ids, n * sizeof *bi);
        memcpy(bv, bias, n * sizeof *bv);
    }
    free(s->bias_ids);
    free(s->bias);
    s->bias_ids = bi;
    s->bias = bv;
    s->n_bias = n;
    return ENG_SAMP_OK;
}

void eng_sampler_reset(eng_sampler *s)
{
    for (size_t i = 0; i < s->n_ids; i++)
        s->hist[s->ids[i]] = 0;
    s->n_ids = 0;
    rng_seed(s->rng, s->p.seed);
}

/* Makes room for EXTRA more distinct ids (never more than the vocabulary). */
static int reserve_ids(eng_sampler *s, size_t extra)
{
    size_t room = s->n_vocab - s->n_ids;
    size_t need = s->n_ids + (extra < room ? extra : room);
    if (need <= s->cap_ids)
        return ENG_SAMP_OK;
    size_t cap = s->cap_ids ? s->cap_ids : 256;
    while (cap < need)
        cap *= 2;
    if (cap > s->n_vocab)
        cap = s->n_vocab;
    int32_t *ids = realloc(s->ids, cap * sizeof *ids);
    if (!ids)
        return ENG_SAMP_ENOMEM;
    s->ids = ids;
    s->cap_ids = cap;
    return ENG_SAMP_OK;
}

/* Adds one history entry; the caller reserved room for a new distinct id. */
static void note(eng_sampler *s, int32_t id, bool generated)
{
    uint32_t w = s->hist[id];
    if (w == 0)
        s->ids[s->n_ids++] = id;
    w |= HIST_SEEN;
    if (generated && (w & HIST_COUNT) != HIST_COUNT)
        w++;
    s->hist[id] = w;
}

int eng_sampler_accept_prompt(eng_sampler *s, const int32_t *ids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= s->n_vocab)
            return ENG_SAMP_EBADID;
    if (!s->penalties)
        return ENG_SAMP_OK;
    int rc = reserve_ids(s, n);
    if (rc != ENG_SAMP_OK)
        return rc;
    for (size_t i = 0; i < n; i++)
        note(s, ids[i], false);
    return ENG_SAMP_OK;
}

int eng_sampler_accept(eng_sampler *s, int32_t id)
{
    if (id < 0 || (size_t)id >= s->n_vocab)
        return ENG_SAMP_EBADID;
    if (!s->penalties)
        return ENG_SAMP_OK;
    int rc = reserve_ids(s, 1);
    if (rc != ENG_SAMP_OK)
        return rc;
    note(s, id, true);
    return ENG_SAMP_OK;
}

/* ---- row passes, 4 lanes at a time ---------------------------------------
 *
 * The passes over a whole row use GCC vector extensions: plain C that
 * compiles to the baseline SIMD of the target, no ISA flags needed. Most
 * passes test 4 entries at once and fall back to scalar code only for the
 * few lanes that pass.
 */

typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f load4(const float *p)
{
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline v4f splat4(float x) { return (v4f){x, x, x, x}; }

/* Lanewise MASK ? A : B for a mask of all-ones / all-zeros lanes. */
static inline v4f select4(v4i mask, v4f a, v4f b)
{
    return (v4f)((mask & (v4i)a) | (~mask & (v4i)b));
}

/* Lanewise A > B ? A : B (a NaN in A never replaces B, nor +0 a -0): what MAXPS does, in one instruction. */
static inline v4f max4(v4f a, v4f b)
{
#ifdef __SSE__
    return (v4f)_mm_max_ps((__m128)a, (__m128)b);
#else
    return select4(a > b, a, b);
#endif
}

static inline bool any4(v4i mask)
{
    uint64_t u[2];
    memcpy(u, &mask, sizeof u);
    return (u[0] | u[1]) != 0;
}

/* A logit as the filters see it: NaN is -inf and +inf the largest float, so
 * that distances from the maximum stay defined. */
static inline float san(float x) { return x != x ? -INFINITY : x > FLT_MAX ? FLT_MAX : x; }

static inline v4f san4(v4f x)
{
    x = select4(x != x, splat4(-INFINITY), x);
    return select4(x > FLT_MAX, splat4(FLT_MAX), x);
}

/* Distance from the maximum M in nats at temperature 1 / INV_T: >= 0, +inf
 * for -inf logits. The vector form computes the same expression. */
static inline float dist(float m, float x, float inv_t) { return (m - x) * inv_t; }

/* The histogram bin of a distance (see N_BINS); truncation, as the vector form. */
static inline size_t bin_of(float d)
{
    float b = d * BIN_SCALE;
    return b < (float)(N_BINS - 1) ? (size_t)b : N_BINS - 1;
}

static inline v4i bins4(v4f d)
{
    v4f b = d * BIN_SCALE;
    b = select4(b < (float)(N_BINS - 1), b, splat4((float)(N_BINS - 1)));
    return __builtin_convertvector(b, v4i);
}

/*
 * e^t for t <= 0, about 1 ulp: t = n ln2 + r with |r| <= ln2 / 2 (ln2 split
 * in two so that n ln2 is exact), e^r by the minimax polynomial of Cephes'
 * expf, 2^n put in the exponent bits. Below -87 (e^t < 2^-125) the result is
 * 0, as it is for -inf. e^0 is exactly 1.
 */
static inline v4f exp_neg4(v4f t)
{
    const v4f lo = splat4(-87.0f), magic = splat4(12582912.0f); /* 1.5 * 2^23 */
    v4i under = t < lo;
    t = select4(under, lo, t);
    v4f k = t * 1.44269504088896341f + magic; /* round(t / ln2) + magic */
    v4f n = k - magic;
    v4i ni = (v4i)k - (v4i)magic;
    v4f r = t - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    v4f p = splat4(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    v4f scale = (v4f)((ni + 127) << 23);
    return (v4f)(~under & (v4i)(p * scale));
}

/* e^-d for one distance. */
static inline float weight(float d) { return exp_neg4(splat4(-d))[0]; }

/*
 * Sets e[i] = e^-d_i over the whole row and the sum of each block of BLOCK
 * ids in blk; with MASS, also adds each e to the mass of its bin. Returns
 * the total.
 */
static double exp_row(eng_sampler *s, const float *row, float m, float inv_t, double *mass)
{
    const size_t V = s->n_vocab;
    const v4f mv = splat4(m), iv = splat4(inv_t);
    float *e = s->e;
    double z = 0.0;
    for (size_t b = 0, lo = 0; lo < V; b++, lo += BLOCK) {
        size_t hi = lo + BLOCK < V ? lo + BLOCK : V, i = lo;
        v4f acc = splat4(0.0f);
        for (; i + 4 <= hi; i += 4) {
            v4f d = (mv - san4(load4(row + i))) * iv;
            v4f ev = exp_neg4(-d);
            memcpy(e + i, &ev, sizeof ev);
            acc += ev;
            if (mass) {
                v4i bi = bins4(d);
                for (int l = 0; l < 4; l++)
                    mass[bi[l]] += ev[l];
            }
        }
        double bs = (double)acc[0] + (double)acc[1] + (double)acc[2] + (double)acc[3];
        for (; i < hi; i++) {
            float d = dist(m, san(row[i]), inv_t);
            e[i] = weight(d);
            bs += e[i];
            if (mass)
                mass[bin_of(d)] += e[i];
        }
        s->blk[b] = bs;
        z += bs;
    }
    return z;
}

int32_t eng_argmax(const float *logits, size_t n)
{
    /*
     * The largest value first (NaN never replaces), then its first index (a
     * -0 and a +0 maximum find the same one). Four independent maxima: one
     * chain of selects waits on its own latency, and the LM head's argmax
     * of a batch-8 decode step scans 1.2 million logits.
     */
    float bv = -INFINITY;
    size_t i = 0;
    v4f mv[4] = {splat4(-INFINITY), splat4(-INFINITY), splat4(-INFINITY), splat4(-INFINITY)};
    for (; i + 16 <= n; i += 16)
        for (int u = 0; u < 4; u++) {
            mv[u] = max4(load4(logits + i + 4 * u), mv[u]);
        }
    for (; i + 4 <= n; i += 4)
        mv[0] = max4(load4(logits + i), mv[0]);
    for (int u = 0; u < 4; u++)
        for (int l = 0; l < 4; l++)
            if (mv[u][l] > bv)
                bv = mv[u][l];
    for (; i < n; i++)
        if (logits[i] > bv)
            bv = logits[i];
    if (!(bv > -INFINITY))
        return 0;
    for (i = 0; i + 16 <= n; i += 16)
        if (any4((load4(logits + i) == bv) | (load4(logits + i + 4) == bv) | (load4(logits + i + 8) == bv) |
                 (load4(logits + i + 12) == bv)))
            break;
    for (; i + 4 <= n; i += 4)
        if (any4(load4(logits + i) == bv))
            break;
    for (; i < n; i++)
        if (logits[i] == bv)
            break;
    return (int32_t)i;
}

/* ---- candidates ---------------------------------------------------------- */

/* The candidate order: larger logit first, then lower id. */
static inline bool better(const cand *a, const cand *b)
{
    return a->x > b->x || (a->x == b->x && a->id < b->id);
}

static int cmp_better(const void *pa, const void *pb)
{
    const cand *a = pa, *b = pb;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

static inline void swap_cand(cand *a, cand *b)
{
    cand t = *a;
    *a = *b;
    *b = t;
}

static inline cand make_cand(float x, float e, size_t id) { return (cand){x, e, (int32_t)id}; }

/* Restores the heap below I; the root of c[0..k) is the worst entry. */
static void sift_down(cand *c, size_t k, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, w = i;
        if (l < k && better(&c[w], &c[l]))
            w = l;
        if (l + 1 < k && better(&c[w], &c[l + 1]))
            w = l + 1;
        if (w == i)
            return;
        swap_cand(&c[i], &c[w]);
        i = w;
    }
}

/* Offers ROW[i] to the heap. An equal logit never wins: its id is higher
 * than every id already in the heap. */
static inline void heap_offer(cand *c, size_t k, const float *row, size_t i)
{
    float x = san(row[i]);
    if (x > c[0].x) {
        c[0] = make_cand(x, 0.0f, i);
        sift_down(c, k, 0);
    }
}

/* Puts the K best entries of ROW in c[0..k), unordered (0 < k < n). */
static void top_k_heap(cand *c, const float *row, size_t n, size_t k)
{
    for (size_t i = 0; i < k; i++)
        c[i] = make_cand(san(row[i]), 0.0f, i);
    for (size_t i = k / 2; i-- > 0;)
        sift_down(c, k, i);
    size_t i = k;
    for (; i + 4 <= n; i += 4)
        if (any4(load4(row + i) > c[0].x))
            for (size_t j = i; j < i + 4; j++)
                heap_offer(c, k, row, j);
    for (; i < n; i++)
        heap_offer(c, k, row, i);
}

/* Same result as top_k_heap() by quickselect, for large k. */
static void top_k_select(cand *c, const float *row, size_t n, size_t k)
{
    for (size_t i = 0; i < n; i++)
        c[i] = make_cand(san(row[i]), 0.0f, i);
    size_t lo = 0, hi = n - 1;
    for (int rounds = 0; hi > lo; rounds++) {
        if (rounds == 64) {
            /* Bad pivots all along: sorting what is left bounds the cost. */
            qsort(c + lo, hi - lo + 1, sizeof *c, cmp_better);
            return;
        }
        /* Median of three moved to hi as the pivot. */
        size_t mid = lo + (hi - lo) / 2;
        if (better(&c[mid], &c[lo]))
            swap_cand(&c[mid], &c[lo]);
        if (better(&c[hi], &c[lo]))
            swap_cand(&c[hi], &c[lo]);
        if (better(&c[hi], &c[mid]))
            swap_cand(&c[hi], &c[mid]);
        swap_cand(&c[mid], &c[hi]);
        size_t store = lo;
        for (size_t i = lo; i < hi; i++)
            if (better(&c[i], &c[hi]))
                swap_cand(&c[i], &c[store++]);
        swap_cand(&c[store], &c[hi]);
        /* c[lo..store) are better than c[store], c(store..hi] worse; the
         * loop keeps lo <= k - 1 < k <= hi until it returns. */
        if (store == k - 1 || store == k)
            return;
        if (store > k)
            hi = store - 1;
        else
            lo = store + 1;
    }
}

/* The first bin where the cumulative mass reaches TARGET (N_BINS if rounding
 * leaves it short); *before gets the mass of the bins before it. */
static size_t cut_bin(const double *mass, double target, double *before)
{
    double cum = 0.0;
    for (size_t b = 0; b < N_BINS; b++) {
        if (cum + mass[b] >= target) {
            *before = cum;
            return b;
        }
        cum += mass[b];
    }
    *before = cum;
    return N_BINS;
}

/* Sorts the cut bin c[lo..hi) and keeps its best entries until the mass
 * reaches TARGET; returns the number of survivors c[0..). */
static size_t cut_within_bin(cand *c, size_t lo, size_t hi, double cum, double target)
{
    /* Bins are monotone in the logit, so only the cut bin needs an order. */
    qsort(c + lo, hi - lo, sizeof *c, cmp_better);
    for (size_t j = lo; j < hi; j++) {
        cum += c[j].e;
        if (cum >= target)
            return j + 1;
    }
    return hi;
}

/*
 * Top-p over the candidates c[0..n): sets every e, then keeps the smallest
 * set of best candidates whose probability reaches top_p of their total.
 * Returns the new count; the survivors are moved to the front.
 */
static size_t top_p_filter(eng_sampler *s, cand *c, size_t n, float m, float inv_t)
{
    double *mass = s->mass;
    memset(mass, 0, sizeof s->mass);
    double z = 0.0;
    for (size_t i = 0; i < n; i++) {
        float d = dist(m, c[i].x, inv_t);
        c[i].e = weight(d);
        mass[bin_of(d)] += c[i].e;
        z += c[i].e;
    }
    double target = (double)s->p.top_p * z, cum;
    size_t cut = cut_bin(mass, target, &cum);
    if (cut == N_BINS)
        return n;
    /* Three-way partition: bins before the cut, the cut bin, the rest. */
    size_t lt = 0, i = 0, gt = n;
    while (i < gt) {
        size_t b = bin_of(dist(m, c[i].x, inv_t));
        if (b < cut)
            swap_cand(&c[lt++], &c[i++]);
        else if (b == cut)
            i++;
        else
            swap_cand(&c[i], &c[--gt]);
    }
    return cut_within_bin(c, lt, gt, cum, target);
}

/* Top-p over the whole row: the same, gathering only the survivors into c. */
static size_t top_p_row(eng_sampler *s, const float *row, float m, float inv_t)
{
    const size_t V = s->n_vocab;
    const float *e = s->e;
    cand *c = s->cand;
    memset(s->mass, 0, sizeof s->mass);
    double z = exp_row(s, row, m, inv_t, s->mass);
    double target = (double)s->p.top_p * z, cum;
    size_t cut = cut_bin(s->mass, target, &cum);

    /* Bins before the cut fill c from the front, the cut bin from the back. */
    size_t lo = 0, hi = V, i = 0;
    const v4f mv = splat4(m), iv = splat4(inv_t);
    const v4i cutv = {(int32_t)cut, (int32_t)cut, (int32_t)cut, (int32_t)cut};
    for (;; i += 4) {
        bool tail = i + 4 > V;
        if (!tail && !any4(bins4((mv - san4(load4(row + i))) * iv) <= cutv))
            continue;
        for (size_t j = i; j < (tail ? V : i + 4); j++) {
            float x = san(row[j]);
            size_t b = bin_of(dist(m, x, inv_t));
            if (b < cut)
                c[lo++] = make_cand(x, e[j], j);
            else if (b == cut)
                c[--hi] = make_cand(x, e[j], j);
        }
        if (tail)
            break;
    }
    size_t n_cut = V - hi;
    memmove(c + lo, c + hi, n_cut * sizeof *c);
    return cut_within_bin(c, lo, lo + n_cut, cum, target);
}

/* Keeps the candidates within DMAX nats of the maximum, in order. */
static size_t min_p_filter(cand *c, size_t n, float m, float inv_t, float dmax)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (dist(m, c[i].x, inv_t) <= dmax)
            c[k++] = c[i];
    return k;
}

/* The same over the whole row, gathering the survivors into c. */
static size_t min_p_row(cand *c, const float *row, size_t n, float m, float inv_t, float dmax)
{
    size_t k = 0, i = 0;
    const v4f mv = splat4(m), iv = splat4(inv_t);
    for (;; i += 4) {
        bool tail = i + 4 > n;
        if (!tail && !any4((mv - san4(load4(row + i))) * iv <= dmax))
            continue;
        for (size_t j = i; j < (tail ? n : i + 4); j++) {
            float x = san(row[j]);
            if (dist(m, x, inv_t) <= dmax)
                c[k++] = make_cand(x, 0.0f, j);
        }
        if (tail)
            break;
    }
    return k;
}

/* Applies the penalties to the copy of the row for the ids in the history. */
static void apply_penalties(eng_sampler *s, float *row)
{
    const float rep = s->p.repetition_penalty;
    const float freq = s->p.frequency_penalty, pres = s->p.presence_penalty;
    for (size_t j = 0; j < s->n_ids; j++) {
        int32_t id = s->ids[j];
        uint32_t count = s->hist[id] & HIST_COUNT;
        float x = row[id];
        if (rep != 1.0f)
            x = x > 0.0f ? x / rep : x * rep;
        if (count > 0)
            x -= (float)count * freq + pres;
        row[id] = x;
    }
}

/* ---- filtering and the draw --------------------------------------------- */

/* What the filters left: one id (greedy), the whole row with its weights in
 * s->e and block sums in s->blk, or the candidates c[0..n) with weights. */
typedef struct survivors {
    enum { SURV_ONE, SURV_ROW, SURV_CAND } kind;
    int32_t id;   /* SURV_ONE */
    size_t n;     /* SURV_CAND */
    double sum;   /* SURV_ROW, SURV_CAND: total weight */
} survivors;

/* Penalties, temperature and the filters, in the order of sampler.h. */
static void filter(eng_sampler *s, const float *logits, survivors *out)
{
    const size_t V = s->n_vocab;
    const float *row = logits;
    if ((s->penalties && s->n_ids > 0) || s->n_bias) {
        memcpy(s->pen, logits, V * sizeof *s->pen);
        for (size_t j = 0; j < s->n_bias; j++)
            s->pen[s->bias_ids[j]] += s->bias[j];
        if (s->penalties)
            apply_penalties(s, s->pen);
        row = s->pen;
    }

    /* Greedy: the first maximum. A temperature so small that its inverse
     * overflows is greedy as well, and so is a row without a logit above
     * -inf. */
    int32_t am = eng_argmax(row, V);
    float inv_t = s->p.temperature > 0.0f ? 1.0f / s->p.temperature : INFINITY;
    if (!isfinite(inv_t) || !(row[am] > -INFINITY)) {
        out->kind = SURV_ONE;
        out->id = am;
        return;
    }
    const float m = san(row[am]);

    cand *c = s->cand;
    size_t n;
    bool have_e = false, min_p_done = false;
    const float dmax = s->p.min_p > 0.0f ? -logf(s->p.min_p) : INFINITY;
    const size_t k = (size_t)s->p.top_k;
    if (k > 0 && k < V) {
        if (k <= HEAP_MAX_K)
            top_k_heap(c, row, V, k);
        else
            top_k_select(c, row, V, k);
        n = k;
        if (s->p.top_p < 1.0f && n > 1) {
            n = top_p_filter(s, c, n, m, inv_t);
            have_e = true;
        }
    } else if (s->p.top_p < 1.0f) {
        n = top_p_row(s, row, m, inv_t);
        have_e = true;
    } else if (s->p.min_p > 0.0f) {
        /* min-p is the only filter: no exp needed to find the survivors. */
        n = min_p_row(c, row, V, m, inv_t, dmax);
        min_p_done = true;
    } else {
        out->kind = SURV_ROW;
        out->sum = exp_row(s, row, m, inv_t, NULL);
        return;
    }
    if (s->p.min_p > 0.0f && !min_p_done)
        n = min_p_filter(c, n, m, inv_t, dmax);

    /* The maximum survives every filter with weight 1, so n >= 1 and the
     * sum is at least 1. */
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!have_e)
            c[i].e = weight(dist(m, c[i].x, inv_t));
        sum += c[i].e;
    }
    out->kind = SURV_CAND;
    out->n = n;
    out->sum = sum;
}

/* Inverse CDF over the candidates' weights, which sum to SUM. Entries of
 * weight 0 are never drawn. */
static int32_t draw_cand(eng_sampler *s, const cand *c, size_t n, double sum)
{
    double target = rng_uniform(s->rng) * sum, acc = 0.0;
    int32_t last = c[0].id;
    for (size_t i = 0; i < n; i++) {
        if (c[i].e <= 0.0f)
            continue;
        acc += c[i].e;
        last = c[i].id;
        if (target < acc)
            return last;
    }
    return last;
}

/* The same over the whole row, finding the block by its sum first. */
static int32_t draw_row(eng_sampler *s, double sum)
{
    const size_t V = s->n_vocab;
    const float *e = s->e;
    double target = rng_uniform(s->rng) * sum, acc = 0.0;
    for (size_t b = 0, lo = 0; lo < V; b++, lo += BLOCK) {
        if (!(target < acc + s->blk[b])) {
            acc += s->blk[b];
            continue;
        }
        /* Within the block; if rounding leaves the target short, the walk
         * goes on into the following blocks. */
        for (size_t i = lo; i < V; i++) {
            if (e[i] <= 0.0f)
                continue;
            acc += e[i];
            if (target < acc)
                return (int32_t)i;
        }
        break;
    }
    /* Rounding at the very end: the last id with a positive weight (the
     * maximum has weight 1, so there is one). */
    size_t i = V;
    while (i > 1 && !(e[i - 1] > 0.0f))
        i--;
    return (int32_t)(i - 1);
}

double eng_logprobs(const float *logits, size_t n, int32_t id, size_t top, int32_t *top_ids, float *top_lps,
                    float *lp)
{
    if (top > ENG_TOP_LOGPROBS_MAX)
        top = ENG_TOP_LOGPROBS_MAX;
    float mx = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (logits[i] > mx) /* NaN never compares greater */
            mx = logits[i];
    double sum = 0;
    if (mx > -INFINITY)
        for (size_t i = 0; i < n; i++)
            if (logits[i] > -INFINITY)
                sum += exp((double)logits[i] - (double)mx);
    double lse = mx > -INFINITY ? (double)mx + log(sum) : INFINITY;
    float v = id >= 0 && (size_t)id < n ? logits[id] : NAN;
    *lp = v == v && v > -INFINITY ? (float)((double)v - lse) : -INFINITY;
    /* The TOP largest by a sorted insertion: most entries fall below the last kept one at once. */
    size_t k = 0;
    float kept[ENG_TOP_LOGPROBS_MAX];
    for (size_t i = 0; i < n && top; i++) {
        float x = logits[i] == logits[i] ? logits[i] : -INFINITY;
        if (k == top && !(x > kept[k - 1]))
            continue;
        size_t j = k < top ? k++ : k - 1;
        while (j > 0 && x > kept[j - 1]) { /* strictly greater: an earlier (lower) id stays ahead on ties */
            kept[j] = kept[j - 1];
            top_ids[j] = top_ids[j - 1];
            j--;
        }
        kept[j] = x;
        top_ids[j] = (int32_t)i;
    }
    for (size_t j = 0; j < k; j++)
        top_lps[j] = kept[j] > -INFINITY ? (float)((double)kept[j] - lse) : -INFINITY;
    for (size_t j = k; j < top; j++) { /* a row shorter than TOP */
        top_ids[j] = -1;
        top_lps[j] = -INFINITY;
    }
    return lse;
}

uint64_t eng_argmax_key(const float *logits, size_t begin, size_t end)
{
    if (begin >= end)
        return 0;
    size_t i = begin + (size_t)eng_argmax(logits + begin, end - begin);
    float v = logits[i];
    if (v != v)
        return 0; /* only NaN */
    if (v == 0.0f)
        v = 0.0f; /* -0 ties with +0, as in eng_argmax's comparisons */
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    /* Ordered as the floats are: flip negatives, set the sign bit of the rest. */
    uint32_t ord = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
    return ((uint64_t)ord << 32) | (uint64_t)(UINT32_MAX - (uint32_t)i);
}

int32_t eng_argmax_key_id(uint64_t key)
{
    uint32_t ord = (uint32_t)(key >> 32);
    /* No part had a value above -inf: eng_argmax's answer is 0. */
    if (key == 0 || ord <= 0x007FFFFFu)
        return 0;
    return (int32_t)(UINT32_MAX - (uint32_t)key);
}

bool eng_sampler_is_greedy(const eng_sampler *s)
{
    return s->p.temperature == 0.0f && !s->penalties && !s->n_bias;
}

int32_t eng_sampler_sample_known(eng_sampler *s, const float *logits, int32_t argmax)
{
    if (argmax >= 0 && (size_t)argmax < s->n_vocab && eng_sampler_is_greedy(s))
        return argmax;
    return eng_sampler_sample(s, logits);
}

int32_t eng_sampler_sample(eng_sampler *s, const float *logits)
{
    survivors sv;
    if (s->p.temperature == 0.0f && !(s->penalties && s->n_ids > 0) && !s->n_bias)
        return eng_argmax(logits, s->n_vocab);
    filter(s, logits, &sv);
    switch (sv.kind) {
    case SURV_ONE:
        return sv.id;
    case SURV_ROW:
        return draw_row(s, sv.sum);
    case SURV_CAND:
        break;
    }
    return draw_cand(s, s->cand, sv.n, sv.sum);
}

int32_t eng_sampler_sample_masked(eng_sampler *s, const float *logits, const uint64_t *mask)
{
    const size_t V = s->n_vocab;
    if (!s->masked && !(s->masked = malloc(V * sizeof *s->masked)))
        return -1;
    float *row = s->masked;
    int32_t first = -1;
    bool finite = false;
    for (size_t w = 0, lo = 0; lo < V; w++, lo += 64) {
        size_t hi = lo + 64 < V ? lo + 64 : V;
        uint64_t bits = mask[w];
        if (first < 0 && bits)
            first = (int32_t)(lo + (size_t)__builtin_ctzll(bits));
        if (bits == UINT64_MAX && hi - lo == 64) {
            memcpy(row + lo, logits + lo, 64 * sizeof *row);
            for (size_t i = lo; i < hi && !finite; i++)
                finite = logits[i] > -INFINITY;
            continue;
        }
        for (size_t i = lo; i < hi; i++) {
            bool on = (bits >> (i - lo)) & 1;
            row[i] = on ? logits[i] : -INFINITY;
            finite |= on && logits[i] > -INFINITY;
        }
    }
    if (first < 0)
        return -1;
    /* Every allowed logit is -inf or NaN: the sampler's fallback (id 0) may be disallowed. */
    if (!finite)
        return first;
    return eng_sampler_sample(s, row);
}

void eng_sampler_probs(eng_sampler *s, const float *logits, float *probs)
{
    survivors sv;
    filter(s, logits, &sv);
    const size_t V = s->n_vocab;
    if (sv.kind == SURV_ROW) {
        for (size_t i = 0; i < V; i++)
            probs[i] = (float)(s->e[i] / sv.sum);
        return;
    }
    memset(probs, 0, V * sizeof *probs);
    if (sv.kind == SURV_ONE) {
        probs[sv.id] = 1.0f;
        return;
    }
    for (size_t i = 0; i < sv.n; i++)
        probs[s->cand[i].id] = (float)(s->cand[i].e / sv.sum);
}
