/*
 * keys: the API key file (see keys.h). Loop thread; the table is not
 * changed after srv_keys_load().
 */
#include "server/keys.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "api/error.h"

/* A key file larger than this is refused (a mistake, not a key list). */
#define FILE_MAX (1 << 20)

typedef struct entry {
    char *key;
    size_t len;
    srv_key_id id;
} entry;

struct srv_keys {
    entry *e;
    size_t n, cap;
};

/*
 * An unnamed key's scope is a digest of the key under a salt drawn once per
 * process: stable across reloads, unrelated across processes, and never
 * the key or something a log reader could test guesses against.
 */
static uint64_t scope_salt(void)
{
    static uint64_t salt;
    static bool have;
    if (!have) {
        if (getrandom(&salt, sizeof salt, 0) != (ssize_t)sizeof salt)
            salt = (uint64_t)(uintptr_t)&salt ^ 0x9e3779b97f4a7c15ull;
        have = true;
    }
    return salt;
}

static uint64_t digest(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ scope_salt();
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

void srv_keys_free(srv_keys *k)
{
    if (!k)
        return;
    for (size_t i = 0; i < k->n; i++)
        free(k->e[i].key);
    free(k->e);
    free(k);
}

size_t srv_keys_count(const srv_keys *k) { return k ? k->n : 0; }

static bool name_ok(const char *s, size_t n)
{
    if (!n || n > SRV_KEY_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

static bool key_ok(const char *s, size_t n)
{
    if (!n || n > API_SECRET_SPAN)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= ' ' || (unsigned char)s[i] >= 0x7f)
            return false;
    return true;
}

/* One line (no newline) into K. Returns 0, or -1 with ERR. */
static int add_line(srv_keys *k, const char *path, int lineno, char *s, size_t len, char *err, size_t cap)
{
    while (len && isspace((unsigned char)*s))
        s++, len--;
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    if (!len || *s == '#')
        return 0;
    const char *name = NULL, *key = s;
    size_t nlen = 0, klen = len;
    size_t sp = 0;
    while (sp < len && !isspace((unsigned char)s[sp]))
        sp++;
    if (sp < len) {
        name = s;
        nlen = sp;
        key = s + sp;
        klen = len - sp;
        while (klen && isspace((unsigned char)*key))
            key++, klen--;
        if (!name_ok(name, nlen)) {
            snprintf(err, cap, "%s:%d: the name must be 1 to %d characters of [A-Za-z0-9._-] (the line is "
                     "'NAME KEY' or 'KEY')", path, lineno, SRV_KEY_NAME_MAX);
            return -1;
        }
    }
    if (!key_ok(key, klen)) {
        snprintf(err, cap, "%s:%d: a key is 1 to %d printable ASCII characters without spaces", path, lineno,
                 API_SECRET_SPAN);
        return -1;
    }
    if (k->n == k->cap) {
        size_t nc = k->cap ? k->cap * 2 : 8;
        entry *e = realloc(k->e, nc * sizeof *e);
        if (!e) {
            snprintf(err, cap, "out of memory");
            return -1;
        }
        k->e = e;
        k->cap = nc;
    }
    entry *e = &k->e[k->n];
    memset(e, 0, sizeof *e);
    if (name)
        snprintf(e->id.name, sizeof e->id.name, "%.*s", (int)nlen, name);
    else
        snprintf(e->id.name, sizeof e->id.name, "key%zu", k->n + 1);
    if (name)
        snprintf(e->id.scope, sizeof e->id.scope, "name:%s", e->id.name);
    else
        snprintf(e->id.scope, sizeof e->id.scope, "key:%016" PRIx64, digest(key, klen));
    for (size_t i = 0; i < k->n; i++) {
        if (!strcmp(k->e[i].id.name, e->id.name)) {
            snprintf(err, cap, "%s:%d: the name '%s' is given twice", path, lineno, e->id.name);
            return -1;
        }
        if (k->e[i].len == klen && !memcmp(k->e[i].key, key, klen)) {
            snprintf(err, cap, "%s:%d: the key of '%s' is given twice", path, lineno, e->id.name);
            return -1;
        }
    }
    if (!(e->key = strndup(key, klen))) {
        snprintf(err, cap, "out of memory");
        return -1;
    }
    e->len = klen;
    k->n++;
    return 0;
}

int srv_keys_load(const char *path, srv_keys **out, char *err, size_t cap)
{
    *out = NULL;
    char *buf = NULL;
    srv_keys *k = calloc(1, sizeof *k);
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, cap, "cannot open '%s': %s", path, strerror(errno));
        goto fail;
    }
    if (!k || !(buf = malloc(FILE_MAX + 1))) {
        snprintf(err, cap, "out of memory");
        goto fail;
    }
    size_t n = fread(buf, 1, FILE_MAX + 1, f);
    if (ferror(f)) {
        snprintf(err, cap, "cannot read '%s'", path);
        goto fail;
    }
    if (n > FILE_MAX) {
        snprintf(err, cap, "'%s' is larger than %d bytes", path, FILE_MAX);
        goto fail;
    }
    if (memchr(buf, '\0', n)) {
        snprintf(err, cap, "'%s' holds a NUL byte", path);
        goto fail;
    }
    int lineno = 0;
    for (size_t at = 0; at < n;) {
        char *nl = memchr(buf + at, '\n', n - at);
        size_t len = nl ? (size_t)(nl - (buf + at)) : n - at;
        if (add_line(k, path, ++lineno, buf + at, len, err, cap) != 0)
            goto fail;
        at += len + 1;
    }
    if (!k->n) {
        snprintf(err, cap, "'%s' holds no key", path);
        goto fail;
    }
    fclose(f);
    free(buf);
    *out = k;
    return 0;
fail:
    if (f)
        fclose(f);
    free(buf);
    srv_keys_free(k);
    return -1;
}

int srv_keys_match(const srv_keys *k, const char *token, size_t len, srv_key_id *id)
{
    size_t hit = SIZE_MAX;
    for (size_t i = 0; i < k->n; i++)
        if (api_secret_equal(token, len, k->e[i].key, k->e[i].len))
            hit = i;
    if (hit == SIZE_MAX)
        return 0;
    *id = k->e[hit].id;
    return 1;
}
