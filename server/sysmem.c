/*
 * sysmem: MemAvailable and the cgroup memory limit (see sysmem.h).
 *
 * /proc/self/cgroup names the process's cgroup: "0::/path" for cgroup v2,
 * "N:memory:/path" (the controller may share its line with others) for the
 * v1 memory controller, which wins on hybrid systems where v2 carries no
 * controllers. The path is looked up below the controller's mount; inside a
 * cgroup namespace it is "/" and the mount is the container's own cgroup,
 * and a container that sees its host path without the directories below
 * the mount has its own cgroup there too.
 * Limits at or above 2^62 bytes mean "none" (v1 writes 0x7ffffffffffff000).
 *
 * Main thread, at start; no state.
 */
#include "server/sysmem.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define NO_LIMIT (UINT64_C(1) << 62)

/* ROOT + PATH into BUF; false when it does not fit. */
static bool join(char *buf, size_t cap, const char *root, const char *path)
{
    int n = snprintf(buf, cap, "%s%s", root, path);
    return n > 0 && (size_t)n < cap;
}

/* The first unsigned number in the file DIR/NAME; false when absent or "max". */
static bool read_u64(const char *dir, const char *name, uint64_t *out)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return false;
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    unsigned long long v;
    bool ok = fscanf(f, "%llu", &v) == 1;
    fclose(f);
    if (ok)
        *out = (uint64_t)v;
    return ok;
}

/* The value of the "KEY value" line of a stat-like file, scaled by UNIT; false when absent. */
static bool read_key(const char *path, const char *key, uint64_t unit, uint64_t *out)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[256];
    size_t kl = strlen(key);
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long long v;
        if (!strncmp(line, key, kl) && (line[kl] == ' ' || line[kl] == ':') &&
            sscanf(line + kl + 1, " %llu", &v) == 1) {
            *out = (uint64_t)v * unit;
            found = true;
        }
    }
    fclose(f);
    return found;
}

/* Usage less inactive file pages (which the kernel reclaims first) of the cgroup at DIR. */
static uint64_t working_set(const char *dir, int version)
{
    uint64_t usage = 0, inactive = 0;
    read_u64(dir, version == 1 ? "memory.usage_in_bytes" : "memory.current", &usage);
    char stat[4096];
    if (snprintf(stat, sizeof stat, "%s/memory.stat", dir) < (int)sizeof stat &&
        read_key(stat, version == 1 ? "total_inactive_file" : "inactive_file", 1, &inactive) && inactive < usage)
        usage -= inactive;
    return usage;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The cgroup path of the v1 memory controller (VERSION 1) or of v2 (VERSION 2) into OUT. */
static int own_cgroup(const char *root, char *out, size_t cap)
{
    char path[4096];
    if (!join(path, sizeof path, root, "/proc/self/cgroup"))
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[1024];
    int version = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0';
        const char *controllers = c1 + 1, *cg = c2 + 1;
        bool memory = false;
        for (const char *p = controllers; *p;) {
            size_t n = strcspn(p, ",");
            memory = memory || (n == 6 && !strncmp(p, "memory", 6));
            p += n + (p[n] == ',');
        }
        if (memory) {
            snprintf(out, cap, "%s", cg);
            version = 1;
            break;
        }
        if (!*controllers && !strcmp(line, "0")) {
            snprintf(out, cap, "%s", cg);
            version = 2;
        }
    }
    fclose(f);
    return version;
}

void srv_sysmem_read(const char *root, srv_sysmem *out)
{
    memset(out, 0, sizeof *out);
#ifdef QD_TEST_HOOKS
    /* Test-only, compiled into tests/serve/qwen3d-hooks alone (never
     * installed): QWEN3D_TEST_SYSROOT points /proc and /sys/fs/cgroup at a
     * tree of the test's own. */
    if (!root)
        root = getenv("QWEN3D_TEST_SYSROOT");
#endif
    if (!root)
        root = "";
    char path[4096];
    uint64_t kb = 0;
    if (join(path, sizeof path, root, "/proc/meminfo") && read_key(path, "MemAvailable", 1024, &kb))
        out->mem_available = kb;

    char cg[256];
    int version = own_cgroup(root, cg, sizeof cg);
    char mount[4096], dir[4096];
    if (version == 1 ? !join(mount, sizeof mount, root, "/sys/fs/cgroup/memory")
                     : !join(mount, sizeof mount, root, "/sys/fs/cgroup"))
        version = 0;
    if (version && !join(dir, sizeof dir, mount, strcmp(cg, "/") ? cg : ""))
        version = 0;
    /* A container without a cgroup namespace names its host path but has
     * its own cgroup mounted at the root. */
    if (version && !is_dir(dir))
        snprintf(dir, sizeof dir, "%s", mount);
    if (version) {
        const char *limit_file = version == 1 ? "memory.limit_in_bytes" : "memory.max";
        /* The leaf and every ancestor up to the mount: the smallest limit
         * binds, against what its whole subtree uses. */
        char walk[4096], at[4096] = "";
        snprintf(walk, sizeof walk, "%s", dir);
        uint64_t limit = 0, v;
        for (;;) {
            if (read_u64(walk, limit_file, &v) && v < NO_LIMIT && (!limit || v < limit)) {
                limit = v;
                snprintf(at, sizeof at, "%s", walk);
            }
            if (strlen(walk) <= strlen(mount))
                break;
            *strrchr(walk, '/') = '\0';
        }
        if (limit) {
            out->cgroup_version = version;
            snprintf(out->cgroup, sizeof out->cgroup, "%s", cg);
            out->cgroup_limit = limit;
            out->cgroup_usage = working_set(at, version);
        }
    }
    out->available = out->mem_available;
    if (out->cgroup_limit) {
        uint64_t left = out->cgroup_limit > out->cgroup_usage ? out->cgroup_limit - out->cgroup_usage : 0;
        if (!out->available || left < out->available)
            out->available = left;
    }
}
