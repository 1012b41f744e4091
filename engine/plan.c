/*
 * plan: kernel binding of a graph (see plan.h).
 *
 * Every supported op has one registry row (op_def): prepare() checks the
 * node's attributes and constant inputs once at plan time and names the
 * kernel; infer() derives output shapes at run time (reading only integer
 * shape tensors); run() executes. Ops marked shape_op (Shape, Gather/Cast/
 * Sub/ReduceSum on integers, ...) also run during the shape pass, so
 * everything a later shape depends on is known before the arena is laid
 * out. The rows live in the files of their op families; this file lists
 * them, binds nodes to them, applies the fusions and packs the weights.
 *
 * Threads: plan building runs on one thread; a built plan is read-only.
 */
#include "engine/plan_internal.h"

#include <stdlib.h>

/* Every op qwen3d runs; a node of any other op is rejected when the plan is built. */
const op_def *const plan_ops[] = {
    &op_constant, &op_shape, &op_gather, &op_reduce_sum, &op_sub, &op_add, &op_mul, &op_cast, &op_sigmoid,
    &op_reshape, &op_split, &op_sln, &op_skip_sln, &op_matmulnbits, &op_gqa, &op_gather_block_quantized,
    /* the standard contracts' ops (lower.c) */
    &op_rmsnorm, &op_dequantize, &op_matmul, &op_transpose, &op_rotary, &op_attention, &op_reduce_mean, &op_pow,
    &op_sqrt, &op_div, &op_slice, &op_neg, &op_concat, &op_softmax, &op_unsqueeze, &op_range,
    &op_constant_of_shape, &op_trilu,
};
const size_t plan_n_ops = sizeof plan_ops / sizeof plan_ops[0];
/* Steps of lowered graphs; no ONNX op names them, so the loader never accepts them. */
const op_def *const plan_internal_ops[] = {&op_folded, &op_matmul_f, &op_gather_q4};
const size_t plan_n_internal_ops = sizeof plan_internal_ops / sizeof plan_internal_ops[0];

size_t plan_op_index(const op_def *op)
{
    for (size_t k = 0; k < plan_n_ops; k++)
        if (plan_ops[k] == op)
            return k;
    for (size_t k = 0; k < plan_n_internal_ops; k++)
        if (plan_internal_ops[k] == op)
            return plan_n_ops + k;
    return plan_n_ops + plan_n_internal_ops;
}

const op_def *plan_op_find(const char *domain, const char *op)
{
    if (!strcmp(domain, "ai.onnx"))
        domain = "";
    for (size_t i = 0; i < plan_n_ops; i++)
        if (!strcmp(plan_ops[i]->domain, domain) && !strcmp(plan_ops[i]->op, op))
            return plan_ops[i];
    return NULL;
}

bool plan_own(eng_plan *p, void *buf)
{
    if (!buf)
        return false;
    if (p->n_owned == p->cap_owned) {
        size_t cap = p->cap_owned ? 2 * p->cap_owned : 64;
        void **o = realloc(p->owned, cap * sizeof *o);
        if (!o) {
            free(buf);
            return false;
        }
        p->owned = o;
        p->cap_owned = cap;
    }
    p->owned[p->n_owned++] = buf;
    return true;
}

/*
 * External data carries no alignment promise, and kernels load floats and
 * integers as such: a misaligned initializer gets an aligned copy. A table
 * read only by Gather is copied row by row with memcpy and stays mapped.
 */
static int realign(eng_plan *p, const eng_graph *g, size_t v, const eng_tensor *t, void **data)
{
    size_t es = eng_dtype_size(t->dtype);
    if (es <= 1 || !t->data || (uintptr_t)t->data % es == 0)
        return 0;
    /* Gather copies rows with memcpy, and the lowering reads DequantizeLinear's inputs the same way */
    bool only_gathered = true;
    for (size_t i = 0; i < g->n_nodes && only_gathered; i++) {
        const eng_node *n = &g->nodes[i];
        for (size_t j = 0; j < n->n_inputs; j++)
            if (n->input_values[j] == (int)v && !(j == 0 && !strcmp(n->op_type, "Gather") && !*n->domain) &&
                !(!strcmp(n->op_type, "DequantizeLinear") && !*n->domain))
                only_gathered = false;
    }
    if (only_gathered)
        return 0;
    void *copy = aligned_alloc(ALIGN, (t->nbytes + ALIGN - 1) / ALIGN * ALIGN);
    if (!copy || !plan_own(p, copy))
        return -1;
    memcpy(copy, t->data, t->nbytes);
    p->prepared_bytes += t->nbytes;
    *data = copy;
    return 0;
}

int eng_plan_new(const eng_graph *g, const eng_plan_opts *opts, eng_plan **out, eng_diag *diag)
{
    *out = NULL;
    eng_plan *p = calloc(1, sizeof *p);
    if (!p)
        goto oom;
    p->g = g;
    if (opts)
        p->opts = *opts;
    p->krn = *krn_active();
    p->n_steps = g->n_nodes;
    p->steps = calloc(g->n_nodes + 1, sizeof *p->steps);
    p->vals = calloc(g->n_values + 1, sizeof *p->vals);
    p->inits = calloc(g->n_inits + 1, sizeof *p->inits);
    p->repacked = calloc(g->n_inits + 1, sizeof *p->repacked);
    p->read_at_run = calloc(g->n_inits + 1, sizeof *p->read_at_run);
    if (!p->inits || !p->repacked || !p->read_at_run)
        goto oom;
    if (!p->steps || !p->vals)
        goto oom;
    size_t before = diag->n_total;
    for (size_t v = 0; v < g->n_values; v++) {
        val_plan *vp = &p->vals[v];
        vp->def = -1;
        vp->last = -1;
        const eng_value *gv = &g->values[v];
        if (gv->kind == ENG_VALUE_INITIALIZER) {
            const eng_tensor *t = &g->inits[gv->index];
            vp->kind = PV_CONST;
            vp->cval = (eng_view){.dtype = t->dtype, .rank = t->rank, .data = (void *)t->data};
            memcpy(vp->cval.dims, t->dims, sizeof vp->cval.dims);
            if (realign(p, g, v, t, &vp->cval.data) != 0)
                goto oom;
            p->inits[gv->index] = *t;
            p->inits[gv->index].data = vp->cval.data;
        } else if (gv->kind == ENG_VALUE_INPUT) {
            vp->kind = PV_INPUT;
        } else {
            vp->kind = PV_NODE;
            vp->def = (int)gv->index;
        }
    }
    for (size_t o = 0; o < g->n_outputs; o++) {
        int v = eng_graph_value(g, g->outputs[o].name);
        if (v >= 0) {
            p->vals[v].graph_output = true;
            p->vals[v].last = (int)g->n_nodes;
        }
    }
    plan_builder b = {.p = p, .diag = diag};
    for (size_t i = 0; i < g->n_nodes; i++) {
        step *s = &p->steps[i];
        const eng_node *n = &g->nodes[i];
        s->node = n;
        s->op = plan_op_find(n->domain, n->op_type);
        if (n->n_inputs > MAX_IO || n->n_outputs > MAX_IO) {
            eng_diag_add(diag, "%s: node '%s' (%s): too many inputs or outputs", g->dir, node_label(n), n->op_type);
            s->op = NULL;
            continue;
        }
        s->n_in = (int)n->n_inputs;
        s->n_out = (int)n->n_outputs;
        for (int k = 0; k < s->n_in; k++)
            s->in[k] = n->input_values[k];
        for (int k = 0; k < s->n_out; k++)
            s->out[k] = n->output_values[k];
    }
    /* The standard contracts' patterns first, then the nodes they leave, which their registry rows bind. */
    if (diag->n_total == before)
        plan_lower(&b);
    bool lowered = diag->n_total == before;
    if (lowered)
        plan_drop_unread(p);
    for (size_t i = 0; i < g->n_nodes && lowered; i++) {
        step *s = &p->steps[i];
        const eng_node *n = s->node;
        if (s->lowered)
            continue;
        if (!s->op) {
            eng_diag_add(diag, "%s: node '%s': no kernel for %s::%s", g->dir, node_label(n),
                         *n->domain ? n->domain : "ai.onnx", n->op_type);
            continue;
        }
        s->op->prepare(&b, s);
    }
    free(b.scales_bf16);
    free(b.zp_records);
    if (diag->n_total == before && !plan_widen_constants(p))
        goto oom;
    /* Lifetimes: the last step reading each value (graph outputs live to the end). */
    for (size_t i = 0; i < g->n_nodes; i++) {
        const step *s = &p->steps[i];
        if (!s->op || s->op == &op_folded)
            continue;
        for (int k = 0; k < s->n_in; k++)
            if (s->in[k] >= 0 && (int)i > p->vals[s->in[k]].last && !p->vals[s->in[k]].graph_output)
                p->vals[s->in[k]].last = (int)i;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        p->steps[i].silu_head = -1;
        p->steps[i].sib_head = -1;
        p->steps[i].silu_gate = p->steps[i].silu_up = -1;
    }
    if (!p->opts.no_fusion && diag->n_total == before) {
        plan_fuse_skip_norm(p);
        plan_fuse_silu(p);
        plan_fuse_norm_quant(p);
        plan_fuse_mmnb_split(p);
        plan_fuse_mmnb_siblings(p);
    }
    /* A view keeps the storage it points into alive: extend lifetimes
     * backwards through Reshape and Split (reverse order handles chains). */
    for (size_t i = g->n_nodes; i-- > 0;) {
        step *s = &p->steps[i];
        if (!s->op || !s->op->places_outputs || s->in[0] < 0)
            continue;
        for (int k = 0; k < s->n_out; k++)
            if (s->out[k] >= 0 && p->vals[s->out[k]].last > p->vals[s->in[0]].last)
                p->vals[s->in[0]].last = p->vals[s->out[k]].last;
    }
    if (diag->n_total > before) {
        eng_plan_free(p);
        return -1;
    }
    if (!p->opts.describe_only && (!plan_prep_adopt(p) || !plan_pack_all(p)))
        goto oom;
    if (!p->opts.describe_only) {
        plan_prep_store(p);
        if (!p->opts.no_readahead)
            plan_prefetch_in_place(p);
    }
    *out = p;
    return 0;
oom:
    eng_diag_add(diag, "%s: out of memory building the plan", g->dir);
    eng_plan_free(p);
    return -1;
}

void eng_plan_free(eng_plan *p)
{
    if (!p)
        return;
    plan_prep_wait(p); /* a background store reads the arena and the steps */
    for (size_t i = 0; i < p->n_owned; i++)
        free(p->owned[i]);
    free(p->owned);
    plan_prep_free(p->prep);
    free(p->inits);
    free(p->repacked);
    free(p->read_at_run);
    free(p->steps);
    free(p->vals);
    free(p);
}

const eng_graph *eng_plan_graph(const eng_plan *p)
{
    return p->g;
}

const char *eng_plan_contract(const eng_plan *p)
{
    return p->contract;
}

const char *eng_plan_kernel(const eng_plan *p, size_t node)
{
    return node < p->n_steps && p->steps[node].kernel[0] ? p->steps[node].kernel : "unassigned";
}

size_t eng_plan_attention_count(const eng_plan *p)
{
    return (size_t)p->n_gqa;
}

int eng_plan_attention_index(const eng_plan *p, const char *past_key_input)
{
    int v = eng_graph_value(p->g, past_key_input);
    for (size_t i = 0; v >= 0 && i < p->n_steps; i++) {
        const step *s = &p->steps[i];
        if (s->op == &op_gqa && s->n_in > 3 && s->in[3] == v)
            return s->p.gqa.index;
    }
    return -1;
}

uint64_t eng_plan_prepared_bytes(const eng_plan *p)
{
    return p->prepared_bytes;
}
