/*
 * diag: a list of problems found while reading or checking an input.
 *
 * Parsers and validators report every problem they find into a caller-owned
 * eng_diag instead of stopping at the first one, so a corrupt model file is
 * described in one run. Each entry is one line naming the file, node, tensor or
 * argument at fault. Single-threaded: owned by whoever created it.
 */
#ifndef QWEN3D_ENGINE_DIAG_H
#define QWEN3D_ENGINE_DIAG_H

#include <stddef.h>
#include <stdio.h>

/* At most this many entries are kept; further ones are only counted. */
#define ENG_DIAG_MAX_KEPT 32

typedef struct eng_diag {
    char *lines[ENG_DIAG_MAX_KEPT]; /* owned, one message each, no newline */
    size_t n_kept;
    size_t n_total;                 /* including the ones not kept */
} eng_diag;

void eng_diag_init(eng_diag *d);
void eng_diag_clear(eng_diag *d);

/* Appends one formatted problem. Never fails: on out-of-memory the entry is only counted. */
void eng_diag_add(eng_diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints each kept entry as "PREFIX: message" on its own line, plus a count of the rest. */
void eng_diag_print(const eng_diag *d, FILE *out, const char *prefix);

static inline int eng_diag_failed(const eng_diag *d) { return d->n_total > 0; }

#endif
