/*
 * keys: the API keys of `qwen3d serve --api-key-file`. The file holds one
 * key per line, optionally named: `KEY`, or `NAME KEY` (a name of 1 to 64
 * characters from [A-Za-z0-9._-], then whitespace, then the key); blank
 * lines and lines starting with '#' are skipped. A key is 1 to 1024
 * printable ASCII characters without whitespace. An unnamed key is named
 * keyN, N its position among the file's keys. Names and keys are unique.
 *
 * The name is what logs and metrics show; the key itself is never shown.
 * Each key also has a scope, the prefix-cache scope of its requests: a
 * named key's scope follows its name (a key replaced under the same name
 * keeps its cached prefixes), an unnamed key's follows the key itself.
 *
 * The routes own one table at a time and replace it on SIGHUP; callers copy
 * what they keep. Loop thread.
 */
#ifndef QWEN3D_SERVER_KEYS_H
#define QWEN3D_SERVER_KEYS_H

#include <stddef.h>

#define SRV_KEY_NAME_MAX 64
#define SRV_KEY_SCOPE_MAX 80

typedef struct srv_keys srv_keys;

typedef struct srv_key_id {
    char name[SRV_KEY_NAME_MAX + 1];
    char scope[SRV_KEY_SCOPE_MAX + 1];
} srv_key_id;

/* Reads PATH. Returns 0 and *out, or -1 with ERR naming the file, line and fault. */
int srv_keys_load(const char *path, srv_keys **out, char *err, size_t err_cap);
void srv_keys_free(srv_keys *k);
size_t srv_keys_count(const srv_keys *k);

/*
 * Whether TOKEN (LEN bytes) is one of the keys; fills ID when it is. Every
 * key is compared in constant time, so the time tells nothing about which
 * key, if any, matched.
 */
int srv_keys_match(const srv_keys *k, const char *token, size_t len, srv_key_id *id);

#endif
