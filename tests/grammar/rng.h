/*
 * rng: the seeded draws of the grammar tests and benchmark (test_grammar,
 * tests/grammar/walk, bench/grammar_bench), so a seed gives the same walks
 * everywhere.
 */
#ifndef QWEN3D_TESTS_GRAMMAR_RNG_H
#define QWEN3D_TESTS_GRAMMAR_RNG_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/tokenizer.h"

/* The next value of state *S (never 0 when *S is not 0). */
static inline uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/*
 * Draws an id of MASK (WORDS words): first a byte uniformly among the first
 * bytes of the allowed ids (FIRST[id]; 256 for ids without bytes, such as
 * EOS and tags, which count as one more), then an id uniformly among the
 * allowed ones that start with it. A draw uniform over all allowed ids
 * would hardly ever end a string: about ten of the ~149,000 Qwen3 ids a
 * JSON string allows close it.
 */
static inline int32_t rng_draw(const uint64_t *mask, size_t words, const uint16_t *first, uint64_t *rng)
{
    size_t count[257] = {0}, classes = 0;
    for (size_t i = 0; i < words; i++)
        for (uint64_t w = mask[i]; w; w &= w - 1)
            count[first[i * 64 + (size_t)__builtin_ctzll(w)]]++;
    for (int c = 0; c < 257; c++)
        classes += count[c] > 0;
    if (!classes)
        return -1;
    size_t k = rng_next(rng) % classes;
    int cls = 0;
    while (count[cls] == 0 || k-- > 0)
        cls++;
    k = rng_next(rng) % count[cls];
    for (size_t i = 0; i < words; i++)
        for (uint64_t w = mask[i]; w; w &= w - 1) {
            size_t id = i * 64 + (size_t)__builtin_ctzll(w);
            if (first[id] == cls && k-- == 0)
                return (int32_t)id;
        }
    return -1;
}

/* The first byte of each of the N ids of TOK for rng_draw() (256: no bytes); NULL when out of memory. */
static inline uint16_t *rng_first_bytes(const eng_tok *tok, size_t n)
{
    uint16_t *first = malloc(n * sizeof *first);
    for (size_t id = 0; first && id < n; id++) {
        size_t len = 0;
        const char *b = id < eng_tok_n_ids(tok) && !eng_tok_is_added(tok, (int32_t)id)
                            ? eng_tok_token_bytes(tok, (int32_t)id, &len)
                            : NULL;
        first[id] = b && len ? (uint8_t)b[0] : 256;
    }
    return first;
}

#endif
