/*
 * test_cli: the shared option helpers of server/cli/cli.c.
 */
#include <check.h>
#include <stdlib.h>

#include "server/cli/cli.h"
#include "tests/check_main.h"

START_TEST(parse_i64_strict)
{
    int64_t v = 0;
    ck_assert(cli_parse_i64("42", 0, 100, &v));
    ck_assert_int_eq(v, 42);
    ck_assert(!cli_parse_i64("42x", 0, 100, &v));
    ck_assert(!cli_parse_i64("", 0, 100, &v));
    ck_assert(!cli_parse_i64("101", 0, 100, &v));
    ck_assert(!cli_parse_i64("-1", 0, 100, &v));
    ck_assert(!cli_parse_i64("99999999999999999999999", 0, INT64_MAX, &v));
}
END_TEST

START_TEST(opt_forms)
{
    char *argv[] = {"x", "--model", "dir", "--port=8080", "--json", "--model"};
    int argc = 6, i = 1;
    const char *val = NULL;
    ck_assert_int_eq(cli_opt("t", argc, argv, &i, "model", &val), 1);
    ck_assert_str_eq(val, "dir");
    ck_assert_int_eq(i, 2);
    i = 3;
    ck_assert_int_eq(cli_opt("t", argc, argv, &i, "port", &val), 1);
    ck_assert_str_eq(val, "8080");
    ck_assert_int_eq(cli_opt("t", argc, argv, &i, "portx", &val), 0);
    i = 4;
    ck_assert(cli_flag(argv, i, "json"));
    ck_assert_int_eq(cli_opt("t", argc, argv, &i, "js", &val), 0);
    i = 5;
    ck_assert_int_eq(cli_opt("t", argc, argv, &i, "model", &val), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("options");
    tcase_add_test(tc, parse_i64_strict);
    tcase_add_test(tc, opt_forms);
    suite_add_tcase(s, tc);
    return qd_run_suite(s);
}
