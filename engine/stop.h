/*
 * stop: the stop strings of a request (`stop`, design.md section 3), matched
 * on the streamed text.
 *
 * Fed the text piece of each generated token, an eng_stop says which bytes
 * may be sent to the client now. It holds back the longest tail that could
 * still be the beginning of a stop string, so no byte of a stop string is
 * ever emitted, and matches across token boundaries. When a stop string
 * completes, the text before it is released and nothing after it; if several
 * complete, the one that ends first wins (the longest of those ending on the
 * same byte). At the end of a generation that did not stop on a string,
 * eng_stop_finish() releases the held-back tail.
 *
 * Matching is on bytes; stop strings and pieces are UTF-8, so a held-back
 * tail always starts on a character boundary. Each stop string runs its own
 * Knuth-Morris-Pratt automaton: O(pieces' bytes x stop strings) in all.
 *
 * Called by the scheduler (or the API layer) for one request; an eng_stop is
 * used by one thread at a time.
 */
#ifndef QWEN3D_ENGINE_STOP_H
#define QWEN3D_ENGINE_STOP_H

#include <stdbool.h>
#include <stddef.h>

#define ENG_STOP_MAX_STRINGS 16
#define ENG_STOP_MAX_LEN 256

#define ENG_STOP_ERRORS(X)                                                  \
    X(ENG_STOP_OK, 0, "success")                                            \
    X(ENG_STOP_ETOOMANY, -1, "too many stop strings")                       \
    X(ENG_STOP_EEMPTY, -2, "empty stop string")                             \
    X(ENG_STOP_ETOOLONG, -3, "stop string too long")                        \
    X(ENG_STOP_ENOMEM, -4, "out of memory")

enum {
#define ENG_STOP_ENUM(name, value, msg) name = value,
    ENG_STOP_ERRORS(ENG_STOP_ENUM)
#undef ENG_STOP_ENUM
};

const char *eng_stop_strerror(int err);

/* What eng_stop_validate() found wrong. */
typedef struct eng_stop_error {
    int index;         /* the stop string at fault, or -1 for the list itself */
    char message[96];  /* e.g. "stop[2] is longer than 256 bytes" */
} eng_stop_error;

/*
 * Checks N NUL-terminated stop strings: at most ENG_STOP_MAX_STRINGS, each 1
 * to ENG_STOP_MAX_LEN bytes. Returns 0 or a negative ENG_STOP_E* code with
 * ERR (may be NULL) naming the string.
 */
int eng_stop_validate(const char *const *stops, size_t n, eng_stop_error *err);

typedef struct eng_stop eng_stop;

/*
 * A matcher for copies of STOPS (N may be 0: everything passes through).
 * Returns NULL if they fail eng_stop_validate() or on out-of-memory.
 */
eng_stop *eng_stop_new(const char *const *stops, size_t n);
void eng_stop_free(eng_stop *s);

/* Starts a new text with the same stop strings. */
void eng_stop_reset(eng_stop *s);

/*
 * Feeds the next LEN bytes of text. Sets *emit and *emit_len to the bytes the
 * caller may send now (owned by the matcher, valid until the next call, not
 * NUL-terminated).
 * Returns 1 when a stop string has completed (this call's *emit is the last
 * text before it; later calls emit nothing and return 1 again), 0 to go on,
 * or ENG_STOP_ENOMEM (nothing consumed, nothing emitted).
 */
int eng_stop_feed(eng_stop *s, const char *piece, size_t len, const char **emit, size_t *emit_len);

/*
 * Ends the text: sets *emit to the held-back tail (empty after a stop) and
 * resets the matcher.
 */
void eng_stop_finish(eng_stop *s, const char **emit, size_t *emit_len);

/* Index of the stop string that completed, or -1. */
int eng_stop_matched(const eng_stop *s);

#endif
