/*
 * prepcache: the prepared-weights cache. The packed MatMulNBits weights of a
 * plan (the one arena pack.c fills, the tied embedding's rows included, as
 * they are read from the packed LM head) are written once to a file, and
 * later plans of the same model files, kernels and layout map that file
 * read-only (MAP_PRIVATE) and read the weights in place, without repacking
 * or copying them.
 *
 * The file: a 4 KiB header, a table of one entry per packed matrix (node,
 * offset, bytes, scale form, checksum), then at a 2 MiB aligned offset the
 * arena's bytes as pack.c laid them out. The header carries a digest of the
 * model's files (size, mtime and sampled content, see source_digest), the
 * kernel level and matmul kernel, the packed layout's version, the file
 * format's and qwen3d's versions and the graph contract, and a checksum of
 * itself and the table. Anything that differs, a file whose size is not the
 * one it names, a table that does not describe this plan's arena, or a
 * matrix whose checksum differs (verified at every load, before a kernel
 * reads it) makes the plan pack the weights as if there were no cache and
 * store a new file. Files are written under a temporary name in the same
 * directory, synced and renamed over the old one, so a reader sees a whole
 * old file or a whole new one; two processes building at once both write
 * whole files and the last rename wins.
 *
 * Called by pack.c (sizing, the arena) and plan.c (adopt, store, free) while
 * a plan is built, on the building thread; verification starts and joins
 * its own helper threads.
 */
#include "config.h"

#include "engine/plan_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PREP_MAGIC "QW3DPREP"
#define PREP_FORMAT 1u
#define PREP_HEADER_BYTES 4096u
#define PREP_PAYLOAD_ALIGN ((uint64_t)2 << 20) /* huge-page aligned, in the file and in memory */
#define PREP_MAX_ENTRIES 65536u
/* Source files up to this size are hashed whole; larger ones are sampled. */
#define PREP_WHOLE_BYTES ((uint64_t)16 << 20)
#define PREP_SAMPLE_BYTES ((uint64_t)64 << 10)
#define PREP_SAMPLES 64

typedef struct prep_entry {
    uint32_t node, bf16;
    uint64_t offset, bytes;
    uint64_t sum[2];
} prep_entry;

typedef struct prep_header {
    char magic[8];
    uint32_t format, layout;
    uint64_t source[2];      /* source_digest() */
    uint64_t n_entries;
    uint64_t payload_offset, payload_bytes;
    uint64_t file_bytes;
    uint64_t check;          /* header_check() of this header (check = 0) and the table */
    char version[32];        /* PACKAGE_VERSION */
    char kernels[96];        /* "LEVEL MMNB_I8_KERNEL" */
    char contract[64];
    char model[512];         /* the model folder, for people reading the file */
    uint8_t pad[PREP_HEADER_BYTES - 8 - 8 - 16 - 5 * 8 - 32 - 96 - 64 - 512];
} prep_header;

_Static_assert(sizeof(prep_header) == PREP_HEADER_BYTES, "prep_header is one 4 KiB block");
_Static_assert(sizeof(prep_entry) == 40, "prep_entry has no padding");

struct plan_prep {
    eng_prep_state state;
    char path[PATH_MAX];
    char note[320];
    bool store;              /* a plan built without a usable cache stores one */
    prep_header want;        /* what a valid header must say (source, kernels, versions) */
    prep_entry *entries;     /* a validated table */
    size_t n_entries;
    uint8_t *map;            /* the payload's mapping, NULL: none */
    uint64_t map_bytes;
    /* A store on its own thread (eng_plan_opts.store_in_background): the
     * thread fills bg_state and bg_note, then sets bg_done; readers take
     * those once bg_done is set, state and note (left alone) before. */
    pthread_t writer;
    bool writer_started;
    eng_prep_state bg_state;
    char bg_note[320 + PATH_MAX + 160];
    atomic_bool bg_done;
};

/* ---- hashing ---- */

/* A 64-bit mix per 8-byte word: not cryptographic (see README), a guard against accidents. */
static inline uint64_t mix(uint64_t h, uint64_t w)
{
    h ^= w;
    h *= UINT64_C(0x9E3779B97F4A7C15);
    return h ^ (h >> 29);
}

static void hash_bytes(uint64_t h[2], const void *data, size_t n)
{
    const uint8_t *p = data;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof w);
        h[0] = mix(h[0], w);
        h[1] = mix(h[1], w ^ UINT64_C(0xD6E8FEB86659FD93));
    }
    uint64_t w = n - i; /* the tail, and the length, so "a" and "a\0" differ */
    memcpy(&w, p + i, n - i);
    h[0] = mix(h[0], w ^ n);
    h[1] = mix(h[1], (w ^ n) + 1);
}

/*
 * The payload's checksum: per 8-byte word w_i, lane j = i % 8 keeps
 * a_j += w_i and b_j += a_j (Fletcher's sums, eight lanes so the compiler
 * vectorizes it and memory bandwidth bounds it). Any one changed word
 * changes sum[0]; reordered words change sum[1].
 */
static void payload_sum(const uint8_t *p, uint64_t n, uint64_t sum[2])
{
    uint64_t a[8] = {0}, b[8] = {0};
    uint64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 8; j++) {
            uint64_t w;
            memcpy(&w, p + i + 8 * j, sizeof w);
            a[j] += w;
            b[j] += a[j];
        }
    for (int j = 0; i < n; i++, j = (j + 1) & 7) {
        a[j] += p[i];
        b[j] += a[j];
    }
    sum[0] = sum[1] = 0;
    for (int j = 0; j < 8; j++) {
        sum[0] += a[j];
        sum[1] += b[j] * (uint64_t)(2 * j + 1);
    }
}

static uint64_t header_check(const prep_header *h, const prep_entry *e, size_t n)
{
    prep_header c = *h;
    c.check = 0;
    uint64_t d[2] = {UINT64_C(0x243F6A8885A308D3), UINT64_C(0x13198A2E03707344)};
    hash_bytes(d, &c, sizeof c);
    hash_bytes(d, e, n * sizeof *e);
    return d[0] ^ d[1];
}

/* Reads (WRITE false) or writes LEN bytes at OFF of FD, in pieces of at most 1 GiB; false unless all. */
static bool io_at(int fd, void *buf, uint64_t len, uint64_t off, bool write)
{
    uint8_t *p = buf;
    while (len) {
        size_t n = len > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)len;
        ssize_t r = write ? pwrite(fd, p, n, (off_t)off) : pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        p += r;
        len -= (uint64_t)r;
        off += (uint64_t)r;
    }
    return true;
}

static bool read_at(int fd, void *buf, uint64_t len, uint64_t off)
{
    return io_at(fd, buf, len, off, false);
}

static bool write_at(int fd, const void *buf, uint64_t len, uint64_t off)
{
    return io_at(fd, (void *)buf, len, off, true);
}

/*
 * The digest of the model's files: for each, its size and mtime (to the
 * nanosecond) and its content, whole up to PREP_WHOLE_BYTES (model.onnx,
 * the graph, always is in practice), else its first and last 1 MiB and
 * PREP_SAMPLES blocks of 64 KiB spread evenly between: about 6 MiB read
 * for a 2.5 GB data file. What it misses: a change of a large data file
 * outside the sampled blocks that also keeps its size and mtime (a tool that
 * rewrites bytes in place and resets the mtime).
 */
static bool source_digest(const eng_graph *g, uint64_t d[2], char *why, size_t cap)
{
    d[0] = UINT64_C(0xA4093822299F31D0);
    d[1] = UINT64_C(0x082EFA98EC4E6C89);
    size_t bufcap = PREP_WHOLE_BYTES > ((uint64_t)1 << 20) ? (size_t)1 << 20 : (size_t)PREP_WHOLE_BYTES;
    uint8_t *buf = malloc(bufcap);
    char path[PATH_MAX];
    bool ok = buf != NULL;
    for (size_t i = 0; ok && eng_graph_source(g, i, path, sizeof path) == 0; i++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) != 0) {
            snprintf(why, cap, "cannot read %s: %s", path, strerror(errno));
            ok = false;
        } else {
            uint64_t size = (uint64_t)st.st_size;
            uint64_t meta[3] = {size, (uint64_t)st.st_mtim.tv_sec, (uint64_t)st.st_mtim.tv_nsec};
            hash_bytes(d, meta, sizeof meta);
            uint64_t spans[PREP_SAMPLES + 2][2];
            size_t n_spans = 0;
            if (size <= PREP_WHOLE_BYTES) {
                spans[n_spans][0] = 0, spans[n_spans++][1] = size;
            } else {
                spans[n_spans][0] = 0, spans[n_spans++][1] = (uint64_t)1 << 20;
                for (uint64_t k = 1; k <= PREP_SAMPLES; k++)
                    spans[n_spans][0] = size / (PREP_SAMPLES + 1) * k, spans[n_spans++][1] = PREP_SAMPLE_BYTES;
                spans[n_spans][0] = size - ((uint64_t)1 << 20), spans[n_spans++][1] = (uint64_t)1 << 20;
            }
            for (size_t s = 0; ok && s < n_spans; s++)
                for (uint64_t off = spans[s][0], left = spans[s][1]; ok && left;) {
                    size_t len = left > bufcap ? bufcap : (size_t)left;
                    if (!read_at(fd, buf, len, off)) {
                        snprintf(why, cap, "cannot read %s", path);
                        ok = false;
                    }
                    hash_bytes(d, buf, len);
                    off += len;
                    left -= len;
                }
        }
        if (fd >= 0)
            close(fd);
    }
    free(buf);
    return ok;
}

/* ---- where the file lives ---- */

/* mkdir -p DIR (0755); 0 or -1 with errno. */
static int make_dirs(char *dir)
{
    for (char *s = dir + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        int r = mkdir(dir, 0755);
        *s = '/';
        if (r != 0 && errno != EEXIST)
            return -1;
    }
    return mkdir(dir, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static void name_chars(char *s)
{
    for (char *c = s; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '-' || *c == '_'))
            *c = '_';
}

bool eng_folder_label(const char *dir, char *real, size_t real_cap, char *base, size_t base_cap)
{
    char buf[PATH_MAX];
    bool found = realpath(dir, buf) != NULL;
    snprintf(real, real_cap, "%s", found ? buf : dir);
    const char *slash = strrchr(real, '/');
    snprintf(base, base_cap, "%s", slash && slash[1] ? slash + 1 : "model");
    name_chars(base);
    return found;
}

/* DIR/NAME-HASH.KERNELS.prep: NAME the model folder's label, HASH of its real path. */
static bool cache_path(const eng_graph *g, const char *dir, const char *kernels, char *out, size_t cap)
{
    char real[PATH_MAX], base[64], kern[96];
    eng_folder_label(g->dir, real, sizeof real, base, sizeof base);
    snprintf(kern, sizeof kern, "%s", kernels);
    name_chars(kern);
    uint64_t h[2] = {1, 2};
    hash_bytes(h, real, strlen(real));
    int n = snprintf(out, cap, "%s/%s-%016llx.%s.prep", dir, base, (unsigned long long)h[0], kern);
    return n > 0 && (size_t)n < cap;
}

/* ---- states ---- */

static const char *const state_names[] = {
#define X(id, name, what) name,
    ENG_PREP_STATES(X)
#undef X
};

const char *eng_prep_state_name(eng_prep_state s)
{
    return (size_t)s < sizeof state_names / sizeof *state_names ? state_names[s] : "unknown";
}

static void set_state(plan_prep *c, eng_prep_state s, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Adds FMT's text to NOTE (of SIZE bytes), after "; " when it already says something. */
static void note_add(char *note, size_t size, const char *fmt, va_list ap)
{
    size_t used = strlen(note);
    if (used && used + 2 < size)
        memcpy(note + used, "; ", 3), used += 2;
    vsnprintf(note + used, size - used, fmt, ap);
}

static void note_addf(char *note, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void note_addf(char *note, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    note_add(note, size, fmt, ap);
    va_end(ap);
}

/* Sets the state; FMT (if any) is added to the note, after what an earlier state said. */
static void set_state(plan_prep *c, eng_prep_state s, const char *fmt, ...)
{
    c->state = s;
    if (!fmt)
        return;
    va_list ap;
    va_start(ap, fmt);
    note_add(c->note, sizeof c->note, fmt, ap);
    va_end(ap);
}

/* The state a store ends in: written, or rebuilt when the file it replaced was stale. */
static eng_prep_state stored_state(bool ok, eng_prep_state before)
{
    return !ok ? ENG_PREP_UNSTORED : before == ENG_PREP_STALE ? ENG_PREP_REBUILT : ENG_PREP_WRITTEN;
}

static void unmap(plan_prep *c)
{
    if (c->map)
        munmap(c->map, c->map_bytes);
    c->map = NULL;
    c->map_bytes = 0;
    free(c->entries);
    c->entries = NULL;
    c->n_entries = 0;
}

/*
 * Maps LEN payload bytes of the file at OFFSET (a multiple of 2 MiB) read-only
 * on a 2 MiB boundary and reads them in: the mapping and its length (whole
 * pages) in *SPAN, or NULL with *BAD saying why.
 *
 * Huge pages before the first read: the kernel then reads the file into 2 MiB
 * page-cache folios and maps them whole, where its filesystem supports large
 * folios. With 4 KiB pages the TLB misses of a decode step's weight stream
 * cost 10-20%. Both calls are hints; verification reads every byte anyway.
 */
static uint8_t *map_payload(int fd, uint64_t offset, size_t len, size_t *span, const char **bad)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    *span = (len + page - 1) / page * page;
    /* Reserve room to place the mapping on a 2 MiB boundary, as the file's payload is. */
    uint8_t *r = mmap(NULL, *span + PREP_PAYLOAD_ALIGN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) {
        *bad = "cannot reserve address space to map it";
        return NULL;
    }
    uint8_t *a = (uint8_t *)(((uintptr_t)r + PREP_PAYLOAD_ALIGN - 1) & ~(uintptr_t)(PREP_PAYLOAD_ALIGN - 1));
    if (mmap(a, len, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, (off_t)offset) == MAP_FAILED) {
        munmap(r, *span + PREP_PAYLOAD_ALIGN);
        *bad = "cannot map it";
        return NULL;
    }
    if (a > r)
        munmap(r, (size_t)(a - r));
    if (r + *span + PREP_PAYLOAD_ALIGN > a + *span)
        munmap(a + *span, (size_t)(r + *span + PREP_PAYLOAD_ALIGN - (a + *span)));
    madvise(a, *span, MADV_HUGEPAGE);
    madvise(a, *span, MADV_POPULATE_READ);
    return a;
}

/* Why header H does not suit this plan, or NULL. */
static const char *header_mismatch(const prep_header *h, const prep_header *want)
{
    if (h->format != PREP_FORMAT)
        return "another file format version";
    if (h->layout != want->layout)
        return "another packed layout version";
    if (strncmp(h->version, want->version, sizeof h->version))
        return "written by another qwen3d version";
    if (strncmp(h->kernels, want->kernels, sizeof h->kernels))
        return "written for other kernels";
    if (memcmp(h->source, want->source, sizeof h->source))
        return "the model files changed";
    return NULL;
}

/*
 * Reads and checks the header and table of the file at c->path; maps the
 * payload unless DESCRIBE. False with the reason in the note (ENOENT: absent).
 */
static bool open_file(plan_prep *c, bool describe)
{
    int fd = open(c->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        set_state(c, ENG_PREP_ABSENT, NULL);
        return false;
    }
    if (fd < 0) {
        set_state(c, ENG_PREP_ABSENT, "cannot open it: %s", strerror(errno));
        return false;
    }
    struct stat st;
    prep_header h;
    const char *bad = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        bad = "not a regular file";
    else if ((uint64_t)st.st_size < PREP_HEADER_BYTES || !read_at(fd, &h, sizeof h, 0))
        bad = "truncated (no whole header)";
    else if (memcmp(h.magic, PREP_MAGIC, sizeof h.magic))
        bad = "not a prepared-weights file";
    else if (h.file_bytes != (uint64_t)st.st_size)
        bad = "truncated or extended (its size is not the one its header names)";
    else if (h.n_entries > PREP_MAX_ENTRIES || h.payload_offset % PREP_PAYLOAD_ALIGN ||
             h.payload_offset < PREP_HEADER_BYTES + h.n_entries * sizeof(prep_entry) ||
             h.payload_offset > h.file_bytes || h.file_bytes - h.payload_offset != h.payload_bytes)
        bad = "a corrupt header (sizes out of range)";
    if (!bad) {
        c->entries = malloc(h.n_entries * sizeof *c->entries + 1);
        if (!c->entries || !read_at(fd, c->entries, h.n_entries * sizeof *c->entries, PREP_HEADER_BYTES))
            bad = "cannot read its table";
        else if (header_check(&h, c->entries, h.n_entries) != h.check)
            bad = "a corrupt header or table (checksum differs)";
        else
            bad = header_mismatch(&h, &c->want);
    }
    for (uint64_t i = 0, end = 0; !bad && i < h.n_entries; i++) {
        const prep_entry *e = &c->entries[i];
        if (e->offset < end || e->offset % ALIGN || e->offset > h.payload_bytes ||
            e->bytes > h.payload_bytes - e->offset)
            bad = "a corrupt table (entries out of range)";
        end = e->offset + e->bytes;
    }
    if (!bad)
        c->n_entries = h.n_entries;
    if (!bad && !describe && h.payload_bytes) {
        size_t span;
        uint8_t *a = map_payload(fd, h.payload_offset, (size_t)h.payload_bytes, &span, &bad);
        if (a) {
            c->map = a;
            c->map_bytes = span;
        }
    }
    close(fd);
    if (bad) {
        unmap(c);
        set_state(c, ENG_PREP_STALE, "%s", bad);
        return false;
    }
    memcpy(c->want.contract, h.contract, sizeof h.contract); /* checked once the plan names its contract */
    set_state(c, ENG_PREP_PRESENT, NULL);
    return true;
}

void plan_prep_open(eng_plan *p)
{
    if (p->prep)
        return;
    plan_prep *c = calloc(1, sizeof *c);
    if (!c)
        return; /* no cache: the plan packs as it always could */
    p->prep = c;
    if (p->opts.matmul_fp32 || !p->krn.q4_packed) {
        set_state(c, ENG_PREP_NONE, NULL);
        return;
    }
    const char *opt = p->opts.prepared_cache;
    if (!opt || !strcmp(opt, "off")) {
        set_state(c, ENG_PREP_OFF, NULL);
        return;
    }
    char dir[PATH_MAX];
    if (!*opt || (size_t)snprintf(dir, sizeof dir, "%s", opt) >= sizeof dir) {
        set_state(c, ENG_PREP_UNSTORED, "no cache folder: give --prepared-cache DIR, or set XDG_CACHE_HOME or HOME");
        return;
    }
    prep_header *w = &c->want;
    memcpy(w->magic, PREP_MAGIC, sizeof w->magic);
    w->format = PREP_FORMAT;
    w->layout = KRN_Q4_PACK_LAYOUT;
    snprintf(w->version, sizeof w->version, "%s", PACKAGE_VERSION);
    snprintf(w->kernels, sizeof w->kernels, "%s %s", p->krn.level_name, p->krn.mmnb_i8.name);
    snprintf(w->model, sizeof w->model, "%s", p->g->dir);
    if (!cache_path(p->g, dir, w->kernels, c->path, sizeof c->path)) {
        set_state(c, ENG_PREP_UNSTORED, "the cache folder's path is too long");
        return;
    }
    char why[PATH_MAX + 64];
    if (!source_digest(p->g, w->source, why, sizeof why)) {
        set_state(c, ENG_PREP_UNSTORED, "%s", why);
        return;
    }
    bool found = open_file(c, p->opts.describe_only);
    if (p->opts.describe_only)
        return;
    c->store = !found;
    if (!found && make_dirs(dir) != 0) {
        set_state(c, ENG_PREP_UNSTORED, "cannot create %s: %s", dir, strerror(errno));
        c->store = false;
    } else if (!found && access(dir, W_OK) != 0) {
        set_state(c, ENG_PREP_UNSTORED, "%s is not writable: %s", dir, strerror(errno));
        c->store = false;
    }
}

bool plan_prep_mapped(const eng_plan *p)
{
    return p->prep && p->prep->map;
}

int plan_prep_bf16(const eng_plan *p, size_t node)
{
    const plan_prep *c = p->prep; /* a checked table: mapped for a load, read alone for inspect */
    if (!c)
        return -1;
    for (size_t i = 0; i < c->n_entries; i++)
        if (c->entries[i].node == node)
            return c->entries[i].bf16 != 0;
    return -1;
}

void plan_prep_drop(eng_plan *p, const char *why)
{
    plan_prep *c = p->prep;
    if (!c || !c->map)
        return;
    unmap(c);
    set_state(c, ENG_PREP_STALE, "%s", why);
    c->store = true;
}

void *plan_prep_arena(eng_plan *p, uint64_t total)
{
    plan_prep *c = p->prep;
    if (!c || !c->map)
        return NULL;
    /* the table's last entry ends at the payload's end, as store() writes it */
    uint64_t bytes = c->n_entries ? c->entries[c->n_entries - 1].offset + c->entries[c->n_entries - 1].bytes : 0;
    if (bytes != total) {
        plan_prep_drop(p, "its payload is not this plan's arena");
        return NULL;
    }
    return c->map;
}

/* The packed matrix of step S, when it has one in the arena: its offset and (ALIGN-rounded) bytes. */
static bool arena_slot(const eng_plan *p, const step *s, uint64_t *off, uint64_t *bytes)
{
    if (!s->op || s->op != &op_matmulnbits || !s->p.mmnb.w.packed || !p->pack_base)
        return false;
    uintptr_t q = (uintptr_t)s->p.mmnb.w.packed, base = (uintptr_t)p->pack_base;
    if (q < base || q - base >= p->pack_total)
        return false;
    *off = q - base;
    *bytes = (krn_q4_pack_size(&s->p.mmnb.w) + ALIGN - 1) / ALIGN * ALIGN;
    return true;
}

static bool has_packed(const step *s)
{
    return s->op && s->op == &op_matmulnbits && s->p.mmnb.w.packed;
}

typedef struct verify_job {
    const plan_prep *c;
    _Atomic size_t next;
    _Atomic size_t bad;      /* first entry whose checksum differs, + 1; 0: none */
} verify_job;

static void *verify_thread(void *arg)
{
    verify_job *j = arg;
    for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->c->n_entries;) {
        const prep_entry *e = &j->c->entries[i];
        uint64_t sum[2];
        payload_sum(j->c->map + e->offset, e->bytes, sum);
        if (sum[0] != e->sum[0] || sum[1] != e->sum[1]) {
            size_t none = 0;
            atomic_compare_exchange_strong(&j->bad, &none, i + 1);
        }
    }
    return NULL;
}

/* Checks every matrix's checksum, on up to THREADS threads (the caller's among them); -1: all match, else an entry. */
static long verify_payload(const plan_prep *c, int threads)
{
    verify_job j = {.c = c};
    pthread_t th[8];
    bool started[8] = {false};
    int nt = threads < 1 ? 1 : threads > 8 ? 8 : threads;
    for (int t = 1; t < nt; t++)
        started[t] = pthread_create(&th[t], NULL, verify_thread, &j) == 0;
    verify_thread(&j);
    for (int t = 1; t < nt; t++)
        if (started[t])
            pthread_join(th[t], NULL);
    size_t bad = atomic_load(&j.bad);
    return bad ? (long)bad - 1 : -1;
}

/* Threads for work spread over the CPUs at load (pack.c's rule). */
static int load_threads(const eng_plan *p)
{
    long cpus = p->opts.pack_threads > 0 ? p->opts.pack_threads : sysconf(_SC_NPROCESSORS_ONLN);
    return cpus < 1 ? 1 : cpus > 8 ? 8 : (int)cpus;
}

bool plan_prep_adopt(eng_plan *p)
{
    plan_prep *c = p->prep;
    if (!c || !c->map)
        return true;
    const char *why = NULL;
    char msg[160];
    size_t k = 0;
    if (strncmp(c->want.contract, p->contract, sizeof c->want.contract))
        why = "written for another graph contract";
    for (size_t i = 0; !why && i < p->n_steps; i++) {
        const step *s = &p->steps[i];
        uint64_t off, bytes;
        if (!has_packed(s))
            continue;
        if (!arena_slot(p, s, &off, &bytes) || p->pack_base != c->map) {
            why = "a packed matrix lies outside the cached arena";
        } else if (k >= c->n_entries || c->entries[k].node != i || c->entries[k].offset != off ||
                   c->entries[k].bytes != bytes || !c->entries[k].bf16 != !s->p.mmnb.w.packed_bf16) {
            snprintf(msg, sizeof msg, "its table does not describe node %zu's packed matrix", i);
            why = msg;
        }
        k++;
    }
    if (!why && k != c->n_entries)
        why = "its table lists more matrices than the plan packs";
    long bad = why ? -1 : verify_payload(c, load_threads(p));
    if (!why && bad >= 0) {
        snprintf(msg, sizeof msg, "the packed weights of node %u differ from their checksum",
                 c->entries[bad].node);
        why = msg;
    }
    if (!why) {
        for (size_t i = 0; i < p->n_steps; i++) {
            mmnb_params *m = &p->steps[i].p.mmnb;
            if (!has_packed(&p->steps[i]))
                continue;
            /* The kernels stream the cached copy: what building the plan read of
             * the mapped originals (scales, zero points) need not stay resident. */
            plan_release_mapped(m->pack_b);
            plan_release_mapped(m->pack_scales);
            plan_release_mapped(m->pack_zp);
            for (int t = 0; m->qdq && t < 3; t++)
                plan_release_mapped(m->qdq->tensors[t]);
            m->pack_b = m->pack_scales = m->pack_zp = NULL; /* nothing for pack_all() to do */
            m->qdq = NULL;
        }
        set_state(c, ENG_PREP_HIT, NULL);
        return true;
    }
    /* Pack into memory of our own instead, at the same offsets, and store a new file. */
    uint8_t *fresh = plan_alloc_weights(p->pack_total);
    if (!plan_own(p, fresh))
        return false;
    for (size_t i = 0; i < p->n_steps; i++) {
        step *s = &p->steps[i];
        uint64_t off, bytes;
        if (arena_slot(p, s, &off, &bytes))
            s->p.mmnb.w.packed = fresh + off;
    }
    p->pack_base = fresh;
    plan_prep_drop(p, why);
    return true;
}

/* Writes the arena as a new cache file: a temporary file in the same folder, synced, renamed over c->path. */
static bool store(const eng_plan *p, plan_prep *c, prep_entry *e, size_t n, char *why, size_t cap)
{
    prep_header h = c->want;
    memcpy(h.contract, p->contract, sizeof h.contract);
    h.n_entries = n;
    h.payload_offset = (PREP_HEADER_BYTES + n * sizeof *e + PREP_PAYLOAD_ALIGN - 1) / PREP_PAYLOAD_ALIGN *
                       PREP_PAYLOAD_ALIGN;
    h.payload_bytes = p->pack_total;
    h.file_bytes = h.payload_offset + h.payload_bytes;
    h.check = header_check(&h, e, n);
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", c->path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(why, cap, "cannot create a file beside %s: %s", c->path, strerror(errno));
        return false;
    }
    /* Header last: a file cut short anywhere never has a header naming its size. */
    bool ok = fchmod(fd, 0644) == 0 && ftruncate(fd, (off_t)h.file_bytes) == 0 &&
              write_at(fd, e, n * sizeof *e, PREP_HEADER_BYTES) &&
              write_at(fd, p->pack_base, h.payload_bytes, h.payload_offset) && write_at(fd, &h, sizeof h, 0) &&
              fsync(fd) == 0;
    int err = errno;
    /*
     * The written pages sit in the page cache in whatever folios the writes
     * made, and a later mapping would get those. Dropped now (they are clean
     * after the sync) and read back through a huge-page mapping, the file
     * waits in the page cache in 2 MiB folios, so the next load maps them
     * without reading the disk (the read is this cold load's, not the first
     * restart's). Hints: failure costs only speed.
     */
    if (ok) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        size_t span;
        const char *unused;
        uint8_t *m = map_payload(fd, h.payload_offset, (size_t)h.payload_bytes, &span, &unused);
        if (m)
            munmap(m, span);
    }
    if (close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (ok && rename(tmp, c->path) != 0) {
        ok = false;
        err = errno;
    }
    if (!ok) {
        unlink(tmp);
        snprintf(why, cap, "cannot write %s: %s", c->path, strerror(err));
        return false;
    }
    /* The rename itself made durable. */
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", c->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return true;
}

/* The plan's packed matrices: the cache file's entries. */
static size_t n_packed(const eng_plan *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->n_steps; i++)
        n += has_packed(&p->steps[i]);
    return n;
}

/* Checksums the arena's matrices and writes the file; false with WHY when it could not. */
static bool store_all(const eng_plan *p, plan_prep *c, size_t n, char *why, size_t cap)
{
    prep_entry *e = calloc(n, sizeof *e);
    snprintf(why, cap, "out of memory");
    bool ok = e != NULL && n <= PREP_MAX_ENTRIES;
    size_t k = 0;
    for (size_t i = 0; ok && i < p->n_steps; i++) {
        const step *s = &p->steps[i];
        uint64_t off, bytes;
        if (!has_packed(s))
            continue;
        if (!arena_slot(p, s, &off, &bytes)) {
            snprintf(why, cap, "node %zu's packed matrix lies outside the arena", i);
            ok = false;
            break;
        }
        e[k] = (prep_entry){.node = (uint32_t)i, .bf16 = s->p.mmnb.w.packed_bf16, .offset = off, .bytes = bytes};
        payload_sum(p->pack_base + off, bytes, e[k].sum);
        k++;
    }
    /* The payload is the arena up to its last matrix, which the table's last entry names. */
    if (ok && e[k - 1].offset + e[k - 1].bytes != p->pack_total) {
        snprintf(why, cap, "the arena holds room no packed matrix uses");
        ok = false;
    }
    ok = ok && store(p, c, e, n, why, cap);
    free(e);
    return ok;
}

/*
 * The background store. The packed arena, the steps and the cache's path are
 * not written again once the plan is built, so this thread reads them
 * freely; eng_plan_free() joins it first. It runs at a lower priority than
 * the compute threads: a daemon may already be serving.
 */
static void *store_thread(void *arg)
{
    eng_plan *p = arg;
    plan_prep *c = p->prep;
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10); /* a hint: failure leaves it as it was */
    char why[PATH_MAX + 128];
    bool ok = store_all(p, c, n_packed(p), why, sizeof why);
    eng_prep_state before = c->bg_state; /* the state before writing, set by plan_prep_store */
    c->bg_state = stored_state(ok, before);
    snprintf(c->bg_note, sizeof c->bg_note, "%s", c->note);
    if (!ok)
        note_addf(c->bg_note, sizeof c->bg_note, "%s", why);
    atomic_store_explicit(&c->bg_done, true, memory_order_release);
    if (p->opts.stored) {
        eng_prep_info pi;
        eng_plan_prepared_cache(p, &pi);
        p->opts.stored(p->opts.stored_ctx, &pi);
    }
    return NULL;
}

void plan_prep_store(eng_plan *p)
{
    plan_prep *c = p->prep;
    if (!c || !c->store)
        return;
    size_t n = n_packed(p);
    if (!n || !p->pack_base) {
        set_state(c, ENG_PREP_NONE, NULL);
        return;
    }
    if (p->opts.store_in_background) {
        eng_prep_state before = c->state;
        c->state = ENG_PREP_WRITING; /* as the thread starts: it reads the state before (stale or not) */
        c->bg_state = before;
        if (pthread_create(&c->writer, NULL, store_thread, p) == 0) {
            c->writer_started = true;
            return;
        }
        c->state = before; /* no thread: write it here */
    }
    char why[PATH_MAX + 128];
    bool ok = store_all(p, c, n, why, sizeof why);
    if (ok)
        set_state(c, stored_state(true, c->state), NULL);
    else
        set_state(c, ENG_PREP_UNSTORED, "%s", why);
}

void plan_prep_wait(eng_plan *p)
{
    plan_prep *c = p->prep;
    if (c && c->writer_started) {
        pthread_join(c->writer, NULL);
        c->writer_started = false;
    }
}

void plan_prep_free(plan_prep *c)
{
    if (!c)
        return;
    unmap(c);
    free(c);
}

void eng_plan_prepared_cache(const eng_plan *p, eng_prep_info *out)
{
    plan_prep *c = p->prep;
    *out = (eng_prep_info){ENG_PREP_NONE, "", ""};
    if (c && atomic_load_explicit(&c->bg_done, memory_order_acquire))
        *out = (eng_prep_info){c->bg_state, c->path, c->bg_note};
    else if (c)
        *out = (eng_prep_info){c->state, c->path, c->note};
}
