/*
 * fingerprint: the build id and the model folder's digest (see
 * fingerprint.h). Called by cmd_serve on a work-pool thread.
 */
#include "server/fingerprint.h"

#include "engine/plan.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* ---- the kept digest ------------------------------------------------------- */

/*
 * Reading a 4 GB model on every start costs most of a second, so the digest
 * is kept in the cache folder beside what stat said of every entry when it
 * was read: for regular files the device, inode, size, mtime and ctime (the
 * kernel moves ctime on every write and every utime(), so a file rewritten
 * in place with its mtime put back still shows). A start whose list is the
 * same, byte for byte, takes the kept digest. A list is kept only when it did
 * not change while the files were read and no file changed in the last
 * RECENT_NS, so that a write in the same clock tick as the read cannot go
 * unseen.
 */
#define KEPT_MAGIC "QW3DFPRT"
#define KEPT_FORMAT 1u
#define KEPT_MAX_BYTES ((size_t)64 << 20)
#define RECENT_NS ((int64_t)2000000000)

typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

static int put(bytes *b, const void *p, size_t n)
{
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < n)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q)
            return -1;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

static int64_t ns_of(struct timespec t) { return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec; }

/*
 * The stat list of the NAMES in DIR (links followed) into KEY; *NEWEST is the
 * latest mtime or ctime of a regular file; REGULAR (NULL: not wanted) says
 * which names are regular files. Entries stat cannot see count by name, as
 * in the digest.
 */
static int stat_list(const char *dir, char *const *names, size_t n, bytes *key, int64_t *newest, bool *regular)
{
    key->n = 0;
    *newest = INT64_MIN;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        uint64_t rec[6] = {0};
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        bool reg = false;
        if (stat(path, &st) == 0) {
            reg = S_ISREG(st.st_mode);
            rec[0] = (uint64_t)st.st_mode;
            if (S_ISREG(st.st_mode)) {
                rec[1] = (uint64_t)st.st_dev;
                rec[2] = (uint64_t)st.st_ino;
                rec[3] = (uint64_t)st.st_size;
                rec[4] = (uint64_t)ns_of(st.st_mtim);
                rec[5] = (uint64_t)ns_of(st.st_ctim);
                if (ns_of(st.st_mtim) > *newest)
                    *newest = ns_of(st.st_mtim);
                if (ns_of(st.st_ctim) > *newest)
                    *newest = ns_of(st.st_ctim);
            }
        }
        if (regular)
            regular[i] = reg;
        if (put(key, names[i], strlen(names[i]) + 1) || put(key, rec, sizeof rec))
            return -1;
    }
    return 0;
}

/* CACHE/NAME-HASH.fingerprint: NAME the folder's label, HASH of its real path. */
static bool kept_path(const char *cache, const char *dir, char *out, size_t cap)
{
    char real[PATH_MAX], base[64];
    if (!eng_folder_label(dir, real, sizeof real, base, sizeof base))
        return false;
    digest d;
    dg_init(&d);
    dg_add(&d, real, strlen(real));
    int len = snprintf(out, cap, "%s/%s-%016" PRIx64 ".fingerprint", cache, base, dg_end(&d));
    return len > 0 && (size_t)len < cap;
}

/* The record: magic, format, digest, key length, key, and a digest of all that. */
static uint64_t record_check(const unsigned char *p, size_t n)
{
    digest d;
    dg_init(&d);
    dg_add(&d, p, n);
    return dg_end(&d);
}

/* The digest kept at PATH for KEY, if there is one. */
static bool kept_read(const char *path, const bytes *key, uint64_t *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    bool ok = false;
    struct stat st;
    size_t head = 8 + 4 + 8 + 8, want = head + key->n + 8;
    unsigned char *buf = NULL;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size == want && want <= KEPT_MAX_BYTES &&
        (buf = malloc(want)) != NULL) {
        size_t got = 0;
        while (got < want) {
            ssize_t r = read(fd, buf + got, want - got);
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        uint32_t format;
        uint64_t key_len, check;
        if (got == want) {
            memcpy(&format, buf + 8, 4);
            memcpy(&key_len, buf + 20, 8);
            memcpy(&check, buf + want - 8, 8);
            ok = !memcmp(buf, KEPT_MAGIC, 8) && format == KEPT_FORMAT && key_len == key->n &&
                 !memcmp(buf + head, key->p, key->n) && check == record_check(buf, want - 8);
            if (ok)
                memcpy(out, buf + 12, 8);
        }
    }
    free(buf);
    close(fd);
    return ok;
}

/* Keeps DIGEST for KEY at PATH: a whole new file renamed over the old, or nothing. */
static void kept_write(const char *cache, const char *path, const bytes *key, uint64_t dg)
{
    bytes r = {0};
    uint32_t format = KEPT_FORMAT;
    uint64_t key_len = key->n;
    if (put(&r, KEPT_MAGIC, 8) || put(&r, &format, 4) || put(&r, &dg, 8) || put(&r, &key_len, 8) ||
        put(&r, key->p, key->n)) {
        free(r.p);
        return;
    }
    uint64_t check = record_check(r.p, r.n);
    char tmp[4200];
    if (put(&r, &check, 8) || (size_t)snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= sizeof tmp) {
        free(r.p);
        return;
    }
    (void)mkdir(cache, 0755);
    int fd = mkstemp(tmp);
    if (fd >= 0) {
        size_t done = 0;
        while (done < r.n) {
            ssize_t w = write(fd, r.p + done, r.n - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            done += (size_t)w;
        }
        bool ok = done == r.n && fchmod(fd, 0644) == 0;
        if (close(fd) != 0 || !ok || rename(tmp, path) != 0)
            unlink(tmp);
    }
    free(r.p);
}

int srv_fingerprint(const char *version, const char *dir, const char *cache, char *out, size_t cap, bool *kept, char *err,
                    size_t err_cap)
{
    int rc = -1;
    bytes key = {0}, after = {0};
    *kept = false;
    char **names = NULL;
    size_t n = 0, ncap = 0;
    unsigned char *buf = NULL;
    bool *regular = NULL;
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

    char record[4096];
    int64_t newest = 0, newest_after = 0;
    if (!(regular = calloc(n ? n : 1, sizeof *regular)) || stat_list(dir, names, n, &key, &newest, regular)) {
        snprintf(err, err_cap, "out of memory");
        goto fail;
    }
    bool use_kept = cache && *cache && strcmp(cache, "off") && kept_path(cache, dir, record, sizeof record);
    uint64_t model_digest;
    *kept = use_kept && kept_read(record, &key, &model_digest);
    if (*kept)
        goto done;
    digest d;
    dg_init(&d);
    for (size_t i = 0; i < n; i++) {
        dg_add(&d, names[i], strlen(names[i]) + 1);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (regular[i] && add_file(&d, path, buf, err, err_cap) != 0)
            goto fail;
    }
    model_digest = dg_end(&d);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (use_kept && stat_list(dir, names, n, &after, &newest_after, NULL) == 0 && after.n == key.n &&
        !memcmp(after.p, key.p, key.n) && newest < ns_of(now) - RECENT_NS)
        kept_write(cache, record, &key, model_digest);
done:;
    char build[SRV_FINGERPRINT_MAX];
    srv_fingerprint_build(version, build, sizeof build);
    snprintf(out, cap, "fp_%s_%016" PRIx64, build, model_digest);
    rc = 0;
fail:
    free(key.p);
    free(after.p);
    if (dp)
        closedir(dp);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    free(regular);
    free(buf);
    return rc;
}
