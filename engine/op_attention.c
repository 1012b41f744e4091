/*
 * op_attention: the adapter of com.microsoft::GroupQueryAttention: new key
 * and value rows stored (keys rotated) into a session-owned cache or the
 * present tensors, then the attention core over the cache, split by kv
 * head over the pool.
 *
 * Threads: see plan_internal.h.
 */
#include "engine/plan_internal.h"

#include <math.h>

typedef struct rot_call { const krn_table *t; krn_rotary_args a; } rot_call;

typedef struct gqa_call { const krn_table *t; krn_gqa_args a; } gqa_call;

typedef struct rows_call { const krn_table *t; krn_rows_args a; } rows_call;

static void do_rot(const void *c, size_t b, size_t e)
{
    const rot_call *r = c;
    r->t->rotary.fn(&r->a, b, e);
}

static void do_gqa(const void *c, size_t b, size_t e)
{
    const gqa_call *g = c;
    g->t->gqa.fn(&g->a, b, e);
}

/*
 * A decode step's attention with its new row (one token, items = query
 * heads, ranges of whole kv groups): each participant stores the values,
 * rotates (or stores) the keys of its own kv heads and rotates its query
 * heads, then attends. Attention for a kv head reads only that head's cache
 * rows, this one included, so nothing waits for the other participants, and
 * the row work (with the page faults of a new cache page) is split instead
 * of running on one thread while the others wait.
 */
typedef struct gqa_decode_call {
    gqa_call ga;
    krn_rows_args vals, keys;    /* keys: used when there is no rotary */
    krn_rotary_args rot_k, rot_q;
    bool rotary;
    const float *q;              /* no rotary: query heads copied from here to ga.a.q */
} gqa_decode_call;

static void do_gqa_decode(const void *c, size_t b, size_t e)
{
    const gqa_decode_call *d = c;
    const krn_table *t = d->ga.t;
    size_t group = d->ga.a.n_heads / d->ga.a.n_kv_heads, hd = d->ga.a.head_dim;
    size_t g0 = b / group, g1 = (e + group - 1) / group;
    t->kv_store.fn(&d->vals, g0, g1);
    if (d->rotary) {
        t->rotary.fn(&d->rot_k, g0, g1);
        t->rotary.fn(&d->rot_q, b, e);
    } else {
        t->kv_store.fn(&d->keys, g0, g1);
        memcpy((float *)d->ga.a.q + b * hd, d->q + b * hd, (e - b) * hd * sizeof(float));
    }
    t->gqa.fn(&d->ga.a, b, e);
}

static void do_rows(const void *c, size_t b, size_t e)
{
    const rows_call *r = c;
    r->t->kv_store.fn(&r->a, b, e);
}

/* ---- GroupQueryAttention ------------------------------------------------------- */

static int prep_gqa(plan_builder *b, step *s)
{
    const eng_node *n = s->node;
    gqa_params *g = &s->p.gqa;
    g->heads = eng_node_attr_int(n, "num_heads", 0);
    g->kv_heads = eng_node_attr_int(n, "kv_num_heads", 0);
    g->scale = eng_node_attr_float(n, "scale", 0.0f);
    int64_t do_rotary = eng_node_attr_int(n, "do_rotary", 0);
    g->rotary = do_rotary == 1;
    /* ONNX Runtime rotates only for 1; any other value is a malformed node, not "off". */
    if (do_rotary != 0 && do_rotary != 1)
        PREP_FAIL(b, s, "attribute 'do_rotary' = %lld must be 0 or 1", (long long)do_rotary);
    if (g->heads <= 0 || g->kv_heads <= 0 || g->heads % g->kv_heads)
        PREP_FAIL(b, s, "num_heads = %lld must be a positive multiple of kv_num_heads = %lld", (long long)g->heads,
                  (long long)g->kv_heads);
    if (eng_node_attr_float(n, "softcap", 0.0f) != 0.0f)
        PREP_FAIL(b, s, "attribute 'softcap' is not supported");
    if (eng_node_attr_int(n, "local_window_size", -1) != -1)
        PREP_FAIL(b, s, "attribute 'local_window_size' (sliding window) is not supported");
    if (eng_node_attr_int(n, "rotary_interleaved", 0) != 0)
        PREP_FAIL(b, s, "attribute 'rotary_interleaved' = 1 is not supported");
    if (eng_node_attr_int(n, "smooth_softmax", -1) == 1)
        PREP_FAIL(b, s, "attribute 'smooth_softmax' = 1 is not supported");
    if (eng_node_attr_int(n, "qk_output", 0) != 0)
        PREP_FAIL(b, s, "attribute 'qk_output' is not supported");
    if (eng_node_attr_int(n, "kv_cache_bit_width", 0) != 0)
        PREP_FAIL(b, s, "attribute 'kv_cache_bit_width' (quantized KV cache) is not supported");
    const char *qt[] = {"k_quant_type", "v_quant_type"};
    for (int i = 0; i < 2; i++) {
        const eng_attr *a = eng_node_attr(n, qt[i]);
        if (a && strcmp(a->s, "NONE"))
            PREP_FAIL(b, s, "attribute '%s' = '%s' is not supported", qt[i], a->s);
    }
    bool has_k = s->n_in > 1 && s->in[1] >= 0, has_v = s->n_in > 2 && s->in[2] >= 0;
    if (has_k != has_v)
        PREP_FAIL(b, s, "key and value must both be given or both be absent");
    g->packed = !has_k;
    g->width_heads = g->heads;
    if (g->packed && (!ck_mul_i64(2, g->kv_heads, &g->width_heads) ||
                      !ck_add_i64(g->width_heads, g->heads, &g->width_heads)))
        PREP_FAIL(b, s, "num_heads = %lld + 2 x kv_num_heads = %lld overflows", (long long)g->heads,
                  (long long)g->kv_heads);
    g->index = b->p->n_gqa++;
    if (s->n_in < 7 || s->in[5] < 0 || s->in[6] < 0)
        PREP_FAIL(b, s, "inputs seqlens_k and total_sequence_length are required");
    bool has_pk = s->n_in > 3 && s->in[3] >= 0, has_pv = s->n_in > 4 && s->in[4] >= 0;
    if (has_pk != has_pv)
        PREP_FAIL(b, s, "past_key and past_value must both be given or both be absent");
    if (g->rotary && (s->n_in < 9 || s->in[7] < 0 || s->in[8] < 0))
        PREP_FAIL(b, s, "do_rotary = 1 needs inputs cos_cache and sin_cache");
    static const char *unsupported[] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                                        "position_ids", "attention_bias", "head_sink", "k_scale",
                                        "v_scale", "q_norm_weight", "k_norm_weight"};
    for (int i = 9; i < s->n_in && i < 16; i++)
        if (s->in[i] >= 0)
            PREP_FAIL(b, s, "input %d (%s) is not supported", i, unsupported[i]);
    if (s->n_out < 3 || s->out[1] < 0 || s->out[2] < 0)
        PREP_FAIL(b, s, "outputs present_key and present_value are required");
    if (s->n_out > 3 && s->out[3] >= 0)
        PREP_FAIL(b, s, "output 3 (output_qk) is not supported");
    snprintf(s->kernel, sizeof s->kernel, "%s + %s + %s", b->p->krn.kv_store.name,
             g->rotary ? b->p->krn.rotary.name : "(no rotary)", b->p->krn.gqa.name);
    return 0;
}

typedef struct gqa_dims {
    int64_t S, H, W, T, P, present;
} gqa_dims;

static int gqa_shapes(eng_exec *x, const step *s, gqa_dims *d)
{
    const gqa_params *g = &s->p.gqa;
    const rt_val *q = IN(x, s, 0), *k = IN(x, s, 1), *pk = IN(x, s, 3), *pv = IN(x, s, 4);
    const rt_val *seq = IN(x, s, 5), *tot = IN(x, s, 6);
    if (q->v.dtype != ENG_DT_FLOAT || q->v.rank != 3)
        STEP_FAIL(x, s, "query must be FLOAT [batch, sequence, hidden]");
    if (q->v.dims[0] != 1)
        STEP_FAIL(x, s, "batch size %lld is not supported (only 1)", (long long)q->v.dims[0]);
    d->S = q->v.dims[1];
    d->W = q->v.dims[2];
    int64_t heads_total = g->width_heads;
    if (d->W % heads_total)
        STEP_FAIL(x, s, "query width %lld is not a multiple of %lld heads", (long long)d->W, (long long)heads_total);
    d->H = d->W / heads_total;
    /* H >= 8 also bounds the heads by the query's width, so head counts times H fit */
    if (d->H < 8 || d->H > KRN_MAX_HEAD_DIM || d->H % 8)
        STEP_FAIL(x, s, "head size %lld must be a positive multiple of 8 up to %d", (long long)d->H,
                  KRN_MAX_HEAD_DIM);
    if (!g->packed) {
        const rt_val *v = IN(x, s, 2);
        for (int i = 0; i < 2; i++) {
            const rt_val *t = i ? v : k;
            if (t->v.dtype != ENG_DT_FLOAT || t->v.rank != 3 || t->v.dims[0] != 1 || t->v.dims[1] != d->S ||
                t->v.dims[2] != g->kv_heads * d->H)
                STEP_FAIL(x, s, "%s must be FLOAT [1, %lld, %lld]", i ? "value" : "key", (long long)d->S,
                          (long long)(g->kv_heads * d->H));
        }
    }
    d->P = 0;
    if (pk) {
        for (int i = 0; i < 2; i++) {
            const rt_val *t = i ? pv : pk;
            if (t->v.dtype != ENG_DT_FLOAT || t->v.rank != 4 || t->v.dims[0] != 1 || t->v.dims[1] != g->kv_heads ||
                t->v.dims[3] != d->H || t->v.dims[2] != pk->v.dims[2])
                STEP_FAIL(x, s, "%s must be FLOAT [1, %lld, past, %lld]", i ? "past_value" : "past_key",
                          (long long)g->kv_heads, (long long)d->H);
        }
        d->P = pk->v.dims[2];
    }
    if (g->lowered) {
        /* the attention mask's length, from the positions the graph computes for its rotary embedding */
        if (tot->v.dtype != ENG_DT_INT64 || eng_view_numel(&tot->v) != 1)
            STEP_FAIL(x, s, "the attention mask length must be one INT64");
        if (need_data(x, s, tot, "the attention mask length") != 0)
            return -1;
        d->T = ((const int64_t *)tot->v.data)[0];
        if (pk && !x->n_batch && !x->kv[g->index].k && d->P != d->T - d->S)
            STEP_FAIL(x, s, "past_key holds %lld tokens, the attention mask %lld - %lld new", (long long)d->P,
                      (long long)d->T, (long long)d->S);
    } else {
        if (seq->v.dtype != ENG_DT_INT32 || eng_view_numel(&seq->v) != 1)
            STEP_FAIL(x, s, "seqlens_k must be INT32 [1]");
        if (tot->v.dtype != ENG_DT_INT32 || eng_view_numel(&tot->v) != 1)
            STEP_FAIL(x, s, "total_sequence_length must be one INT32");
        if (need_data(x, s, tot, "total_sequence_length") != 0)
            return -1;
        d->T = ((const int32_t *)tot->v.data)[0];
    }
    if (d->T < d->S)
        STEP_FAIL(x, s, "total_sequence_length %lld is less than the %lld new tokens", (long long)d->T, (long long)d->S);
    d->present = d->T > d->P ? d->T : d->P;
    return 0;
}

/* Bytes of scratch before the positions (rotated queries), and before the decode calls (positions). */
static uint64_t aligned(uint64_t n)
{
    return (n + ALIGN - 1) / ALIGN * ALIGN;
}

static int infer_gqa(eng_exec *x, const step *s)
{
    gqa_dims d;
    if (gqa_shapes(x, s, &d) != 0)
        return -1;
    const gqa_params *g = &s->p.gqa;
    int64_t od[3] = {1, d.S, g->heads * d.H};
    /* with a session cache bound (or a batch of them), the cache is the state and present is empty */
    bool cached = x->n_batch || x->kv[g->index].k;
    int64_t pd[4] = {1, g->kv_heads, cached ? 0 : d.present, d.H};
    if (set_out(x, s, 0, ENG_DT_FLOAT, 3, od) != 0 || set_out(x, s, 1, ENG_DT_FLOAT, 4, pd) != 0 ||
        set_out(x, s, 2, ENG_DT_FLOAT, 4, pd) != 0)
        return -1;
    /* scratch: rotated queries, positions, then a batch's decode calls */
    uint64_t need = aligned((uint64_t)(d.S * g->heads * d.H) * sizeof(float)) +
                    aligned((uint64_t)d.S * sizeof(int64_t)) + (uint64_t)x->n_batch * sizeof(gqa_decode_call) + ALIGN;
    if (need > x->scratch_need)
        x->scratch_need = need;
    return 0;
}

/* What one sequence's rows of an attention step read and write. */
typedef struct gqa_seq {
    void *kc, *vc;          /* its cache (or the present tensors) */
    size_t head_stride;     /* elements between kv heads' first rows */
    krn_kv_type kvt;
    int64_t past, S;        /* cached tokens, new rows */
    const float *qd, *kd, *vd; /* its first row of queries, keys, values */
    float *out, *qrot;      /* its first output row and rotated-query row */
    int64_t *pos;           /* [S] positions */
    bool prompt;
} gqa_seq;

/*
 * Fills the kernel calls of one sequence's rows: values stored (or rounded
 * into an fp16 or q8 cache), keys rotated on the way in (or stored as they are),
 * queries rotated, attention over the cache.
 */
static void seq_calls(eng_exec *x, const step *s, const gqa_dims *d, const gqa_seq *q, rows_call *vs, rows_call *ks,
                      rot_call *rk, rot_call *rq, gqa_call *ga)
{
    const gqa_params *g = &s->p.gqa;
    const krn_table *kt = &x->p->krn;
    const rt_val *cos = IN(x, s, 7), *sin = IN(x, s, 8);
    int64_t H = d->H, Nq = g->heads, Nkv = g->kv_heads;
    size_t tok_stride = krn_kv_row_elems(q->kvt, (size_t)H), esz = krn_kv_elem_bytes(q->kvt);
    int64_t kv_ld = g->packed ? d->W : Nkv * H;
    /* Element offset of the first new row in the cache; the kernels take typed bases. */
    size_t new_off = (size_t)q->past * tok_stride;
    void *kc_new = (uint8_t *)q->kc + new_off * esz, *vc_new = (uint8_t *)q->vc + new_off * esz;
    for (int64_t t = 0; t < q->S; t++)
        q->pos[t] = q->past + t;
    *vs = (rows_call){kt, {.x = q->vd, .x_tok_stride = (size_t)kv_ld, .x_head_stride = (size_t)H, .y = vc_new,
                           .y_tok_stride = tok_stride, .y_head_stride = q->head_stride, .n_tok = (size_t)q->S,
                           .n_heads = (size_t)Nkv, .n = (size_t)H, .y_type = q->kvt}};
    *rk = (rot_call){kt, {.x = q->kd, .y = kc_new, .x_tok_stride = (size_t)kv_ld, .x_head_stride = (size_t)H,
                          .y_tok_stride = tok_stride, .y_head_stride = q->head_stride, .n_tok = (size_t)q->S,
                          .n_heads = (size_t)Nkv, .head_dim = (size_t)H,
                          .rot_dim = g->rotary ? (size_t)(2 * cos->v.dims[1]) : 0,
                          .cos_cache = g->rotary ? cos->v.data : NULL, .sin_cache = g->rotary ? sin->v.data : NULL,
                          .cache_ld = g->rotary ? (size_t)cos->v.dims[1] : 0, .pos = q->pos, .y_type = q->kvt}};
    *rq = *rk;
    rq->a.x = q->qd;
    rq->a.y = q->qrot;
    rq->a.x_tok_stride = (size_t)d->W;
    rq->a.y_tok_stride = (size_t)(Nq * H);
    rq->a.y_head_stride = (size_t)H;
    rq->a.n_heads = (size_t)Nq;
    rq->a.y_type = KRN_KV_F32;
    *ks = *vs;
    ks->a.x = q->kd;
    ks->a.y = kc_new;
    *ga = (gqa_call){kt, {.q = q->qrot, .q_ld = (size_t)(Nq * H), .k_cache = q->kc, .v_cache = q->vc,
                          .kv_head_stride = q->head_stride, .kv_tok_stride = tok_stride, .out = q->out,
                          .out_ld = (size_t)(Nq * H), .seq = (size_t)q->S, .past = (size_t)q->past,
                          .n_heads = (size_t)Nq, .n_kv_heads = (size_t)Nkv, .head_dim = (size_t)H,
                          .scale = g->scale != 0.0f ? g->scale : 1.0f / sqrtf((float)H),
                          .local_window = -1, .softcap = 0.0f, .kv_type = q->kvt, .prompt = q->prompt}};
    x->kv_bytes_moved += 2 * (uint64_t)(q->S * Nkv) * (uint64_t)tok_stride * esz;
}

/* A decode row (one token of a generated id) is done in one pool run per sequence, or per batch. */
static bool is_decode(const gqa_seq *q)
{
    return q->S == 1 && !q->prompt;
}

static void decode_call(eng_exec *x, const step *s, const gqa_dims *d, const gqa_seq *q, gqa_decode_call *dc)
{
    rows_call vs, ks;
    rot_call rk, rq;
    seq_calls(x, s, d, q, &vs, &ks, &rk, &rq, &dc->ga);
    dc->vals = vs.a;
    dc->keys = ks.a;
    dc->rot_k = rk.a;
    dc->rot_q = rq.a;
    dc->rotary = s->p.gqa.rotary;
    dc->q = q->qd;
}

/* A prompt's (or a multi-row) sequence: stores, rotations, then attention, each split over the pool. */
static void run_rows(eng_exec *x, const step *s, const gqa_dims *d, const gqa_seq *q)
{
    const gqa_params *g = &s->p.gqa;
    int64_t S = q->S, H = d->H, Nq = g->heads, Nkv = g->kv_heads;
    rows_call vs, ks;
    rot_call rk, rq;
    gqa_call ga;
    seq_calls(x, s, d, q, &vs, &ks, &rk, &rq, &ga);
    plan_run_par(x, (size_t)(S * Nkv), 1, do_rows, &vs);
    if (g->rotary) {
        plan_run_par(x, (size_t)(S * Nkv), 1, do_rot, &rk);
        plan_run_par(x, (size_t)(S * Nq), 1, do_rot, &rq);
    } else {
        plan_run_par(x, (size_t)(S * Nkv), 1, do_rows, &ks);
        for (int64_t t = 0; t < S; t++)
            memcpy(q->qrot + t * Nq * H, q->qd + t * d->W, (uint64_t)(Nq * H) * sizeof(float));
    }
    /* Items are (kv head, token, head in group): an even split hands out whole kv groups. */
    plan_run_par(x, (size_t)(S * Nq), (size_t)(Nq / Nkv), do_gqa, &ga);
}

/* Checks a session cache binding for PAST + S tokens. */
static int check_binding(eng_exec *x, const step *s, const eng_kv_binding *kvb, int64_t past, int64_t S, int64_t H)
{
    if (!kvb->k || !kvb->v)
        STEP_FAIL(x, s, "no KV cache is bound for this attention node");
    if (past + S > kvb->capacity)
        STEP_FAIL(x, s, "%lld cached + %lld new tokens exceed the KV cache of %lld", (long long)past, (long long)S,
                  (long long)kvb->capacity);
    int64_t cap_elems, row = (int64_t)krn_kv_row_elems(kvb->type, (size_t)H);
    if (!ck_mul_i64(kvb->capacity, row, &cap_elems) || kvb->head_stride < cap_elems)
        STEP_FAIL(x, s, "KV cache head stride %lld is below %lld tokens x row of %lld", (long long)kvb->head_stride,
                  (long long)kvb->capacity, (long long)row);
    return 0;
}

static int check_rotary(eng_exec *x, const step *s, int64_t H, int64_t last)
{
    const rt_val *cos = IN(x, s, 7), *sin = IN(x, s, 8);
    if (!s->p.gqa.rotary)
        return 0;
    if (cos->v.rank != 2 || sin->v.rank != 2 || cos->v.dims[1] != sin->v.dims[1] || cos->v.dims[1] * 2 > H ||
        cos->v.dims[1] % 8 || cos->v.dtype != ENG_DT_FLOAT || sin->v.dtype != ENG_DT_FLOAT)
        STEP_FAIL(x, s, "cos_cache/sin_cache must be FLOAT [positions, rotary_dim/2] with rotary_dim <= head size");
    if (last >= cos->v.dims[0] || sin->v.dims[0] < cos->v.dims[0])
        STEP_FAIL(x, s, "position %lld is beyond the rotary cache (%lld rows)", (long long)last,
                  (long long)cos->v.dims[0]);
    return 0;
}

/* The calls of a batch's decode rows, done in one pool run: items are (sequence, query head). */
typedef struct gqa_batch_call {
    const gqa_decode_call *dc;
    size_t heads;
} gqa_batch_call;

static void do_gqa_batch(const void *c, size_t b, size_t e)
{
    const gqa_batch_call *bc = c;
    for (size_t i = b; i < e;) {
        size_t seq = i / bc->heads, h0 = i % bc->heads;
        size_t h1 = e - seq * bc->heads < bc->heads ? e - seq * bc->heads : bc->heads;
        do_gqa_decode(&bc->dc[seq], h0, h1);
        i = seq * bc->heads + h1;
    }
}

/*
 * A batched run (eng_exec_set_batch): each sequence's rows go to its own
 * cache. Prompt sequences run one after the other, each split over the
 * pool; the decode rows of all sequences then run in one pool run, split by
 * (sequence, kv group), so a step of many sessions waits once.
 */
static int run_gqa_batch(eng_exec *x, const step *s, const gqa_dims *d)
{
    const gqa_params *g = &s->p.gqa;
    const rt_val *q = IN(x, s, 0), *kin = IN(x, s, 1), *vin = IN(x, s, 2);
    rt_val *out = OUT(x, s, 0);
    int64_t H = d->H, Nq = g->heads, Nkv = g->kv_heads;
    int64_t rows = 0;
    for (size_t i = 0; i < x->n_batch; i++)
        rows += x->batch[i].n;
    if (rows != d->S)
        STEP_FAIL(x, s, "the batch's sequences hold %lld rows, the query %lld", (long long)rows, (long long)d->S);
    float *qrot = (float *)x->scratch;
    int64_t *pos = (int64_t *)(x->scratch + aligned((uint64_t)(d->S * Nq * H) * sizeof(float)));
    gqa_decode_call *dc = (gqa_decode_call *)(void *)((uint8_t *)pos + aligned((uint64_t)d->S * sizeof(int64_t)));
    const float *qd = q->v.data;
    const float *kd = g->packed ? qd + Nq * H : kin->v.data;
    const float *vd = g->packed ? qd + (Nq + Nkv) * H : vin->v.data;
    int64_t kv_ld = g->packed ? d->W : Nkv * H;
    size_t n_dec = 0;
    int64_t r0 = 0;
    for (size_t i = 0; i < x->n_batch; r0 += x->batch[i++].n) {
        const eng_batch_seq *bs = &x->batch[i];
        const eng_kv_binding *kvb = &bs->kv[g->index];
        if (check_binding(x, s, kvb, bs->past, bs->n, H) != 0 || check_rotary(x, s, H, bs->past + bs->n - 1) != 0)
            return -1;
        gqa_seq sq = {.kc = kvb->k, .vc = kvb->v, .head_stride = (size_t)kvb->head_stride,
                      .kvt = kvb->type, .past = bs->past, .S = bs->n,
                      .qd = qd + r0 * d->W, .kd = kd + r0 * kv_ld, .vd = vd + r0 * kv_ld,
                      .out = (float *)out->v.data + r0 * Nq * H, .qrot = qrot + r0 * Nq * H, .pos = pos + r0,
                      .prompt = bs->prompt};
        if (is_decode(&sq))
            decode_call(x, s, d, &sq, &dc[n_dec++]);
        else
            run_rows(x, s, d, &sq);
    }
    if (n_dec) {
        gqa_batch_call bc = {dc, (size_t)Nq};
        plan_run_par(x, n_dec * (size_t)Nq, (size_t)(Nq / Nkv), do_gqa_batch, &bc);
    }
    return 0;
}

static int run_gqa(eng_exec *x, const step *s)
{
    const gqa_params *g = &s->p.gqa;
    gqa_dims d;
    if (gqa_shapes(x, s, &d) != 0)
        return -1;
    if (x->n_batch)
        return run_gqa_batch(x, s, &d);
    const rt_val *q = IN(x, s, 0), *kin = IN(x, s, 1), *vin = IN(x, s, 2), *pk = IN(x, s, 3), *pv = IN(x, s, 4);
    const rt_val *seq = IN(x, s, 5);
    rt_val *out = OUT(x, s, 0), *prk = OUT(x, s, 1), *prv = OUT(x, s, 2);
    int64_t S = d.S, H = d.H, Nq = g->heads, Nkv = g->kv_heads;
    int64_t total = g->lowered ? d.T : (int64_t)((const int32_t *)seq->v.data)[0] + 1;
    bool first = S == d.T;
    int64_t past = first ? 0 : total - S;
    if (first && total != S)
        STEP_FAIL(x, s, "seqlens_k + 1 = %lld does not match the %lld prompt tokens (padding is not supported)",
                  (long long)total, (long long)S);
    if (!first && S > 1 && total != d.T)
        STEP_FAIL(x, s, "seqlens_k + 1 = %lld must equal total_sequence_length %lld", (long long)total, (long long)d.T);
    const eng_kv_binding *kvb = &x->kv[g->index];
    if (past < 0 || (!kvb->k && (past > d.P || past + S > d.present)))
        STEP_FAIL(x, s, "%lld cached tokens + %lld new do not fit past length %lld / present length %lld",
                  (long long)past, (long long)S, (long long)d.P, (long long)d.present);
    if (check_rotary(x, s, H, past + S - 1) != 0)
        return -1;
    if (kvb->k && check_binding(x, s, kvb, past, S, H) != 0)
        return -1;
    /* A session cache may hold fp16 or q8 (the tensor contract's present is always FLOAT). */
    krn_kv_type kvt = kvb->k ? kvb->type : KRN_KV_F32;
    uint64_t row = (uint64_t)H * sizeof(float);
    /* Session cache or present tensor, both [kv_head, token, head]: a kv
     * head's rows are contiguous, only the distance between heads differs. */
    size_t head_stride = kvb->k ? (size_t)kvb->head_stride : (size_t)(d.present * H);
    void *kc = kvb->k ? kvb->k : prk->v.data, *vc = kvb->k ? kvb->v : prv->v.data;
    /* Separate past and present buffers: copy the cached rows over (the
     * tensor contract, always fp32; a shared buffer already holds them). */
    const float *pkd = pk ? pk->v.data : NULL, *pvd = pv ? pv->v.data : NULL;
    for (int64_t h = 0; h < Nkv && !kvb->k; h++) {
        for (int c = 0; c < 2; c++) {
            float *dst = (float *)(c ? vc : kc) + h * d.present * H;
            const float *src = c ? pvd : pkd;
            if (src && src + h * d.P * H != dst && past) {
                memcpy(dst, src + h * d.P * H, (uint64_t)past * row);
                x->kv_bytes_moved += (uint64_t)past * row;
            }
            if ((const void *)src != (c ? vc : kc) && past + S < d.present)
                memset(dst + (past + S) * H, 0, (uint64_t)(d.present - past - S) * row);
        }
    }
    const float *qd = q->v.data;
    float *qrot = (float *)x->scratch;
    int64_t *pos = (int64_t *)(x->scratch + aligned((uint64_t)(S * Nq * H) * sizeof(float)));
    gqa_seq sq = {.kc = kc, .vc = vc, .head_stride = head_stride, .kvt = kvt,
                  .past = past, .S = S, .qd = qd, .kd = g->packed ? qd + Nq * H : kin->v.data,
                  .vd = g->packed ? qd + (Nq + Nkv) * H : vin->v.data, .out = out->v.data, .qrot = qrot,
                  .pos = pos, .prompt = x->prompt_rows};
    /*
     * A decode step stores its new row, rotates and attends inside one pool
     * run (do_gqa_decode), each participant for its own kv heads.
     */
    if (is_decode(&sq)) {
        gqa_decode_call dc;
        decode_call(x, s, &d, &sq, &dc);
        plan_run_par(x, (size_t)Nq, (size_t)(Nq / Nkv), do_gqa_decode, &dc);
        return 0;
    }
    run_rows(x, s, &d, &sq);
    return 0;
}

/* ---- lowered Attention (lower.c) ------------------------------------------------ */

int plan_prep_lowered_attention(plan_builder *b, step *s, int64_t heads, int64_t kv_heads, float scale,
                                const char *what)
{
    gqa_params *g = &s->p.gqa;
    s->op = &op_gqa;
    s->lowered = true;
    /* q, k and v are separate (never packed): the query's width is its own heads' */
    *g = (gqa_params){.index = b->p->n_gqa++, .heads = heads, .kv_heads = kv_heads, .width_heads = heads,
                      .scale = scale, .rotary = true, .lowered = true};
    if (heads <= 0 || kv_heads <= 0 || heads % kv_heads)
        PREP_FAIL(b, s, "%lld query heads are not a positive multiple of %lld kv heads", (long long)heads,
                  (long long)kv_heads);
    snprintf(s->kernel, sizeof s->kernel, "%s: %s + %s + %s", what, b->p->krn.kv_store.name, b->p->krn.rotary.name,
             b->p->krn.gqa.name);
    return 0;
}

/* ---- registry rows (op_registry.h) ---- */

/* key and value are absent with packed QKV, the past on a first call */
#define GQA_OPTIONAL ((1u << 1) | (1u << 2) | (1u << 3) | (1u << 4))

const op_def op_gqa = {
    .domain = OP_MS, .op = "GroupQueryAttention",
    .min_in = 7, .max_in = 16, .min_out = 3, .max_out = 4, .may_be_empty = GQA_OPTIONAL,
    .attrs = {{"num_heads", ENG_ATTR_INT, true}, {"kv_num_heads", ENG_ATTR_INT, true},
              {"scale", ENG_ATTR_FLOAT, false}, {"softcap", ENG_ATTR_FLOAT, false},
              {"local_window_size", ENG_ATTR_INT, false}, {"do_rotary", ENG_ATTR_INT, false},
              {"rotary_interleaved", ENG_ATTR_INT, false}, {"smooth_softmax", ENG_ATTR_INT, false},
              {"qk_output", ENG_ATTR_INT, false}, {"k_quant_type", ENG_ATTR_STRING, false},
              {"v_quant_type", ENG_ATTR_STRING, false}, {"kv_cache_bit_width", ENG_ATTR_INT, false}},
    .prepare = prep_gqa, .infer = infer_gqa, .run = run_gqa,
};
