/*
 * fingerprint: the `system_fingerprint` of the daemon's responses, which
 * changes when the program or the model changes and only then:
 *
 *   fp_<build>_<model>
 *
 * <build> is the first 12 hex digits of the executable's GNU build id (the
 * linker's digest of the program; "v" and the version when the binary has
 * none). <model> is 16 hex digits of a digest over the model folder: every
 * entry's name in byte order, and for regular files (symbolic links
 * followed) their size and their whole content; other entries (folders,
 * FIFOs) count by name only. Reading a large model takes a moment, so
 * cmd_serve computes it on the work pool while the model loads, and the
 * digest is kept in the cache folder with what stat says of every entry, so
 * that a restart on unchanged files does not read them again.
 *
 * Any thread.
 */
#ifndef QWEN3D_SERVER_FINGERPRINT_H
#define QWEN3D_SERVER_FINGERPRINT_H

#include <stdbool.h>
#include <stddef.h>

#define SRV_FINGERPRINT_MAX 48

/* The build part: the build id's first 12 hex digits, or "v" and VERSION. */
void srv_fingerprint_build(const char *version, char *out, size_t cap);

/*
 * The whole fingerprint for the model folder DIR. CACHE is the folder that
 * keeps digests (made if missing; NULL, "" or "off": none); *KEPT tells
 * whether the digest came from it. Returns 0, or -1 with ERR.
 */
int srv_fingerprint(const char *version, const char *dir, const char *cache, char *out, size_t cap, bool *kept,
                    char *err, size_t err_cap);

#endif
