/*
 * test_stop: engine/stop.c against a direct reading of its definition.
 *
 * The reference works on the whole text at once: the output is the text up
 * to the start of the stop string that ends first (the longest among those
 * ending on the same byte), and after each piece the held-back tail is the
 * longest suffix of the text so far that is a proper prefix of a stop
 * string. The matcher, fed the same text in pieces, must agree at every step.
 */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/stop.h"
#include "tests/check_main.h"

/* Where the first stop ends in TEXT[0..len): returns the start, or -1. */
static long ref_stop_start(const char *text, size_t len, const char *const *stops, size_t n)
{
    for (size_t end = 1; end <= len; end++) {
        long best = -1;
        for (size_t i = 0; i < n; i++) {
            size_t sl = strlen(stops[i]);
            if (sl <= end && memcmp(text + end - sl, stops[i], sl) == 0)
                if (best < 0 || (long)(end - sl) < best)
                    best = (long)(end - sl);
        }
        if (best >= 0)
            return best;
    }
    return -1;
}

/* The longest suffix of TEXT[0..len) that is a proper prefix of a stop string. */
static size_t ref_hold(const char *text, size_t len, const char *const *stops, size_t n)
{
    size_t hold = 0;
    for (size_t i = 0; i < n; i++) {
        size_t sl = strlen(stops[i]);
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= len && memcmp(text + len - k, stops[i], k) == 0) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Feeds TEXT cut at CUTS (increasing, ending at len) and checks every step. */
static void check_feed(eng_stop *s, const char *text, size_t len, const size_t *cuts, size_t n_cuts,
                       const char *const *stops, size_t n)
{
    char out[1024];
    size_t out_len = 0, prev = 0;
    long stop_at = ref_stop_start(text, len, stops, n);
    bool stopped = false;
    for (size_t c = 0; c < n_cuts; c++) {
        const char *emit;
        size_t emit_len;
        int rc = eng_stop_feed(s, text + prev, cuts[c] - prev, &emit, &emit_len);
        ck_assert_int_ge(rc, 0);
        ck_assert_uint_le(out_len + emit_len, sizeof out);
        memcpy(out + out_len, emit, emit_len);
        out_len += emit_len;
        long here = ref_stop_start(text, cuts[c], stops, n);
        if (here >= 0) {
            /* Stopped: exactly the text before the stop, and only once. */
            ck_assert_int_eq(rc, 1);
            ck_assert_uint_eq(out_len, (size_t)stop_at);
            ck_assert(memcmp(out, text, out_len) == 0);
            if (!stopped)
                ck_assert_int_ge(eng_stop_matched(s), 0);
            else
                ck_assert_uint_eq(emit_len, 0);
            stopped = true;
        } else {
            ck_assert_int_eq(rc, 0);
            ck_assert_int_eq(eng_stop_matched(s), -1);
            ck_assert_uint_eq(out_len, cuts[c] - ref_hold(text, cuts[c], stops, n));
            ck_assert(memcmp(out, text, out_len) == 0);
        }
        prev = cuts[c];
    }
    const char *emit;
    size_t emit_len;
    eng_stop_finish(s, &emit, &emit_len);
    memcpy(out + out_len, emit, emit_len);
    out_len += emit_len;
    size_t want = stop_at >= 0 ? (size_t)stop_at : len;
    ck_assert_uint_eq(out_len, want);
    ck_assert(memcmp(out, text, want) == 0);
}

START_TEST(one_byte_pieces_and_whole_text)
{
    const char *stops[] = {"</s>", "\n\nUser:", "END"};
    const char *texts[] = {
        "Hello world",           "Hello </s> world",   "a<</s>",
        "x\n\nUse\n\nUser: hi",  "<</<</s",            "ENEND tail",
        "EN",                    "\n\nUser",           "",
    };
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        size_t len = strlen(texts[t]);
        eng_stop *s = eng_stop_new(stops, 3);
        ck_assert_ptr_nonnull(s);
        size_t cuts[64];
        for (size_t i = 0; i < len; i++)
            cuts[i] = i + 1;
        check_feed(s, texts[t], len, cuts, len, stops, 3);
        size_t whole = len;
        check_feed(s, texts[t], len, &whole, 1, stops, 3);
        eng_stop_free(s);
    }
}
END_TEST

/* Overlapping stop strings over a two-letter alphabet, random pieces. */
START_TEST(random_overlaps)
{
    const char *sets[][4] = {
        {"aab", "ba", NULL, NULL},
        {"abab", "bab", "aaa", NULL},
        {"abaabab", "b", NULL, NULL},
        {"aaaaab", "abba", "bbbb", "ab"},
    };
    uint64_t r = 88172645463325252ull;
    for (size_t set = 0; set < 4; set++) {
        size_t n = 0;
        while (n < 4 && sets[set][n])
            n++;
        eng_stop *s = eng_stop_new(sets[set], n);
        ck_assert_ptr_nonnull(s);
        for (int trial = 0; trial < 400; trial++) {
            char text[40];
            size_t len = 0;
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            size_t want = 1 + r % 39;
            while (len < want) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                text[len++] = (r >> 20) % 5 < 3 ? 'a' : 'b';
            }
            size_t cuts[40], n_cuts = 0, pos = 0;
            while (pos < len) {
                r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                pos += 1 + r % 4;
                if (pos > len)
                    pos = len;
                cuts[n_cuts++] = pos;
            }
            check_feed(s, text, len, cuts, n_cuts, sets[set], n);
        }
        eng_stop_free(s);
    }
}
END_TEST

START_TEST(utf8_and_no_stops)
{
    const char *stops[] = {"\xe2\x80\x94stop", "\xf0\x9f\x99\x82"}; /* "—stop", an emoji */
    const char *text = "caf\xc3\xa9 \xe2\x80\x94st \xe2\x80\x94stop!";
    eng_stop *s = eng_stop_new(stops, 2);
    ck_assert_ptr_nonnull(s);
    size_t len = strlen(text), cuts[64];
    for (size_t i = 0; i < len; i++)
        cuts[i] = i + 1;
    check_feed(s, text, len, cuts, len, stops, 2);
    eng_stop_free(s);

    /* With no stop strings everything passes through at once. */
    s = eng_stop_new(NULL, 0);
    ck_assert_ptr_nonnull(s);
    const char *emit;
    size_t emit_len;
    ck_assert_int_eq(eng_stop_feed(s, "abc", 3, &emit, &emit_len), 0);
    ck_assert_uint_eq(emit_len, 3);
    ck_assert(memcmp(emit, "abc", 3) == 0);
    eng_stop_finish(s, &emit, &emit_len);
    ck_assert_uint_eq(emit_len, 0);
    eng_stop_free(s);
    eng_stop_free(NULL);
}
END_TEST

START_TEST(reset_and_reuse)
{
    const char *stops[] = {"xyz"};
    eng_stop *s = eng_stop_new(stops, 1);
    const char *emit;
    size_t emit_len;
    ck_assert_int_eq(eng_stop_feed(s, "abxy", 4, &emit, &emit_len), 0);
    ck_assert_uint_eq(emit_len, 2);
    ck_assert_int_eq(eng_stop_feed(s, "z", 1, &emit, &emit_len), 1);
    ck_assert_uint_eq(emit_len, 0);
    ck_assert_int_eq(eng_stop_matched(s), 0);
    ck_assert_int_eq(eng_stop_feed(s, "more", 4, &emit, &emit_len), 1);
    ck_assert_uint_eq(emit_len, 0);
    eng_stop_reset(s);
    ck_assert_int_eq(eng_stop_matched(s), -1);
    ck_assert_int_eq(eng_stop_feed(s, "xy", 2, &emit, &emit_len), 0);
    ck_assert_uint_eq(emit_len, 0);
    eng_stop_finish(s, &emit, &emit_len);
    ck_assert_uint_eq(emit_len, 2);
    ck_assert(memcmp(emit, "xy", 2) == 0);
    /* finish() started a new text. */
    ck_assert_int_eq(eng_stop_feed(s, "zz", 2, &emit, &emit_len), 0);
    ck_assert_uint_eq(emit_len, 2);
    eng_stop_free(s);
}
END_TEST

START_TEST(invalid_lists_named)
{
    char long_stop[ENG_STOP_MAX_LEN + 2];
    memset(long_stop, 'a', sizeof long_stop - 1);
    long_stop[sizeof long_stop - 1] = '\0';
    const char *with_long[] = {"ok", long_stop};
    const char *with_empty[] = {"ok", "fine", ""};
    const char *with_null[] = {"ok", NULL};
    const char *many[ENG_STOP_MAX_STRINGS + 1];
    for (size_t i = 0; i <= ENG_STOP_MAX_STRINGS; i++)
        many[i] = "s";
    eng_stop_error err;
    ck_assert_int_eq(eng_stop_validate(with_long, 2, &err), ENG_STOP_ETOOLONG);
    ck_assert_int_eq(err.index, 1);
    ck_assert_ptr_nonnull(strstr(err.message, "stop[1]"));
    ck_assert_int_eq(eng_stop_validate(with_empty, 3, &err), ENG_STOP_EEMPTY);
    ck_assert_int_eq(err.index, 2);
    ck_assert_ptr_nonnull(strstr(err.message, "stop[2]"));
    ck_assert_int_eq(eng_stop_validate(with_null, 2, &err), ENG_STOP_EEMPTY);
    ck_assert_int_eq(eng_stop_validate(many, ENG_STOP_MAX_STRINGS + 1, &err), ENG_STOP_ETOOMANY);
    ck_assert_int_eq(err.index, -1);
    ck_assert_ptr_null(eng_stop_new(with_long, 2));
    ck_assert_ptr_null(eng_stop_new(many, ENG_STOP_MAX_STRINGS + 1));
    /* The limits themselves are accepted. */
    long_stop[ENG_STOP_MAX_LEN] = '\0';
    ck_assert_int_eq(eng_stop_validate(with_long, 2, &err), 0);
    eng_stop *s = eng_stop_new(many, ENG_STOP_MAX_STRINGS);
    ck_assert_ptr_nonnull(s);
    eng_stop_free(s);
    s = eng_stop_new(with_long, 2);
    ck_assert_ptr_nonnull(s);
    eng_stop_free(s);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("stop");
    TCase *tc = tcase_create("matching");
    tcase_add_test(tc, one_byte_pieces_and_whole_text);
    tcase_add_test(tc, random_overlaps);
    tcase_add_test(tc, utf8_and_no_stops);
    tcase_add_test(tc, reset_and_reuse);
    tcase_add_test(tc, invalid_lists_named);
    suite_add_tcase(su, tc);
    return qd_run_suite(su);
}
