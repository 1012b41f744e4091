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
 * cmd_serve computes it on the work pool while the model loads.
 *
 * Any thread.
 */
#ifndef QWEN3D_SERVER_FINGERPRINT_H
#define QWEN3D_SERVER_FINGERPRINT_H

#include <stddef.h>

#define SRV_FINGERPRINT_MAX 48

/* The build part: the build id's first 12 hex digits, or "v" and VERSION. */
void srv_fingerprint_build(const char *version, char *out, size_t cap);

/* The whole fingerprint for the model folder DIR. Returns 0, or -1 with ERR. */
int srv_fingerprint(const char *version, const char *dir, char *out, size_t cap, char *err, size_t err_cap);

#endif
