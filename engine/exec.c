/*
 * exec: the executor of a plan (see plan.h): graph inputs bound by the
 * caller, outputs optionally written into caller buffers, one arena laid
 * out from value lifetimes for everything else, a shape pass then an
 * execution pass per run.
 *
 * Threads: an eng_exec is driven by one thread at a time; its kernels fan
 * out over the eng_pool it was given.
 */
#include "engine/plan_internal.h"
#include "engine/sampler.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

/* ---- small helpers --------------------------------------------------------- */

uint64_t eng_view_numel(const eng_view *v)
{
    uint64_t n = 1;
    for (int i = 0; i < v->rank; i++)
        n *= (uint64_t)v->dims[i];
    return n;
}

/* ---- parallel helpers ------------------------------------------------------ */

typedef struct par_ctx {
    const void *args;
    void (*fn)(const void *args, size_t b, size_t e);
} par_ctx;

static void par_trampoline(void *ctx, size_t b, size_t e)
{
    const par_ctx *c = ctx;
    c->fn(c->args, b, e);
}

void plan_run_par(eng_exec *x, size_t n, size_t grain, void (*fn)(const void *, size_t, size_t), const void *args)
{
    par_ctx c = {args, fn};
    eng_pool_run(x->pool, n, grain, par_trampoline, &c);
}

/* ---- exec ----------------------------------------------------------------------- */

/*
 * The arena and scratch of an executor come straight from mmap and go back
 * with munmap: sessions come and go with arenas of many sizes, and malloc
 * would keep the freed ones in its heap (resident memory that only grows).
 */
static void *map_bytes(uint64_t n)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void unmap_bytes(void *p, uint64_t n)
{
    if (p)
        munmap(p, n ? n : 1);
}

eng_exec *eng_exec_new(const eng_plan *p, eng_pool *pool)
{
    if (p->opts.describe_only)
        return NULL; /* its packed weights were never written */
    eng_exec *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->norm_qa_value = -1;
    x->argmax_step = -1;
    size_t nv = p->g->n_values + 1;
    x->p = p;
    x->pool = pool;
    x->vals = calloc(nv, sizeof *x->vals);
    x->input_set = calloc(nv, sizeof *x->input_set);
    x->bound = calloc(nv, sizeof *x->bound);
    x->slot_off = calloc(nv, sizeof *x->slot_off);
    x->slot_cap = calloc(nv, sizeof *x->slot_cap);
    x->need = calloc(nv, sizeof *x->need);
    x->kv = calloc((size_t)p->n_gqa + 1, sizeof *x->kv);
    x->fused_now = calloc(p->n_steps + 1, sizeof *x->fused_now);
    x->last_row = calloc(p->n_steps + 1, sizeof *x->last_row);
    if (!x->vals || !x->input_set || !x->bound || !x->slot_off || !x->slot_cap || !x->need || !x->kv || !x->fused_now || !x->last_row) {
        eng_exec_free(x);
        return NULL;
    }
    for (size_t v = 0; v < p->g->n_values; v++)
        if (p->vals[v].kind == PV_CONST) {
            x->vals[v].v = p->vals[v].cval;
            x->vals[v].nbytes = eng_view_numel(&p->vals[v].cval) * eng_dtype_size(p->vals[v].cval.dtype);
        }
    return x;
}

void eng_exec_free(eng_exec *x)
{
    if (!x)
        return;
    free(x->vals);
    free(x->input_set);
    free(x->bound);
    free(x->slot_off);
    free(x->slot_cap);
    free(x->need);
    free(x->kv);
    free(x->fused_now);
    free(x->last_row);
    free(x->argmax_keys);
    free(x->batch);
    free(x->sel);
    unmap_bytes(x->sel_buf, x->sel_cap);
    unmap_bytes(x->arena, x->arena_bytes);
    unmap_bytes(x->scratch, x->scratch_cap);
    unmap_bytes(x->norm_qa, x->norm_qa_cap);
    free(x->shape_buf);
    free(x);
}

int eng_exec_set_input(eng_exec *x, const char *name, int32_t dtype, int rank, const int64_t *dims,
                       const void *data, eng_diag *diag)
{
    const eng_graph *g = x->p->g;
    int v = eng_graph_value(g, name);
    if (v < 0 || g->values[v].kind != ENG_VALUE_INPUT) {
        eng_diag_add(diag, "'%s' is not an input of the graph", name);
        return -1;
    }
    const eng_value_info *vi = &g->inputs[g->values[v].index];
    if (dtype != vi->dtype) {
        eng_diag_add(diag, "input '%s' must be %s, not %s", name, eng_dtype_name(vi->dtype), eng_dtype_name(dtype));
        return -1;
    }
    if (rank < 0 || rank > ENG_MAX_RANK || (vi->rank >= 0 && rank != vi->rank)) {
        eng_diag_add(diag, "input '%s' must have rank %d, not %d", name, vi->rank, rank);
        return -1;
    }
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || (vi->rank >= 0 && vi->dims[i].value >= 0 && vi->dims[i].value != dims[i])) {
            eng_diag_add(diag, "input '%s': dimension %d is %lld, the graph fixes %lld", name, i, (long long)dims[i],
                         (long long)vi->dims[i].value);
            return -1;
        }
    }
    if (set_shape(&x->vals[v], dtype, rank, dims) != 0) {
        char shape[200];
        eng_diag_add(diag, "input '%s': shape %s is more than the largest tensor (%llu bytes)", name,
                     eng_shape_str(dims, rank, shape, sizeof shape), (unsigned long long)ENG_MAX_TENSOR_BYTES);
        return -1;
    }
    x->vals[v].v.data = (void *)data;
    x->input_set[v] = true;
    return 0;
}

int eng_exec_bind_output(eng_exec *x, const char *name, void *buf, uint64_t cap, eng_diag *diag)
{
    int v = eng_graph_value(x->p->g, name);
    if (v < 0 || !x->p->vals[v].graph_output || x->p->vals[v].kind != PV_NODE) {
        eng_diag_add(diag, "'%s' is not a computed output of the graph", name);
        return -1;
    }
    x->bound[v] = (bound_buf){buf, buf ? cap : 0};
    return 0;
}

int eng_exec_set_argmax(eng_exec *x, const char *name, bool on, eng_diag *diag)
{
    const eng_plan *p = x->p;
    int v = eng_graph_value(p->g, name);
    int i = v >= 0 ? plan_producer_step(p, v) : -1;
    if (i < 0 || !p->vals[v].graph_output || p->steps[i].op != &op_matmulnbits) {
        eng_diag_add(diag, "'%s' is not a graph output computed by MatMulNBits", name);
        return -1;
    }
    x->argmax_step = on && !p->opts.no_fusion ? i : -1;
    return 0;
}

int32_t eng_exec_argmax(const eng_exec *x)
{
    return x->argmax_rows ? eng_exec_argmax_row(x, x->argmax_rows - 1) : -1;
}

int32_t eng_exec_argmax_row(const eng_exec *x, size_t i)
{
    return i < x->argmax_rows ? eng_argmax_key_id(atomic_load(&x->argmax_keys[i])) : -1;
}

int eng_exec_set_batch(eng_exec *x, const eng_batch_seq *seqs, size_t n, eng_diag *diag)
{
    x->n_batch = x->n_sel = 0;
    if (!n)
        return 0;
    size_t want = 0;
    for (size_t i = 0; i < n; i++)
        want += seqs[i].all_rows && seqs[i].n > 0 ? (size_t)seqs[i].n : seqs[i].logits;
    if (n > x->batch_cap) {
        eng_batch_seq *b = realloc(x->batch, n * sizeof *b);
        if (!b) {
            eng_diag_add(diag, "out of memory for a batch of %zu sequences", n);
            return -1;
        }
        x->batch = b;
        x->batch_cap = n;
    }
    if (want > x->sel_rows_cap) {
        int64_t *sel = realloc(x->sel, want * sizeof *sel);
        if (!sel) {
            eng_diag_add(diag, "out of memory selecting %zu rows", want);
            return -1;
        }
        x->sel = sel;
        x->sel_rows_cap = want;
    }
    int64_t row = 0;
    for (size_t i = 0; i < n; i++) {
        if (seqs[i].n < 1 || seqs[i].past < 0 || !seqs[i].kv) {
            eng_diag_add(diag, "batch sequence %zu: %lld rows after %lld cached tokens, %s", i, (long long)seqs[i].n,
                         (long long)seqs[i].past, seqs[i].kv ? "bound" : "no KV cache bound");
            return -1;
        }
        x->batch[i] = seqs[i];
        if (seqs[i].all_rows)
            for (int64_t r = 0; r < seqs[i].n; r++)
                x->sel[x->n_sel++] = row + r;
        row += seqs[i].n;
        if (seqs[i].logits && !seqs[i].all_rows)
            x->sel[x->n_sel++] = row - 1;
    }
    x->n_batch = n;
    return 0;
}

int eng_exec_last_row_only(eng_exec *x, const char *name, bool on, eng_diag *diag)
{
    const eng_plan *p = x->p;
    int v = eng_graph_value(p->g, name);
    int i = v >= 0 ? plan_producer_step(p, v) : -1;
    if (i < 0 || !p->vals[v].graph_output) {
        eng_diag_add(diag, "'%s' is not a computed output of the graph", name);
        return -1;
    }
    if (p->steps[i].op != &op_matmulnbits && p->steps[i].op != &op_matmul_f) {
        eng_diag_add(diag, "output '%s' comes from %s, not a row-wise MatMulNBits or MatMul", name,
                     p->steps[i].node->op_type);
        return -1;
    }
    x->last_row[i] = on;
    return 0;
}

int eng_exec_bind_kv(eng_exec *x, const char *past_key_input, const eng_kv_binding *b, eng_diag *diag)
{
    const eng_plan *p = x->p;
    int v = eng_graph_value(p->g, past_key_input);
    for (size_t i = 0; v >= 0 && i < p->n_steps; i++) {
        const step *s = &p->steps[i];
        if (s->op != &op_gqa || s->n_in < 4 || s->in[3] != v)
            continue;
        if (b && (!b->k || !b->v || b->capacity <= 0 || b->head_stride < b->capacity ||
                  !krn_kv_type_known(b->type))) {
            eng_diag_add(diag, "invalid KV binding for '%s'", past_key_input);
            return -1;
        }
        x->kv[s->p.gqa.index] = b ? *b : (eng_kv_binding){0};
        return 0;
    }
    eng_diag_add(diag, "no GroupQueryAttention node reads past key '%s'", past_key_input);
    return -1;
}

/* Values that need arena storage this run. */
static bool in_arena(const eng_exec *x, size_t v)
{
    const val_plan *vp = &x->p->vals[v];
    return vp->kind == PV_NODE && !x->bound[v].buf;
}

typedef struct slot_order {
    size_t v;
    uint64_t cap;
} slot_order;

static int cmp_slot(const void *a, const void *b)
{
    const slot_order *x = a, *y = b;
    if (x->cap != y->cap)
        return x->cap > y->cap ? -1 : 1;
    return x->v < y->v ? -1 : 1;
}

/* Lays out every arena value by first fit, largest first, so that values
 * whose lifetimes [def, last] intersect never share bytes. */
static int layout_arena(eng_exec *x)
{
    const eng_plan *p = x->p;
    size_t nv = p->g->n_values, n = 0;
    slot_order *ord = malloc((nv + 1) * sizeof *ord);
    size_t *placed = malloc((nv + 1) * sizeof *placed);
    if (!ord || !placed) {
        free(ord);
        free(placed);
        return -1;
    }
    for (size_t v = 0; v < nv; v++) {
        if (!in_arena(x, v))
            continue;
        uint64_t cap = (x->need[v] > x->slot_cap[v] ? x->need[v] : x->slot_cap[v]);
        cap = (cap + ALIGN - 1) / ALIGN * ALIGN;
        x->slot_cap[v] = cap;
        if (cap)
            ord[n++] = (slot_order){v, cap};
    }
    qsort(ord, n, sizeof *ord, cmp_slot);
    uint64_t total = 0;
    size_t n_placed = 0;
    for (size_t i = 0; i < n; i++) {
        size_t v = ord[i].v;
        int d0 = p->vals[v].def, l0 = p->vals[v].last < d0 ? d0 : p->vals[v].last;
        uint64_t off = 0, end = ord[i].cap;
        bool fits = true;
        for (bool moved = true; moved && fits;) {
            moved = false;
            for (size_t j = 0; j < n_placed && fits; j++) {
                size_t u = placed[j];
                int d1 = p->vals[u].def, l1 = p->vals[u].last < d1 ? d1 : p->vals[u].last;
                if (l0 < d1 || l1 < d0)
                    continue; /* never alive together */
                uint64_t ub = x->slot_off[u], ue = ub + x->slot_cap[u]; /* an end already placed: fits */
                if (off < ue && ub < end) {
                    off = ue;
                    moved = true;
                    fits = ck_add_u64(off, ord[i].cap, &end);
                }
            }
        }
        if (!fits) { /* past 2^64 bytes: no such arena can exist */
            free(ord);
            free(placed);
            return -1;
        }
        x->slot_off[v] = off;
        placed[n_placed++] = v;
        if (end > total)
            total = end;
    }
    free(ord);
    free(placed);
    if (total > x->arena_bytes) {
        void *na = map_bytes(total);
        if (!na)
            return -1;
        unmap_bytes(x->arena, x->arena_bytes);
        x->arena = na;
        x->arena_bytes = total;
    }
    return 0;
}

/* Storage for an integer value of the shape pass; never NULL for a value that got some, even an empty one. */
static void *shape_alloc(eng_exec *x, uint64_t n)
{
    n = n ? (n + 15) / 16 * 16 : 16;
    if (x->shape_used + n > x->shape_cap)
        return NULL;
    void *r = x->shape_buf + x->shape_used;
    x->shape_used += n;
    return r;
}

/* Gives the outputs of step s their storage for this pass. */
static int place_outputs(eng_exec *x, const step *s)
{
    for (int k = 0; k < s->n_out; k++) {
        int v = s->out[k];
        if (v < 0)
            continue;
        rt_val *o = &x->vals[v];
        if (x->shape_pass) {
            /* a Reshape output is always a view and needs no storage of its own */
            x->need[v] = s->op == &op_reshape ? 0 : o->nbytes;
            o->v.data = NULL;
            if (s->op->shape_op && is_int_dtype(o->v.dtype)) {
                o->v.data = shape_alloc(x, o->nbytes);
                if (!o->v.data) {
                    /* grow the shape buffer and redo this run's shape pass */
                    return 1;
                }
            }
            continue;
        }
        if (x->bound[v].buf) {
            if (o->nbytes > x->bound[v].cap)
                STEP_FAIL(x, s, "output '%s' needs %llu bytes, its buffer holds %llu", x->p->g->values[v].name,
                          (unsigned long long)o->nbytes, (unsigned long long)x->bound[v].cap);
            o->v.data = x->bound[v].buf;
        } else {
            o->v.data = x->arena + x->slot_off[v];
        }
    }
    return 0;
}

static bool outputs_are_int(const eng_exec *x, const step *s)
{
    if (!s->op->shape_op && !s->op->places_outputs)
        return false;
    for (int k = 0; k < s->n_out; k++)
        if (s->out[k] >= 0 && !is_int_dtype(x->vals[s->out[k]].v.dtype))
            return false;
    return true;
}

/* Infers one step's output shapes and gives its outputs storage. */
static int infer_and_place(eng_exec *x, const step *s)
{
    if (s->op->infer(x, s) != 0)
        return -1;
    return place_outputs(x, s);
}

/* Infers, places and (where this pass runs it) executes one step. */
static int exec_step(eng_exec *x, const step *s, bool shape_pass)
{
    if (x->last_row[s - x->p->steps]) {
        /* Present the input as its selected rows alone for this step: the
         * last row, or in a batched run the last row of each sequence
         * whose logits are wanted, or all rows of one that wants them all
         * (gathered into sel_buf). */
        rt_val *in = &x->vals[s->in[0]];
        rt_val saved = *in;
        if (in->v.rank >= 1 && eng_view_numel(&in->v) > 0) {
            uint64_t row = (uint64_t)in->v.dims[in->v.rank - 1], esz = eng_dtype_size(in->v.dtype);
            uint64_t rows = eng_view_numel(&in->v) / (row ? row : 1);
            for (int k = 0; k + 1 < in->v.rank; k++)
                in->v.dims[k] = 1;
            if (x->n_batch) {
                if (in->v.rank < 2)
                    STEP_FAIL(x, s, "a batched run selects rows of a tensor of rank >= 2");
                in->v.dims[in->v.rank - 2] = (int64_t)x->n_sel;
                in->nbytes = x->n_sel * row * esz;
                if (in->v.data && x->n_sel) {
                    if (x->n_sel * row * esz > x->sel_cap) {
                        unmap_bytes(x->sel_buf, x->sel_cap);
                        x->sel_cap = (x->n_sel * row * esz + ALIGN - 1) / ALIGN * ALIGN;
                        x->sel_buf = map_bytes(x->sel_cap);
                        if (!x->sel_buf) {
                            x->sel_cap = 0;
                            *in = saved;
                            STEP_FAIL(x, s, "out of memory gathering %zu rows", x->n_sel);
                        }
                    }
                    for (size_t i = 0; i < x->n_sel; i++)
                        memcpy((char *)x->sel_buf + i * row * esz,
                               (const char *)in->v.data + (uint64_t)x->sel[i] * row * esz, row * esz);
                    in->v.data = x->sel_buf;
                }
            } else {
                if (in->v.data)
                    in->v.data = (char *)in->v.data + (rows - 1) * row * esz;
                in->nbytes = row * esz;
            }
        }
        x->last_row[s - x->p->steps] = false;
        int r = exec_step(x, s, shape_pass);
        x->last_row[s - x->p->steps] = true;
        *in = saved;
        return r;
    }
    int r = infer_and_place(x, s);
    if (r)
        return r;
    /* The shape pass computes integer values only: float data is never
     * needed to know a shape, and has no storage yet. */
    if (shape_pass && !outputs_are_int(x, s))
        return 0;
    struct timespec t0, t1;
    bool timed = x->profiling && !shape_pass;
    if (timed)
        clock_gettime(CLOCK_MONOTONIC, &t0);
    if (s->op->run(x, s) != 0)
        return -1;
    if (timed) {
        clock_gettime(CLOCK_MONOTONIC, &t1);
        size_t k = plan_op_index(s->op);
        x->prof_ns[k] += (uint64_t)((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
        x->prof_calls[k]++;
    }
    return 0;
}

static int pass(eng_exec *x, bool shape_pass)
{
    const eng_plan *p = x->p;
    x->shape_pass = shape_pass;
    x->shape_used = 0;
    for (size_t i = 0; i < p->n_steps; i++) {
        const step *s = &p->steps[i];
        if (!s->op->infer || s->silu_head >= 0 || s->sib_head >= 0)
            continue; /* folded constant, or deferred to its fused step */
        for (int k = 0; k < (s->op == &op_matmulnbits ? s->p.mmnb.n_sibs : 0); k++) {
            /* the earlier MatMulNBits this one runs: their outputs now, their columns in its pass */
            int r = infer_and_place(x, &p->steps[s->p.mmnb.sibs[k]]);
            if (r)
                return r;
        }
        if (s->silu_gate >= 0) {
            const rt_val *gv = &x->vals[s->silu_gate], *uv = &x->vals[s->silu_up];
            bool same = gv->v.dtype == ENG_DT_FLOAT && uv->v.dtype == ENG_DT_FLOAT && gv->v.rank == uv->v.rank &&
                        !memcmp(gv->v.dims, uv->v.dims, (size_t)gv->v.rank * sizeof gv->v.dims[0]);
            x->fused_now[i] = same;
            for (int k = 0; k < 2 && !same; k++) {
                int r = exec_step(x, &p->steps[s->silu_steps[k]], shape_pass);
                if (r)
                    return r;
            }
        }
        int r = exec_step(x, s, shape_pass);
        if (r)
            return r;
    }
    return 0;
}

/* Grows a per-run buffer to at least NEED bytes (contents not kept): 0, or -1 out of memory. */
static int ensure_mapped(uint8_t **buf, uint64_t *cap, uint64_t need)
{
    if (need <= *cap)
        return 0;
    unmap_bytes(*buf, *cap);
    uint64_t c = (need + ALIGN - 1) / ALIGN * ALIGN;
    *buf = map_bytes(c);
    *cap = *buf ? c : 0;
    return *buf ? 0 : -1;
}

int eng_exec_run(eng_exec *x, eng_diag *diag)
{
    const eng_plan *p = x->p;
    const eng_graph *g = p->g;
    x->diag = diag;
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = eng_graph_value(g, g->inputs[i].name);
        if (v >= 0 && !x->input_set[v]) {
            eng_diag_add(diag, "graph input '%s' is not set", g->inputs[i].name);
            return -1;
        }
    }
    /* shape pass: every shape, and every byte count, of this run */
    x->scratch_need = 0;
    x->norm_qa_need = 0;
    x->norm_qa_value = -1;
    x->argmax_rows = 0;
    size_t keys = x->n_batch ? (x->n_sel ? x->n_sel : 1) : 1;
    if (keys > x->argmax_cap) {
        _Atomic uint64_t *k = realloc(x->argmax_keys, keys * sizeof *k);
        if (!k) {
            eng_diag_add(diag, "out of memory for %zu argmax rows", keys);
            return -1;
        }
        x->argmax_keys = k;
        x->argmax_cap = keys;
    }
    int r;
    while ((r = pass(x, true)) == 1) {
        uint64_t cap = x->shape_cap ? x->shape_cap * 2 : 4096;
        uint8_t *nb = realloc(x->shape_buf, cap);
        if (!nb) {
            eng_diag_add(diag, "out of memory for shape values");
            return -1;
        }
        x->shape_buf = nb;
        x->shape_cap = cap;
    }
    if (r != 0)
        return -1;
    bool grow = false;
    for (size_t v = 0; v < g->n_values; v++)
        if (in_arena(x, v) && x->need[v] > x->slot_cap[v])
            grow = true;
    if (grow && layout_arena(x) != 0) {
        eng_diag_add(diag, "out of memory for the activation arena");
        return -1;
    }
    if (ensure_mapped(&x->norm_qa, &x->norm_qa_cap, x->norm_qa_need) != 0) {
        eng_diag_add(diag, "out of memory for quantized activations");
        return -1;
    }
    if (ensure_mapped(&x->scratch, &x->scratch_cap, x->scratch_need) != 0) {
        eng_diag_add(diag, "out of memory for kernel scratch");
        return -1;
    }
    return pass(x, false) == 0 ? 0 : -1;
}

int eng_exec_value(const eng_exec *x, const char *name, eng_view *out)
{
    int v = eng_graph_value(x->p->g, name);
    if (v < 0)
        return -1;
    *out = x->vals[v].v;
    return 0;
}

void eng_exec_set_prompt_rows(eng_exec *x, bool on)
{
    x->prompt_rows = on;
}

void eng_exec_set_profiling(eng_exec *x, bool on)
{
    x->profiling = on;
}

size_t eng_exec_profile(const eng_exec *x, eng_prof_entry *out, size_t cap)
{
    size_t n = 0;
    for (size_t k = 0; k < plan_n_ops + plan_n_internal_ops && n < cap; k++)
        if (x->prof_calls[k])
            out[n++] = (eng_prof_entry){k < plan_n_ops ? plan_ops[k]->op : plan_internal_ops[k - plan_n_ops]->op,
                                        x->prof_ns[k], x->prof_calls[k]};
    return n;
}

uint64_t eng_exec_arena_bytes(const eng_exec *x)
{
    return x->arena_bytes;
}

uint64_t eng_exec_kv_bytes_moved(const eng_exec *x)
{
    return x->kv_bytes_moved;
}
