/*
 * pack: the repacked copies of the MatMulNBits weights (krn_q4_pack): sized
 * once per plan, carved from one huge-page allocation, filled in parallel at
 * load, after which the mapped originals' pages are released.
 *
 * Threads: called while a plan is built, on the building thread (plan_pack_all
 * starts and joins its own helper threads).
 */
#include "engine/plan_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * Repacked weights (krn_q4_pack) are one long sequential stream per matrix;
 * transparent huge pages, where the system grants them on request, spare the
 * GEMV a TLB miss every 4 KiB (worth ~20% of decode bandwidth on the machines
 * measured). Freed with free() like the plan's other owned buffers.
 */
void *plan_alloc_weights(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    size_t align = bytes >= 2 * huge ? huge : ALIGN;
    uint64_t sz;
    if (!ck_add_u64(bytes, align - 1, &sz))
        return NULL;
    sz = sz / align * align;
    void *p = aligned_alloc(align, sz);
    if (p && align == huge)
        madvise(p, sz, MADV_HUGEPAGE); /* a hint; failure only costs speed */
    return p;
}

/*
 * Whether the packed copy of MatMulNBits node n can keep its scales as
 * bfloat16: they are an fp32 initializer whose every value fits exactly
 * (krn_q4_scales_fit_bf16; true of exports quantized from a bf16 checkpoint).
 */
static bool node_scales_bf16(const eng_tensor *scales)
{
    return scales->data && krn_q4_scales_fit_bf16(scales->data, (size_t)scales->n_elems);
}

/* Input I of node N when it is an initializer of DTYPE and N_ELEMS elements, else NULL. */
static const eng_tensor *node_init(const eng_plan *p, const eng_node *n, size_t i, int32_t dtype, uint64_t n_elems)
{
    if (n->n_inputs <= i || n->input_values[i] < 0)
        return NULL;
    const eng_value *v = &p->g->values[n->input_values[i]];
    if (v->kind != ENG_VALUE_INITIALIZER)
        return NULL;
    const eng_tensor *t = &p->inits[v->index];
    return t->dtype == dtype && t->n_elems == n_elems ? t : NULL;
}

bool plan_q4_scales_bf16(const q4_src *src)
{
    if (src->s_dtype == ENG_DT_BFLOAT16)
        return true;
    size_t kb = (src->k + 31) / 32;
    for (size_t n = 0; n < src->n; n++)
        for (size_t j = 0; j < kb; j++) {
            float v;
            memcpy(&v, (const float *)src->s + n * src->s_sn + j * src->s_sb, sizeof v);
            if (!krn_q4_scales_fit_bf16(&v, 1))
                return false;
        }
    return true;
}

bool plan_q4_zp_all_8(const uint8_t *zp, uint64_t bytes, uint64_t n, uint64_t k_blocks)
{
    /* Rows of (k_blocks + 1) / 2 bytes; an odd count leaves the last high nibble unused. */
    uint64_t row = (k_blocks + 1) / 2;
    if (!zp || bytes != n * row)
        return false;
    for (uint64_t r = 0; r < n; r++)
        for (uint64_t j = 0; j < k_blocks; j++)
            if (((zp[r * row + j / 2] >> (4 * (j & 1))) & 15) != 8)
                return false;
    return true;
}

bool plan_q8_zp_all_128(const uint8_t *zp, uint64_t bytes)
{
    if (!zp)
        return false;
    for (uint64_t i = 0; i < bytes; i++)
        if (zp[i] != 128)
            return false;
    return true;
}

/* Nibble i of a 4-bit tensor. */
static inline unsigned nib(const uint8_t *t, uint64_t i)
{
    return (t[i / 2] >> (4 * (i & 1))) & 15;
}

/*
 * Columns n0 .. n1 of a lowered weight in MatMulNBits' layout, the first at
 * index 0: codes [n, k_blocks, 16] (the padding of a last partial block 0),
 * fp32 scales [n * k_blocks], and unless ZP is NULL the zero points
 * [n, (k_blocks + 1) / 2] packed two per byte.
 */
void plan_q4_fill(const q4_src *src, size_t n0, size_t n1, uint8_t *b, float *scales, uint8_t *zp)
{
    size_t kb = (src->k + 31) / 32, zb = (kb + 1) / 2;
    for (size_t n = n0; n < n1; n++) {
        uint8_t *row = b + (n - n0) * kb * 16;
        memset(row, 0, kb * 16);
        for (size_t k = 0; k < src->k; k++)
            row[k / 2] |= (uint8_t)(nib(src->q, n * src->q_sn + k * src->q_sk) << (4 * (k & 1)));
        for (size_t j = 0; j < kb; j++) {
            uint64_t i = n * src->s_sn + j * src->s_sb;
            if (src->s_dtype == ENG_DT_BFLOAT16) {
                uint16_t h;
                memcpy(&h, (const uint16_t *)src->s + i, sizeof h);
                uint32_t u = (uint32_t)h << 16;
                memcpy(&scales[(n - n0) * kb + j], &u, sizeof u);
            } else {
                memcpy(&scales[(n - n0) * kb + j], (const float *)src->s + i, sizeof(float));
            }
        }
        if (zp) {
            memset(zp + (n - n0) * zb, 0, zb);
            for (size_t j = 0; j < kb; j++)
                zp[(n - n0) * zb + j / 2] |= (uint8_t)(nib(src->z, n * src->z_sn + j * src->z_sb) << (4 * (j & 1)));
        }
    }
}

/*
 * Bytes of krn_q4_pack for a MatMulNBits node as its attributes, scales and
 * zero points describe it, or for a lowered DequantizeLinear weight as the
 * lowering found it (0 when the packed form does not apply), in *bf16 the
 * form of its scales and in *zp_rec whether its records hold zero points:
 * zero points that are all 8 pack as none (the same bits, smaller records),
 * others into the records (packed_zp), which prep_mmnb and plan_prep_q4
 * then read from here.
 */
static size_t node_pack_size(const eng_plan *p, size_t i, bool *bf16, bool *zp_rec)
{
    int cached = plan_prep_bf16(p, i); /* the scale form the cache recorded: no scan of the scales */
    const eng_node *n = &p->g->nodes[i];
    const step *s = &p->steps[i];
    *bf16 = false;
    *zp_rec = false;
    if (s->op == &op_matmulnbits && s->p.mmnb.qdq) {
        const q4_src *src = s->p.mmnb.qdq;
        if (p->opts.matmul_fp32 || !p->krn.q4_packed)
            return 0;
        *bf16 = cached >= 0 ? cached : plan_q4_scales_bf16(src);
        *zp_rec = !src->zp_all_8;
        krn_q4_weights w = {.n = src->n, .k = src->k, .block_size = 32, .packed_bf16 = *bf16,
                            .packed_zp = *zp_rec};
        krn_q4_weights_set_blocks(&w);
        return (krn_q4_pack_size(&w) + ALIGN - 1) / ALIGN * ALIGN;
    }
    int64_t bs = eng_node_attr_int(n, "block_size", 0), bits = eng_node_attr_int(n, "bits", 4);
    if (strcmp(n->op_type, "MatMulNBits") || !(bits == 4 || (bits == 8 && p->krn.q8_packed)) || bs < 16 ||
        (bs & (bs - 1)) || eng_node_attr_int(n, "accuracy_level", 0) != 4)
        return 0;
    int64_t N = eng_node_attr_int(n, "N", 0), K = eng_node_attr_int(n, "K", 0);
    mmnb_sizes z;
    const eng_tensor *scales, *zp = NULL;
    bool has_zp = n->n_inputs > 3 && n->input_values[3] >= 0;
    /* Only a node prep_mmnb will accept counts, so no size below overflows. */
    if (N <= 0 || K <= 0 || !mmnb_sizes_of(K, N, bs, (int)bits, &z) || !node_init(p, n, 1, ENG_DT_UINT8, z.b_bytes) ||
        !(scales = node_init(p, n, 2, ENG_DT_FLOAT, z.n_scales)) ||
        (has_zp && !(zp = node_init(p, n, 3, ENG_DT_UINT8, z.zp_bytes))))
        return 0;
    *bf16 = cached >= 0 ? cached : node_scales_bf16(scales);
    *zp_rec = zp && !(bits == 8 ? plan_q8_zp_all_128(zp->data, zp->n_elems)
                                : plan_q4_zp_all_8(zp->data, zp->n_elems, z.n_scales / z.kb, z.kb));
    krn_q4_weights w = {.n = (size_t)N, .k = (size_t)K, .block_size = (size_t)bs, .packed_bf16 = *bf16,
                        .packed_zp = *zp_rec, .bits8 = bits == 8};
    krn_q4_weights_set_blocks(&w);
    return (krn_q4_pack_size(&w) + ALIGN - 1) / ALIGN * ALIGN;
}

/*
 * The sizing pass of the arena below, once per plan: every node's packed
 * bytes, scale form and zero-point form, so each node's scales and zero
 * points are read once for it (twice when a prepared cache is dropped). False
 * when out of memory.
 */
bool plan_size_packs(plan_builder *b)
{
    if (b->pack_sized)
        return true;
    const eng_graph *g = b->p->g;
    b->scales_bf16 = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *b->scales_bf16);
    b->zp_records = calloc(g->n_nodes ? g->n_nodes : 1, sizeof *b->zp_records);
    if (!b->scales_bf16 || !b->zp_records)
        return false;
    plan_prep_open(b->p);
    /* An overflowing total cannot be allocated: packed_slot() then fails the node naming it. */
    for (int pass = 0; pass < 2; pass++) {
        size_t packed = 0, cached = 0;
        b->pack_total = 0;
        for (size_t i = 0; i < g->n_nodes; i++) {
            size_t bytes = node_pack_size(b->p, i, &b->scales_bf16[i], &b->zp_records[i]);
            packed += bytes > 0;
            cached += bytes > 0 && plan_prep_bf16(b->p, i) >= 0;
            if (!ck_add_u64(b->pack_total, bytes, &b->pack_total))
                b->pack_total = UINT64_MAX;
        }
        /* A cache whose matrices are not exactly these is not used; the scale forms are then read. */
        if (!plan_prep_mapped(b->p) || (cached == packed && plan_prep_arena(b->p, b->pack_total)))
            break;
        plan_prep_drop(b->p, "its table does not list this plan's packed matrices");
    }
    b->pack_sized = true;
    return true;
}

/*
 * Room for the next packed matrix. All packed weights of a plan share one
 * allocation, sized up front from the graph's MatMulNBits attributes, so the
 * whole set sits on huge pages (most matrices are a few MiB, too small to get
 * them on their own) and is faulted in with a few hundred faults. Matrices
 * are carved in step order after the last one packed; whatever does not fit
 * (a node the sizing pass counted differently) gets its own buffer. *counted
 * is the number of bytes this call newly allocated.
 */
void *plan_packed_slot(plan_builder *b, const step *s, size_t bytes, uint64_t *counted)
{
    eng_plan *p = b->p;
    size_t total = (size_t)b->pack_total; /* plan_size_packs() has run */
    /* The arena is the first packed matrix's buffer; only matrices inside it count for the next offset. */
    uintptr_t base = 0, used = 0;
    for (const step *t = p->steps; t < s; t++) {
        if (!t->op || t->op != &op_matmulnbits || !t->p.mmnb.w.packed)
            continue;
        uintptr_t q = (uintptr_t)t->p.mmnb.w.packed;
        if (!base)
            base = q;
        if (q >= base && q - base < total) {
            uintptr_t e = q - base + (krn_q4_pack_size(&t->p.mmnb.w) + ALIGN - 1) / ALIGN * ALIGN;
            used = e > used ? e : used;
        }
    }
    *counted = 0;
    if (base && used + bytes <= total)
        return (void *)(base + used);
    size_t want = base ? bytes : (total >= bytes ? total : bytes);
    /* The arena: mapped from the prepared-weights cache when it holds this plan's, else allocated. */
    void *buf = base ? NULL : plan_prep_arena(p, total);
    if (buf) {
        p->pack_base = buf;
        p->pack_total = total;
        *counted = want;
        return buf;
    }
    buf = plan_alloc_weights(want);
    if (!plan_own(p, buf))
        return NULL;
    if (!base) {
        p->pack_base = buf;
        p->pack_total = total;
    }
    *counted = want;
    return buf;
}

/*
 * Repacks every MatMulNBits that prep_mmnb gave a packed buffer. Loading is
 * bound by reading the weights from the mapped file and faulting in the new
 * buffer, so the matrices are spread over one thread per online CPU (largest
 * first to the least loaded thread; up to 8), created for this and joined.
 */
typedef struct pack_job {
    step **steps;
    size_t n;
    _Atomic uint64_t *done;   /* packed bytes of all jobs */
    const eng_plan_opts *report; /* set for the caller's own job: it tells opts->progress */
    uint64_t total;
    bool failed; /* a lowered weight's tile buffers could not be allocated */
} pack_job;

/*
 * A lowered DequantizeLinear weight: its packed form one tile of columns at
 * a time (each tile's columns gathered into MatMulNBits' layout first), or
 * its whole copy in that layout.
 */
static bool pack_qdq(mmnb_params *m)
{
    const q4_src *src = m->qdq;
    size_t kb = m->w.k_blocks;
    if (!m->w.packed) {
        plan_q4_fill(src, 0, src->n, (uint8_t *)m->w.b_data, (float *)m->w.scales, (uint8_t *)m->w.zero_pts);
        return true;
    }
    bool zp = m->w.packed_zp;
    size_t tile = krn_q4_pack_size(&(krn_q4_weights){.n = 1, .k = m->w.k, .block_size = 32, .k_blocks = kb,
                                                     .packed_bf16 = m->w.packed_bf16, .packed_zp = zp});
    uint8_t *tb = malloc(KRN_Q4_PACK_TILE * 16 * kb);
    float *ts = malloc(KRN_Q4_PACK_TILE * sizeof(float) * kb);
    uint8_t *tz = zp ? malloc(KRN_Q4_PACK_TILE * ((kb + 1) / 2)) : NULL;
    bool ok = tb && ts && (!zp || tz);
    for (size_t n0 = 0; ok && n0 < src->n; n0 += KRN_Q4_PACK_TILE) {
        size_t n1 = n0 + KRN_Q4_PACK_TILE < src->n ? n0 + KRN_Q4_PACK_TILE : src->n;
        plan_q4_fill(src, n0, n1, tb, ts, tz);
        krn_q4_weights t = {.b_data = tb, .scales = ts, .zero_pts = tz, .n = n1 - n0, .k = m->w.k,
                            .block_size = 32, .k_blocks = kb, .packed_bf16 = m->w.packed_bf16, .packed_zp = zp};
        krn_q4_pack(&t, (uint8_t *)m->w.packed + n0 / KRN_Q4_PACK_TILE * tile);
    }
    free(tb);
    free(ts);
    free(tz);
    return ok;
}

/* False when out of memory (a lowered weight's tile buffers). */
static bool pack_one(step *s)
{
    mmnb_params *m = &s->p.mmnb;
    if (m->qdq) {
        if (!pack_qdq(m))
            return false;
        for (int i = 0; i < 3; i++)
            plan_release_mapped(m->qdq->tensors[i]);
        m->qdq = NULL;
        return true;
    }
    krn_q4_pack(&m->w, (void *)m->w.packed);
    /* The kernels now stream the copy; the mapped originals need not stay resident. */
    plan_release_mapped(m->pack_b);
    plan_release_mapped(m->pack_scales);
    plan_release_mapped(m->pack_zp);
    m->pack_b = m->pack_scales = m->pack_zp = NULL;
    return true;
}

static void *pack_thread(void *arg)
{
    pack_job *j = arg;
    for (size_t i = 0; i < j->n; i++) {
        j->failed |= !pack_one(j->steps[i]);
        uint64_t bytes = krn_q4_pack_size(&j->steps[i]->p.mmnb.w);
        uint64_t d = atomic_fetch_add(j->done, bytes) + bytes;
        if (j->report && j->report->progress)
            j->report->progress(j->report->progress_ctx, d, j->total);
    }
    return NULL;
}

static int cmp_pack_size(const void *a, const void *b)
{
    size_t x = krn_q4_pack_size(&(*(step *const *)a)->p.mmnb.w), y = krn_q4_pack_size(&(*(step *const *)b)->p.mmnb.w);
    return x < y ? 1 : x > y ? -1 : 0;
}

static bool needs_pack(const step *s)
{
    return s->op && s->op == &op_matmulnbits && (s->p.mmnb.pack_b || s->p.mmnb.qdq);
}

bool plan_pack_all(eng_plan *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_steps; i++)
        n += needs_pack(&p->steps[i]);
    long cpus = p->opts.pack_threads > 0 ? p->opts.pack_threads : sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = cpus < 1 ? 1 : cpus > 8 ? 8 : (size_t)cpus;
    if (nt > n)
        nt = n ? n : 1;
    step **all = calloc(n + 1, sizeof *all), **slots = calloc(n * nt + 1, sizeof *slots);
    if (!all || !slots) {
        /* no memory for the bookkeeping: one thread, in step order */
        bool ok = true;
        for (size_t i = 0; i < p->n_steps; i++)
            if (needs_pack(&p->steps[i]))
                ok &= pack_one(&p->steps[i]);
        free(all);
        free(slots);
        return ok;
    }
    size_t k = 0;
    for (size_t i = 0; i < p->n_steps; i++)
        if (needs_pack(&p->steps[i]))
            all[k++] = &p->steps[i];
    qsort(all, n, sizeof *all, cmp_pack_size);
    pack_job jobs[8];
    size_t load[8] = {0};
    _Atomic uint64_t done = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += krn_q4_pack_size(&all[i]->p.mmnb.w);
    for (size_t t = 0; t < nt; t++)
        jobs[t] = (pack_job){slots + t * n, 0, &done, t == 0 ? &p->opts : NULL, total, false};
    for (size_t i = 0; i < n; i++) {
        size_t t = 0;
        for (size_t u = 1; u < nt; u++)
            if (load[u] < load[t])
                t = u;
        jobs[t].steps[jobs[t].n++] = all[i];
        load[t] += krn_q4_pack_size(&all[i]->p.mmnb.w);
    }
    pthread_t th[8];
    bool started[8] = {false};
    for (size_t t = 1; t < nt; t++)
        started[t] = pthread_create(&th[t], NULL, pack_thread, &jobs[t]) == 0;
    pack_thread(&jobs[0]);
    for (size_t t = 1; t < nt; t++) {
        if (started[t])
            pthread_join(th[t], NULL);
        else
            pack_thread(&jobs[t]); /* could not start it: do its share here */
    }
    if (p->opts.progress && total)
        p->opts.progress(p->opts.progress_ctx, total, total);
    free(all);
    free(slots);
    bool ok = true;
    for (size_t t = 0; t < nt; t++)
        ok &= !jobs[t].failed;
    return ok;
}

/*
 * Drops the pages of a tensor that lies in a mapped data file from this
 * process's resident set (read-only shared file mapping: a later read faults
 * them back in from the file). Only whole pages inside the tensor are touched.
 */
void plan_release_mapped(const eng_tensor *t)
{
    if (!t || !t->mapped || !t->data)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)t->data + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)t->data + t->nbytes) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void plan_mark_repacked(eng_plan *p, const eng_tensor *t)
{
    if (t && t >= p->inits && t < p->inits + p->g->n_inits)
        p->repacked[t - p->inits] = true;
}

void plan_mark_read_at_run(eng_plan *p, int v)
{
    const eng_graph *g = p->g;
    for (int hops = 0; v >= 0 && (size_t)v < g->n_values && hops < 64; hops++) {
        const eng_value *gv = &g->values[v];
        if (gv->kind == ENG_VALUE_INITIALIZER) {
            p->read_at_run[gv->index] = true;
            return;
        }
        if (gv->kind != ENG_VALUE_NODE_OUTPUT)
            return;
        const eng_node *n = &g->nodes[gv->index];
        const op_def *op = plan_op_find(n->domain, n->op_type); /* a view: its outputs point into input 0 */
        if (!op || !op->places_outputs || n->n_inputs < 1)
            return;
        v = n->input_values[0];
    }
}

bool plan_read_in_place(const eng_plan *p, size_t i)
{
    const eng_tensor *t = &p->inits[i];
    return t->mapped && t->nbytes && (!p->repacked[i] || p->read_at_run[i]) && t->data == p->g->inits[i].data;
}

uint64_t eng_plan_readahead_bytes(const eng_plan *p)
{
    return p->readahead_bytes;
}

uint64_t eng_plan_in_place_bytes(const eng_plan *p)
{
    uint64_t n = 0;
    for (size_t i = 0; i < p->g->n_inits; i++)
        if (plan_read_in_place(p, i))
            n += p->inits[i].nbytes;
    return n;
}

/*
 * Without it, after a cold start every embedding row the first requests meet
 * is a disk read inside a step (about 1 ms each on 0.6b here). The kernel
 * reads ahead at most its readahead window per call, so the range goes in
 * 2 MiB pieces; the reads then run in the background and fill the page cache
 * only, not this process's resident set. A request that comes within the
 * second after a cold load shares the disk with them (README.md: a paced
 * reader on a thread of its own was slower to help and took CPU from the
 * pool). A hint: failures only cost that first latency.
 */
void plan_prefetch_in_place(eng_plan *p)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), piece = (uintptr_t)2 << 20;
    for (size_t i = 0; i < p->g->n_inits; i++) {
        if (!plan_read_in_place(p, i))
            continue;
        p->readahead_bytes += p->inits[i].nbytes;
        uintptr_t lo = (uintptr_t)p->inits[i].data & ~(page - 1), hi = (uintptr_t)p->inits[i].data + p->inits[i].nbytes;
        for (uintptr_t a = lo; a < hi; a += piece)
            madvise((void *)a, hi - a < piece ? hi - a : piece, MADV_WILLNEED);
    }
}
