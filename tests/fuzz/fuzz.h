/*
 * fuzz: what every fuzz target of tests/fuzz/ shares.
 *
 * A target is one file defining LLVMFuzzerTestOneInput() (and, when it needs
 * set-up, LLVMFuzzerInitialize()). Built with clang -fsanitize=fuzzer it is a
 * libFuzzer binary (`make fuzz-smoke`); built with the project's compiler and
 * linked with tests/fuzz/replay.c it replays corpus files, which is how
 * `make check` runs the checked-in corpus and every past crash without clang.
 *
 * With QD_FUZZ_REPORT set in the environment, a target prints the errors
 * the code under test reported for each input on stderr, one per line
 * (tests/fuzz_replay.sh checks the named errors of the regression inputs
 * that way); libFuzzer runs leave it unset.
 *
 * FUZZ_CHECK states an invariant of the code under test: when it fails the
 * target prints the condition and aborts, which libFuzzer reports as a crash
 * and the replayer as a failed test. It is not assert(), so NDEBUG never
 * turns it off.
 */
#ifndef QWEN3D_TESTS_FUZZ_H
#define QWEN3D_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                          \
        }                                                                                     \
    } while (0)

/* Whether errors are to be printed (QD_FUZZ_REPORT), read once. */
static inline int fuzz_report(void)
{
    static int on = -1;
    if (on < 0)
        on = getenv("QD_FUZZ_REPORT") != NULL;
    return on;
}

/* True when S[0..N) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static inline int fuzz_utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t need;
        unsigned lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0)
                lo = 0xA0;
            if (c == 0xED)
                hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0)
                lo = 0x90;
            if (c == 0xF4)
                hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i <= need)
            return 0;
        for (size_t k = 1; k <= need; k++) {
            unsigned b = p[i + k];
            if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF))
                return 0;
        }
        i += need + 1;
    }
    return 1;
}

#endif
