/*
 * pool: the compute pool. Persistent worker threads created once; each
 * parallel step splits its work items among the participants, and the
 * calling thread works as participant 0, so a pool of N threads starts N-1
 * workers. Workers spin briefly for the next step and then sleep on a
 * condition variable.
 *
 * Threads: eng_pool_run() is called by one thread at a time (the thread that
 * drives the plan); workers touch nothing but the ranges they are given.
 */
#ifndef QWEN3D_ENGINE_POOL_H
#define QWEN3D_ENGINE_POOL_H

#include <stddef.h>

typedef struct eng_pool eng_pool;

/* fn processes items [begin, end) of one step; ctx is the step's arguments. */
typedef void (*eng_pool_fn)(void *ctx, size_t begin, size_t end);

/* A pool of n_threads participants (>= 1). pin: bind each thread to its own
 * core, taking the cores this process may run on (its CPU binding, see
 * eng_pool_place) in order, where the platform allows. NULL on failure. */
eng_pool *eng_pool_new(int n_threads, int pin);
/* Physical cores this process may run on (hwloc), at least 1: the default
 * pool size. */
int eng_pool_physical_cores(void);
void eng_pool_free(eng_pool *p);
int eng_pool_threads(const eng_pool *p);

/*
 * Runs fn over [0, n_items) in ranges that are multiples of `grain` items
 * (except the last) and returns when all are done. A step with few grains
 * gives each participant one contiguous slice; in a larger one each takes
 * its own slice front to back in shrinking ranges and then steals from the
 * back of the others' (pool.c), so a core that is slower for a while, or a
 * worker that wakes late, does not hold up the step. fn must give the same
 * result for an item whatever range it comes in. With p == NULL the caller
 * does all the work.
 */
void eng_pool_run(eng_pool *p, size_t n_items, size_t grain, eng_pool_fn fn, void *ctx);

/* One line describing where the threads run, for logs and `inspect`. */
void eng_pool_describe(const eng_pool *p, char *buf, size_t len);

/*
 * Placement of the whole process, for replicas that each own a CPU set or a
 * NUMA node. cpus: a CPU list such as "0-3,8" (Linux CPU numbers, as
 * taskset and /proc/PID/status print them), or NULL; numa_node: a NUMA node
 * number, or -1. With both, the CPUs must belong to the node.
 *
 * Binds every thread of the process to those CPUs (a node alone: its CPUs)
 * and the memory policy of the calling thread to the node (CPUs alone: the
 * nodes local to them). Call it on the main thread before any thread starts
 * and before the model loads: the threads created afterwards inherit both,
 * so the packed weights, the KV caches and the activations are allocated on
 * the node whose cores read them (pool.c says why a policy, not per-area
 * binding). Returns 0, or -1 with one line naming what is wrong in err.
 */
int eng_pool_place(const char *cpus, int numa_node, char *err, size_t errlen);

/* The binding the kernel reports for the calling thread: for `inspect`, the
 * start log and tests. */
typedef struct eng_placement {
    char cpus[256];      /* CPUs the process may run on, as a list ("0-1") */
    int cores;           /* physical cores among them */
    char mem_nodes[64];  /* NUMA nodes its memory comes from, as a list */
    int membind;         /* 1: bound to mem_nodes; 0: the kernel's default (first touch) */
} eng_placement;
void eng_pool_placement(eng_placement *out);
/* The same as one line: "cpus 0-1 (2 cores), memory bound to NUMA node 0". */
void eng_pool_describe_placement(char *buf, size_t len);

#endif
