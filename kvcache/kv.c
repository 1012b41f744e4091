/*
 * kv: session key/value storage (see kv.h). Each layer's keys and values
 * are one region of the reserved range, one page-aligned run per kv head;
 * commits grow every run's prefix together in steps of COMMIT_STEP tokens
 * (an account of the pages a session may touch, checked against its
 * capacity). The range is one read-write mapping without reserve, so pages
 * exist only once written: protecting the uncommitted part would split the
 * mapping into two areas per run, and the pool and the prefix cache keep
 * enough idle caches for that to exceed the kernel's limit on mappings per
 * process (vm.max_map_count, 65530 by default). Transparent huge pages are
 * off for it: one would commit 2 MiB of every run at its first row.
 *
 * Threads: see kv.h.
 */
#include "kvcache/kv.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kernels/checked.h"

/* Tokens committed at a time: the account grows in steps, as the pages are touched. */
#define COMMIT_STEP 256

struct kv_cache {
    kv_geometry geo;
    uint8_t *base;          /* reserved range */
    uint64_t range_bytes;   /* its size */
    uint64_t head_bytes;    /* one kv head's run, page aligned */
    uint64_t region_bytes;  /* one layer's keys (or values): kv_heads runs */
    uint64_t page;
    int64_t length;
    int64_t committed;      /* tokens committed in every region */
};

size_t kv_elem_size(kv_type t)
{
    return krn_kv_elem_bytes(t);
}

const char *kv_type_name(kv_type t)
{
    return t == KV_Q8 ? "q8" : t == KV_F16 ? "f16" : "f32";
}

int kv_type_parse(const char *s, kv_type *out)
{
    if (!strcmp(s, "f32"))
        *out = KV_F32;
    else if (!strcmp(s, "f16"))
        *out = KV_F16;
    else if (!strcmp(s, "q8"))
        *out = KV_Q8;
    else
        return -1;
    return 0;
}

static uint64_t round_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

/* Bytes of one token's row in one kv head's run. */
static uint64_t row_bytes(const kv_geometry *geo)
{
    return (uint64_t)krn_kv_row_elems(geo->type, (size_t)geo->head_dim) * kv_elem_size(geo->type);
}

/* Runs in the reserved range: one per kv head, for keys and values of every layer. */
static uint64_t n_runs(const kv_geometry *geo)
{
    return (uint64_t)geo->kv_heads * 2 * (uint64_t)geo->layers;
}

/*
 * One kv head's run (page aligned) and the whole reserved range for GEO, in
 * bytes; false for a geometry with a field <= 0 or whose sizes overflow (the
 * geometry comes from the model file and the context from the configuration,
 * so every product is checked). Once they fit, every smaller product in this
 * file (a row, a region, a committed prefix) fits too.
 */
static bool geo_bytes(const kv_geometry *geo, int64_t tokens, uint64_t page, uint64_t *head_bytes, uint64_t *total)
{
    uint64_t run, runs;
    /* A head size below 2^31 keeps a row (at most 4 bytes per value, 4 more for a q8 scale) well inside 64 bits. */
    if (geo->layers <= 0 || geo->kv_heads <= 0 || geo->head_dim <= 0 || geo->capacity <= 0 || tokens <= 0 ||
        geo->head_dim > INT32_MAX || !ck_mul_u64(row_bytes(geo), (uint64_t)tokens, &run) ||
        !ck_add_u64(run, page - 1, &run) ||
        !ck_mul_u64((uint64_t)geo->kv_heads, 2, &runs) || !ck_mul_u64(runs, (uint64_t)geo->layers, &runs))
        return false;
    *head_bytes = run / page * page;
    return ck_mul_u64(*head_bytes, runs, total);
}

static int64_t range_tokens(const kv_geometry *geo)
{
    return geo->reserve > geo->capacity ? geo->reserve : geo->capacity;
}

uint64_t kv_bytes_for(const kv_geometry *geo)
{
    uint64_t head, total, range;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    return geo_bytes(geo, geo->capacity, page, &head, &total) && geo_bytes(geo, range_tokens(geo), page, &head, &range)
               ? total
               : 0;
}

kv_cache *kv_new(const kv_geometry *geo)
{
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE), head, total;
    if (!kv_bytes_for(geo) || !geo_bytes(geo, range_tokens(geo), page, &head, &total) || total > SIZE_MAX)
        return NULL;
    kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv)
        return NULL;
    kv->geo = *geo;
    kv->page = page;
    kv->head_bytes = head;
    kv->range_bytes = total;
    kv->region_bytes = kv->head_bytes * (uint64_t)geo->kv_heads;
    void *p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        free(kv);
        return NULL;
    }
    madvise(p, total, MADV_NOHUGEPAGE); /* advice only: without it the runs still work */
    kv->base = p;
    return kv;
}

void kv_free(kv_cache *kv)
{
    if (!kv)
        return;
    munmap(kv->base, kv->range_bytes);
    free(kv);
}

const kv_geometry *kv_geo(const kv_cache *kv)
{
    return &kv->geo;
}

void *kv_keys(kv_cache *kv, int64_t layer)
{
    return kv->base + (uint64_t)(2 * layer) * kv->region_bytes;
}

void *kv_values(kv_cache *kv, int64_t layer)
{
    return kv->base + (uint64_t)(2 * layer + 1) * kv->region_bytes;
}

int64_t kv_head_stride(const kv_cache *kv)
{
    return (int64_t)(kv->head_bytes / kv_elem_size(kv->geo.type));
}

int64_t kv_length(const kv_cache *kv)
{
    return kv->length;
}

int kv_set_capacity(kv_cache *kv, int64_t capacity)
{
    if (capacity <= 0 || capacity < kv->length || (uint64_t)capacity > kv->head_bytes / row_bytes(&kv->geo))
        return -1;
    kv->geo.capacity = capacity;
    return 0;
}

int kv_reserve_tokens(kv_cache *kv, int64_t new_length)
{
    if (new_length < 0 || new_length > kv->geo.capacity)
        return -1;
    if (new_length <= kv->committed)
        return 0;
    int64_t want = round_up((uint64_t)new_length, COMMIT_STEP);
    if (want > kv->geo.capacity)
        want = kv->geo.capacity;
    kv->committed = want;
    return 0;
}

void kv_set_length(kv_cache *kv, int64_t length)
{
    kv->length = length;
}

void kv_reset(kv_cache *kv)
{
    kv->length = 0;
}

int64_t kv_copy_prefix(kv_cache *dst, const kv_cache *src, int64_t tokens)
{
    const kv_geometry *a = &dst->geo, *b = &src->geo;
    if (a->layers != b->layers || a->kv_heads != b->kv_heads || a->head_dim != b->head_dim || a->type != b->type ||
        tokens < 0 || tokens > src->length || kv_reserve_tokens(dst, tokens) != 0)
        return -1;
    uint64_t bytes = row_bytes(a) * (uint64_t)tokens;
    for (uint64_t r = 0; r < n_runs(a); r++)
        memcpy(dst->base + r * dst->head_bytes, src->base + r * src->head_bytes, bytes);
    dst->length = tokens;
    return (int64_t)(bytes * n_runs(a));
}

void kv_trim(kv_cache *kv, int64_t keep)
{
    if (keep < 0)
        keep = 0;
    if (keep >= kv->committed) {
        if (kv->length > keep)
            kv->length = keep;
        return;
    }
    uint64_t from = round_up(row_bytes(&kv->geo) * (uint64_t)keep, kv->page);
    uint64_t to = round_up(row_bytes(&kv->geo) * (uint64_t)kv->committed, kv->page);
    if (to > from)
        for (uint64_t r = 0; r < n_runs(&kv->geo); r++) {
            /* The pages go back to the system; the range stays reserved. */
            madvise(kv->base + r * kv->head_bytes + from, to - from, MADV_DONTNEED);
        }
    /* the tokens whose rows lie wholly in the pages kept */
    kv->committed = (int64_t)(from / row_bytes(&kv->geo));
    if (kv->committed > kv->geo.capacity)
        kv->committed = kv->geo.capacity;
    if (kv->length > keep)
        kv->length = keep;
}

uint64_t kv_bytes_reserved(const kv_cache *kv)
{
    /* A pooled cache may hold more committed rows than its new capacity. */
    int64_t t = kv->committed > kv->geo.capacity ? kv->committed : kv->geo.capacity;
    return round_up(row_bytes(&kv->geo) * (uint64_t)t, kv->page) * n_runs(&kv->geo);
}

uint64_t kv_bytes_committed(const kv_cache *kv)
{
    return round_up(row_bytes(&kv->geo) * (uint64_t)kv->committed, kv->page) * n_runs(&kv->geo);
}

uint64_t kv_bytes_per_token(const kv_cache *kv)
{
    return row_bytes(&kv->geo) * n_runs(&kv->geo);
}

/* ---- pool ------------------------------------------------------------------ */

#define POOL_SLOTS 64

struct kv_pool {
    pthread_mutex_t mu;
    uint64_t budget, bytes;
    kv_cache *slot[POOL_SLOTS]; /* oldest first */
    size_t n;
};

kv_pool *kv_pool_new(uint64_t budget)
{
    kv_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return NULL;
    }
    p->budget = budget;
    return p;
}

void kv_pool_free(kv_pool *p)
{
    if (!p)
        return;
    kv_pool_shrink(p, 0);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static bool fits(const kv_cache *kv, const kv_geometry *geo)
{
    const kv_geometry *g = &kv->geo;
    return g->layers == geo->layers && g->kv_heads == geo->kv_heads && g->head_dim == geo->head_dim &&
           g->type == geo->type && geo->capacity > 0 &&
           kv->head_bytes / row_bytes(g) >= (uint64_t)geo->capacity;
}

static void slot_remove(kv_pool *p, size_t i)
{
    p->bytes -= kv_bytes_committed(p->slot[i]);
    memmove(p->slot + i, p->slot + i + 1, (p->n - i - 1) * sizeof *p->slot);
    p->n--;
}

kv_cache *kv_pool_take(kv_pool *p, const kv_geometry *geo)
{
    kv_cache *kv = NULL;
    if (p && kv_bytes_for(geo)) {
        pthread_mutex_lock(&p->mu);
        size_t best = p->n;
        for (size_t i = 0; i < p->n; i++)
            if (fits(p->slot[i], geo) &&
                (best == p->n || kv_bytes_committed(p->slot[i]) > kv_bytes_committed(p->slot[best])))
                best = i;
        if (best < p->n) {
            kv = p->slot[best];
            slot_remove(p, best);
        }
        pthread_mutex_unlock(&p->mu);
    }
    if (!kv)
        return kv_new(geo);
    /* The committed prefix stays (possibly past the new capacity: it is only memory). */
    kv->length = 0;
    kv_set_capacity(kv, geo->capacity); /* fits: checked above */
    kv->geo.reserve = geo->reserve;
    return kv;
}

void kv_pool_give(kv_pool *p, kv_cache *kv)
{
    if (!kv)
        return;
    uint64_t b = kv_bytes_committed(kv);
    if (!p || b == 0 || b > p->budget) {
        kv_free(kv);
        return;
    }
    pthread_mutex_lock(&p->mu);
    while (p->n && (p->n == POOL_SLOTS || p->bytes + b > p->budget)) {
        kv_cache *old = p->slot[0];
        slot_remove(p, 0);
        kv_free(old);
    }
    kv->length = 0;
    p->slot[p->n++] = kv;
    p->bytes += b;
    pthread_mutex_unlock(&p->mu);
}

uint64_t kv_pool_shrink(kv_pool *p, uint64_t bytes)
{
    uint64_t freed = 0;
    if (!p)
        return 0;
    pthread_mutex_lock(&p->mu);
    while (p->n && p->bytes > bytes) {
        kv_cache *old = p->slot[0];
        freed += kv_bytes_committed(old);
        slot_remove(p, 0);
        kv_free(old);
    }
    pthread_mutex_unlock(&p->mu);
    return freed;
}

uint64_t kv_pool_bytes(const kv_pool *p)
{
    if (!p)
        return 0;
    pthread_mutex_lock((pthread_mutex_t *)&p->mu);
    uint64_t b = p->bytes;
    pthread_mutex_unlock((pthread_mutex_t *)&p->mu);
    return b;
}

uint64_t kv_pool_budget(const kv_pool *p)
{
    return p ? p->budget : 0;
}

void kv_pool_set_budget(kv_pool *p, uint64_t bytes)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->budget = bytes;
    pthread_mutex_unlock(&p->mu);
}
