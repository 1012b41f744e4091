/*
 * pool: persistent compute workers (see pool.h). Placement uses hwloc: one
 * participant per physical core of the process's CPU binding, in core
 * order, the caller included.
 *
 * Synchronisation: the driver publishes a job and bumps the generation
 * counter; workers spin on the counter for a short while and then sleep on
 * `wake`. Each participant increments `done` when it finds no work left; the
 * driver spins/sleeps until done == participants - 1. The mutex and the
 * condition variables are touched only when someone sleeps: a worker counts
 * itself in `sleepers` (and the driver flags `driver_waits`) under the
 * mutex before it re-checks and waits, and the other side looks at that
 * count (flag) after its own update, both sequentially consistent, so
 * either the sleeper sees the update or the updater sees the sleeper and
 * signals under the mutex, which the sleeper holds until it waits. With
 * everyone spinning, a step costs the cache lines of the counters only
 * (bench/pool_bench: an empty two-slice step 0.70-0.78 us against 1.68-2.23
 * with the mutex taken on both sides, on a 2-core Zen 5 guest).
 *
 * Work is handed out in grains. With at least GUIDED_MIN grains per
 * participant, each participant owns one contiguous slice and takes it from
 * the front, a quarter of what is left at a time; one that has finished its
 * own takes half of what is left of the fullest other slice, from its back
 * (work stealing). So each thread's ranges follow each other in memory
 * until it steals, and a weight stream breaks (a cold start a DRAM latency
 * long, and the lines prefetched past the range's end wasted) once per
 * steal instead of once per take, while a participant that is slow for a
 * while, or wakes late, still leaves its work to the others. Below
 * GUIDED_MIN, one even slice each.
 */
#include "engine/pool.h"

#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/*
 * How long a waiting thread spins before it sleeps: long enough to cover the
 * gap between two plan steps and between two decode steps (sampling, stop
 * checks), short enough not to burn a core when idle. Waking a sleeping
 * worker takes a futex round trip, tens of microseconds in a virtual machine,
 * which a decode step of ~300 small steps cannot afford; spinning is bounded
 * by time, not by iterations, so it does not depend on the CPU's speed.
 */
#define SPIN_NS 1000000

/* Grains per participant from which a step is handed out in guided ranges. */
#define GUIDED_MIN 8

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Spins until cond(p) holds or SPIN_NS passed; returns whether it holds. */
#define SPIN_UNTIL(cond)                                                         \
    ({                                                                           \
        bool met_ = (cond);                                                      \
        uint64_t t0_ = 0;                                                        \
        for (unsigned i_ = 1; !met_; i_++) {                                     \
            cpu_relax();                                                         \
            met_ = (cond);                                                       \
            if (!met_ && (i_ & 255) == 0) {                                      \
                uint64_t t_ = now_ns();                                          \
                if (!t0_)                                                        \
                    t0_ = t_;                                                    \
                else if (t_ - t0_ > SPIN_NS)                                     \
                    break;                                                       \
            }                                                                    \
        }                                                                        \
        met_;                                                                    \
    })

/* A participant's untaken grains [lo, hi) as lo | hi << 32, on its own cache line. */
typedef struct slice_span {
    _Atomic uint64_t v;
    char pad[64 - sizeof(uint64_t)];
} slice_span;

#define SPAN(lo, hi) ((uint64_t)(lo) | (uint64_t)(hi) << 32)
#define SPAN_LO(v) ((size_t)((v) & 0xFFFFFFFFu))
#define SPAN_HI(v) ((size_t)((v) >> 32))

typedef struct worker {
    eng_pool *pool;
    int index;
    pthread_t thread;
} worker;

struct eng_pool {
    int n;                       /* participants, caller included */
    worker *workers;             /* n - 1 */
    pthread_mutex_t mu;
    pthread_cond_t wake, finished;
    atomic_uint generation;
    atomic_int done;
    atomic_int sleepers;         /* workers counted under mu before they wait on wake */
    atomic_bool driver_waits;    /* set under mu before the driver waits on finished */
    atomic_bool stop;
    /* current job, written by the driver before the generation bump */
    eng_pool_fn fn;
    void *ctx;
    size_t n_items, grain;
    size_t units;                /* grains */
    bool guided;
    slice_span *spans;           /* per participant: its slice's grains not yet taken (guided) */
    hwloc_topology_t topo;
    hwloc_bitmap_t domain;       /* CPUs the process may run on when the pool was made */
    int pinned;                  /* participants actually bound */
};

/* Participant INDEX's even share of the step's grains, [*ub, *ue). */
static void slice_units(const eng_pool *p, int index, size_t *ub, size_t *ue)
{
    size_t units = (p->n_items + p->grain - 1) / p->grain;
    size_t per = units / (size_t)p->n, extra = units % (size_t)p->n;
    *ub = (size_t)index * per + ((size_t)index < extra ? (size_t)index : extra);
    *ue = *ub + per + ((size_t)index < extra ? 1 : 0);
}

/* The same share in items. */
static void slice(const eng_pool *p, int index, size_t *b, size_t *e)
{
    size_t ub, ue;
    slice_units(p, index, &ub, &ue);
    *b = ub * p->grain;
    *e = ue * p->grain;
    if (*b > p->n_items)
        *b = p->n_items;
    if (*e > p->n_items)
        *e = p->n_items;
}

/* Takes the front quarter (at least one grain) of what is left of participant INDEX's slice; false if empty. */
static bool take_own(eng_pool *p, int index, size_t *ub, size_t *ue)
{
    _Atomic uint64_t *sp = &p->spans[index].v;
    uint64_t v = atomic_load_explicit(sp, memory_order_relaxed);
    size_t lo, hi, n;
    do {
        lo = SPAN_LO(v);
        hi = SPAN_HI(v);
        if (lo >= hi)
            return false;
        n = (hi - lo) / 4 ? (hi - lo) / 4 : 1;
    } while (!atomic_compare_exchange_weak_explicit(sp, &v, SPAN(lo + n, hi), memory_order_relaxed,
                                                    memory_order_relaxed));
    *ub = lo;
    *ue = lo + n;
    return true;
}

/* Takes the back half (at least one grain) of what is left of the fullest other slice; false if all are empty. */
static bool steal(eng_pool *p, int index, size_t *ub, size_t *ue)
{
    for (;;) {
        int victim = -1;
        size_t most = 0;
        for (int i = 0; i < p->n; i++) {
            uint64_t v = atomic_load_explicit(&p->spans[i].v, memory_order_relaxed);
            if (i != index && SPAN_HI(v) > SPAN_LO(v) && SPAN_HI(v) - SPAN_LO(v) > most) {
                most = SPAN_HI(v) - SPAN_LO(v);
                victim = i;
            }
        }
        if (victim < 0)
            return false;
        _Atomic uint64_t *sp = &p->spans[victim].v;
        uint64_t v = atomic_load_explicit(sp, memory_order_relaxed);
        size_t lo = SPAN_LO(v), hi = SPAN_HI(v);
        if (lo >= hi)
            continue;
        size_t n = (hi - lo) / 2 ? (hi - lo) / 2 : 1;
        if (atomic_compare_exchange_strong_explicit(sp, &v, SPAN(lo, hi - n), memory_order_relaxed,
                                                    memory_order_relaxed)) {
            *ub = hi - n;
            *ue = hi;
            return true;
        }
    }
}

static void work(eng_pool *p, int index)
{
    size_t b, e;
    if (!p->guided) {
        slice(p, index, &b, &e);
        if (b < e)
            p->fn(p->ctx, b, e);
        return;
    }
    size_t ub, ue;
    while (take_own(p, index, &ub, &ue) || steal(p, index, &ub, &ue)) {
        b = ub * p->grain;
        e = ue * p->grain < p->n_items ? ue * p->grain : p->n_items;
        p->fn(p->ctx, b, e);
    }
}

/* The CPUs this process may run on (the union over its threads), into set. */
static void process_cpus(hwloc_topology_t topo, hwloc_bitmap_t set)
{
    if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0 || hwloc_bitmap_iszero(set))
        hwloc_bitmap_copy(set, hwloc_topology_get_allowed_cpuset(topo));
}

/* The index-th physical core with a CPU in domain, or NULL. */
static hwloc_obj_t core_in(hwloc_topology_t topo, hwloc_const_bitmap_t domain, int index)
{
    hwloc_obj_t core = NULL;
    while ((core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)))
        if (core->cpuset && hwloc_bitmap_intersects(core->cpuset, domain) && index-- == 0)
            return core;
    return NULL;
}

static int cores_in(hwloc_topology_t topo, hwloc_const_bitmap_t domain)
{
    int n = 0;
    while (core_in(topo, domain, n))
        n++;
    return n;
}

static void bind_to_core(eng_pool *p, int index)
{
    if (!p->topo)
        return;
    hwloc_obj_t core = core_in(p->topo, p->domain, index);
    if (!core)
        return; /* more threads than cores: this one keeps the process binding */
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set)
        return;
    hwloc_bitmap_and(set, core->cpuset, p->domain);
    hwloc_bitmap_singlify(set); /* one hardware thread of the core */
    if (hwloc_set_cpubind(p->topo, set, HWLOC_CPUBIND_THREAD) == 0)
        __atomic_fetch_add(&p->pinned, 1, __ATOMIC_RELAXED);
    hwloc_bitmap_free(set);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    eng_pool *p = w->pool;
    bind_to_core(p, w->index);
    unsigned seen = 0;
    for (;;) {
        unsigned gen = seen;
        SPIN_UNTIL((gen = atomic_load_explicit(&p->generation, memory_order_acquire)) != seen ||
                   atomic_load(&p->stop));
        if (gen == seen && !atomic_load(&p->stop)) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((gen = atomic_load(&p->generation)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop))
            return NULL;
        seen = gen;
        work(p, w->index);
        if (atomic_fetch_add(&p->done, 1) + 1 == p->n - 1 && atomic_load(&p->driver_waits)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->finished);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

eng_pool *eng_pool_new(int n_threads, int pin)
{
    if (n_threads < 1)
        n_threads = 1;
    eng_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    if (pin) {
        if (hwloc_topology_init(&p->topo) != 0 || hwloc_topology_load(p->topo) != 0 ||
            !(p->domain = hwloc_bitmap_alloc())) {
            if (p->topo)
                hwloc_topology_destroy(p->topo);
            p->topo = NULL;
        } else {
            process_cpus(p->topo, p->domain); /* before the caller is pinned to one core */
        }
    }
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    p->spans = aligned_alloc(64, (size_t)n_threads * sizeof *p->spans);
    if (!p->workers || !p->spans)
        goto fail;
    bind_to_core(p, 0);
    for (int i = 1; i < n_threads; i++) {
        worker *w = &p->workers[i - 1];
        w->pool = p;
        w->index = i;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            p->n = i; /* the ones started so far */
            goto fail;
        }
    }
    return p;
fail:
    eng_pool_free(p);
    return NULL;
}

void eng_pool_free(eng_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n && p->workers; i++)
        pthread_join(p->workers[i - 1].thread, NULL);
    free(p->workers);
    free(p->spans);
    hwloc_bitmap_free(p->domain);
    if (p->topo)
        hwloc_topology_destroy(p->topo);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->finished);
    free(p);
}

/* A loaded topology, or NULL. */
static hwloc_topology_t topology(void)
{
    hwloc_topology_t t;
    if (hwloc_topology_init(&t) != 0)
        return NULL;
    if (hwloc_topology_load(t) != 0) {
        hwloc_topology_destroy(t);
        return NULL;
    }
    return t;
}

int eng_pool_physical_cores(void)
{
    eng_placement pl;
    eng_pool_placement(&pl);
    return pl.cores;
}

int eng_pool_threads(const eng_pool *p)
{
    return p ? p->n : 1;
}

void eng_pool_run(eng_pool *p, size_t n_items, size_t grain, eng_pool_fn fn, void *ctx)
{
    if (!n_items)
        return;
    if (!grain)
        grain = 1;
    if (!p || p->n == 1 || n_items <= grain) {
        fn(ctx, 0, n_items);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n_items;
    p->grain = grain;
    p->units = (n_items + grain - 1) / grain;
    /* (a span holds 32-bit grain numbers: larger steps are cut statically) */
    p->guided = p->units >= (size_t)GUIDED_MIN * (size_t)p->n && p->units <= 0xFFFFFFFFu;
    if (p->guided)
        for (int i = 0; i < p->n; i++) {
            size_t ub, ue;
            slice_units(p, i, &ub, &ue);
            atomic_store_explicit(&p->spans[i].v, SPAN(ub, ue), memory_order_relaxed);
        }
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_fetch_add(&p->generation, 1); /* publishes the job: the workers load it with acquire */
    if (atomic_load(&p->sleepers)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    work(p, 0);

    if (!SPIN_UNTIL(atomic_load_explicit(&p->done, memory_order_acquire) >= p->n - 1)) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->driver_waits, true);
        while (atomic_load(&p->done) < p->n - 1)
            pthread_cond_wait(&p->finished, &p->mu);
        atomic_store(&p->driver_waits, false);
        pthread_mutex_unlock(&p->mu);
    }
}

void eng_pool_describe(const eng_pool *p, char *buf, size_t len)
{
    if (!p) {
        snprintf(buf, len, "1 thread (caller only)");
        return;
    }
    char cpus[256] = "";
    if (p->topo)
        hwloc_bitmap_list_snprintf(cpus, sizeof cpus, p->domain);
    snprintf(buf, len, "%d threads, %d pinned one per physical core (%d cores in CPUs %s)", p->n,
             __atomic_load_n(&p->pinned, __ATOMIC_RELAXED), p->topo ? cores_in(p->topo, p->domain) : 0,
             p->topo ? cpus : "?");
}

/* ---- placement ------------------------------------------------------------- */

/*
 * Why one process-wide memory policy (hwloc_set_membind, i.e. set_mempolicy
 * MPOL_BIND, inherited by every thread created afterwards) and not per-area
 * binding (hwloc_set_area_membind on each buffer): the memory that decode
 * reads is allocated by several modules: the packed weights by the plan,
 * the KV caches by kvcache (mmap, committed as they grow), activations by
 * the executor, and the page cache behind the mmap'd model file, whose pages
 * follow the policy of the task that faults them in, not a binding set on
 * the mapping. A policy reaches all of them without hooks in each. First
 * touch by threads bound to the node's CPUs would put them there as well
 * while the node has free memory, but would spill to another node without a
 * word when it runs short; MPOL_BIND keeps them on the node (its memory is
 * then the limit, which --kv-budget should respect), and also covers what
 * the loop and tokenizer threads allocate. Page-cache pages of the model
 * that an earlier process already read stay on the node they were read on.
 */

#define MAX_CPU 65535

/* Parses a CPU list ("0-3,8") strictly into set; -1 with a reason in err. */
static int parse_cpus(const char *s, hwloc_bitmap_t set, char *err, size_t errlen)
{
    const char *p = s;
    hwloc_bitmap_zero(set);
    for (;;) {
        unsigned long a, b;
        char *end;
        if (!isdigit((unsigned char)*p))
            goto bad;
        a = strtoul(p, &end, 10);
        b = a;
        p = end;
        if (*p == '-') {
            if (!isdigit((unsigned char)*++p))
                goto bad;
            b = strtoul(p, &end, 10);
            p = end;
        }
        if (a > MAX_CPU || b > MAX_CPU) {
            snprintf(err, errlen, "--cpus '%s': CPU numbers go up to %d", s, MAX_CPU);
            return -1;
        }
        if (a > b) {
            snprintf(err, errlen, "--cpus '%s': the range %lu-%lu is backwards", s, a, b);
            return -1;
        }
        hwloc_bitmap_set_range(set, (unsigned)a, (int)b);
        if (!*p)
            return 0;
        if (*p++ != ',')
            goto bad;
    }
bad:
    snprintf(err, errlen, "--cpus '%s': expected a CPU list such as 0-3,8", s);
    return -1;
}

int eng_pool_place(const char *cpus, int numa_node, char *err, size_t errlen)
{
    int rc = -1;
    hwloc_topology_t t = topology();
    hwloc_bitmap_t cpuset = hwloc_bitmap_alloc(), nodeset = hwloc_bitmap_alloc(), extra = hwloc_bitmap_alloc();
    char l1[256], l2[256];
    if (!t || !cpuset || !nodeset || !extra) {
        snprintf(err, errlen, "cannot read the machine's topology (hwloc)");
        goto fail;
    }
    hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_cpuset(t);
    if (cpus) {
        if (parse_cpus(cpus, cpuset, err, errlen) != 0)
            goto fail;
        hwloc_bitmap_andnot(extra, cpuset, allowed);
        if (!hwloc_bitmap_iszero(extra)) {
            hwloc_bitmap_list_snprintf(l1, sizeof l1, extra);
            hwloc_bitmap_list_snprintf(l2, sizeof l2, allowed);
            snprintf(err, errlen, "--cpus '%s': CPUs %s are not available here (this process may use %s)", cpus, l1, l2);
            goto fail;
        }
    }
    if (numa_node >= 0) {
        hwloc_obj_t node = hwloc_get_numanode_obj_by_os_index(t, (unsigned)numa_node);
        if (!node || !node->cpuset) {
            hwloc_bitmap_list_snprintf(l2, sizeof l2, hwloc_topology_get_allowed_nodeset(t));
            snprintf(err, errlen, "--numa-node %d: no such NUMA node (nodes here: %s)", numa_node, l2);
            goto fail;
        }
        hwloc_bitmap_and(extra, node->cpuset, allowed);
        if (hwloc_bitmap_iszero(extra)) {
            snprintf(err, errlen, "--numa-node %d: the node has no CPU this process may use", numa_node);
            goto fail;
        }
        if (cpus) {
            hwloc_bitmap_andnot(extra, cpuset, node->cpuset);
            if (!hwloc_bitmap_iszero(extra)) {
                hwloc_bitmap_list_snprintf(l1, sizeof l1, extra);
                hwloc_bitmap_list_snprintf(l2, sizeof l2, node->cpuset);
                snprintf(err, errlen, "--cpus '%s': CPUs %s are not on NUMA node %d (its CPUs: %s)", cpus, l1,
                         numa_node, l2);
                goto fail;
            }
        } else {
            hwloc_bitmap_copy(cpuset, extra);
        }
        hwloc_bitmap_only(nodeset, (unsigned)numa_node);
    } else if (cpus) {
        hwloc_cpuset_to_nodeset(t, cpuset, nodeset);
    } else {
        rc = 0; /* nothing asked */
        goto fail;
    }
    if (hwloc_set_cpubind(t, cpuset, HWLOC_CPUBIND_PROCESS) != 0) {
        hwloc_bitmap_list_snprintf(l1, sizeof l1, cpuset);
        snprintf(err, errlen, "cannot bind the process to CPUs %s: %s", l1, strerror(errno));
        goto fail;
    }
    /* The calling thread's policy (set_mempolicy on Linux), which the threads
     * it starts afterwards inherit. */
    if (hwloc_set_membind(t, nodeset, HWLOC_MEMBIND_BIND,
                          HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET | HWLOC_MEMBIND_STRICT) != 0) {
        hwloc_bitmap_list_snprintf(l1, sizeof l1, nodeset);
        snprintf(err, errlen, "cannot bind memory to NUMA node %s: %s", l1, strerror(errno));
        goto fail;
    }
    rc = 0;
fail:
    hwloc_bitmap_free(extra);
    hwloc_bitmap_free(nodeset);
    hwloc_bitmap_free(cpuset);
    if (t)
        hwloc_topology_destroy(t);
    return rc;
}

void eng_pool_placement(eng_placement *out)
{
    memset(out, 0, sizeof *out);
    out->cores = 1;
    snprintf(out->cpus, sizeof out->cpus, "?");
    snprintf(out->mem_nodes, sizeof out->mem_nodes, "?");
    hwloc_topology_t t = topology();
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    hwloc_membind_policy_t policy;
    if (t && set) {
        process_cpus(t, set);
        hwloc_bitmap_list_snprintf(out->cpus, sizeof out->cpus, set);
        int n = cores_in(t, set);
        out->cores = n > 0 ? n : 1;
        if (hwloc_get_membind(t, set, &policy, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) == 0) {
            hwloc_bitmap_list_snprintf(out->mem_nodes, sizeof out->mem_nodes, set);
            out->membind = policy == HWLOC_MEMBIND_BIND;
        }
    }
    hwloc_bitmap_free(set);
    if (t)
        hwloc_topology_destroy(t);
}

void eng_pool_describe_placement(char *buf, size_t len)
{
    eng_placement pl;
    eng_pool_placement(&pl);
    snprintf(buf, len, "cpus %s (%d core%s), memory %s NUMA nodes %s", pl.cpus, pl.cores, pl.cores == 1 ? "" : "s",
             pl.membind ? "bound to" : "first touch on", pl.mem_nodes);
}
