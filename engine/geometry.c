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
    default: return "other";
    }
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
            } else if ((is_op(n, "", "SimplifiedLayerNormalization") && j == 1) ||
                       (is_op(n, "com.microsoft", "SkipSimplifiedLayerNormalization") && j == 2)) {
                return ENG_ROLE_NORM;
            } else if (is_op(n, "com.microsoft", "GroupQueryAttention") && (j == 7 || j == 8)) {
                return ENG_ROLE_ROTARY;
            }
            return ENG_ROLE_OTHER;
        }
    }
    return ENG_ROLE_OTHER;
}

/* The first node (in topological order) reading value v as input slot `slot`
 * with the given op, or NULL. */
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
        if (is_op(n, "", "Gather") && n->n_inputs > 0 && !geo->vocab) {
            const eng_tensor *t = eng_graph_initializer(g, n->inputs[0]);
            if (t && t->dtype == ENG_DT_FLOAT && t->rank == 2) {
                geo->vocab = t->dims[0];
                geo->hidden = t->dims[1];
            }
        }
        /* down_proj: the projection reading the SwiGLU product Mul(silu(gate), up). */
        if (is_op(n, "com.microsoft", "MatMulNBits") && !geo->intermediate && n->n_inputs > 0) {
            const eng_node *p = eng_graph_producer(g, n->inputs[0]);
            if (p && is_op(p, "", "Mul"))
                geo->intermediate = eng_node_attr_int(n, "K", 0);
        }
    }
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
        eng_diag_add(diag, "%s: no GroupQueryAttention node: not a decoder graph of the supported form", dir);
    if (!geo->vocab)
        eng_diag_add(diag, "%s: no float embedding table read by a Gather node", dir);
    if (geo->layers && !geo->head_size)
        eng_diag_add(diag, "%s: cannot derive head size: no MatMulNBits reads the attention output", dir);
    if (geo->layers && !geo->intermediate)
        eng_diag_add(diag, "%s: cannot derive the MLP width: no MatMulNBits reads a Mul output", dir);
    return diag->n_total > before ? -1 : 0;
}
