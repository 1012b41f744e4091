/*
 * checked: integer sums and products that report overflow instead of
 * wrapping (unsigned) or being undefined (signed).
 *
 * Every size computed from a value that comes from outside, a model file
 * (dims, attributes, split sizes), a request (token counts) or a
 * configuration (context length, geometry), goes through these, and the
 * caller rejects an overflow with an error naming the node, field or
 * argument. They sit in kernels/, the lowest layer, and include nothing of
 * the project, so every module can use them (kvcache/ from the side,
 * nothing from below).
 *
 * Each returns true and stores the exact result when it fits in the type;
 * false otherwise, and *out is then not meaningful. Pure; any thread.
 */
#ifndef QWEN3D_KERNELS_CHECKED_H
#define QWEN3D_KERNELS_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

static inline bool ck_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline bool ck_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static inline bool ck_add_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

static inline bool ck_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

/* a * b, or UINT64_MAX when it does not fit: for sizes compared against a limit. */
static inline uint64_t ck_mul_sat_u64(uint64_t a, uint64_t b)
{
    uint64_t r;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

#endif
