/*
 * prefix: the prompt-prefix cache (see prefix.h).
 *
 * Each scope has a radix tree over token ids. A node's edge holds its own
 * copy of the ids that lead to it from its parent; an entry hangs at the
 * node where its ids end, so every entry below a node shares the ids from
 * the root to that node. Entries are also on one list in order of use, for
 * the least-recently-used eviction.
 *
 * Threads: see prefix.h.
 */
#include "engine/prefix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pentry pentry;

typedef struct pnode {
    int64_t *label;           /* the ids on the edge from the parent */
    size_t len;
    size_t depth;             /* ids from the root to the end of this node */
    struct pnode *parent;
    struct pnode **kids;
    size_t n_kids, cap_kids;
    pentry *entry;            /* an entry whose ids end here, or NULL */
} pnode;

struct pentry {
    pnode *node;
    struct scope_tree *tree;
    eng_session *s;           /* holds the rows of the node's depth in tokens */
    /* S is a running generation's, handed over by a hit: its rows below the
     * node's depth are never rewritten while it runs, so later hits copy
     * them; it comes back through eng_prefix_put. Such an entry owns no
     * memory (bytes 0) and never frees S. */
    bool lent;
    uint64_t bytes;
    pentry *prev, *next;      /* use order: head = most recent */
};

/*
 * Lookups that must all miss before any entry is given to an empty KV pool
 * (eng_prefix_recycle). A new cache counts as having hit, so a fresh daemon
 * keeps its first conversations' prefixes.
 */
#define RECENT_LOOKUPS 16
#define RECENT_MASK ((1u << RECENT_LOOKUPS) - 1)

typedef struct scope_tree {
    char *scope;
    pnode root;
} scope_tree;

struct eng_prefix {
    eng_model *m;
    uint64_t budget;
    size_t min_tokens;
    scope_tree **trees;
    size_t n_trees;
    pentry *head, *tail;
    eng_prefix_stats st;
    uint32_t recent;          /* the last RECENT_LOOKUPS lookups, the newest in bit 0: 1 = a hit */
};

/* ---- radix tree ----------------------------------------------------------------- */

static void node_free(pnode *n)
{
    for (size_t i = 0; i < n->n_kids; i++) {
        node_free(n->kids[i]);
        free(n->kids[i]);
    }
    free(n->kids);
    free(n->label);
}

static bool add_kid(pnode *p, pnode *k)
{
    if (p->n_kids == p->cap_kids) {
        size_t cap = p->cap_kids ? 2 * p->cap_kids : 4;
        pnode **kids = realloc(p->kids, cap * sizeof *kids);
        if (!kids)
            return false;
        p->kids = kids;
        p->cap_kids = cap;
    }
    p->kids[p->n_kids++] = k;
    k->parent = p;
    return true;
}

static void drop_kid(pnode *p, const pnode *k)
{
    for (size_t i = 0; i < p->n_kids; i++)
        if (p->kids[i] == k) {
            p->kids[i] = p->kids[--p->n_kids];
            return;
        }
}

/* The kid of P whose edge starts with ID, or NULL. */
static pnode *kid_for(const pnode *p, int64_t id)
{
    for (size_t i = 0; i < p->n_kids; i++)
        if (p->kids[i]->label[0] == id)
            return p->kids[i];
    return NULL;
}

/* Splits N's edge after K ids (0 < K < len): a new node between N's parent and N. */
static pnode *split(pnode *n, size_t k)
{
    pnode *mid = calloc(1, sizeof *mid);
    int64_t *head = mid ? malloc(k * sizeof *head) : NULL;
    int64_t *tail = head ? malloc((n->len - k) * sizeof *tail) : NULL;
    if (!tail) {
        free(head);
        free(mid);
        return NULL;
    }
    memcpy(head, n->label, k * sizeof *head);
    memcpy(tail, n->label + k, (n->len - k) * sizeof *tail);
    pnode *parent = n->parent;
    mid->label = head;
    mid->len = k;
    mid->depth = n->depth - n->len + k;
    if (!add_kid(mid, n)) {
        free(head);
        free(tail);
        free(mid);
        return NULL;
    }
    for (size_t i = 0; i < parent->n_kids; i++)
        if (parent->kids[i] == n)
            parent->kids[i] = mid;
    mid->parent = parent;
    free(n->label);
    n->label = tail;
    n->len -= k;
    return mid;
}

/* The node at which IDS end, created (with edges split) as needed; NULL out of memory. */
static pnode *insert_path(pnode *root, const int64_t *ids, size_t n)
{
    pnode *cur = root;
    size_t i = 0;
    while (i < n) {
        pnode *k = kid_for(cur, ids[i]);
        if (!k) {
            pnode *leaf = calloc(1, sizeof *leaf);
            int64_t *label = leaf ? malloc((n - i) * sizeof *label) : NULL;
            if (!label || !add_kid(cur, leaf)) {
                free(label);
                free(leaf);
                return NULL;
            }
            memcpy(label, ids + i, (n - i) * sizeof *label);
            leaf->label = label;
            leaf->len = n - i;
            leaf->depth = n;
            return leaf;
        }
        size_t j = 0;
        while (j < k->len && i + j < n && k->label[j] == ids[i + j])
            j++;
        if (j < k->len) {
            k = split(k, j);
            if (!k)
                return NULL;
        }
        i += j;
        cur = k;
    }
    return cur;
}

/*
 * How far IDS go down the tree: the deepest node reached or entered
 * (*node) and the ids matched (*depth). Every entry at or below *node
 * shares those ids.
 */
static void walk(pnode *root, const int64_t *ids, size_t n, pnode **node, size_t *depth)
{
    pnode *cur = root;
    size_t i = 0;
    for (;;) {
        pnode *k = i < n ? kid_for(cur, ids[i]) : NULL;
        if (!k)
            break;
        size_t j = 0;
        while (j < k->len && i + j < n && k->label[j] == ids[i + j])
            j++;
        i += j;
        cur = k;
        if (j < k->len)
            break;
    }
    *node = cur;
    *depth = i;
}

/* The most recently used entry at or below N, lent or not as LENT says
 * (entries are few: a full walk is cheap). */
static pentry *recent_below(const pnode *n, const eng_prefix *c, bool lent)
{
    pentry *best = NULL;
    for (pentry *e = c->head; e; e = e->next) {
        if (e->lent != lent)
            continue;
        for (const pnode *p = e->node; p; p = p->parent)
            if (p == n) {
                best = e;
                break;
            }
        if (best)
            break;
    }
    return best;
}

/* Removes empty nodes upward from N and merges a node left with one kid into it. */
static void prune(pnode *n)
{
    while (n->parent && !n->entry && n->n_kids == 0) {
        pnode *p = n->parent;
        drop_kid(p, n);
        node_free(n);
        free(n);
        n = p;
    }
    if (n->parent && !n->entry && n->n_kids == 1) {
        pnode *k = n->kids[0];
        int64_t *label = malloc((n->len + k->len) * sizeof *label);
        if (!label)
            return; /* an unmerged node is still a correct tree */
        memcpy(label, n->label, n->len * sizeof *label);
        memcpy(label + n->len, k->label, k->len * sizeof *label);
        free(k->label);
        k->label = label;
        k->len += n->len;
        pnode *p = n->parent;
        for (size_t i = 0; i < p->n_kids; i++)
            if (p->kids[i] == n)
                p->kids[i] = k;
        k->parent = p;
        free(n->label);
        free(n->kids);
        free(n);
    }
}

/* ---- entries ---------------------------------------------------------------- */

static void lru_unlink(eng_prefix *c, pentry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        c->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_front(eng_prefix *c, pentry *e)
{
    e->next = c->head;
    e->prev = NULL;
    if (c->head)
        c->head->prev = e;
    c->head = e;
    if (!c->tail)
        c->tail = e;
}

/* Takes E out of the cache; its session is returned, not freed. */
static eng_session *detach(eng_prefix *c, pentry *e)
{
    eng_session *s = e->s;
    lru_unlink(c, e);
    e->node->entry = NULL;
    prune(e->node);
    c->st.bytes -= e->bytes;
    c->st.entries--;
    free(e);
    return s;
}

/* Takes E out of the cache and frees its session, unless it is lent. */
static void drop(eng_prefix *c, pentry *e)
{
    bool lent = e->lent;
    eng_session *s = detach(c, e);
    if (!lent)
        eng_session_free(s);
}

static scope_tree *tree_for(eng_prefix *c, const char *scope, bool create)
{
    for (size_t i = 0; i < c->n_trees; i++)
        if (!strcmp(c->trees[i]->scope, scope))
            return c->trees[i];
    if (!create)
        return NULL;
    scope_tree **trees = realloc(c->trees, (c->n_trees + 1) * sizeof *trees);
    if (!trees)
        return NULL;
    c->trees = trees;
    scope_tree *t = calloc(1, sizeof *t);
    if (!t || !(t->scope = strdup(scope))) {
        free(t);
        return NULL;
    }
    c->trees[c->n_trees++] = t;
    return t;
}

eng_prefix *eng_prefix_new(eng_model *m, uint64_t budget, size_t min_tokens)
{
    eng_prefix *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->m = m;
    c->budget = budget;
    c->recent = RECENT_MASK;
    c->min_tokens = min_tokens ? min_tokens : 1;
    return c;
}

void eng_prefix_free(eng_prefix *c)
{
    if (!c)
        return;
    while (c->head)
        drop(c, c->head);
    for (size_t i = 0; i < c->n_trees; i++) {
        node_free(&c->trees[i]->root);
        free(c->trees[i]->scope);
        free(c->trees[i]);
    }
    free(c->trees);
    free(c);
}

/* Drops E to make room; a lent entry's session lives on with its borrower, so that is no eviction. */
static void evict(eng_prefix *c, pentry *e)
{
    if (!e->lent)
        c->st.evictions++;
    drop(c, e);
}

uint64_t eng_prefix_shrink(eng_prefix *c, uint64_t bytes)
{
    uint64_t freed = 0;
    while (c->tail && c->st.bytes > bytes) {
        freed += c->tail->bytes;
        evict(c, c->tail);
    }
    return freed;
}

bool eng_prefix_recycle(eng_prefix *c)
{
    if (eng_model_kv_pool_bytes(c->m) > 0)
        return false;
    uint64_t keep = c->recent ? c->budget / 2 : 0;
    for (pentry *e = c->tail; e && c->st.bytes > keep; e = e->prev)
        if (!e->lent) {
            evict(c, e);
            return true;
        }
    return false;
}

/*
 * Leaves a lent entry for S, a session handed over with the rows of IDS (N
 * ids), at the node where they end, unless an entry already ends there.
 */
static void lend(eng_prefix *c, scope_tree *t, const int64_t *ids, size_t n, eng_session *s)
{
    pnode *at = insert_path(&t->root, ids, n);
    if (!at || at->entry) {
        if (at)
            prune(at);
        return;
    }
    pentry *e = calloc(1, sizeof *e);
    if (!e) {
        prune(at);
        return;
    }
    *e = (pentry){.node = at, .tree = t, .s = s, .lent = true};
    at->entry = e;
    lru_front(c, e);
    c->st.entries++;
}

/*
 * Whether the hit of DEPTH tokens on E takes E's storage rather than a copy
 * of its rows: when the prompt extends the whole entry, or shares at least
 * half of it (the entry's other rows are dropped: the rest of one earlier
 * prompt, worth less than a copy of the shared part), and the storage's
 * range holds CAPACITY tokens.
 */
static bool hand_over(const pentry *e, size_t depth, int64_t capacity)
{
    if (2 * depth < e->node->depth)
        return false;
    return eng_session_capacity(e->s) >= capacity || eng_session_set_capacity(e->s, capacity) == 0;
}

eng_session *eng_prefix_take(eng_prefix *c, const char *scope, const int64_t *ids, size_t n, int64_t capacity,
                             size_t *reused, eng_diag *diag)
{
    *reused = 0;
    scope_tree *t = tree_for(c, scope ? scope : "", false);
    pnode *node = NULL;
    size_t depth = 0;
    if (t && n > 1)
        walk(&t->root, ids, n - 1, &node, &depth);
    pentry *e = depth >= c->min_tokens ? recent_below(node, c, false) : NULL;
    pentry *lent = depth >= c->min_tokens && !e ? recent_below(node, c, true) : NULL;
    c->recent = (c->recent << 1 | (e || lent)) & RECENT_MASK;
    if (!e && !lent) {
        c->st.misses++;
        return NULL;
    }
    eng_session *s;
    if (e && hand_over(e, depth, capacity)) {
        /* Its storage goes on, nothing is copied; until it comes back, later hits copy from it. */
        s = detach(c, e);
        eng_session_truncate(s, (int64_t)depth);
        lend(c, t, ids, depth, s);
    } else {
        pentry *from = e ? e : lent;
        s = eng_session_new(c->m, capacity, diag);
        if (!s || eng_session_copy_prefix(s, from->s, (int64_t)depth, diag) != 0) {
            eng_session_free(s);
            return NULL;
        }
        c->st.copied_bytes += eng_session_kv_bytes_moved(s);
        lru_unlink(c, from);
        lru_front(c, from);
    }
    c->st.hits++;
    c->st.tokens += depth;
    *reused = depth;
    return s;
}

void eng_prefix_put(eng_prefix *c, const char *scope, const int64_t *ids, size_t n, eng_session *s)
{
    if (!s)
        return;
    if (n > (size_t)eng_session_length(s))
        n = (size_t)eng_session_length(s);
    /* A session handed over by a hit comes back: its lent entry goes. */
    for (pentry *e = c->head; e; e = e->next)
        if (e->lent && e->s == s) {
            detach(c, e);
            break;
        }
    scope_tree *t = n >= c->min_tokens ? tree_for(c, scope ? scope : "", true) : NULL;
    pnode *node = NULL;
    size_t depth = 0;
    if (t)
        walk(&t->root, ids, n, &node, &depth);
    /* An entry already holds a longer prompt that begins with these ids: it serves them. */
    pentry *longer = t && depth == n ? recent_below(node, c, false) : NULL;
    if (!longer && t && depth == n)
        longer = recent_below(node, c, true);
    if (!t || (longer && longer->node->depth >= n)) {
        if (longer) {
            lru_unlink(c, longer);
            lru_front(c, longer);
        }
        eng_session_free(s);
        return;
    }
    eng_session_truncate(s, (int64_t)n);
    pentry *e = calloc(1, sizeof *e);
    pnode *at = e ? insert_path(&t->root, ids, n) : NULL;
    if (!at) {
        free(e);
        eng_session_free(s);
        return;
    }
    e->node = at;
    e->tree = t;
    e->s = s;
    e->bytes = eng_session_kv_bytes_committed(s);
    /* Entries whose ids begin these ones (on the path from the root) are served by this one now.
     * The new entry hangs at its node first, so pruning their nodes leaves it in place. */
    pentry *older = at->entry;
    at->entry = e;
    if (older) {
        lru_unlink(c, older);
        c->st.bytes -= older->bytes;
        c->st.entries--;
        if (!older->lent)
            eng_session_free(older->s);
        free(older);
    }
    for (;;) {
        pentry *up = NULL;
        for (pnode *p = at->parent; p && !up; p = p->parent)
            up = p->entry;
        if (!up)
            break;
        drop(c, up);
    }
    lru_front(c, e);
    c->st.bytes += e->bytes;
    c->st.entries++;
    eng_prefix_shrink(c, c->budget);
}

void eng_prefix_get_stats(const eng_prefix *c, eng_prefix_stats *out)
{
    *out = c->st;
}

uint64_t eng_prefix_budget(const eng_prefix *c)
{
    return c->budget;
}
