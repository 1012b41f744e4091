/*
 * geometry: derives the model's shape from graph structure (see geometry.h).
 * Read-only over an eng_graph; safe from any thread.
 */
#include "engine/geometry.h"

#include <string.h>

static bool is_op(const eng_node *n, const char *domain, const char *op)
{
    return !strcmp(n->domain, domain) && !strcmp(n->op_type, op);
}

const char *eng_weight_role_name(eng_weight_role r)
{
    switch (r) {
    case ENG_ROLE_INT4_WEIGHT: return "int4_weights";
    case ENG_ROLE_SCALES: return "scales";
    case ENG_ROLE_ZERO_POINTS: return "zero_points";
    case ENG_ROLE_EMBEDDING: return "embedding";
    case ENG_ROLE_NORM: return "norm_weights";
    case ENG_ROLE_ROTARY: return "rotary_caches";
    case ENG_ROLE_FLOAT_WEIGHT: return "float_weights";
    default: return "other";
    }
}

/* The first node (in topological order) with the given op that reads value v
 * as any of its inputs, or NULL. */
static const eng_node *consumer(const eng_graph *g, int v, const char *domain, const char *op)
{
    if (v < 0)
        return NULL;
    for (size_t k = 0; k < g->n_nodes; k++) {
        const eng_node *n = &g->nodes[k];
        if (!is_op(n, domain, op))
            continue;
        for (size_t j = 0; j < n->n_inputs; j++)
            if (n->input_values[j] == v)
                return n;
    }
    return NULL;
}

eng_weight_role eng_initializer_role(const eng_graph *g, size_t i)
{
    int v = eng_graph_value(g, g->inits[i].name);
    if (v < 0)
        return ENG_ROLE_OTHER;
    /* The first consumer decides: writers never share a weight across roles. */
    for (size_t k = 0; k < g->n_nodes; k++) {
        const eng_node *n = &g->nodes[k];
        for (size_t j = 0; j < n->n_inputs; j++) {
            if (n->input_values[j] != v)
                continue;
            if (is_op(n, "com.microsoft", "MatMulNBits")) {
                if (j == 1) return ENG_ROLE_INT4_WEIGHT;
                if (j == 2) return ENG_ROLE_SCALES;
                if (j == 3) return ENG_ROLE_ZERO_POINTS;
            } else if (is_op(n, "", "Gather") && j == 0 && g->inits[i].dtype == ENG_DT_FLOAT) {
                return ENG_ROLE_EMBEDDING;
            } else if (is_op(n, "com.microsoft", "GatherBlockQuantized") && j != 1) {
                return j == 0 ? ENG_ROLE_INT4_WEIGHT : j == 2 ? ENG_ROLE_SCALES : ENG_ROLE_ZERO_POINTS;
            } else if (is_op(n, "", "Reshape") && j == 0 && n->n_outputs &&
                       consumer(g, n->output_values[0], "com.microsoft", "GatherBlockQuantized")) {
                return ENG_ROLE_INT4_WEIGHT; /* the LM head's codes, viewed as the tied embedding's table */
            } else if ((is_op(n, "", "SimplifiedLayerNormalization") && j == 1) ||
                       (is_op(n, "com.microsoft", "SkipSimplifiedLayerNormalization") && j == 2)) {
                return ENG_ROLE_NORM;
            } else if (is_op(n, "com.microsoft", "GroupQueryAttention") && (j == 7 || j == 8)) {
                return ENG_ROLE_ROTARY;
            } else if (is_op(n, "", "DequantizeLinear")) {
                return j == 0 ? ENG_ROLE_INT4_WEIGHT : j == 1 ? ENG_ROLE_SCALES : ENG_ROLE_ZERO_POINTS;
            } else if (is_op(n, "", "Gather") && j == 0 && g->inits[i].dtype == ENG_DT_BFLOAT16) {
                return ENG_ROLE_EMBEDDING;
            } else if ((is_op(n, "", "MatMul") && j == 1) || (is_op(n, "", "Transpose") && g->inits[i].rank == 2)) {
                return ENG_ROLE_FLOAT_WEIGHT;
            } else if ((is_op(n, "", "RMSNormalization") && j == 1) || (is_op(n, "", "Mul") && g->inits[i].rank == 1)) {
                return ENG_ROLE_NORM;
            } else if ((is_op(n, "", "RotaryEmbedding") && (j == 1 || j == 2)) ||
                       ((is_op(n, "", "Cast") || is_op(n, "", "Gather")) && g->inits[i].rank == 2)) {
                return ENG_ROLE_ROTARY;
            }
            return ENG_ROLE_OTHER;
        }
    }
    return ENG_ROLE_OTHER;
}

/* The tensor named NAME: an initializer, or the value of a Constant node's one attribute; NULL otherwise. */
static const eng_tensor *constant_tensor(const eng_graph *g, const char *name)
{
    const eng_tensor *t = eng_graph_initializer(g, name);
    return t ? t : eng_node_constant(eng_graph_producer(g, name));
}

/*
 * Rows and codes per row of the table a GatherBlockQuantized reads: an
 * initializer, or a Reshape of one to a constant 2-D shape (the ONNX Runtime
 * GenAI builder's view of the tied LM head's MatMulNBits codes as [vocab,
 * hidden * bits / 8]). UINT8 data holds 8 / bits codes per byte.
 */
static bool quantized_table(const eng_graph *g, const eng_node *n, int64_t *rows, int64_t *cols)
{
    const eng_tensor *t = eng_graph_initializer(g, n->inputs[0]);
    int32_t dt;
    int64_t r, c;
    if (t) {
        if (t->rank != 2)
            return false;
        dt = t->dtype, r = t->dims[0], c = t->dims[1];
    } else {
        const eng_node *rs = eng_graph_producer(g, n->inputs[0]);
        if (!rs || !is_op(rs, "", "Reshape") || rs->n_inputs < 2)
            return false;
        const eng_tensor *src = eng_graph_initializer(g, rs->inputs[0]), *sh = constant_tensor(g, rs->inputs[1]);
        if (!src || src->rank < 1 || !sh || sh->dtype != ENG_DT_INT64 || sh->n_elems != 2 || !sh->data)
            return false;
        const int64_t *d = sh->data;
        dt = src->dtype;
        r = d[0] == 0 ? src->dims[0] : d[0];
        c = d[1];
        if (r > 0 && c == -1 && src->n_elems % (uint64_t)r == 0)
            c = (int64_t)(src->n_elems / (uint64_t)r);
        else if (c > 0 && r == -1 && src->n_elems % (uint64_t)c == 0)
            r = (int64_t)(src->n_elems / (uint64_t)c);
    }
    int64_t bits = eng_node_attr_int(n, "bits", 4);
    if (r <= 0 || c <= 0 || (bits != 4 && bits != 8))
        return false;
    *rows = r;
    *cols = dt == ENG_DT_UINT8 ? c * (8 / bits) : c;
    return true;
}

/* The constant tensor behind value v: an initializer, or one through a Cast (the BF16 graphs' tables). */
static const eng_tensor *table_of(const eng_graph *g, int v)
{
    if (v < 0)
        return NULL;
    const eng_tensor *t = eng_graph_initializer(g, g->values[v].name);
    const eng_node *c = t ? NULL : eng_graph_producer(g, g->values[v].name);
    if (c && is_op(c, "", "Cast") && c->n_inputs)
        t = eng_graph_initializer(g, c->inputs[0]);
    return t;
}

/* K of a standard MatMul's weight: a [K, N] constant, or a DequantizeLinear of UINT4 [K, N] codes. */
static int64_t matmul_k(const eng_graph *g, const eng_node *mm)
{
    if (!mm || mm->n_inputs < 2)
        return 0;
    const eng_tensor *t = eng_graph_initializer(g, mm->inputs[1]);
    const eng_node *dq = t ? NULL : eng_graph_producer(g, mm->inputs[1]);
    if (dq && is_op(dq, "", "DequantizeLinear") && dq->n_inputs)
        t = eng_graph_initializer(g, dq->inputs[0]);
    return t && t->rank == 2 ? t->dims[0] : 0;
}

/*
 * The standard contracts (design.md section 1): attention nodes are
 * Attention, or the decomposition's Softmax, its query Reshape to
 * [0, 0, kv_heads, group, head] giving the heads; the embedding a FLOAT or
 * BFLOAT16 table, or the UINT4 [V, D] codes behind DequantizeLinear.
 */
static void standard_geometry(const eng_graph *g, eng_geometry *geo)
{
    const eng_node *att = NULL;
    int64_t softmaxes = 0;
    for (size_t k = 0; k < g->n_nodes; k++) {
        const eng_node *n = &g->nodes[k];
        if (is_op(n, "", "Attention")) {
            if (!att)
                att = n;
            geo->layers++;
        }
        softmaxes += is_op(n, "", "Softmax");
        if (is_op(n, "", "Reshape") && n->n_inputs == 2 && !geo->heads) {
            const eng_tensor *sh = constant_tensor(g, n->inputs[1]);
            if (sh && sh->dtype == ENG_DT_INT64 && sh->n_elems == 5 && sh->data) {
                const int64_t *d = sh->data;
                geo->kv_heads = d[2];
                geo->heads = d[2] * d[3];
                geo->head_size = d[4];
            }
        }
        if (is_op(n, "", "Gather") && n->n_inputs > 0 && !geo->vocab) {
            const eng_tensor *t = eng_graph_initializer(g, n->inputs[0]);
            const eng_node *dq = t ? NULL : eng_graph_producer(g, n->inputs[0]);
            if (dq && is_op(dq, "", "DequantizeLinear") && dq->n_inputs)
                t = eng_graph_initializer(g, dq->inputs[0]);
            if (t && t->rank == 2 && (t->dtype == ENG_DT_BFLOAT16 || t->dtype == ENG_DT_FLOAT ||
                                      t->dtype == ENG_DT_UINT4) && (dq || n->n_inputs < 2 ||
                                      g->values[eng_graph_value(g, n->inputs[1])].kind == ENG_VALUE_INPUT)) {
                geo->vocab = t->dims[0];
                geo->hidden = t->dims[1];
            }
        }
        /* down_proj reads the SwiGLU product, a Mul of two computed values (a norm's Mul has a weight) */
        if (is_op(n, "", "MatMul") && !geo->intermediate && n->n_inputs > 0) {
            const eng_node *p = eng_graph_producer(g, n->inputs[0]);
            if (p && is_op(p, "", "Mul") && p->n_inputs == 2 && eng_graph_producer(g, p->inputs[0]) &&
                eng_graph_producer(g, p->inputs[1]))
                geo->intermediate = matmul_k(g, n);
        }
        const eng_tensor *cos = NULL;
        if (is_op(n, "", "RotaryEmbedding") && n->n_inputs > 1)
            cos = table_of(g, eng_graph_value(g, n->inputs[1]));
        else if (is_op(n, "", "Gather") && n->n_inputs > 1) {
            const eng_node *ix = eng_graph_producer(g, n->inputs[1]);
            if (ix && is_op(ix, "", "Range"))
                cos = table_of(g, eng_graph_value(g, n->inputs[0]));
        }
        if (cos && cos->rank == 2 && !geo->max_positions) {
            geo->max_positions = cos->dims[0];
            geo->rotary_dim = 2 * cos->dims[1];
        }
    }
    if (att) {
        geo->heads = eng_node_attr_int(att, "q_num_heads", 0);
        geo->kv_heads = eng_node_attr_int(att, "kv_num_heads", 0);
        const eng_node *o_proj = consumer(g, att->output_values[0], "", "MatMul");
        if (o_proj && geo->heads > 0)
            geo->head_size = matmul_k(g, o_proj) / geo->heads;
    } else {
        geo->layers = softmaxes;
    }
}

int eng_graph_geometry(const eng_graph *g, eng_geometry *geo, eng_diag *diag)
{
    memset(geo, 0, sizeof *geo);
    const eng_node *gqa = NULL;
    for (size_t k = 0; k < g->n_nodes; k++) {
        const eng_node *n = &g->nodes[k];
        if (is_op(n, "com.microsoft", "GroupQueryAttention")) {
            if (!gqa)
                gqa = n;
            geo->layers++;
        }
        if (is_op(n, "", "Gather") && n->n_inputs > 1 && !geo->vocab) {
            const eng_tensor *t = eng_graph_initializer(g, n->inputs[0]);
            int ix = eng_graph_value(g, n->inputs[1]);
            if (t && t->dtype == ENG_DT_FLOAT && t->rank == 2 && ix >= 0 && g->values[ix].kind == ENG_VALUE_INPUT) {
                geo->vocab = t->dims[0];
                geo->hidden = t->dims[1];
            }
        }
        if (is_op(n, "com.microsoft", "GatherBlockQuantized") && n->n_inputs > 1 && !geo->vocab) {
            int ix = eng_graph_value(g, n->inputs[1]);
            if (ix >= 0 && g->values[ix].kind == ENG_VALUE_INPUT)
                quantized_table(g, n, &geo->vocab, &geo->hidden);
        }
        /* down_proj: the projection reading the SwiGLU product Mul(silu(gate), up). */
        if (is_op(n, "com.microsoft", "MatMulNBits") && !geo->intermediate && n->n_inputs > 0) {
            const eng_node *p = eng_graph_producer(g, n->inputs[0]);
            if (p && is_op(p, "", "Mul"))
                geo->intermediate = eng_node_attr_int(n, "K", 0);
        }
    }
    if (!gqa)
        standard_geometry(g, geo);
    if (gqa) {
        geo->heads = eng_node_attr_int(gqa, "num_heads", 0);
        geo->kv_heads = eng_node_attr_int(gqa, "kv_num_heads", 0);
        const eng_node *o_proj = consumer(g, gqa->output_values[0], "com.microsoft", "MatMulNBits");
        if (o_proj && geo->heads > 0)
            geo->head_size = eng_node_attr_int(o_proj, "K", 0) / geo->heads;
        const eng_tensor *cos = gqa->n_inputs > 7 ? eng_graph_initializer(g, gqa->inputs[7]) : NULL;
        if (cos && cos->rank == 2) {
            geo->max_positions = cos->dims[0];
            geo->rotary_dim = 2 * cos->dims[1];
        }
    }
    size_t before = diag->n_total;
    const char *dir = g->dir;
    if (!geo->layers)
        eng_diag_add(diag, "%s: no GroupQueryAttention, Attention or attention decomposition: not a decoder graph "
                     "of a supported form", dir);
    if (!geo->vocab)
        eng_diag_add(diag, "%s: no embedding table (float, or UINT4 through DequantizeLinear, read by a Gather node; "
                     "or block-quantized, read by a GatherBlockQuantized node)", dir);
    if (geo->layers && !geo->head_size)
        eng_diag_add(diag, "%s: cannot derive head size: no projection reads the attention output", dir);
    if (geo->layers && !geo->intermediate)
        eng_diag_add(diag, "%s: cannot derive the MLP width: no projection reads a Mul output", dir);
    return diag->n_total > before ? -1 : 0;
}
