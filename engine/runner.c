/*
 * runner: model loading and per-sequence sessions (see runner.h).
 *
 * Persistent mode (default): the session owns a kv_cache and binds each
 * layer's region to the attention node reading past_key_values.N.key; the
 * graph's past inputs are empty tensors and nothing stored is ever copied.
 *
 * Tensor mode (reference): each layer's past_key/value is an input of shape
 * [1, kv_heads, L, head] and present an output of shape [1, kv_heads, L + n,
 * head]. The session keeps two buffers per tensor and alternates them, so
 * present of one run is past of the next; the contract copies the past every
 * step and the copy is counted. Buffers are reserved with mmap and committed
 * by the kernel as they are touched.
 *
 * Threads: see runner.h.
 */
#include "engine/runner.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/checked.h"
#include "kernels/krn.h"

struct eng_model {
    eng_model_opts opts;
    eng_graph *g;
    eng_genai_config cfg;
    eng_geometry geo;
    eng_plan *plan;
    eng_pool *pool;
    /* graph I/O names, resolved from genai_config.json */
    char **past_k, **past_v, **present_k, **present_v;
    const char *input_ids, *attention_mask, *logits;
    /*
     * Persistent mode: the one executor every session's feeds run through,
     * batched (eng_model_feed), with its per-run inputs. Compute thread only.
     */
    eng_exec *run_x;
    kv_pool *kv_pool;      /* idle sessions' committed KV pages, for new sessions */
    bool select_rows;      /* the LM head computes only the rows whose logits are wanted */
    int *attn_index;       /* [layers] attention node of each layer */
    int64_t *ids, *ones;   /* [run_cap] the run's input_ids, and its attention mask */
    size_t run_cap;
    eng_batch_seq *seqs;   /* [seq_cap] */
    size_t seq_cap;
    float empty_past[1];   /* data of the empty past inputs */
    uint64_t runs;         /* eng_model_feed calls that ran */
};

typedef struct kv_pair {
    float *buf[2];       /* alternating past / present */
} kv_pair;

struct eng_session {
    eng_model *m;
    int64_t cap;         /* tokens */
    int64_t len;
    bool greedy;         /* its feeds want the argmax of their logits row */
    int32_t argmax;      /* of the last feed's row, -1 when not computed */
    const float *logits; /* the last feed's row */
    /* persistent mode: the cache and its binding per attention node */
    kv_cache *kv;
    eng_kv_binding *bind;
    uint64_t kv_moved;
    /* tensor mode: an executor of its own, past and present alternating */
    eng_exec *x;
    bool last_row_only;  /* the lm_head runs for the last position only */
    int cur;             /* which buffer holds the past */
    kv_pair *k, *v;      /* per layer */
    uint64_t kv_bytes;   /* bytes of one buffer */
    int64_t *mask;       /* [cap] ones */
};

static char *format_name(const char *pattern, int64_t layer)
{
    char *s = NULL;
    /* genai_config names carry one %d for the layer */
    if (asprintf(&s, pattern, (int)layer) < 0)
        return NULL;
    return s;
}

/* exactly one conversion, and it is %d: the pattern is passed to asprintf */
static bool pattern_ok(const char *p)
{
    const char *pct = strchr(p, '%');
    return pct && pct[1] == 'd' && !strchr(pct + 1, '%');
}

static int check_io(eng_model *m, const char *name, bool input, int32_t dtype, eng_diag *diag)
{
    const eng_graph *g = m->g;
    const eng_value_info *list = input ? g->inputs : g->outputs;
    size_t n = input ? g->n_inputs : g->n_outputs;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i].name, name)) {
            if (list[i].dtype != dtype) {
                eng_diag_add(diag, "%s: graph %s '%s' is %s, expected %s", g->dir, input ? "input" : "output", name,
                             eng_dtype_name(list[i].dtype), eng_dtype_name(dtype));
                return -1;
            }
            return 0;
        }
    eng_diag_add(diag, "%s: the graph has no %s '%s' (named by genai_config.json or its defaults)", g->dir,
                 input ? "input" : "output", name);
    return -1;
}

/*
 * The persistent mode's executor: its past inputs are always empty (each
 * session's cache is bound per run), and where the logits come from a
 * row-wise projection (the LM head) it computes only the rows asked for.
 */
static int open_runner(eng_model *m, eng_diag *diag)
{
    int64_t L = m->geo.layers;
    m->run_x = eng_exec_new(m->plan, m->pool);
    m->attn_index = calloc((size_t)L + 1, sizeof *m->attn_index);
    if (!m->run_x || !m->attn_index)
        return -1;
    for (int64_t l = 0; l < L; l++) {
        m->attn_index[l] = eng_plan_attention_index(m->plan, m->past_k[l]);
        if (m->attn_index[l] < 0) {
            eng_diag_add(diag, "%s: no GroupQueryAttention node reads past key '%s'", m->g->dir, m->past_k[l]);
            return -1;
        }
    }
    int64_t d_empty[4] = {1, m->geo.kv_heads, 0, m->geo.head_size};
    for (int64_t l = 0; l < L; l++)
        if (eng_exec_set_input(m->run_x, m->past_k[l], ENG_DT_FLOAT, 4, d_empty, m->empty_past, diag) != 0 ||
            eng_exec_set_input(m->run_x, m->past_v[l], ENG_DT_FLOAT, 4, d_empty, m->empty_past, diag) != 0)
            return -1;
    eng_diag quiet;
    eng_diag_init(&quiet);
    m->select_rows = eng_exec_last_row_only(m->run_x, m->logits, true, &quiet) == 0;
    eng_diag_clear(&quiet);
    return 0;
}

int eng_model_open(const char *dir, const eng_model_opts *opts, eng_model **out, eng_diag *diag)
{
    *out = NULL;
    eng_model_opts o = opts ? *opts : (eng_model_opts){0};
    eng_model *m = calloc(1, sizeof *m);
    if (!m) {
        eng_diag_add(diag, "%s: out of memory", dir);
        return -1;
    }
    m->opts = o;
    size_t before = diag->n_total;
    if (eng_graph_load_model(dir, &m->g, &m->cfg, diag) != 0)
        goto fail;
    if (eng_graph_geometry(m->g, &m->geo, diag) != 0)
        goto fail;
    eng_plan_opts po = {.matmul_fp32 = o.matmul_fp32, .no_fusion = o.no_fusion, .progress = o.progress,
                        .progress_ctx = o.progress_ctx, .prepared_cache = o.prepared_cache,
                        .store_in_background = o.prepared_cache_background, .stored = o.prepared,
                        .stored_ctx = o.prepared_ctx, .no_readahead = o.no_readahead};
    if (eng_plan_new(m->g, &po, &m->plan, diag) != 0)
        goto fail;
    if (o.prepared) {
        eng_prep_info pi;
        eng_plan_prepared_cache(m->plan, &pi);
        o.prepared(o.prepared_ctx, &pi);
    }

    const eng_genai_config *c = &m->cfg;
    m->input_ids = c->input_ids;
    m->attention_mask = c->attention_mask;
    m->logits = c->logits;
    const char *pats[4] = {c->past_key_names, c->past_value_names, c->present_key_names, c->present_value_names};
    for (int i = 0; i < 4; i++)
        if (!pattern_ok(pats[i])) {
            eng_diag_add(diag, "%s: genai_config.json name pattern '%s' must contain one %%d", m->g->dir, pats[i]);
            goto fail;
        }
    int64_t L = m->geo.layers;
    char ***lists[4] = {&m->past_k, &m->past_v, &m->present_k, &m->present_v};
    for (int i = 0; i < 4; i++) {
        *lists[i] = calloc((size_t)L + 1, sizeof(char *));
        if (!*lists[i])
            goto fail;
        for (int64_t l = 0; l < L; l++)
            (*lists[i])[l] = format_name(pats[i], l);
    }
    check_io(m, m->input_ids, true, ENG_DT_INT64, diag);
    check_io(m, m->attention_mask, true, ENG_DT_INT64, diag);
    check_io(m, m->logits, false, ENG_DT_FLOAT, diag);
    for (int64_t l = 0; l < L; l++) {
        check_io(m, m->past_k[l], true, ENG_DT_FLOAT, diag);
        check_io(m, m->past_v[l], true, ENG_DT_FLOAT, diag);
        check_io(m, m->present_k[l], false, ENG_DT_FLOAT, diag);
        check_io(m, m->present_v[l], false, ENG_DT_FLOAT, diag);
    }
    if (m->g->n_inputs != (size_t)(2 + 2 * L))
        eng_diag_add(diag, "%s: the graph has %zu inputs; a decoder with %lld layers has %lld "
                     "(input_ids, attention_mask, past keys and values)", m->g->dir, m->g->n_inputs,
                     (long long)L, (long long)(2 + 2 * L));
    int64_t ctx = eng_model_max_context(m);
    if (eng_model_kv_bytes(m, ctx) == UINT64_MAX)
        eng_diag_add(diag, "%s: the KV state of the model's context of %lld tokens (%lld layers, %lld kv heads of "
                     "%lld) overflows", m->g->dir, (long long)ctx, (long long)L, (long long)m->geo.kv_heads,
                     (long long)m->geo.head_size);
    if (o.kv_mode == ENG_KV_TENSOR && o.kv_type != KV_F32)
        eng_diag_add(diag, "KV type %s needs the persistent KV mode: the tensor contract's past and present are FLOAT",
                     kv_type_name(o.kv_type));
    if (diag->n_total > before)
        goto fail;
    m->pool = eng_pool_new(o.threads > 0 ? o.threads : eng_pool_physical_cores(), 1);
    if (!m->pool) {
        eng_diag_add(diag, "cannot start %d compute threads", o.threads);
        goto fail;
    }
    if (o.kv_mode == ENG_KV_PERSISTENT && open_runner(m, diag) != 0)
        goto fail;
    if (o.kv_mode == ENG_KV_PERSISTENT &&
        !(m->kv_pool = kv_pool_new(o.kv_pool_bytes < 0 ? 0 : o.kv_pool_bytes ? (uint64_t)o.kv_pool_bytes
                                                                             : ENG_KV_POOL_DEFAULT)))
        goto fail;
    *out = m;
    return 0;
fail:
    if (diag->n_total == before)
        eng_diag_add(diag, "%s: out of memory", dir);
    eng_model_free(m);
    return -1;
}

static void free_names(char **names, int64_t n)
{
    if (!names)
        return;
    for (int64_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

void eng_model_free(eng_model *m)
{
    if (!m)
        return;
    eng_exec_free(m->run_x);
    kv_pool_free(m->kv_pool);
    free(m->attn_index);
    free(m->ids);
    free(m->ones);
    free(m->seqs);
    eng_pool_free(m->pool);
    eng_plan_free(m->plan);
    free_names(m->past_k, m->geo.layers);
    free_names(m->past_v, m->geo.layers);
    free_names(m->present_k, m->geo.layers);
    free_names(m->present_v, m->geo.layers);
    eng_graph_free(m->g);
    free(m);
}

const eng_graph *eng_model_graph(const eng_model *m) { return m->g; }
const eng_plan *eng_model_plan(const eng_model *m) { return m->plan; }
const eng_geometry *eng_model_geometry(const eng_model *m) { return &m->geo; }
const eng_genai_config *eng_model_config(const eng_model *m) { return &m->cfg; }
eng_pool *eng_model_pool(eng_model *m) { return m->pool; }

int64_t eng_model_max_context(const eng_model *m)
{
    int64_t c = m->cfg.context_length > 0 ? m->cfg.context_length : m->geo.max_positions;
    if (m->geo.max_positions > 0 && c > m->geo.max_positions)
        c = m->geo.max_positions;
    /* The graph counts tokens in INT32 (total_sequence_length, seqlens_k). */
    return c < INT32_MAX ? c : INT32_MAX;
}

bool eng_model_is_eos(const eng_model *m, int64_t id)
{
    for (int i = 0; i < m->cfg.n_eos; i++)
        if (m->cfg.eos_token_id[i] == id)
            return true;
    return false;
}

const char *eng_kv_mode_name(eng_kv_mode mode)
{
    return mode == ENG_KV_TENSOR ? "tensor" : "persistent";
}

int eng_kv_mode_parse(const char *s, eng_kv_mode *out)
{
    if (!strcmp(s, "persistent"))
        *out = ENG_KV_PERSISTENT;
    else if (!strcmp(s, "tensor"))
        *out = ENG_KV_TENSOR;
    else
        return -1;
    return 0;
}

/* ---- sessions ---------------------------------------------------------------- */

static float *reserve(uint64_t bytes)
{
    /* Reserved, not committed: pages appear as the cache grows. */
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* A session only ever reads the last position's logits: where the logits
 * come from a row-wise projection (the LM head), compute only that row. */
static void logits_last_row(eng_session *s)
{
    eng_diag quiet;
    eng_diag_init(&quiet);
    s->last_row_only = eng_exec_last_row_only(s->x, s->m->logits, true, &quiet) == 0;
    eng_diag_clear(&quiet);
}

void eng_session_set_greedy(eng_session *s, bool on)
{
    s->greedy = on;
    if (s->x) {
        eng_diag quiet;
        eng_diag_init(&quiet);
        eng_exec_set_argmax(s->x, s->m->logits, on, &quiet); /* a plan without a MatMulNBits head just never fuses */
        eng_diag_clear(&quiet);
    }
}

int32_t eng_session_argmax(const eng_session *s)
{
    return s->argmax;
}

/* Tensor mode: bytes of one past or present tensor [1, kv_heads, capacity, head] (fp32); false on overflow. */
static bool tensor_kv_bytes(const eng_model *m, int64_t capacity, uint64_t *out)
{
    uint64_t n;
    return ck_mul_u64((uint64_t)m->geo.kv_heads, (uint64_t)capacity, &n) &&
           ck_mul_u64(n, (uint64_t)m->geo.head_size, &n) && ck_mul_u64(n, sizeof(float), out);
}

uint64_t eng_model_kv_bytes(const eng_model *m, int64_t capacity)
{
    if (capacity <= 0)
        return 0;
    if (m->opts.kv_mode == ENG_KV_PERSISTENT) {
        kv_geometry kg = {.layers = m->geo.layers, .kv_heads = m->geo.kv_heads, .head_dim = m->geo.head_size,
                          .capacity = capacity, .type = m->opts.kv_type};
        uint64_t b = kv_bytes_for(&kg);
        return b ? b : UINT64_MAX;
    }
    /* Tensor mode: two alternating buffers each for keys and values, per layer. */
    uint64_t one;
    if (!tensor_kv_bytes(m, capacity, &one))
        return UINT64_MAX;
    return ck_mul_sat_u64(ck_mul_sat_u64(one, 4), (uint64_t)m->geo.layers);
}

eng_session *eng_session_new(eng_model *m, int64_t max_ctx, eng_diag *diag)
{
    int64_t limit = eng_model_max_context(m);
    if (max_ctx <= 0 || max_ctx > limit) {
        eng_diag_add(diag, "context of %lld tokens is outside 1..%lld", (long long)max_ctx, (long long)limit);
        return NULL;
    }
    eng_session *s = calloc(1, sizeof *s);
    if (!s)
        goto oom;
    s->m = m;
    s->cap = max_ctx;
    s->argmax = -1;
    int64_t L = m->geo.layers;
    if (m->opts.kv_mode == ENG_KV_PERSISTENT) {
        /* Every session's range spans the model's context, so any idle cache of the pool fits any session. */
        kv_geometry kg = {.layers = L, .kv_heads = m->geo.kv_heads, .head_dim = m->geo.head_size,
                          .capacity = max_ctx, .type = m->opts.kv_type, .reserve = limit};
        s->kv = kv_pool_take(m->kv_pool, &kg);
        s->bind = calloc(eng_plan_attention_count(m->plan) + 1, sizeof *s->bind);
        if (!s->kv || !s->bind)
            goto oom;
        for (int64_t l = 0; l < L; l++)
            s->bind[m->attn_index[l]] = (eng_kv_binding){kv_keys(s->kv, l), kv_values(s->kv, l), m->opts.kv_type,
                                                         max_ctx, kv_head_stride(s->kv)};
        return s;
    }
    if (!tensor_kv_bytes(m, max_ctx, &s->kv_bytes))
        goto oom; /* eng_model_open() checked the largest context; cannot happen */
    s->k = calloc((size_t)L, sizeof *s->k);
    s->v = calloc((size_t)L, sizeof *s->v);
    s->mask = malloc((size_t)max_ctx * sizeof *s->mask);
    s->x = eng_exec_new(m->plan, m->pool);
    if (!s->k || !s->v || !s->mask || !s->x)
        goto oom;
    logits_last_row(s);
    for (int64_t i = 0; i < max_ctx; i++)
        s->mask[i] = 1;
    for (int64_t l = 0; l < L; l++)
        for (int b = 0; b < 2; b++) {
            s->k[l].buf[b] = reserve(s->kv_bytes);
            s->v[l].buf[b] = reserve(s->kv_bytes);
            if (!s->k[l].buf[b] || !s->v[l].buf[b])
                goto oom;
        }
    return s;
oom:
    eng_diag_add(diag, "out of memory for a session of %lld tokens", (long long)max_ctx);
    eng_session_free(s);
    return NULL;
}

void eng_session_free(eng_session *s)
{
    if (!s)
        return;
    kv_pool_give(s->m->kv_pool, s->kv);
    free(s->bind);
    for (int64_t l = 0; s->k && l < s->m->geo.layers; l++)
        for (int b = 0; b < 2; b++)
            if (s->k[l].buf[b])
                munmap(s->k[l].buf[b], s->kv_bytes);
    for (int64_t l = 0; s->v && l < s->m->geo.layers; l++)
        for (int b = 0; b < 2; b++)
            if (s->v[l].buf[b])
                munmap(s->v[l].buf[b], s->kv_bytes);
    free(s->k);
    free(s->v);
    free(s->mask);
    eng_exec_free(s->x);
    free(s);
}

void eng_session_reset(eng_session *s)
{
    s->len = 0;
    s->cur = 0;
    s->logits = NULL;
    s->argmax = -1;
    if (s->kv)
        kv_reset(s->kv);
}

int eng_session_copy_prefix(eng_session *dst, const eng_session *src, int64_t tokens, eng_diag *diag)
{
    if (!dst->kv || !src->kv || dst->m != src->m) {
        eng_diag_add(diag, "copying a session's prefix needs two persistent-mode sessions of one model");
        return -1;
    }
    if (dst->len || tokens > src->len || tokens > dst->cap) {
        eng_diag_add(diag, "cannot copy %lld of %lld cached tokens into a session of %lld tokens holding %lld",
                     (long long)tokens, (long long)src->len, (long long)dst->cap, (long long)dst->len);
        return -1;
    }
    int64_t bytes = kv_copy_prefix(dst->kv, src->kv, tokens);
    if (bytes < 0) {
        eng_diag_add(diag, "cannot commit KV cache memory for %lld tokens", (long long)tokens);
        return -1;
    }
    dst->len = tokens;
    dst->kv_moved += (uint64_t)bytes;
    return 0;
}

void eng_session_trim(eng_session *s, int64_t keep)
{
    if (keep < s->len)
        s->len = keep < 0 ? 0 : keep;
    if (s->kv)
        kv_trim(s->kv, s->len);
    s->logits = NULL;
    s->argmax = -1;
}

void eng_session_truncate(eng_session *s, int64_t keep)
{
    if (keep < s->len)
        s->len = keep < 0 ? 0 : keep;
    if (s->kv && kv_length(s->kv) > s->len)
        kv_set_length(s->kv, s->len);
    s->logits = NULL;
    s->argmax = -1;
}

int eng_session_set_capacity(eng_session *s, int64_t capacity)
{
    if (!s->kv || capacity > eng_model_max_context(s->m) || kv_set_capacity(s->kv, capacity) != 0)
        return -1;
    s->cap = capacity;
    for (int64_t l = 0; l < s->m->geo.layers; l++)
        s->bind[s->m->attn_index[l]].capacity = capacity;
    return 0;
}

int64_t eng_session_length(const eng_session *s) { return s->len; }
int64_t eng_session_capacity(const eng_session *s) { return s->cap; }

uint64_t eng_session_kv_bytes_moved(const eng_session *s)
{
    return s->kv ? s->kv_moved : eng_exec_kv_bytes_moved(s->x);
}

eng_exec *eng_session_exec(eng_session *s)
{
    return s->x ? s->x : s->m->run_x;
}

static float next_random(uint64_t *state)
{
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((int32_t)(*state >> 40) & 0xffff) / 65536.0f - 0.5f;
}

static void fill_random(float *dst, uint64_t n, uint64_t *state)
{
    for (uint64_t i = 0; i < n; i++)
        dst[i] = next_random(state);
}

/* The same values as fill_random, ROWS rows of H, stored as rows of the cache's type. */
static void fill_random_kv(void *dst, kv_type t, int64_t rows, int64_t H, uint64_t *state)
{
    float x[KRN_MAX_HEAD_DIM]; /* the attention nodes accept no larger head */
    size_t row_bytes = (size_t)kv_row_elems(t, H) * kv_elem_size(t);
    for (int64_t r = 0; r < rows; r++) {
        fill_random(x, (uint64_t)H, state);
        krn_kv_row_from_f32(t, x, (size_t)H, (uint8_t *)dst + (size_t)r * row_bytes);
    }
}

int eng_session_fill_synthetic(eng_session *s, int64_t length, eng_diag *diag)
{
    eng_model *m = s->m;
    if (length < 0 || length >= s->cap) {
        eng_diag_add(diag, "synthetic context of %lld tokens does not fit the session's %lld", (long long)length,
                     (long long)s->cap);
        return -1;
    }
    uint64_t state = 12345;
    uint64_t per_layer = (uint64_t)(m->geo.kv_heads * length * m->geo.head_size);
    if (s->kv) {
        size_t elem = kv_elem_size(kv_geo(s->kv)->type);
        if (kv_reserve_tokens(s->kv, length) != 0) {
            eng_diag_add(diag, "cannot commit KV cache memory for %lld tokens", (long long)length);
            return -1;
        }
        kv_type t = kv_geo(s->kv)->type;
        int64_t H = m->geo.head_size;
        if (H > KRN_MAX_HEAD_DIM) {
            eng_diag_add(diag, "head size %lld is above the attention kernels' %d", (long long)H, KRN_MAX_HEAD_DIM);
            return -1;
        }
        for (int64_t l = 0; l < m->geo.layers; l++)
            for (int64_t h = 0; h < m->geo.kv_heads; h++) {
                size_t off = (size_t)(h * kv_head_stride(s->kv)) * elem;
                fill_random_kv((char *)kv_keys(s->kv, l) + off, t, length, H, &state);
                fill_random_kv((char *)kv_values(s->kv, l) + off, t, length, H, &state);
            }
        kv_set_length(s->kv, length);
    } else {
        for (int64_t l = 0; l < m->geo.layers; l++) {
            fill_random(s->k[l].buf[s->cur], per_layer, &state);
            fill_random(s->v[l].buf[s->cur], per_layer, &state);
        }
    }
    s->len = length;
    return 0;
}

void eng_model_set_kv_pool_budget(eng_model *m, uint64_t bytes)
{
    if (!m->kv_pool)
        return;
    kv_pool_shrink(m->kv_pool, bytes);
    kv_pool_set_budget(m->kv_pool, bytes);
}

uint64_t eng_model_kv_pool_budget(const eng_model *m)
{
    return kv_pool_budget(m->kv_pool);
}

uint64_t eng_model_kv_pool_bytes(const eng_model *m)
{
    return kv_pool_bytes(m->kv_pool);
}

uint64_t eng_model_kv_pool_shrink(eng_model *m, uint64_t bytes)
{
    return kv_pool_shrink(m->kv_pool, bytes);
}

uint64_t eng_session_kv_bytes_reserved(const eng_session *s)
{
    return s->kv ? kv_bytes_reserved(s->kv) : 4 * s->kv_bytes * (uint64_t)s->m->geo.layers;
}

uint64_t eng_session_kv_bytes_committed(const eng_session *s)
{
    if (s->kv)
        return kv_bytes_committed(s->kv);
    /* both alternating buffers hold up to the current length */
    return 4 * (uint64_t)(s->m->geo.kv_heads * s->len * s->m->geo.head_size) * sizeof(float) *
           (uint64_t)s->m->geo.layers;
}

/* ---- feeds --------------------------------------------------------------------- */

/* Checks a feed before it runs: its ids, and the room of its session (committed here). */
static int check_feed(eng_model *m, eng_feed *f)
{
    int64_t V = m->geo.vocab;
    eng_session *s = f->s;
    if (f->n == 0)
        snprintf(f->error, sizeof f->error, "no ids to feed");
    else if (f->n > (uint64_t)(s->cap - s->len))
        snprintf(f->error, sizeof f->error, "%lld cached + %zu new tokens exceed the session's context of %lld",
                 (long long)s->len, f->n, (long long)s->cap);
    for (size_t i = 0; i < f->n && !f->error[0]; i++)
        if (f->ids[i] < 0 || f->ids[i] >= V)
            snprintf(f->error, sizeof f->error, "token id %lld is outside the vocabulary [0, %lld)",
                     (long long)f->ids[i], (long long)V);
    if (!f->error[0] && s->kv && kv_reserve_tokens(s->kv, s->len + (int64_t)f->n) != 0)
        snprintf(f->error, sizeof f->error, "cannot commit KV cache memory for %lld tokens",
                 (long long)(s->len + (int64_t)f->n));
    return f->error[0] ? -1 : 0;
}

/* Tensor mode: the graph's own contract, one session at a time (the reference). */
static int feed_tensor(eng_feed *f, eng_diag *diag)
{
    eng_session *s = f->s;
    eng_model *m = s->m;
    int64_t V = m->geo.vocab, n = (int64_t)f->n, total = s->len + n;
    int64_t d_ids[2] = {1, n}, d_mask[2] = {1, total};
    int64_t d_past[4] = {1, m->geo.kv_heads, s->len, m->geo.head_size};
    if (eng_exec_set_input(s->x, m->input_ids, ENG_DT_INT64, 2, d_ids, f->ids, diag) != 0 ||
        eng_exec_set_input(s->x, m->attention_mask, ENG_DT_INT64, 2, d_mask, s->mask, diag) != 0)
        return -1;
    int past = s->cur, pres = 1 - s->cur;
    for (int64_t l = 0; l < m->geo.layers; l++) {
        if (eng_exec_set_input(s->x, m->past_k[l], ENG_DT_FLOAT, 4, d_past, s->k[l].buf[past], diag) != 0 ||
            eng_exec_set_input(s->x, m->past_v[l], ENG_DT_FLOAT, 4, d_past, s->v[l].buf[past], diag) != 0 ||
            eng_exec_bind_output(s->x, m->present_k[l], s->k[l].buf[pres], s->kv_bytes, diag) != 0 ||
            eng_exec_bind_output(s->x, m->present_v[l], s->v[l].buf[pres], s->kv_bytes, diag) != 0)
            return -1;
    }
    /* every position's logits: the LM head leaves its last-row-only mode for this run */
    bool last_only = s->last_row_only && !f->all_rows;
    if (s->last_row_only && f->all_rows)
        eng_exec_last_row_only(s->x, m->logits, false, diag);
    eng_exec_set_prompt_rows(s->x, f->prompt);
    int rc = eng_exec_run(s->x, diag);
    eng_exec_set_prompt_rows(s->x, false);
    if (s->last_row_only && f->all_rows)
        eng_exec_last_row_only(s->x, m->logits, true, diag);
    if (rc != 0)
        return -1;
    eng_view lv;
    /* the logits of the last position only, or of every position */
    int64_t rows = last_only ? 1 : n;
    if (eng_exec_value(s->x, m->logits, &lv) != 0 || lv.rank != 3 || lv.dims[1] != rows || lv.dims[2] != V) {
        eng_diag_add(diag, "output '%s' does not have shape [1, %lld, %lld]", m->logits, (long long)rows, (long long)V);
        return -1;
    }
    f->row = (const float *)lv.data + (size_t)(rows - 1) * (size_t)V;
    f->rows = f->all_rows ? (const float *)lv.data : NULL;
    f->argmax = eng_exec_argmax(s->x);
    s->len = total;
    s->cur = pres;
    return 0;
}

/* Grows the persistent runner's per-run arrays for N sequences and ROWS ids. */
static int runner_room(eng_model *m, size_t n, size_t rows)
{
    if (rows > m->run_cap) {
        size_t cap = m->run_cap ? m->run_cap : 64;
        while (cap < rows)
            cap *= 2;
        int64_t *ids = realloc(m->ids, cap * sizeof *ids);
        if (ids)
            m->ids = ids;
        int64_t *ones = realloc(m->ones, cap * sizeof *ones);
        if (ones)
            m->ones = ones;
        if (!ids || !ones)
            return -1;
        for (size_t i = m->run_cap; i < cap; i++)
            m->ones[i] = 1;
        m->run_cap = cap;
    }
    if (n > m->seq_cap) {
        eng_batch_seq *sq = realloc(m->seqs, n * sizeof *sq);
        if (!sq)
            return -1;
        m->seqs = sq;
        m->seq_cap = n;
    }
    return 0;
}

/* Persistent mode: every checked feed's ids in one run of the plan. */
static int feed_batch(eng_model *m, eng_feed *feeds, size_t n, eng_diag *diag)
{
    size_t rows = 0, k = 0;
    bool greedy = false;
    for (size_t i = 0; i < n; i++)
        if (!feeds[i].error[0]) {
            rows += feeds[i].n;
            greedy |= feeds[i].s->greedy;
        }
    if (!rows)
        return 0;
    if (runner_room(m, n, rows) != 0) {
        eng_diag_add(diag, "out of memory for a step of %zu ids", rows);
        return -1;
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        eng_feed *f = &feeds[i];
        if (f->error[0])
            continue;
        memcpy(m->ids + at, f->ids, f->n * sizeof *f->ids);
        at += f->n;
        m->seqs[k++] = (eng_batch_seq){.kv = f->s->bind, .past = f->s->len, .n = (int64_t)f->n, .prompt = f->prompt,
                                       .logits = f->logits || !m->select_rows, .all_rows = f->all_rows};
    }
    int64_t d_ids[2] = {1, (int64_t)rows};
    eng_diag quiet;
    eng_diag_init(&quiet);
    eng_exec_set_argmax(m->run_x, m->logits, greedy, &quiet); /* a plan without a MatMulNBits head never fuses */
    eng_diag_clear(&quiet);
    if (eng_exec_set_input(m->run_x, m->input_ids, ENG_DT_INT64, 2, d_ids, m->ids, diag) != 0 ||
        eng_exec_set_input(m->run_x, m->attention_mask, ENG_DT_INT64, 2, d_ids, m->ones, diag) != 0 ||
        eng_exec_set_batch(m->run_x, m->seqs, k, diag) != 0)
        return -1;
    int rc = eng_exec_run(m->run_x, diag);
    eng_exec_set_batch(m->run_x, NULL, 0, diag);
    if (rc != 0)
        return -1;
    /* With row selection the logits hold one row per feed that wants them (all
     * of its rows for an all_rows feed); else every row. */
    int64_t V = m->geo.vocab, want = 0;
    for (size_t i = 0; i < n; i++)
        if (!feeds[i].error[0] && m->select_rows)
            want += feeds[i].all_rows ? (int64_t)feeds[i].n : feeds[i].logits;
    eng_view lv;
    int64_t expect = m->select_rows ? want : (int64_t)rows;
    if (eng_exec_value(m->run_x, m->logits, &lv) != 0 || lv.rank != 3 || lv.dims[1] != expect || lv.dims[2] != V) {
        eng_diag_add(diag, "output '%s' does not have shape [1, %lld, %lld]", m->logits, (long long)expect,
                     (long long)V);
        return -1;
    }
    size_t sel = 0;
    at = 0;
    for (size_t i = 0; i < n; i++) {
        eng_feed *f = &feeds[i];
        if (f->error[0])
            continue;
        at += f->n;
        size_t first = m->select_rows ? sel : at - f->n, row = m->select_rows ? sel : at - 1;
        if (f->all_rows) {
            row = first + f->n - 1;
            f->rows = (const float *)lv.data + first * (size_t)V;
        }
        if (f->logits || f->all_rows || !m->select_rows) {
            f->row = (const float *)lv.data + row * (size_t)V;
            f->argmax = eng_exec_argmax_row(m->run_x, row);
            sel += m->select_rows ? (f->all_rows ? f->n : 1) : 0;
        }
        eng_session *s = f->s;
        s->len += (int64_t)f->n;
        kv_set_length(s->kv, s->len);
        s->kv_moved += (uint64_t)f->n * kv_bytes_per_token(s->kv);
    }
    return 0;
}

uint64_t eng_model_runs(const eng_model *m)
{
    return m->runs;
}

int eng_model_feed(eng_model *m, eng_feed *feeds, size_t n, eng_diag *diag)
{
    int failed = 0;
    m->runs++;
    for (size_t i = 0; i < n; i++) {
        eng_feed *f = &feeds[i];
        f->error[0] = '\0';
        f->row = f->rows = NULL;
        f->argmax = -1;
        if (check_feed(m, f) != 0)
            failed++;
    }
    if (m->run_x) {
        if (feed_batch(m, feeds, n, diag) != 0)
            return -1;
    } else {
        for (size_t i = 0; i < n; i++)
            if (!feeds[i].error[0] && feed_tensor(&feeds[i], diag) != 0)
                return -1;
    }
    for (size_t i = 0; i < n; i++) {
        eng_session *s = feeds[i].s;
        s->logits = feeds[i].row;
        s->argmax = feeds[i].argmax;
    }
    return failed;
}

static int feed_one(eng_session *s, const int64_t *ids, size_t n, bool prompt, const float **logits, eng_diag *diag)
{
    eng_feed f = {.s = s, .ids = ids, .n = n, .prompt = prompt, .logits = true};
    int rc = eng_model_feed(s->m, &f, 1, diag);
    if (rc > 0)
        eng_diag_add(diag, "%s", f.error);
    if (rc != 0)
        return -1;
    *logits = f.row;
    return 0;
}

int eng_session_feed_prompt(eng_session *s, const int64_t *ids, size_t n, const float **logits, eng_diag *diag)
{
    return feed_one(s, ids, n, true, logits, diag);
}

int eng_session_feed(eng_session *s, const int64_t *ids, size_t n, const float **logits, eng_diag *diag)
{
    return feed_one(s, ids, n, false, logits, diag);
}
