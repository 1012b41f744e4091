/*
 * kv: the key/value cache of one session.
 *
 * Per layer, keys and values each live in one region laid out [kv_head,
 * token, head_dim] with room for the session's maximum context per kv head:
 * each kv head's rows are one contiguous run, so attention reads each head's
 * past as a sequential stream (a decode step's workers take different kv
 * heads, and one page holds eight rows of one head rather than one row of
 * each), and a new token appends one row at the end of each head's run. The
 * used part of every run is a prefix, so it grows into its reserved address
 * range and nothing stored is ever moved. The whole range for the session's
 * maximum context is mapped at creation (address space only: a page exists
 * once written); "committed" is the account of the rows a session may
 * touch, raised in steps as the cached length grows and checked against its
 * capacity, and bytes reserved and committed are reported for the server's
 * metrics. Elements are fp32, fp16 or q8 (int8 codes with a scale per row,
 * krn_kv_type; a row is then head_dim + 4 bytes).
 *
 * Threads: a cache belongs to one session; the scheduler is its only writer
 * (the compute pool writes rows into it during that session's step).
 */
#ifndef QWEN3D_KVCACHE_KV_H
#define QWEN3D_KVCACHE_KV_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/krn.h"

/* The element type of a cache: the kernels' own, so a cache's type goes to them as is. */
typedef krn_kv_type kv_type;
#define KV_F32 KRN_KV_F32
#define KV_F16 KRN_KV_F16
#define KV_Q8 KRN_KV_Q8

typedef struct kv_cache kv_cache;

typedef struct kv_geometry {
    int64_t layers, kv_heads, head_dim;
    int64_t capacity;      /* tokens */
    kv_type type;
    /* Tokens of address range per kv head (0: the capacity). A larger range
     * costs address space only, and lets a pooled cache serve any capacity
     * up to it (kv_pool). */
    int64_t reserve;
} kv_geometry;

/* Reserves the address range; commits nothing yet. NULL on failure (see kv_bytes_for). */
kv_cache *kv_new(const kv_geometry *geo);
/* The bytes kv_new(GEO) reserves (kv_bytes_reserved of that cache); 0 for a geometry kv_new()
 * refuses: a field <= 0, or sizes that overflow. */
uint64_t kv_bytes_for(const kv_geometry *geo);
/* Returns every page, committed ones included. */
void kv_free(kv_cache *kv);

/*
 * A pool of idle caches whose committed pages stay resident, so a new
 * session writes into pages already touched instead of faulting in fresh
 * ones (a first touch costs a page fault per 4 KiB, far more than the
 * write; on virtual machines with shadow page tables, tens of microseconds
 * each). The pool keeps at most its budget of committed bytes; the bytes of
 * a cache handed out leave it. Any thread (one mutex).
 */
typedef struct kv_pool kv_pool;

/* A pool keeping up to BUDGET committed bytes; NULL: no memory. */
kv_pool *kv_pool_new(uint64_t budget);
/* Frees every pooled cache. NULL is fine. */
void kv_pool_free(kv_pool *p);
/*
 * An empty cache for GEO: the pooled one of the same layers, kv heads, head
 * size, type and a range of at least GEO's capacity with the most committed
 * bytes, else kv_new(GEO). P may be NULL (kv_new). Its rows hold stale
 * values until written; nothing reads a row before it is written.
 */
kv_cache *kv_pool_take(kv_pool *p, const kv_geometry *geo);
/* Keeps KV (emptied) when the pool has room for its committed bytes, else
 * frees it; the oldest pooled caches give way to a newer one. P may be NULL. */
void kv_pool_give(kv_pool *p, kv_cache *kv);
/* Frees pooled caches, oldest first, until the pool holds at most BYTES. Returns the bytes freed. */
uint64_t kv_pool_shrink(kv_pool *p, uint64_t bytes);
uint64_t kv_pool_bytes(const kv_pool *p);
uint64_t kv_pool_budget(const kv_pool *p);
/* Later gives keep at most BYTES (what the pool holds now is not freed: see kv_pool_shrink). */
void kv_pool_set_budget(kv_pool *p, uint64_t bytes);

const kv_geometry *kv_geo(const kv_cache *kv);
/* Bytes per element (1 for q8, whose row of head_dim values is kv_row_elems() = head_dim + 4 long). */
size_t kv_elem_size(kv_type t);
static inline int64_t kv_row_elems(kv_type t, int64_t head_dim)
{
    return (int64_t)krn_kv_row_elems(t, (size_t)head_dim);
}
const char *kv_type_name(kv_type t);
/* Parses "f32" / "f16" / "q8"; 0 or -1. */
int kv_type_parse(const char *s, kv_type *out);

/* Base of layer L's keys / values. Element (t, h, d) is at
 * base + h * kv_head_stride(kv) + t * kv_row_elems(type, head_dim) + d. */
void *kv_keys(kv_cache *kv, int64_t layer);
void *kv_values(kv_cache *kv, int64_t layer);
/* Elements from one kv head's first row to the next one's (at least capacity rows). */
int64_t kv_head_stride(const kv_cache *kv);

/* Cached tokens. */
int64_t kv_length(const kv_cache *kv);
/* Sets the capacity to any count from the length up to the range's tokens: 0, or -1 (unchanged). */
int kv_set_capacity(kv_cache *kv, int64_t capacity);
/*
 * Makes room for tokens [0, new_length): raises the committed account as
 * needed. Returns 0, or -1 if new_length exceeds the capacity.
 * Does not change the length; kv_set_length() does once the rows are written.
 */
int kv_reserve_tokens(kv_cache *kv, int64_t new_length);
void kv_set_length(kv_cache *kv, int64_t length);
/* Forgets the sequence; committed pages stay for reuse. */
void kv_reset(kv_cache *kv);

/*
 * Copies the first TOKENS rows of every kv head's run of SRC into DST (one
 * contiguous copy per run) and sets DST's length to TOKENS: a session that
 * starts from another's prefix. The caches must agree in layers, kv heads,
 * head size and element type; their capacities may differ. Returns the bytes
 * copied, or -1 (nothing copied) on a mismatch, too many tokens or memory
 * that cannot be committed.
 */
int64_t kv_copy_prefix(kv_cache *dst, const kv_cache *src, int64_t tokens);

/*
 * Keeps the rows of the first KEEP tokens and gives the committed pages
 * past them back to the system (the range stays reserved); the length is
 * capped at KEEP. For caches kept idle with only part of their rows worth
 * keeping.
 */
void kv_trim(kv_cache *kv, int64_t keep);

/* Bytes the cache may commit: its capacity's rows (the address range may be larger, see reserve). */
uint64_t kv_bytes_reserved(const kv_cache *kv);
uint64_t kv_bytes_committed(const kv_cache *kv);
/* Bytes one token occupies over all layers, keys and values. */
uint64_t kv_bytes_per_token(const kv_cache *kv);

#endif
