/*
 * sysmem: the memory this process can count on, for `qwen3d serve`'s
 * default KV budget: MemAvailable from /proc/meminfo and, when the process
 * runs in a memory-limited cgroup (systemd's MemoryMax=, a container's
 * limit), that limit minus what the cgroup already uses. A limit set on any
 * ancestor cgroup counts. cgroup v2 and the v1 memory controller are read.
 *
 * Called by cmd_serve at start, on the main thread; no state.
 */
#ifndef QWEN3D_SERVER_SYSMEM_H
#define QWEN3D_SERVER_SYSMEM_H

#include <stdint.h>

typedef struct srv_sysmem {
    uint64_t mem_available;  /* MemAvailable; 0 when unreadable */
    int cgroup_version;      /* 1 or 2 when a cgroup memory limit applies, else 0 */
    char cgroup[256];        /* the process's memory cgroup, e.g. "/system.slice/qwen3d.service" */
    uint64_t cgroup_limit;   /* the smallest limit on its path; 0 = none */
    uint64_t cgroup_usage;   /* its working set: usage less inactive file pages, as the kubelet counts it */
    uint64_t available;      /* the smaller of MemAvailable and limit - usage; 0 = unknown */
} srv_sysmem;

/*
 * Fills OUT from /proc and /sys/fs/cgroup under ROOT (NULL or "" = "/";
 * in tests/serve/qwen3d-hooks, NULL is $QWEN3D_TEST_SYSROOT). Never fails:
 * what cannot be read is left 0.
 */
void srv_sysmem_read(const char *root, srv_sysmem *out);

#endif
