/*
 * fuse: plan rewrites that run several graph steps as one, each keeping the
 * unfused steps as the reference it is tested against (`--no-fusion`):
 * an RMSNorm that quantizes its rows for its int8 MatMulNBits readers,
 * SiLU(gate) * up as one kernel, Add + RMSNorm as the skip norm, and a
 * MatMulNBits that writes the parts of the Split after it.
 *
 * Threads: called while a plan is built, on the building thread.
 */
#include "engine/plan_internal.h"

/* ---- plan ----------------------------------------------------------------------- */

/* Number of steps reading value v (graph outputs count as one more reader). */
static int readers(const eng_plan *p, int v)
{
    int n = p->vals[v].graph_output ? 1 : 0;
    for (size_t i = 0; i < p->n_steps; i++)
        for (int k = 0; k < p->steps[i].n_in; k++)
            n += p->steps[i].in[k] == v;
    return n;
}

int plan_producer_step(const eng_plan *p, int v)
{
    return p->vals[v].kind == PV_NODE ? p->vals[v].def : -1;
}

/* Step R is an int8-mode MatMulNBits whose A is value V. */
static bool int8_mmnb_reading(const step *r, int v)
{
    return r->op && r->op == &op_matmulnbits && r->in[0] == v && r->p.mmnb.int8;
}

/*
 * Plan rewrite: an RMSNorm (Simplified or SkipSimplifiedLayerNormalization
 * over the last axis) whose output is read by int8-mode MatMulNBits nodes
 * quantizes its rows itself, once, for all of them (the Qwen3 gate and up
 * projections share one). Readers of another width or block size would need
 * other records, so the fusion applies only when all int8 readers agree; any
 * other reader just reads the float output, which is still written.
 */
void plan_fuse_norm_quant(eng_plan *p)
{
    for (size_t i = 0; i < p->n_steps; i++) {
        step *ns = &p->steps[i];
        if (!ns->op || (ns->op != &op_sln && ns->op != &op_skip_sln) || ns->out[0] < 0)
            continue;
        if (ns->op == &op_sln && ns->p.norm.axis != -1)
            continue; /* the width per row is the last axis only when axis is -1 */
        size_t k = 0, bs = 0, readers_n = 0;
        bool agree = true;
        for (size_t j = i + 1; j < p->n_steps; j++) {
            const step *r = &p->steps[j];
            if (!int8_mmnb_reading(r, ns->out[0]))
                continue;
            if (readers_n++ && (r->p.mmnb.w.k != k || r->p.mmnb.w.block_size != bs))
                agree = false;
            k = r->p.mmnb.w.k;
            bs = r->p.mmnb.w.block_size;
        }
        if (!readers_n || !agree)
            continue;
        ns->p.norm.qa_block = bs;
        ns->p.norm.qa_k = k;
        for (size_t j = i + 1; j < p->n_steps; j++) {
            step *r = &p->steps[j];
            if (int8_mmnb_reading(r, ns->out[0])) {
                r->p.mmnb.qa_from_norm = true;
                snprintf(r->kernel, sizeof r->kernel, "%s%s%s%s (activations quantized by the norm)",
                         r->origin ? r->origin : "", r->origin ? ": " : "",
                         r->p.mmnb.w.bits8 ? p->krn.mmnb8_i8.name : p->krn.mmnb_i8.name,
                         plan_pack_note(&r->p.mmnb.w));
            }
        }
        size_t len = strlen(ns->kernel);
        snprintf(ns->kernel + len, sizeof ns->kernel - len, " + %s", p->krn.quant_a8.name);
    }
}

/*
 * Plan rewrite: Add(residual, sublayer) followed by an RMS norm of the sum
 * over the last axis (the standard contracts' form of the ORT form's
 * SkipSimplifiedLayerNormalization) becomes that one step: the norm writes
 * the sum, as output 3, for the residual stream's later readers, and the Add
 * is folded. Only when every other reader of the sum comes after the norm.
 * The sum and the normalized row are computed exactly as the two steps do.
 */
void plan_fuse_skip_norm(eng_plan *p)
{
    for (size_t i = 0; i < p->n_steps; i++) {
        step *ns = &p->steps[i];
        if (ns->op != &op_sln || ns->p.norm.axis != -1 || ns->n_in != 2)
            continue;
        int sum = ns->in[0], ia = plan_producer_step(p, sum);
        if (ia < 0 || p->steps[ia].op != &op_add || p->steps[ia].silu_gate >= 0 || p->vals[sum].graph_output)
            continue;
        bool later = true;
        for (size_t j = 0; j <= i && later; j++)
            for (int k = 0; k < p->steps[j].n_in && j != i; k++)
                later &= p->steps[j].op == &op_folded || p->steps[j].in[k] != sum;
        if (!later)
            continue;
        step *add = &p->steps[ia];
        int gamma = ns->in[1];
        ns->op = &op_skip_sln;
        ns->n_in = 3;
        ns->in[0] = add->in[0];
        ns->in[1] = add->in[1];
        ns->in[2] = gamma;
        for (int k = ns->n_out; k < 4; k++)
            ns->out[k] = -1;
        ns->n_out = 4;
        ns->out[3] = sum;
        p->vals[sum].def = (int)i;
        for (int k = 0; k < 2; k++)
            if (p->vals[ns->in[k]].last < (int)i && !p->vals[ns->in[k]].graph_output)
                p->vals[ns->in[k]].last = (int)i;
        add->op = &op_folded;
        snprintf(add->kernel, sizeof add->kernel, "fused into the RMS norm after it (skip norm)");
        snprintf(ns->kernel, sizeof ns->kernel, "%s (Add + RMS norm fused)", p->krn.skip_rmsnorm.name);
    }
}

/*
 * Plan rewrite: Mul(Mul(g, Sigmoid(g)), u) becomes one silu_mul step when the
 * intermediate values have no other reader. The Sigmoid and the first Mul
 * are deferred to the final Mul, which decides per run: equal float shapes
 * run the fused kernel, anything else runs the three steps in order. The
 * kernel rounds exactly like the three steps it replaces.
 */
void plan_fuse_silu(eng_plan *p)
{
    for (size_t i = 0; i < p->n_steps; i++) {
        step *m2 = &p->steps[i];
        if (m2->op != &op_mul)
            continue;
        for (int side = 0; side < 2; side++) {
            int silu = m2->in[side], u = m2->in[1 - side];
            int i1 = plan_producer_step(p, silu);
            if (i1 < 0 || readers(p, silu) != 1)
                continue;
            step *m1 = &p->steps[i1];
            if (m1->op != &op_mul)
                continue;
            for (int gs = 0; gs < 2; gs++) {
                int gate = m1->in[gs], sig = m1->in[1 - gs];
                int i0 = plan_producer_step(p, sig);
                if (i0 < 0 || readers(p, sig) != 1 || p->steps[i0].op != &op_sigmoid ||
                    p->steps[i0].in[0] != gate || gate == u)
                    continue;
                p->steps[i0].silu_head = (int)i;
                m1->silu_head = (int)i;
                m2->silu_gate = gate;
                m2->silu_up = u;
                m2->silu_steps[0] = i0;
                m2->silu_steps[1] = i1;
                /* The replaced steps are deferred to the fused one (which
                 * runs them itself when shapes rule the fusion out), so
                 * gate and the Sigmoid's output must live until then. */
                if (!p->vals[gate].graph_output && p->vals[gate].last < (int)i)
                    p->vals[gate].last = (int)i;
                if (p->vals[sig].last < (int)i)
                    p->vals[sig].last = (int)i;
                snprintf(p->steps[i0].kernel, sizeof p->steps[i0].kernel, "fused into SiLU(gate) * up");
                snprintf(m1->kernel, sizeof m1->kernel, "fused into SiLU(gate) * up");
                snprintf(m2->kernel, sizeof m2->kernel, "%s (SiLU(gate) * up fused)", p->krn.silu_mul.name);
                goto next;
            }
        }
    next:;
    }
}

/*
 * The column sizes of Split step SP over N columns, when they are known at
 * plan time: a constant 'split' input, or equal parts (the last smaller with
 * num_outputs, as the op says). False otherwise or when they do not cover N.
 */
static bool split_cols_const(const eng_plan *p, const step *sp, size_t n, size_t *cols)
{
    if (sp->n_in > 1 && sp->in[1] >= 0) {
        const val_plan *c = &p->vals[sp->in[1]];
        if (c->kind != PV_CONST || !is_int_dtype(c->cval.dtype) || !c->cval.data ||
            eng_view_numel(&c->cval) != (uint64_t)sp->n_out)
            return false;
        size_t sum = 0;
        for (int k = 0; k < sp->n_out; k++) {
            int64_t z = int_at(&c->cval, (uint64_t)k);
            if (z < 0 || (uint64_t)z > n)
                return false;
            cols[k] = (size_t)z;
            sum += cols[k];
        }
        return sum == n;
    }
    size_t parts = (size_t)sp->n_out, part = (n + parts - 1) / parts;
    if (!sp->p.split.num_outputs && n % parts)
        return false;
    for (size_t k = 0; k < parts; k++) {
        size_t rem = n > part * k ? n - part * k : 0;
        cols[k] = rem < part ? rem : part;
    }
    return true;
}

/*
 * Plan rewrite: a MatMulNBits whose only reader is a Split of its last axis
 * (the ORT form's packed QKV projection) writes the Split's outputs itself,
 * each column range into its own tensor, instead of one packed row per token
 * that the Split then copies apart (in prefill, a copy of every row). Every
 * column is computed exactly as before. Only with split sizes known at plan
 * time whose parts start on a packed tile of columns.
 */
void plan_fuse_mmnb_split(eng_plan *p)
{
    for (size_t i = 0; i < p->n_steps; i++) {
        step *sp = &p->steps[i];
        if (sp->op != &op_split || sp->p.split.axis != -1 || sp->n_out < 1 || sp->n_out > MMNB_MAX_PARTS)
            continue;
        int v = sp->in[0], im = plan_producer_step(p, v);
        if (im < 0 || p->steps[im].op != &op_matmulnbits || p->steps[im].n_out != 1 || readers(p, v) != 1 ||
            p->vals[v].graph_output)
            continue;
        step *ms = &p->steps[im];
        mmnb_params *m = &ms->p.mmnb;
        size_t cols[MMNB_MAX_PARTS], off = 0;
        if (!split_cols_const(p, sp, m->w.n, cols))
            continue;
        bool ok = true;
        for (int k = 0; k < sp->n_out; k++) {
            ok &= sp->out[k] >= 0 && off % KRN_Q4_PACK_TILE == 0;
            off += cols[k];
        }
        if (!ok)
            continue;
        m->n_parts = sp->n_out;
        ms->n_out = sp->n_out;
        for (int k = 0; k < sp->n_out; k++) {
            m->part_cols[k] = cols[k];
            ms->out[k] = sp->out[k];
            p->vals[sp->out[k]].def = im;
        }
        sp->op = &op_folded;
        snprintf(sp->kernel, sizeof sp->kernel, "fused into the MatMulNBits before it (writes the parts)");
        size_t len = strlen(ms->kernel);
        snprintf(ms->kernel + len, sizeof ms->kernel - len, " (Split fused: %d outputs)", sp->n_out);
    }
}

/* Step S takes part in no fusion that changes when or how it runs. */
static bool mmnb_alone(const eng_plan *p, const step *s)
{
    if (s->op != &op_matmulnbits || s->sib_head >= 0 || s->p.mmnb.n_sibs)
        return false;
    for (int k = 0; k < s->n_out; k++)
        if (s->out[k] >= 0 && p->vals[s->out[k]].graph_output)
            return false; /* a graph output's step may be asked for its last row only */
    return true;
}

/* Steps a run skips: folded constants and steps deferred to a fused one. */
static bool skipped_step(const step *s)
{
    return !s->op || !s->op->infer || s->silu_head >= 0 || s->sib_head >= 0;
}

/*
 * Plan rewrite: MatMulNBits steps that read the same A and follow each other
 * (only skipped steps between them: Qwen3's gate and up projections, the
 * standard contracts' q, k and v) run as one: the last of them computes the
 * others' columns too, in one pass over the pool, so decode wakes the pool
 * once instead of two or three times and no thread waits at a join between
 * them. The earlier ones are deferred to it; their outputs are placed when
 * it runs, inside the arena slots that already hold them from their own
 * step on, and nothing between reads them. Every column is computed exactly
 * as before (the same kernel, the same quantized A).
 */
void plan_fuse_mmnb_siblings(eng_plan *p)
{
    for (size_t i = 0; i < p->n_steps; i++) {
        step *first = &p->steps[i];
        if (!mmnb_alone(p, first))
            continue;
        int members[MMNB_MAX_SIBS + 1], n = 1, parts = first->p.mmnb.n_parts ? first->p.mmnb.n_parts : 1;
        members[0] = (int)i;
        for (size_t j = i + 1; j < p->n_steps && n <= MMNB_MAX_SIBS; j++) {
            const step *s = &p->steps[j];
            if (skipped_step(s))
                continue;
            const mmnb_params *a = &first->p.mmnb, *b = &s->p.mmnb;
            int sp = b->n_parts ? b->n_parts : 1;
            if (!mmnb_alone(p, s) || s->in[0] != first->in[0] || a->int8 != b->int8 || a->w.k != b->w.k ||
                a->w.block_size != b->w.block_size || a->qa_from_norm != b->qa_from_norm ||
                parts + sp > MMNB_MAX_RUN_PARTS)
                break;
            members[n++] = (int)j;
            parts += sp;
        }
        if (n < 2)
            continue;
        step *head = &p->steps[members[n - 1]];
        head->p.mmnb.n_sibs = n - 1;
        for (int k = 0; k < n - 1; k++) {
            step *s = &p->steps[members[k]];
            head->p.mmnb.sibs[k] = members[k];
            s->sib_head = members[n - 1];
            size_t len = strlen(s->kernel);
            snprintf(s->kernel + len, sizeof s->kernel - len, " (runs in a later MatMulNBits' pass)");
        }
        size_t len = strlen(head->kernel);
        snprintf(head->kernel + len, sizeof head->kernel - len, " (with %d before it in one pass)", n - 1);
        i = (size_t)members[n - 1];
    }
}
