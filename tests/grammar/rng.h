/*
 * rng: the seeded xorshift64 generator of the grammar tests (test_grammar,
 * tests/grammar/walk), so a seed gives the same walks everywhere.
 */
#ifndef QWEN3D_TESTS_GRAMMAR_RNG_H
#define QWEN3D_TESTS_GRAMMAR_RNG_H

#include <stdint.h>

/* The next value of state *S (never 0 when *S is not 0). */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

#endif
