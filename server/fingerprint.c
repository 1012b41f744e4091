/*
 * fingerprint: the build id and the model folder's digest (see
 * fingerprint.h). Called by cmd_serve on a work-pool thread.
 */
#include "server/fingerprint.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define READ_BLOCK (1 << 20)

/* ---- build id -------------------------------------------------------------- */

typedef struct build_note {
    char hex[13];
} build_note;

/* The main program's NT_GNU_BUILD_ID note (the first object dl_iterate_phdr reports). */
static int find_note(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    build_note *b = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
            const char *name = p + sizeof *n;
            const unsigned char *desc = (const unsigned char *)name + ((n->n_namesz + 3) & ~3u);
            if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && !memcmp(name, "GNU", 4) && n->n_descsz >= 6) {
                for (int k = 0; k < 6; k++)
                    snprintf(b->hex + 2 * k, 3, "%02x", desc[k]);
                return 1;
            }
            p = (const char *)desc + ((n->n_descsz + 3) & ~3u);
        }
    }
    return 1; /* only the main program */
}

void srv_fingerprint_build(const char *version, char *out, size_t cap)
{
    build_note b = {{0}};
    dl_iterate_phdr(find_note, &b);
    if (b.hex[0])
        snprintf(out, cap, "%s", b.hex);
    else
        snprintf(out, cap, "v%s", version);
}

/* ---- model digest ------------------------------------------------------------ */

/* Four 64-bit lanes of multiply-rotate mixing, 32 bytes per round (a
 * digest to tell models apart, not a cryptographic one). */
typedef struct digest {
    uint64_t lane[4];
    unsigned char tail[32];
    size_t n_tail;
    uint64_t total;
} digest;

static const uint64_t K1 = 0x9e3779b97f4a7c15ull, K2 = 0xc2b2ae3d27d4eb4full;

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

static void dg_init(digest *d)
{
    memset(d, 0, sizeof *d);
    for (int i = 0; i < 4; i++)
        d->lane[i] = K1 * (uint64_t)(i + 1);
}

static void dg_round(digest *d, const unsigned char *p)
{
    for (int i = 0; i < 4; i++) {
        uint64_t w;
        memcpy(&w, p + 8 * i, 8);
        d->lane[i] = rotl(d->lane[i] + w * K2, 31) * K1;
    }
}

static void dg_add(digest *d, const void *data, size_t n)
{
    const unsigned char *p = data;
    d->total += n;
    if (d->n_tail) {
        size_t k = 32 - d->n_tail < n ? 32 - d->n_tail : n;
        memcpy(d->tail + d->n_tail, p, k);
        d->n_tail += k;
        p += k;
        n -= k;
        if (d->n_tail < 32)
            return;
        dg_round(d, d->tail);
        d->n_tail = 0;
    }
    for (; n >= 32; p += 32, n -= 32)
        dg_round(d, p);
    memcpy(d->tail, p, n);
    d->n_tail = n;
}

static uint64_t dg_end(digest *d)
{
    memset(d->tail + d->n_tail, 0, 32 - d->n_tail);
    dg_round(d, d->tail);
    uint64_t h = d->total * K1;
    for (int i = 0; i < 4; i++) {
        h ^= rotl(d->lane[i], 17 + 11 * i) * K2;
        h = rotl(h, 27) * K1 + K2;
    }
    h ^= h >> 33;
    h *= K2;
    return h ^ (h >> 29);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Adds the file PATH's size and content. */
static int add_file(digest *d, const char *path, unsigned char *buf, char *err, size_t err_cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, err_cap, "cannot read '%s': %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    uint64_t size = (uint64_t)st.st_size;
    dg_add(d, &size, sizeof size);
    for (;;) {
        ssize_t n = read(fd, buf, READ_BLOCK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(err, err_cap, "cannot read '%s': %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        dg_add(d, buf, (size_t)n);
    }
    close(fd);
    return 0;
}

int srv_fingerprint(const char *version, const char *dir, char *out, size_t cap, char *err, size_t err_cap)
{
    int rc = -1;
    char **names = NULL;
    size_t n = 0, ncap = 0;
    unsigned char *buf = NULL;
    DIR *dp = opendir(dir);
    if (!dp) {
        snprintf(err, err_cap, "cannot open the model folder '%s': %s", dir, strerror(errno));
        goto fail;
    }
    if (!(buf = malloc(READ_BLOCK))) {
        snprintf(err, err_cap, "out of memory");
        goto fail;
    }
    struct dirent *e;
    while ((e = readdir(dp))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (n == ncap) {
            ncap = ncap ? ncap * 2 : 16;
            char **nn = realloc(names, ncap * sizeof *nn);
            if (!nn) {
                snprintf(err, err_cap, "out of memory");
                goto fail;
            }
            names = nn;
        }
        if (!(names[n] = strdup(e->d_name))) {
            snprintf(err, err_cap, "out of memory");
            goto fail;
        }
        n++;
    }
    qsort(names, n, sizeof *names, by_name);
    digest d;
    dg_init(&d);
    for (size_t i = 0; i < n; i++) {
        dg_add(&d, names[i], strlen(names[i]) + 1);
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && add_file(&d, path, buf, err, err_cap) != 0)
            goto fail;
    }
    char build[SRV_FINGERPRINT_MAX];
    srv_fingerprint_build(version, build, sizeof build);
    snprintf(out, cap, "fp_%s_%016" PRIx64, build, dg_end(&d));
    rc = 0;
fail:
    if (dp)
        closedir(dp);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(buf);
    return rc;
}
