/*
 * lower: the standard-ONNX contracts (design.md section 1) brought onto the
 * plan the ONNX Runtime GenAI form runs, by pattern recognition over the
 * graph before its nodes are bound:
 *
 *   UINT4 -> DequantizeLinear (axis 0, block 32) -> MatMul   the MatMulNBits
 *       kernels over the same codes, repacked like MatMulNBits' weights;
 *   UINT4 [V, D] -> DequantizeLinear (axis 1) -> Gather, and -> Transpose ->
 *       MatMul   one prepared copy: the LM head's MatMulNBits weights, from
 *       which the Gather dequantizes only the looked-up rows;
 *   MatMul with a constant FLOAT / BFLOAT16 weight (or its transpose)   the
 *       dense kernel reading it in place;
 *   RotaryEmbedding on q and k -> Attention (causal GQA, 4-D past/present),
 *       or their decompositions   the GroupQueryAttention step (rotary and
 *       KV append inside, session caches and batches as for GQA);
 *   the RMS norm decomposition   the RMSNorm step (RMSNormalization itself
 *       is bound by its registry row);
 *   Casts between FLOAT and BFLOAT16 at the graph's edges   gone: present
 *       and logits are written by their producers, the past read directly,
 *       cos/sin tables taken in FP32.
 *
 * Precision: the plan keeps every activation in FP32 and never rounds to
 * BF16 (a BF16 graph computes here as its FP32 carrier does); BF16 constants
 * are widened exactly; INT4 weights keep the int8-activation kernels of the
 * ORT form. A FLOAT -> BFLOAT16 -> FLOAT round trip, which exists only to
 * round, is refused.
 *
 * Only these exact patterns are recognized; a near miss is reported, one
 * line naming the node and what differs, and what is left of a pattern a
 * recognized anchor does not absorb is refused by the pattern-only ops'
 * registry rows, so nothing runs through an unverified path.
 *
 * Threads: called while a plan is built, on the building thread.
 */
#include "engine/plan_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>

typedef struct lower {
    plan_builder *b;
    eng_plan *p;
    const eng_graph *g;
    int *rd_start, *rd;       /* per value: the steps reading it (CSR) */
    int n_opset23, n_decomposed, n_qdq, n_bf16w, n_f32w;
    bool fp32_scales;
} lower;

/* ---- graph access ---- */

static const eng_node *prod(const lower *L, int v)
{
    if (v < 0 || L->g->values[v].kind != ENG_VALUE_NODE_OUTPUT)
        return NULL;
    return &L->g->nodes[L->g->values[v].index];
}

static step *step_of(const lower *L, const eng_node *n)
{
    return &L->p->steps[n - L->g->nodes];
}

static bool is(const eng_node *n, const char *op)
{
    return n && !*n->domain && !strcmp(n->op_type, op);
}

static int in(const eng_node *n, size_t i)
{
    return i < n->n_inputs ? n->input_values[i] : -1;
}

static int out(const eng_node *n, size_t i)
{
    return i < n->n_outputs ? n->output_values[i] : -1;
}

/* Readers of value v: steps, plus one for a graph output. */
static int n_readers(const lower *L, int v)
{
    return L->rd_start[v + 1] - L->rd_start[v] + (L->p->vals[v].graph_output ? 1 : 0);
}

static const eng_node *reader(const lower *L, int v, int i)
{
    return &L->g->nodes[L->rd[L->rd_start[v] + i]];
}

/* The one node reading v, or NULL. */
static const eng_node *sole_reader(const lower *L, int v)
{
    return v >= 0 && n_readers(L, v) == 1 && L->rd_start[v + 1] > L->rd_start[v] ? reader(L, v, 0) : NULL;
}

/* A constant tensor: an initializer, or a Constant node's value. */
static const eng_tensor *konst(const lower *L, int v)
{
    if (v < 0)
        return NULL;
    const eng_value *gv = &L->g->values[v];
    if (gv->kind == ENG_VALUE_INITIALIZER)
        return &L->p->inits[gv->index];
    return eng_node_constant(prod(L, v));
}

static bool konst_i64(const lower *L, int v, size_t n, const int64_t *want)
{
    const eng_tensor *t = konst(L, v);
    if (!t || t->dtype != ENG_DT_INT64 || t->rank > 1 || t->n_elems != n || !t->data)
        return false;
    for (size_t i = 0; i < n; i++) {
        int64_t x;
        memcpy(&x, (const int64_t *)t->data + i, sizeof x);
        if (x != want[i])
            return false;
    }
    return true;
}

#define KONST_I64(L, v, ...) \
    konst_i64(L, v, sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (const int64_t[]){__VA_ARGS__})

/* The value of a one-element FLOAT or BFLOAT16 tensor. */
static bool tensor_scalar(const eng_tensor *t, float *out)
{
    if (!t || t->n_elems != 1 || !t->data)
        return false;
    if (t->dtype == ENG_DT_FLOAT) {
        memcpy(out, t->data, sizeof *out);
        return true;
    }
    if (t->dtype == ENG_DT_BFLOAT16) {
        uint16_t h;
        memcpy(&h, t->data, sizeof h);
        uint32_t u = (uint32_t)h << 16;
        memcpy(out, &u, sizeof u);
        return true;
    }
    return false;
}

static bool konst_scalar(const lower *L, int v, float *out)
{
    return tensor_scalar(konst(L, v), out);
}

static bool attr_ints(const eng_node *n, const char *name, size_t cnt, const int64_t *want)
{
    const eng_attr *a = eng_node_attr(n, name);
    if (!a || a->type != ENG_ATTR_INTS || a->n_ints != cnt)
        return false;
    for (size_t i = 0; i < cnt; i++)
        if (a->ints[i] != want[i])
            return false;
    return true;
}

#define PERM(n, ...) \
    attr_ints(n, "perm", sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t), (const int64_t[]){__VA_ARGS__})

/* The other input of a two-input node given one of them, or -1. */
static int other(const eng_node *n, int v)
{
    return in(n, 0) == v ? in(n, 1) : in(n, 1) == v ? in(n, 0) : -1;
}

__attribute__((format(printf, 3, 4)))
static void fail(const lower *L, const eng_node *n, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    eng_diag_add(L->b->diag, "%s: node '%s' (%s): %s", L->g->dir, node_label(n), n->op_type, msg);
}

static void fold(lower *L, step *s, const char *into)
{
    s->op = &op_folded;
    s->lowered = true;
    snprintf(s->kernel, sizeof s->kernel, "folded into %s", into);
}

/* ---- constants and edges ---- */

static bool float_type(int32_t t)
{
    return t == ENG_DT_FLOAT || t == ENG_DT_BFLOAT16;
}

/* A Cast node converting to FLOAT or BFLOAT16. */
static bool float_cast(const eng_node *n)
{
    return is(n, "Cast") && float_type((int32_t)eng_node_attr_int(n, "to", 0));
}

/* The graph input a past-KV operand reads: itself, or through one Cast to BFLOAT16; -1 otherwise. */
static int past_input(const lower *L, int v)
{
    const eng_node *c = prod(L, v);
    if (float_cast(c))
        v = in(c, 0);
    return v >= 0 && L->g->values[v].kind == ENG_VALUE_INPUT ? v : -1;
}

/*
 * The graph output a present-KV or logits value leaves by: itself, or the
 * output of the one FLOAT Cast reading it (the BF16 graph's edge). The Cast
 * is folded and its output made the producer's (*cast gets its step); -1
 * when neither.
 */
static int graph_output_of(lower *L, int v, step **cast)
{
    *cast = NULL;
    if (v >= 0 && L->p->vals[v].graph_output)
        return v;
    const eng_node *c = sole_reader(L, v);
    if (!c || !float_cast(c) || eng_node_attr_int(c, "to", 0) != ENG_DT_FLOAT || !L->p->vals[out(c, 0)].graph_output)
        return -1;
    *cast = step_of(L, c);
    return out(c, 0);
}

/* Makes step s the producer of graph output go (written by slot `slot`), folding the Cast that wrote it. */
static void write_output(lower *L, step *s, int slot, int go, step *cast, const char *what)
{
    s->out[slot] = go;
    L->p->vals[go].def = (int)(s - L->p->steps);
    if (cast)
        fold(L, cast, what);
}

/*
 * A cos/sin table operand as the FLOAT table the rotary kernel reads: an
 * initializer (a BFLOAT16 one is widened later with the other constants), or
 * a Cast of one, whose output becomes that initializer's value. -1 if not.
 */
static int rotary_table(lower *L, int v)
{
    const eng_tensor *t = konst(L, v);
    if (t)
        return t->rank == 2 && float_type(t->dtype) ? v : -1;
    const eng_node *c = prod(L, v);
    if (!float_cast(c))
        return -1;
    int src = in(c, 0);
    t = konst(L, src);
    if (!t || t->rank != 2 || !float_type(t->dtype))
        return -1;
    /* the plan keeps FP32: the cast table is its source */
    val_plan *vp = &L->p->vals[v];
    vp->kind = PV_CONST;
    vp->def = -1;
    vp->cval = L->p->vals[src].cval;
    fold(L, step_of(L, c), "the rotary table it casts (kept in FP32)");
    return v;
}

/* ---- DequantizeLinear weights ---- */

/*
 * Checks DequantizeLinear node n against the contract (UINT4 codes, block
 * 32 along AXIS, FLOAT or BFLOAT16 scales and UINT4 zero points of the
 * blocks' shape, all constant) and describes it in *src with the weight's
 * output features along AXIS's other dimension. One line per difference.
 */
static bool dq_weight(lower *L, const eng_node *n, int64_t axis, q4_src *src)
{
    bool ok = true;
    const eng_tensor *q = konst(L, in(n, 0)), *s = konst(L, in(n, 1)), *z = konst(L, in(n, 2));
    int64_t a = eng_node_attr_int(n, "axis", 1), bs = eng_node_attr_int(n, "block_size", 0);
    if (!q || q->dtype != ENG_DT_UINT4 || q->rank != 2) {
        fail(L, n, "input 0 must be a UINT4 [rows, columns] constant (%s)", q ? eng_dtype_name(q->dtype) : "computed");
        return false;
    }
    if (a != axis && a != axis - 2) {
        fail(L, n, "axis = %lld; %s needs axis %lld (blocks along %s)", (long long)a,
             axis ? "the tied embedding" : "a MatMul weight", (long long)axis, axis ? "its rows" : "K");
        ok = false;
    }
    if (bs != 32) {
        fail(L, n, "block_size = %lld: only 32 is supported", (long long)bs);
        ok = false;
    }
    if (!s) {
        fail(L, n, "the scales are not a constant initializer");
        ok = false;
    } else if (!float_type(s->dtype)) {
        fail(L, n, "the scales are %s; FLOAT or BFLOAT16 expected", eng_dtype_name(s->dtype));
        ok = false;
    }
    if (in(n, 2) < 0) {
        fail(L, n, "the zero points are missing (the contract gives them explicitly)");
        ok = false;
    } else if (!z) {
        fail(L, n, "the zero points are not a constant initializer");
        ok = false;
    } else if (z->dtype != ENG_DT_UINT4) {
        fail(L, n, "the zero points are %s; UINT4 (the codes' type) expected", eng_dtype_name(z->dtype));
        ok = false;
    }
    int64_t od = eng_node_attr_int(n, "output_dtype", 0);
    if (od && s && od != s->dtype) {
        fail(L, n, "output_dtype = %lld differs from the scales' type", (long long)od);
        ok = false;
    }
    if (!ok)
        return false;
    /* axis 0: q [K, N], blocks [ceil(K/32), N]; axis 1: q [N, K], blocks [N, ceil(K/32)] */
    int64_t K = q->dims[axis], N = q->dims[1 - axis], kb = (K + 31) / 32;
    int64_t want[2] = {axis ? N : kb, axis ? kb : N};
    for (int i = 0; i < 2; i++) {
        const eng_tensor *t = i ? z : s;
        if (t->rank != 2 || t->dims[0] != want[0] || t->dims[1] != want[1]) {
            fail(L, n, "the %s must have shape [%lld, %lld]", i ? "zero points" : "scales", (long long)want[0],
                 (long long)want[1]);
            return false;
        }
    }
    if (K < 1 || N < 1 || !q->data || !s->data || !z->data) {
        fail(L, n, "an empty weight");
        return false;
    }
    *src = (q4_src){.q = q->data, .s = s->data, .s_dtype = s->dtype, .z = z->data, .n = (size_t)N, .k = (size_t)K,
                    .tensors = {q, s, z}};
    if (axis) {
        src->q_sn = (uint64_t)K, src->q_sk = 1;
        src->s_sn = src->z_sn = (uint64_t)kb, src->s_sb = src->z_sb = 1;
    } else {
        src->q_sn = 1, src->q_sk = (uint64_t)N;
        src->s_sn = src->z_sn = 1, src->s_sb = src->z_sb = (uint64_t)N;
    }
    src->zp_all_8 = true;
    for (uint64_t i = 0; i < z->n_elems && src->zp_all_8; i++)
        src->zp_all_8 = ((src->z[i / 2] >> (4 * (i & 1))) & 15) == 8;
    if (s->dtype == ENG_DT_FLOAT)
        L->fp32_scales = true;
    return true;
}

/* One lowered weight, kept with the plan (the packer reads it). */
static q4_src *keep_src(lower *L, const q4_src *src)
{
    q4_src *c = malloc(sizeof *c);
    if (!plan_own(L->p, c))
        return NULL;
    *c = *src;
    return c;
}

typedef struct pending { step *s; const q4_src *src; const char *what; } pending;

/*
 * A MatMul whose output leaves the graph through one FLOAT Cast (the BF16
 * graph's logits) writes the graph output itself, so that the runner's
 * last-row selection and greedy argmax, which look for the step producing
 * the logits, find the LM head.
 */
static void write_logits_directly(lower *L, step *s, const eng_node *mm)
{
    step *cast;
    int go = graph_output_of(L, out(mm, 0), &cast);
    if (go >= 0 && cast)
        write_output(L, s, 0, go, cast, "the MatMul (it writes the graph output directly)");
}

/*
 * Every DequantizeLinear: a projection weight (its one reader the B of a
 * MatMul), or the tied embedding (read by one Gather and one Transpose whose
 * one reader is the B of a MatMul). Anything else is reported.
 */
static void lower_dequantize(lower *L, pending *todo, size_t *n_todo, step **gathers, step **heads, size_t *n_tied)
{
    const eng_graph *g = L->g;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node *dq = &g->nodes[i];
        if (!is(dq, "DequantizeLinear"))
            continue;
        int w = out(dq, 0), nr = L->rd_start[w + 1] - L->rd_start[w];
        const eng_node *gather = NULL, *tr = NULL, *mm = NULL;
        int n_mm = 0, n_gather = 0, n_tr = 0, n_other = L->p->vals[w].graph_output ? 1 : 0;
        step_of(L, dq)->lowered = true; /* matched or reported here, never bound alone */
        fold(L, step_of(L, dq), "the step reading its weight");
        for (int r = 0; r < nr; r++) {
            const eng_node *u = reader(L, w, r);
            if (is(u, "MatMul") && in(u, 1) == w)
                mm = u, n_mm++;
            else if (is(u, "Gather") && in(u, 0) == w)
                gather = u, n_gather++;
            else if (is(u, "Transpose"))
                tr = u, n_tr++;
            else if (is(u, "MatMul"))
                fail(L, dq, "feeds node '%s' as the MatMul's A (input 0); a weight is its B (input 1)", node_label(u));
            else
                n_other++;
        }
        if (n_other || n_mm > 1 || n_gather > 1 || n_tr > 1 || (n_mm && (n_gather || n_tr))) {
            fail(L, dq, "is read by other nodes than one MatMul (a projection) or one Gather and one Transpose -> "
                        "MatMul (the tied embedding and LM head)");
            continue;
        }
        q4_src src;
        if (mm) {
            if (!dq_weight(L, dq, 0, &src))
                continue;
            const q4_src *kept = keep_src(L, &src);
            step *s = step_of(L, mm);
            s->op = &op_matmulnbits;
            s->p.mmnb.qdq = kept;
            todo[(*n_todo)++] = (pending){s, kept, "lowered DequantizeLinear -> MatMul"};
            L->n_qdq++;
            continue;
        }
        if (!gather || !tr) {
            if (gather || tr)
                fail(L, dq, "feeds %s without %s: the tied embedding must feed both the Gather and the LM head "
                            "(Transpose -> MatMul)", gather ? "a Gather" : "a Transpose",
                     gather ? "a Transpose -> MatMul" : "a Gather");
            continue;
        }
        const eng_node *head = sole_reader(L, out(tr, 0));
        if (!PERM(tr, 1, 0)) {
            fail(L, tr, "the tied embedding's Transpose must have perm [1, 0]");
            continue;
        }
        if (!is(head, "MatMul")) {
            fail(L, tr, "the transposed embedding must have one reader, the LM head MatMul");
            continue;
        }
        if (in(head, 1) != out(tr, 0)) {
            fail(L, head, "the transposed embedding is its A (input 0): a Transpose on the wrong side; the LM head "
                          "multiplies the hidden state by it (input 1)");
            continue;
        }
        int64_t gaxis = eng_node_attr_int(gather, "axis", 0);
        if (gaxis != 0 && gaxis != -2) {
            fail(L, gather, "axis = %lld; the embedding lookup gathers rows (axis 0)", (long long)gaxis);
            continue;
        }
        if (!dq_weight(L, dq, 1, &src))
            continue;
        const q4_src *kept = keep_src(L, &src);
        step *s = step_of(L, head);
        s->op = &op_matmulnbits;
        s->p.mmnb.qdq = kept;
        write_logits_directly(L, s, head);
        todo[(*n_todo)++] = (pending){s, kept, "lowered tied UINT4 embedding -> Transpose -> MatMul (LM head)"};
        gathers[*n_tied] = step_of(L, gather);
        heads[(*n_tied)++] = s;
        fold(L, step_of(L, tr), "the LM head MatMul (it reads the weight transposed)");
        L->n_qdq++;
    }
}

/* MatMuls whose B is a constant float weight, or the transpose of one (a tied float LM head). */
static void lower_float_weights(lower *L)
{
    for (size_t i = 0; i < L->g->n_nodes; i++) {
        const eng_node *mm = &L->g->nodes[i];
        step *s = step_of(L, mm);
        if (!is(mm, "MatMul") || s->lowered || s->op == &op_matmulnbits)
            continue;
        int b = in(mm, 1);
        const eng_tensor *w = konst(L, b);
        bool nk = false;
        const eng_node *tr = prod(L, b);
        if (!w && is(tr, "Transpose") && PERM(tr, 1, 0) && sole_reader(L, b) == mm) {
            w = konst(L, in(tr, 0));
            nk = true;
        }
        if (!w || w->rank != 2 || !float_type(w->dtype) || !w->data)
            continue;
        if (plan_prep_matmul_f(L->b, s, w, nk) == 0) {
            s->in[1] = -1; /* bound to the step, read in place */
            if (nk)
                fold(L, step_of(L, tr), "the MatMul (it reads the weight transposed)");
            write_logits_directly(L, s, mm);
        }
        if (w->dtype == ENG_DT_BFLOAT16)
            L->n_bf16w++;
        else
            L->n_f32w++;
    }
}

/* ---- positions, rotary, attention ---- */

/* Gather(Shape(graph input), 1) -> the input read; -1 if not that. */
static int shape_dim1(const lower *L, int v)
{
    const eng_node *ga = prod(L, v);
    if (!is(ga, "Gather") || eng_node_attr_int(ga, "axis", 0) != 0 || !KONST_I64(L, in(ga, 1), 1))
        return -1;
    const eng_node *sh = prod(L, in(ga, 0));
    if (!is(sh, "Shape") || eng_node_attr(sh, "start") || eng_node_attr(sh, "end"))
        return -1;
    int x = in(sh, 0);
    return x >= 0 && L->g->values[x].kind == ENG_VALUE_INPUT ? x : -1;
}

/*
 * The positions after the past: Range(T - S, T, 1) with T the attention
 * mask's length and S the ids' (Unsqueeze(.., [0]) when UNSQUEEZED). Sets
 * *T and *P (T - S); false if v is not that.
 */
static bool positions(const lower *L, int v, bool unsqueezed, int *T, int *P)
{
    const eng_node *n = prod(L, v);
    if (unsqueezed) {
        if (!is(n, "Unsqueeze") || !KONST_I64(L, in(n, 1), 0))
            return false;
        n = prod(L, in(n, 0));
    }
    if (!is(n, "Range") || !KONST_I64(L, in(n, 2), 1))
        return false;
    const eng_node *sub = prod(L, in(n, 0));
    if (!is(sub, "Sub") || in(sub, 0) != in(n, 1))
        return false;
    int mask = shape_dim1(L, in(sub, 0)), ids = shape_dim1(L, in(sub, 1));
    if (mask < 0 || ids < 0 || mask == ids)
        return false;
    *T = in(n, 1);
    *P = in(n, 0);
    return true;
}

/* What a rotary embedding of q or k was made of. */
typedef struct rot {
    int x;          /* the [B, S, heads*H] value before it */
    int cos, sin;   /* FLOAT tables [positions, H/2] */
    int T, P;       /* the positions' mask length and past */
    int64_t H;
} rot;

/* cos/sin at the positions, as the decomposition broadcasts them: Unsqueeze(Concat(Gather(table, pos) x2), [1]). */
static bool rot_table_at(lower *L, int v, int *table, int *T, int *P)
{
    const eng_node *u = prod(L, v);
    if (!is(u, "Unsqueeze") || !KONST_I64(L, in(u, 1), 1))
        return false;
    const eng_node *c = prod(L, in(u, 0));
    if (!is(c, "Concat") || c->n_inputs != 2 || in(c, 0) != in(c, 1) || eng_node_attr_int(c, "axis", 0) != -1)
        return false;
    const eng_node *ga = prod(L, in(c, 0));
    if (!is(ga, "Gather") || eng_node_attr_int(ga, "axis", 0) != 0 || !positions(L, in(ga, 1), false, T, P))
        return false;
    *table = rotary_table(L, in(ga, 0));
    return *table >= 0;
}

/*
 * q or k of an attention: RotaryEmbedding(x, cos, sin, positions) over
 * HEADS heads, or Reshape(x4 * cos + rotate_half(x4) * sin, [0, 0, HEADS*H])
 * with x4 = Reshape(x, [0, 0, HEADS, H]). False (reported) otherwise.
 */
static bool rotary_of(lower *L, const eng_node *att, int v, int64_t heads, rot *r)
{
    const eng_node *n = prod(L, v);
    if (is(n, "RotaryEmbedding")) {
        if (eng_node_attr_int(n, "interleaved", 0) != 0) {
            fail(L, n, "interleaved = 1 is not supported (Qwen3 rotates halves)");
            return false;
        }
        if (eng_node_attr_int(n, "num_heads", 0) != heads) {
            fail(L, n, "num_heads = %lld; the Attention reading it has %lld heads (3-D input expected)",
                 (long long)eng_node_attr_int(n, "num_heads", 0), (long long)heads);
            return false;
        }
        r->cos = rotary_table(L, in(n, 1));
        r->sin = rotary_table(L, in(n, 2));
        if (r->cos < 0 || r->sin < 0) {
            fail(L, n, "cos_cache and sin_cache must be constant tables [positions, rotary_dim / 2]");
            return false;
        }
        if (!positions(L, in(n, 3), true, &r->T, &r->P)) {
            fail(L, n, "position_ids must be the positions after the past: Unsqueeze(Range(T - S, T, 1), [0]) with "
                       "T the attention mask's and S the ids' length");
            return false;
        }
        int64_t rd = eng_node_attr_int(n, "rotary_embedding_dim", 0);
        const eng_view *cv = &L->p->vals[r->cos].cval;
        if (rd != 0 && rd != 2 * cv->dims[1]) {
            fail(L, n, "rotary_embedding_dim = %lld differs from the tables' %lld", (long long)rd,
                 (long long)(2 * cv->dims[1]));
            return false;
        }
        r->x = in(n, 0);
        r->H = 0;
        if (sole_reader(L, v) != att) {
            fail(L, n, "its output must have one reader, the Attention");
            return false;
        }
        L->n_opset23++;
        return true;
    }
    /* the decomposition, from its end */
    const eng_node *back = n, *add = is(back, "Reshape") ? prod(L, in(back, 0)) : NULL;
    if (!is(add, "Add")) {
        fail(L, att, "its input '%s' is neither a RotaryEmbedding nor the rotary decomposition", L->g->values[v].name);
        return false;
    }
    const eng_node *m1 = prod(L, in(add, 0)), *m2 = prod(L, in(add, 1));
    if (!is(m1, "Mul") || !is(m2, "Mul")) {
        fail(L, add, "the rotary decomposition adds x * cos and rotate_half(x) * sin");
        return false;
    }
    /* x4 * cos: the Mul one of whose inputs is a Reshape the other Mul's Concat also slices */
    const eng_node *cat = NULL;
    const eng_node *mx = NULL, *mr = NULL;
    for (int side = 0; side < 2 && !cat; side++) {
        const eng_node *a = side ? m2 : m1, *b2 = side ? m1 : m2;
        for (int k = 0; k < 2; k++)
            if (is(prod(L, in(b2, k)), "Concat")) {
                cat = prod(L, in(b2, k));
                mr = b2;
                mx = a;
            }
    }
    const eng_node *neg = cat && cat->n_inputs == 2 ? prod(L, in(cat, 0)) : NULL;
    const eng_node *s2 = is(neg, "Neg") ? prod(L, in(neg, 0)) : NULL, *s1 = cat ? prod(L, in(cat, 1)) : NULL;
    if (!is(s1, "Slice") || !is(s2, "Slice") || in(s1, 0) != in(s2, 0) || eng_node_attr_int(cat, "axis", 0) != -1) {
        fail(L, add, "the rotary decomposition's rotate_half must be Concat(Neg(x[..., H/2:]), x[..., :H/2]) on the "
                     "last axis");
        return false;
    }
    int x4 = in(s1, 0);
    const eng_node *r4 = prod(L, x4);
    const eng_tensor *shp = r4 && is(r4, "Reshape") ? konst(L, in(r4, 1)) : NULL;
    int64_t H = shp && shp->dtype == ENG_DT_INT64 && shp->n_elems == 4 ? ((const int64_t *)shp->data)[3] : 0;
    if (H <= 0 || !KONST_I64(L, in(r4, 1), 0, 0, heads, H) || !KONST_I64(L, in(back, 1), 0, 0, heads * H) ||
        other(mx, x4) < 0 || H % 2) {
        fail(L, add, "the rotary decomposition must work on Reshape(x, [0, 0, %lld, H]) and end in Reshape to "
                     "[0, 0, %lld * H]", (long long)heads, (long long)heads);
        return false;
    }
    if (!KONST_I64(L, in(s1, 1), 0) || !KONST_I64(L, in(s1, 2), H / 2) || !KONST_I64(L, in(s1, 3), -1) ||
        in(s1, 4) >= 0 || !KONST_I64(L, in(s2, 1), H / 2) || !KONST_I64(L, in(s2, 2), H) ||
        !KONST_I64(L, in(s2, 3), -1) || in(s2, 4) >= 0) {
        fail(L, add, "the rotary decomposition's slices must be [0, H/2) and [H/2, H) of the last axis");
        return false;
    }
    int T2, P2;
    if (!rot_table_at(L, other(mx, x4), &r->cos, &r->T, &r->P) ||
        !rot_table_at(L, other(mr, out(cat, 0)), &r->sin, &T2, &P2) || T2 != r->T || P2 != r->P) {
        fail(L, add, "cos and sin must be the tables gathered at the positions after the past, twice over "
                     "(Concat on the last axis), unsqueezed over the heads");
        return false;
    }
    r->x = in(r4, 0);
    r->H = H;
    L->n_decomposed++;
    return true;
}

/* The attention step over the recognized pieces; the anchor is S. */
static void bind_attention(lower *L, step *s, const rot *q, const rot *k, int v, int pk, int pv, int ok_v, int ov_v,
                           step *ck, step *cv, int64_t heads, int64_t kv_heads, float scale, const char *what)
{
    if (q->cos != k->cos || q->sin != k->sin || q->T != k->T) {
        fail(L, s->node, "q and k must be rotated with the same tables and positions");
        return;
    }
    int ins[9] = {q->x, k->x, v, pk, pv, -1, q->T, q->cos, q->sin};
    s->n_in = 9;
    memcpy(s->in, ins, sizeof ins);
    for (int i = s->n_out; i < 3; i++)
        s->out[i] = -1;
    s->n_out = 3;
    write_output(L, s, 1, ok_v, ck, "the attention step (it writes present directly)");
    write_output(L, s, 2, ov_v, cv, "the attention step (it writes present directly)");
    plan_prep_lowered_attention(L->b, s, heads, kv_heads, scale, what);
}

/* Attention (opset 23): causal GQA with 3-D q, k, v and 4-D past and present. */
static void lower_attention(lower *L, const eng_node *n)
{
    int64_t Nq = eng_node_attr_int(n, "q_num_heads", 0), Nkv = eng_node_attr_int(n, "kv_num_heads", 0);
    bool ok = true;
    if (Nq <= 0 || Nkv <= 0)
        fail(L, n, "q_num_heads and kv_num_heads are required (3-D q, k, v)"), ok = false;
    if (eng_node_attr_int(n, "is_causal", 0) != 1)
        fail(L, n, "is_causal must be 1"), ok = false;
    if (eng_node_attr_float(n, "softcap", 0.0f) != 0.0f)
        fail(L, n, "softcap is not supported"), ok = false;
    if (eng_node_attr_int(n, "qk_matmul_output_mode", 0) != 0 || (n->n_outputs > 3 && out(n, 3) >= 0))
        fail(L, n, "the qk_matmul output is not supported"), ok = false;
    int64_t sp = eng_node_attr_int(n, "softmax_precision", ENG_DT_FLOAT);
    if (sp != ENG_DT_FLOAT)
        fail(L, n, "softmax_precision = %lld; the softmax is computed in FLOAT", (long long)sp), ok = false;
    if (in(n, 3) >= 0)
        fail(L, n, "attn_mask is not supported (the causal mask is is_causal's)"), ok = false;
    if (in(n, 6) >= 0)
        fail(L, n, "nonpad_kv_seqlen is not supported"), ok = false;
    int pk = past_input(L, in(n, 4)), pv = past_input(L, in(n, 5));
    if (pk < 0 || pv < 0)
        fail(L, n, "past_key and past_value must be graph inputs (through a Cast to BFLOAT16 at most)"), ok = false;
    step *ck, *cv;
    int okv = graph_output_of(L, out(n, 1), &ck), ovv = graph_output_of(L, out(n, 2), &cv);
    if (okv < 0 || ovv < 0)
        fail(L, n, "present_key and present_value must be graph outputs (through a Cast to FLOAT at most)"), ok = false;
    rot q, k;
    if (!ok || !rotary_of(L, n, in(n, 0), Nq, &q) || !rotary_of(L, n, in(n, 1), Nkv, &k))
        return;
    float scale = eng_node_attr_float(n, "scale", 0.0f);
    bind_attention(L, step_of(L, n), &q, &k, in(n, 2), pk, pv, okv, ovv, ck, cv, Nq, Nkv, scale,
                   "lowered RotaryEmbedding -> Attention");
    L->n_opset23++;
}

/* Reshape(x, [0, 0, heads, H]) -> Transpose [0, 2, 1, 3] concatenated after the past: the present of k or v. */
static bool kv_concat(lower *L, const eng_node *cat, int64_t Nkv, int64_t H, int *pre, int *past)
{
    if (!is(cat, "Concat") || cat->n_inputs != 2 || eng_node_attr_int(cat, "axis", 0) != 2)
        return false;
    *past = past_input(L, in(cat, 0));
    const eng_node *t = prod(L, in(cat, 1)), *r = t ? prod(L, in(t, 0)) : NULL;
    if (*past < 0 || !is(t, "Transpose") || !PERM(t, 0, 2, 1, 3) || !is(r, "Reshape") ||
        !KONST_I64(L, in(r, 1), 0, 0, Nkv, H))
        return false;
    *pre = in(r, 0);
    return true;
}

/*
 * The attention decomposition, anchored on its Softmax: scores of queries
 * grouped by kv head, [B, Nkv, G, S, H], against the keys [B, Nkv, 1, H, T]
 * (the present concatenated after the past), scaled, plus the causal mask,
 * Softmax, times the values, back to [B, S, Nq*H].
 */
static void lower_attention_decomposed(lower *L, const eng_node *sm)
{
    const char *shape = "the attention decomposition (MatMul(q, k^T) * scale + causal mask -> Softmax -> "
                        "MatMul(., v)) differs";
    if (eng_node_attr_int(sm, "axis", -1) != -1) {
        fail(L, sm, "axis must be -1");
        return;
    }
    const eng_node *add = prod(L, in(sm, 0)), *mv = sole_reader(L, out(sm, 0));
    const eng_node *mul = NULL, *tri = NULL;
    for (int k = 0; add && is(add, "Add") && k < 2; k++) {
        if (is(prod(L, in(add, k)), "Mul"))
            mul = prod(L, in(add, k));
        if (is(prod(L, in(add, k)), "Trilu"))
            tri = prod(L, in(add, k));
    }
    const eng_node *qk = NULL;
    float scale = 0.0f;
    for (int k = 0; mul && k < 2; k++)
        if (is(prod(L, in(mul, k)), "MatMul") && konst_scalar(L, in(mul, 1 - k), &scale))
            qk = prod(L, in(mul, k));
    const eng_node *tail = mv ? sole_reader(L, out(mv, 0)) : NULL, *fin = tail ? sole_reader(L, out(tail, 0)) : NULL;
    if (!qk || !tri || !is(mv, "MatMul") || in(mv, 0) != out(sm, 0) || !is(tail, "Transpose") ||
        !PERM(tail, 0, 3, 1, 2, 4) || !is(fin, "Reshape")) {
        fail(L, sm, "%s", shape);
        return;
    }
    /* queries */
    const eng_node *q5 = prod(L, in(qk, 0)), *qr = q5 ? prod(L, in(q5, 0)) : NULL;
    const eng_tensor *qs = qr && is(qr, "Reshape") ? konst(L, in(qr, 1)) : NULL;
    if (!is(q5, "Transpose") || !PERM(q5, 0, 2, 3, 1, 4) || !qs || qs->dtype != ENG_DT_INT64 || qs->n_elems != 5) {
        fail(L, qk, "the queries must be Reshape(q, [0, 0, kv_heads, group, H]) -> Transpose [0, 2, 3, 1, 4]");
        return;
    }
    const int64_t *qd = qs->data;
    int64_t Nkv = qd[2], G = qd[3], H = qd[4], Nq = Nkv * G;
    if (qd[0] != 0 || qd[1] != 0 || Nkv <= 0 || G <= 0 || H <= 0 || !KONST_I64(L, in(fin, 1), 0, 0, Nq * H)) {
        fail(L, qr, "the queries' shape must be [0, 0, kv_heads, group, H] and the output's [0, 0, heads * H]");
        return;
    }
    /* keys and values: the present, unsqueezed over the group */
    const eng_node *kt = prod(L, in(qk, 1)), *ku = kt ? prod(L, in(kt, 0)) : NULL;
    const eng_node *vu = prod(L, in(mv, 1));
    if (!is(kt, "Transpose") || !PERM(kt, 0, 1, 2, 4, 3) || !is(ku, "Unsqueeze") || !KONST_I64(L, in(ku, 1), 2) ||
        !is(vu, "Unsqueeze") || !KONST_I64(L, in(vu, 1), 2)) {
        fail(L, qk, "the keys must be Transpose(Unsqueeze(present_key, [2]), [0, 1, 2, 4, 3]) and the values "
                    "Unsqueeze(present_value, [2])");
        return;
    }
    const eng_node *kc = prod(L, in(ku, 0)), *vc = prod(L, in(vu, 0));
    int kpre, vpre, pk, pv;
    if (!kv_concat(L, kc, Nkv, H, &kpre, &pk) || !kv_concat(L, vc, Nkv, H, &vpre, &pv)) {
        fail(L, qk, "the present must be Concat(past, Transpose(Reshape(x, [0, 0, kv_heads, H]), [0, 2, 1, 3]), "
                    "axis 2), the past a graph input");
        return;
    }
    /* the present leaves the graph: directly, or through one Cast (and feeds the group's Unsqueeze) */
    step *ck = NULL, *cv = NULL;
    int okv = -1, ovv = -1;
    for (int which = 0; which < 2; which++) {
        const eng_node *c = which ? vc : kc, *u = which ? vu : ku;
        int v = out(c, 0), go = -1;
        step *cast = NULL;
        if (L->p->vals[v].graph_output && n_readers(L, v) == 2)
            go = v;
        for (int r = 0; go < 0 && r < L->rd_start[v + 1] - L->rd_start[v] && n_readers(L, v) == 2; r++) {
            const eng_node *x = reader(L, v, r);
            if (x != u && float_cast(x) && eng_node_attr_int(x, "to", 0) == ENG_DT_FLOAT &&
                L->p->vals[out(x, 0)].graph_output) {
                go = out(x, 0);
                cast = step_of(L, x);
            }
        }
        if (go < 0) {
            fail(L, c, "the present must be read by the attention and leave the graph (through a Cast to FLOAT "
                       "at most), nothing else");
            return;
        }
        if (which)
            ovv = go, cv = cast;
        else
            okv = go, ck = cast;
    }
    rot q, k;
    if (!rotary_of(L, sm, in(qr, 0), Nq, &q) || !rotary_of(L, sm, kpre, Nkv, &k))
        return;
    if ((q.H && q.H != H) || (k.H && k.H != H)) {
        fail(L, sm, "the rotary head size differs from the attention's %lld", (long long)H);
        return;
    }
    /* the causal mask: -inf where key j > past + query i, i.e. Trilu(-inf [S, T], past + 1, upper) */
    const eng_node *cs = prod(L, in(tri, 0)), *kadd = prod(L, in(tri, 1));
    const eng_attr *fill = cs && is(cs, "ConstantOfShape") ? eng_node_attr(cs, "value") : NULL;
    float fv = 0.0f;
    bool neg_inf = fill && tensor_scalar(fill->t, &fv) && isinf(fv) && fv < 0;
    const eng_node *st = cs ? prod(L, in(cs, 0)) : NULL;
    const eng_node *su = st && is(st, "Concat") && st->n_inputs == 2 ? prod(L, in(st, 0)) : NULL;
    const eng_node *tu = st && is(st, "Concat") && st->n_inputs == 2 ? prod(L, in(st, 1)) : NULL;
    bool mask_ok = eng_node_attr_int(tri, "upper", 1) == 1 && neg_inf && is(kadd, "Add") &&
                   ((in(kadd, 0) == q.P && KONST_I64(L, in(kadd, 1), 1)) ||
                    (in(kadd, 1) == q.P && KONST_I64(L, in(kadd, 0), 1))) &&
                   is(su, "Unsqueeze") && is(tu, "Unsqueeze") && KONST_I64(L, in(su, 1), 0) &&
                   KONST_I64(L, in(tu, 1), 0) && in(tu, 0) == q.T && eng_node_attr_int(st, "axis", 0) == 0 &&
                   is(prod(L, q.P), "Sub") && in(prod(L, q.P), 1) == in(su, 0);
    if (!mask_ok) {
        fail(L, tri, "the causal mask must be Trilu(ConstantOfShape([S, T], -inf), past + 1, upper = 1) over the "
                     "positions' S, T and past");
        return;
    }
    bind_attention(L, step_of(L, fin), &q, &k, vpre, pk, pv, okv, ovv, ck, cv, Nq, Nkv, scale,
                   "lowered attention decomposition (rotary, MatMul, Softmax, MatMul)");
    /* the concatenations' outputs are graph outputs the attention step now writes */
    fold(L, step_of(L, kc), "the attention step (it writes present directly)");
    fold(L, step_of(L, vc), "the attention step (it writes present directly)");
    L->n_decomposed++;
}

/* ---- norms ---- */

/* Mul(Div(x, Sqrt(Add(ReduceMean(Pow(x, 2), [-1]), eps))), gamma): the RMS norm over the last axis. */
static void lower_norm_decomposed(lower *L, const eng_node *mul)
{
    for (int side = 0; side < 2; side++) {
        const eng_node *div = prod(L, in(mul, side));
        const eng_tensor *gamma = konst(L, in(mul, 1 - side));
        if (!is(div, "Div") || !gamma || gamma->rank != 1 || !float_type(gamma->dtype))
            continue;
        int x = in(div, 0);
        const eng_node *sq = prod(L, in(div, 1)), *ad = sq ? prod(L, in(sq, 0)) : NULL;
        if (!is(sq, "Sqrt") || !is(ad, "Add"))
            continue;
        float eps = 0.0f, two = 0.0f;
        const eng_node *rm = NULL;
        for (int k = 0; k < 2; k++)
            if (is(prod(L, in(ad, k)), "ReduceMean") && konst_scalar(L, in(ad, 1 - k), &eps))
                rm = prod(L, in(ad, k));
        const eng_node *pw = rm ? prod(L, in(rm, 0)) : NULL;
        if (!rm || !is(pw, "Pow") || in(pw, 0) != x)
            continue;
        if (!konst_scalar(L, in(pw, 1), &two) || two != 2.0f) {
            fail(L, pw, "the RMS norm decomposition squares: the exponent must be the constant 2");
            return;
        }
        if (!KONST_I64(L, in(rm, 1), -1) || eng_node_attr_int(rm, "keepdims", 1) != 1 ||
            eng_node_attr_int(rm, "noop_with_empty_axes", 0) != 0) {
            fail(L, rm, "the RMS norm decomposition averages over the last axis: axes [-1], keepdims 1");
            return;
        }
        step *s = step_of(L, mul);
        s->op = &op_sln;
        s->lowered = true;
        s->in[0] = x;
        s->in[1] = in(mul, 1 - side);
        s->n_in = 2;
        s->p.norm.axis = -1;
        s->p.norm.eps = eps;
        snprintf(s->kernel, sizeof s->kernel, "lowered RMS norm decomposition: %s", L->p->krn.rmsnorm.name);
        L->n_decomposed++;
        return;
    }
}

/* ---- driver ---- */

static const char *form(const lower *L)
{
    if (L->n_opset23 && L->n_decomposed)
        return "opset 23 ops and decompositions";
    return L->n_decomposed ? "decomposed" : "opset 23 ops";
}

/* Each value's reading nodes, a node reading it twice counted once. */
static bool build_readers(lower *L)
{
    const eng_graph *g = L->g;
    size_t nv = g->n_values, total = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        total += g->nodes[i].n_inputs;
    L->rd_start = calloc(nv + 2, sizeof *L->rd_start);
    L->rd = calloc(total + 1, sizeof *L->rd);
    int *fill = calloc(nv + 1, sizeof *fill);
    bool ok = L->rd_start && L->rd && fill;
    for (int pass = 0; ok && pass < 2; pass++) {
        for (size_t i = 0; i < g->n_nodes; i++) {
            const eng_node *n = &g->nodes[i];
            for (size_t j = 0; j < n->n_inputs; j++) {
                int v = n->input_values[j];
                bool seen = false;
                for (size_t k = 0; k < j; k++)
                    seen |= n->input_values[k] == v;
                if (v < 0 || seen)
                    continue;
                if (pass)
                    L->rd[L->rd_start[v] + fill[v]++] = (int)i;
                else
                    L->rd_start[v + 1]++;
            }
        }
        for (size_t v = 0; !pass && v < nv; v++)
            L->rd_start[v + 1] += L->rd_start[v];
    }
    free(fill);
    return ok;
}

void plan_lower(plan_builder *b)
{
    eng_plan *p = b->p;
    const eng_graph *g = p->g;
    lower L = {.b = b, .p = p, .g = g};
    bool ms = false, std_ops = false;
    for (size_t i = 0; i < g->n_nodes; i++) {
        ms |= !!*g->nodes[i].domain;
        std_ops |= is(&g->nodes[i], "DequantizeLinear") || is(&g->nodes[i], "MatMul") ||
                   is(&g->nodes[i], "RMSNormalization") || is(&g->nodes[i], "Attention");
    }
    /* a FLOAT -> BFLOAT16 -> FLOAT round trip rounds on purpose: refused, not run as an identity */
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node *n = &g->nodes[i], *c = prod(&L, in(n, 0));
        if (float_cast(n) && float_cast(c) && eng_node_attr_int(c, "to", 0) == ENG_DT_BFLOAT16 &&
            eng_node_attr_int(n, "to", 0) == ENG_DT_FLOAT)
            fail(&L, n, "with '%s' it rounds to BFLOAT16 and back; the plan keeps FP32 and does not round",
                 node_label(c));
    }
    if (!std_ops) {
        snprintf(p->contract, sizeof p->contract, "%s", ms ? "qwen3-ort-int4" : "unrecognized");
        return;
    }
    if (!build_readers(&L)) {
        eng_diag_add(b->diag, "%s: out of memory lowering the graph", g->dir);
        goto out;
    }
    pending *todo = calloc(g->n_nodes + 1, sizeof *todo);
    step **gathers = calloc(g->n_nodes + 1, sizeof *gathers), **heads = calloc(g->n_nodes + 1, sizeof *heads);
    size_t n_todo = 0, n_tied = 0;
    if (!todo || !gathers || !heads) {
        eng_diag_add(b->diag, "%s: out of memory lowering the graph", g->dir);
        free(todo);
        free(gathers);
        free(heads);
        goto out;
    }
    lower_dequantize(&L, todo, &n_todo, gathers, heads, &n_tied);
    /* every lowered weight is known before the first is sized and packed, in step order */
    for (size_t i = 0; i < g->n_nodes; i++)
        for (size_t t = 0; t < n_todo; t++)
            if (todo[t].s == &p->steps[i] && plan_prep_q4(b, todo[t].s, todo[t].src, todo[t].what) == 0)
                todo[t].s->in[1] = -1;
    for (size_t t = 0; t < n_tied; t++) {
        step *s = gathers[t];
        s->op = &op_gather_q4;
        s->lowered = true;
        s->p.gq4.head = heads[t];
        s->in[0] = -1;
        snprintf(s->kernel, sizeof s->kernel, "lowered DequantizeLinear -> Gather: the looked-up rows dequantized "
                                              "from the LM head's weights");
    }
    free(todo);
    free(gathers);
    free(heads);
    lower_float_weights(&L);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const eng_node *n = &g->nodes[i];
        if (is(n, "Attention"))
            lower_attention(&L, n);
        else if (is(n, "Softmax"))
            lower_attention_decomposed(&L, n);
        else if (is(n, "Mul") && !p->steps[i].lowered)
            lower_norm_decomposed(&L, n);
        else if (is(n, "RMSNormalization"))
            L.n_opset23++;
    }
    const char *name = L.n_qdq ? "qwen3-int4-qdq" : L.n_bf16w ? "qwen3-float" : L.n_f32w ? "qwen3-float32"
                                                                                     : "unrecognized";
    snprintf(p->contract, sizeof p->contract, "%s%s (%s)", name, L.n_qdq && L.fp32_scales ? ", FP32 carrier" : "",
             form(&L));
out:
    free(L.rd_start);
    free(L.rd);
}

/* ---- what the patterns leave ---- */

void plan_drop_unread(eng_plan *p)
{
    size_t nv = p->g->n_values;
    int *reads = calloc(nv + 1, sizeof *reads);
    if (!reads)
        return; /* nothing dropped: every step is still checked and bound */
    for (size_t i = 0; i < p->n_steps; i++)
        for (int k = 0; k < p->steps[i].n_in && p->steps[i].op != &op_folded; k++)
            if (p->steps[i].in[k] >= 0)
                reads[p->steps[i].in[k]]++;
    for (size_t i = p->n_steps; i-- > 0;) {
        step *s = &p->steps[i];
        if (s->op == &op_folded)
            continue;
        bool used = false;
        for (int k = 0; k < s->n_out && !used; k++)
            used = s->out[k] >= 0 && (reads[s->out[k]] || p->vals[s->out[k]].graph_output);
        if (used || !s->n_out)
            continue;
        bool any = false;
        for (int k = 0; k < s->n_out; k++)
            any |= s->out[k] >= 0;
        if (!any)
            continue;
        s->op = &op_folded;
        s->lowered = true;
        snprintf(s->kernel, sizeof s->kernel, "folded away (nothing reads it once the patterns are lowered)");
        for (int k = 0; k < s->n_in; k++)
            if (s->in[k] >= 0)
                reads[s->in[k]]--;
    }
    free(reads);
}

bool plan_widen_constants(eng_plan *p)
{
    for (size_t i = 0; i < p->n_steps; i++) {
        const step *s = &p->steps[i];
        if (!s->op || s->op == &op_folded)
            continue;
        for (int k = 0; k < s->n_in; k++) {
            int v = s->in[k];
            /* a Gather widens the rows it looks up itself */
            if (v < 0 || p->vals[v].kind != PV_CONST || p->vals[v].cval.dtype != ENG_DT_BFLOAT16 ||
                (k == 0 && s->op == &op_gather))
                continue;
            eng_view *c = &p->vals[v].cval;
            uint64_t n = eng_view_numel(c);
            float *f = malloc(n * sizeof *f + 1);
            if (!plan_own(p, f))
                return false;
            for (uint64_t j = 0; j < n; j++) {
                uint16_t h;
                memcpy(&h, (const uint16_t *)c->data + j, sizeof h);
                uint32_t u = (uint32_t)h << 16;
                memcpy(&f[j], &u, sizeof u);
            }
            c->data = f;
            c->dtype = ENG_DT_FLOAT;
            p->prepared_bytes += n * sizeof *f;
        }
    }
    return true;
}

/* ---- the standard ops' registry rows ---- */

/*
 * What a node of a pattern-only op that no recognized pattern absorbed is
 * refused with: these ops run only as parts of the patterns above.
 */
static int prep_pattern_only(plan_builder *b, step *s)
{
    const char *op = s->node->op_type, *why;
    if (!strcmp(op, "MatMul"))
        why = "its B is neither a DequantizeLinear weight, a constant float weight, nor part of a recognized "
              "attention decomposition";
    else if (!strcmp(op, "RotaryEmbedding"))
        why = "RotaryEmbedding is supported on the q and k of a recognized Attention only";
    else if (!strcmp(op, "DequantizeLinear") || !strcmp(op, "Attention"))
        why = "not part of a recognized pattern";
    else
        why = "supported only inside a recognized RMS norm, rotary or attention decomposition, its positions or "
              "its causal mask";
    PREP_FAIL(b, s, "%s", why);
}

#define PATTERN_ONLY .prepare = prep_pattern_only, .infer = NULL, .run = NULL

const op_def op_dequantize = {
    .domain = "", .op = "DequantizeLinear", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
    .attrs = {{"axis", ENG_ATTR_INT, false}, {"block_size", ENG_ATTR_INT, false},
              {"output_dtype", ENG_ATTR_INT, false}},
    PATTERN_ONLY,
};
const op_def op_matmul = {
    .domain = "", .op = "MatMul", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, PATTERN_ONLY,
};
const op_def op_transpose = {
    .domain = "", .op = "Transpose", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .attrs = {{"perm", ENG_ATTR_INTS, false}}, PATTERN_ONLY,
};
const op_def op_rotary = {
    .domain = "", .op = "RotaryEmbedding", .min_in = 3, .max_in = 4, .min_out = 1, .max_out = 1,
    .attrs = {{"interleaved", ENG_ATTR_INT, false}, {"num_heads", ENG_ATTR_INT, false},
              {"rotary_embedding_dim", ENG_ATTR_INT, false}},
    PATTERN_ONLY,
};
const op_def op_attention = {
    .domain = "", .op = "Attention", .min_in = 3, .max_in = 7, .min_out = 1, .max_out = 4,
    .attrs = {{"is_causal", ENG_ATTR_INT, false}, {"kv_num_heads", ENG_ATTR_INT, false},
              {"q_num_heads", ENG_ATTR_INT, false}, {"qk_matmul_output_mode", ENG_ATTR_INT, false},
              {"scale", ENG_ATTR_FLOAT, false}, {"softcap", ENG_ATTR_FLOAT, false},
              {"softmax_precision", ENG_ATTR_INT, false}},
    PATTERN_ONLY,
};
const op_def op_reduce_mean = {
    .domain = "", .op = "ReduceMean", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = {{"keepdims", ENG_ATTR_INT, false}, {"noop_with_empty_axes", ENG_ATTR_INT, false}}, PATTERN_ONLY,
};
const op_def op_pow = {.domain = "", .op = "Pow", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, PATTERN_ONLY};
const op_def op_sqrt = {.domain = "", .op = "Sqrt", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, PATTERN_ONLY};
const op_def op_div = {.domain = "", .op = "Div", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, PATTERN_ONLY};
const op_def op_neg = {.domain = "", .op = "Neg", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, PATTERN_ONLY};
const op_def op_slice = {.domain = "", .op = "Slice", .min_in = 3, .max_in = 5, .min_out = 1, .max_out = 1, PATTERN_ONLY};
const op_def op_concat = {
    .domain = "", .op = "Concat", .min_in = 1, .max_in = 64, .min_out = 1, .max_out = 1,
    .attrs = {{"axis", ENG_ATTR_INT, true}}, PATTERN_ONLY,
};
const op_def op_softmax = {
    .domain = "", .op = "Softmax", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .attrs = {{"axis", ENG_ATTR_INT, false}}, PATTERN_ONLY,
};
const op_def op_unsqueeze = {
    .domain = "", .op = "Unsqueeze", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, PATTERN_ONLY,
};
const op_def op_range = {.domain = "", .op = "Range", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1, PATTERN_ONLY};
const op_def op_constant_of_shape = {
    .domain = "", .op = "ConstantOfShape", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .attrs = {{"value", ENG_ATTR_TENSOR, false}}, PATTERN_ONLY,
};
const op_def op_trilu = {
    .domain = "", .op = "Trilu", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
    .attrs = {{"upper", ENG_ATTR_INT, false}}, PATTERN_ONLY,
};

/* A step some pattern absorbed, or whose result nobody reads. */
const op_def op_folded = {.domain = "", .op = "(folded)"};
