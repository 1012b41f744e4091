/*
 * prefix: a bounded cache of finished sessions' prompt KV state, so a
 * request that starts with tokens another request already prefilled (a
 * chat's next turn, an agent's fixed system prompt and tools) prefills
 * only the rest.
 *
 * An entry is one session's KV cache holding the rows of its first N
 * prompt tokens, and those N ids. Entries are found by the longest common
 * prefix of token ids through a radix tree (one per scope): a lookup walks
 * the new prompt's ids once, token by token, so any prefix length is
 * found exactly, however many entries share its beginning, and an entry
 * whose ids begin another's is the other's ancestor in the tree (a longer
 * entry replaces the shorter one it extends). When the new prompt extends
 * the whole entry (the next turn of the same chat) or shares at least half
 * of it, the entry's storage is handed over, trimmed to the shared rows,
 * and nothing is copied; until the session comes back (eng_prefix_put), a
 * lent entry keeps its shared rows findable, and a hit on them copies them.
 * Otherwise a new session starts from one contiguous copy of the shared
 * rows per kv head and layer. Only prompt rows are kept: a generated token's rows
 * come from the decode arithmetic, and reusing them for a prompt would give
 * other bits than prefilling the same tokens, while prompt rows reused from
 * any prefill give exactly the bits of a cold prefill.
 *
 * Scopes keep tenants apart: a lookup only sees the entries put with the
 * same scope (the API key's name, or "" without keys). The bytes of all
 * entries stay within the cache's budget, least recently used entries
 * evicted first; entries shorter than the minimum length are not kept.
 *
 * Threads: one thread at a time (the compute thread) uses a cache and the
 * sessions it returns.
 */
#ifndef QWEN3D_ENGINE_PREFIX_H
#define QWEN3D_ENGINE_PREFIX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/runner.h"

typedef struct eng_prefix eng_prefix;

typedef struct eng_prefix_stats {
    uint64_t hits, misses;      /* lookups that reused a prefix, or did not */
    uint64_t tokens;            /* prompt tokens reused in all */
    uint64_t evictions;         /* entries dropped for the budget */
    uint64_t copied_bytes;      /* KV bytes copied into new sessions (a handed-over entry copies none) */
    uint64_t bytes;             /* committed KV bytes of the entries now */
    uint64_t entries;
} eng_prefix_stats;

/* A cache for sessions of M within BUDGET bytes, keeping prefixes of at least MIN_TOKENS. NULL: no memory. */
eng_prefix *eng_prefix_new(eng_model *m, uint64_t budget, size_t min_tokens);
/* Frees every entry's session. NULL is fine. */
void eng_prefix_free(eng_prefix *c);

/*
 * A session of CAPACITY tokens whose KV state holds the longest prefix of
 * IDS (N ids) cached under SCOPE, at most N - 1 tokens (the last prompt
 * token is always fed, for its logits) and at least the minimum length:
 * *REUSED is its length (the session's length). NULL when nothing is
 * reusable (a miss, *REUSED = 0) or on failure (DIAG says which); the
 * caller then makes a session of its own.
 */
eng_session *eng_prefix_take(eng_prefix *c, const char *scope, const int64_t *ids, size_t n, int64_t capacity,
                             size_t *reused, eng_diag *diag);

/*
 * Gives S to the cache (ownership taken): its first N rows hold the prompt
 * IDS (N <= its length). The rest of its rows are dropped. Freed at once when
 * N is below the minimum length or an entry already holds a longer prompt
 * that begins with IDS.
 */
void eng_prefix_put(eng_prefix *c, const char *scope, const int64_t *ids, size_t n, eng_session *s);

/*
 * Called before a session is made from fresh memory. A first touch of a page
 * costs far more than a write to a page touched before (tens of microseconds
 * under some hypervisors: about as much per token as prefilling it), and
 * entries keep the pages of finished sessions, so with entries piling up the
 * KV pool runs dry and every new session pays it. So when the pool is
 * empty, the least recently used entry that owns its memory goes to it,
 * unless the entries hold no more than what is kept for hits: half the
 * budget while any of the last 16 lookups hit (a new cache counts as
 * having hit), nothing after 16 misses in a row (prompts that share
 * nothing: the entries only hold memory). Returns true when an entry went.
 */
bool eng_prefix_recycle(eng_prefix *c);

/* Drops least recently used entries until the entries hold at most BYTES. Returns the bytes freed. */
uint64_t eng_prefix_shrink(eng_prefix *c, uint64_t bytes);

void eng_prefix_get_stats(const eng_prefix *c, eng_prefix_stats *out);
uint64_t eng_prefix_budget(const eng_prefix *c);

#endif
