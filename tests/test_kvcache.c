/*
 * test_kvcache: kvcache/kv.c storage, commit accounting and limits.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvcache/kv.h"
#include "tests/check_main.h"

static const kv_geometry geo = {.layers = 3, .kv_heads = 2, .head_dim = 64, .capacity = 1000, .type = KV_F32};

START_TEST(reserve_commit_and_limits)
{
    kv_cache *kv = kv_new(&geo);
    ck_assert_ptr_nonnull(kv);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t row = 64 * 4, token = 2 * row;
    ck_assert_uint_eq(kv_bytes_per_token(kv), token * 2 * 3);
    /* one page-aligned run of 1000 rows per kv head, 2 heads, 3 layers, keys and values */
    uint64_t run = (row * 1000 + page - 1) / page * page;
    ck_assert_uint_eq(kv_bytes_reserved(kv), 6 * 2 * run);
    ck_assert_uint_eq(kv_bytes_for(&geo), kv_bytes_reserved(kv));
    int64_t hs = kv_head_stride(kv);
    ck_assert_int_eq(hs, (int64_t)(run / 4));
    ck_assert_int_ge(hs, 1000 * 64);
    ck_assert_uint_eq(kv_bytes_committed(kv), 0);
    ck_assert_int_eq(kv_length(kv), 0);

    ck_assert_int_eq(kv_reserve_tokens(kv, 10), 0);
    uint64_t c10 = kv_bytes_committed(kv);
    ck_assert_uint_ge(c10, 6 * 10 * token);
    ck_assert_uint_le(c10, kv_bytes_reserved(kv));
    /* every committed row of every kv head's run is writable and keeps its value */
    for (int64_t l = 0; l < 3; l++) {
        float *k = kv_keys(kv, l), *v = kv_values(kv, l);
        for (int64_t h = 0; h < 2; h++)
            for (int i = 0; i < 10 * 64; i++) {
                k[h * hs + i] = (float)(l * 100000 + h * 1000 + i);
                v[h * hs + i] = -(float)(l * 100000 + h * 1000 + i);
            }
    }
    kv_set_length(kv, 10);
    ck_assert_int_eq(kv_reserve_tokens(kv, 1000), 0);
    ck_assert_uint_eq(kv_bytes_committed(kv), kv_bytes_reserved(kv));
    for (int64_t l = 0; l < 3; l++) {
        const float *k = kv_keys(kv, l), *v = kv_values(kv, l);
        /* growing moved nothing: row 9 of head 1, row 0 of head 0 */
        ck_assert(k[hs + 9 * 64 + 63] == (float)(l * 100000 + 1000 + 639) && v[5] == -(float)(l * 100000 + 5));
        ((float *)kv_values(kv, l))[hs + 999 * 64 + 63] = 1.0f; /* last element of the last head's run */
    }
    ck_assert_int_eq(kv_reserve_tokens(kv, 1001), -1);
    ck_assert_int_eq(kv_reserve_tokens(kv, -1), -1);

    /* reset keeps the storage */
    uint64_t before = kv_bytes_committed(kv);
    kv_reset(kv);
    ck_assert_int_eq(kv_length(kv), 0);
    ck_assert_uint_eq(kv_bytes_committed(kv), before);
    kv_free(kv);
    kv_free(NULL);
}
END_TEST

START_TEST(types_and_bad_geometry)
{
    kv_type t;
    ck_assert_int_eq(kv_type_parse("f16", &t), 0);
    ck_assert_int_eq(t, KV_F16);
    ck_assert_int_eq(kv_type_parse("f32", &t), 0);
    ck_assert_int_eq(t, KV_F32);
    ck_assert_int_eq(kv_type_parse("q8", &t), 0);
    ck_assert_int_eq(t, KV_Q8);
    ck_assert_str_eq(kv_type_name(KV_Q8), "q8");
    ck_assert_int_eq(kv_type_parse("bf16", &t), -1);
    ck_assert_int_eq(kv_type_parse("q4", &t), -1);
    ck_assert_uint_eq(kv_elem_size(KV_F16), 2);
    ck_assert_uint_eq(kv_elem_size(KV_Q8), 1);
    kv_geometry g = geo;
    g.type = KV_F16;
    kv_cache *kv = kv_new(&g);
    ck_assert_uint_eq(kv_bytes_per_token(kv), 2 * 64 * 2 * 2 * 3);
    kv_free(kv);
    /* q8: a row is 64 codes and a 4-byte scale; heads lie a whole number of rows apart */
    g.type = KV_Q8;
    kv = kv_new(&g);
    ck_assert_uint_eq(kv_bytes_per_token(kv), (64 + 4) * 2 * 2 * 3);
    ck_assert_int_eq(kv_row_elems(KV_Q8, 64), 68);
    ck_assert_int_ge(kv_head_stride(kv), 1000 * 68);
    ck_assert_int_eq(kv_reserve_tokens(kv, 1000), 0);
    /* the last row of the last head of the last layer's values is inside the range */
    uint8_t *last = (uint8_t *)kv_values(kv, 2) + kv_head_stride(kv) + 999 * 68;
    memset(last, 0x7F, 68);
    kv_free(kv);
    g.capacity = 0;
    ck_assert_ptr_null(kv_new(&g));
    g = geo;
    g.layers = -1;
    ck_assert_ptr_null(kv_new(&g));
}
END_TEST

/* Sizes from a model file and a configuration: a geometry whose bytes pass 2^64 is refused, not wrapped. */
START_TEST(overflowing_geometry_refused)
{
    kv_geometry g = {.layers = 2048, .kv_heads = 1000, .head_dim = 1000, .capacity = INT32_MAX, .type = KV_F32};
    ck_assert_uint_eq(kv_bytes_for(&g), 0);
    ck_assert_ptr_null(kv_new(&g));
    /* half as many layers fit: 1024 x 2 x 1000 runs of 4000 x (2^31 - 1) bytes, page rounded */
    g.layers = 1024;
    ck_assert_uint_gt(kv_bytes_for(&g), UINT64_C(1) << 63);
    g.layers = 1;
    g.head_dim = INT64_MAX / 2;
    ck_assert_uint_eq(kv_bytes_for(&g), 0);
    ck_assert_ptr_null(kv_new(&g));
}
END_TEST

START_TEST(many_sessions_are_independent)
{
    kv_cache *a[16];
    for (int i = 0; i < 16; i++) {
        a[i] = kv_new(&geo);
        ck_assert_ptr_nonnull(a[i]);
        ck_assert_int_eq(kv_reserve_tokens(a[i], 1), 0);
        ((float *)kv_keys(a[i], 2))[0] = (float)i;
    }
    for (int i = 0; i < 16; i++) {
        ck_assert(((float *)kv_keys(a[i], 2))[0] == (float)i);
        kv_free(a[i]);
    }
}
END_TEST

/* A prefix copied into a cache of another capacity lands at the same (token, head) places; a trimmed
 * cache keeps its first rows and gives back the pages past them. */
START_TEST(copy_prefix_and_trim)
{
    kv_geometry small = geo;
    small.capacity = 300;
    kv_cache *src = kv_new(&geo), *dst = kv_new(&small);
    ck_assert_int_eq(kv_reserve_tokens(src, 200), 0);
    int64_t hs = kv_head_stride(src), hd = kv_head_stride(dst);
    for (int64_t l = 0; l < 3; l++)
        for (int64_t h = 0; h < 2; h++)
            for (int64_t i = 0; i < 200 * 64; i++) {
                ((float *)kv_keys(src, l))[h * hs + i] = (float)(l * 1000000 + h * 100000 + i);
                ((float *)kv_values(src, l))[h * hs + i] = -(float)(l * 1000000 + h * 100000 + i);
            }
    kv_set_length(src, 200);
    ck_assert_int_eq(kv_copy_prefix(dst, src, 201), -1); /* more than src holds */
    ck_assert_int_eq(kv_copy_prefix(dst, src, 150), 150 * 64 * 4 * 2 * 2 * 3);
    ck_assert_int_eq(kv_length(dst), 150);
    for (int64_t l = 0; l < 3; l++)
        for (int64_t h = 0; h < 2; h++)
            for (int64_t i = 0; i < 150 * 64; i++) {
                ck_assert(((float *)kv_keys(dst, l))[h * hd + i] == (float)(l * 1000000 + h * 100000 + i));
                ck_assert(((float *)kv_values(dst, l))[h * hd + i] == -(float)(l * 1000000 + h * 100000 + i));
            }
    kv_geometry f16 = geo;
    f16.type = KV_F16;
    kv_cache *other = kv_new(&f16);
    ck_assert_int_eq(kv_copy_prefix(other, src, 10), -1); /* another element type */
    kv_free(other);

    uint64_t before = kv_bytes_committed(src);
    kv_trim(src, 20);
    ck_assert_int_eq(kv_length(src), 20);
    ck_assert_uint_lt(kv_bytes_committed(src), before);
    for (int64_t i = 0; i < 20 * 64; i++)
        ck_assert(((float *)kv_keys(src, 2))[hs + i] == (float)(2 * 1000000 + 100000 + i));
    /* rows past the kept ones can be committed and written again */
    ck_assert_int_eq(kv_reserve_tokens(src, 200), 0);
    ((float *)kv_values(src, 1))[hs + 199 * 64] = 1.0f;
    kv_free(src);
    kv_free(dst);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kvcache");
    TCase *tc = tcase_create("kv");
    tcase_add_test(tc, reserve_commit_and_limits);
    tcase_add_test(tc, types_and_bad_geometry);
    tcase_add_test(tc, overflowing_geometry_refused);
    tcase_add_test(tc, many_sessions_are_independent);
    tcase_add_test(tc, copy_prefix_and_trim);
    suite_add_tcase(s, tc);
    return qd_run_suite(s);
}
