/*
 * check_main: the one way the unit tests run their check suite.
 */
#ifndef QWEN3D_TESTS_CHECK_MAIN_H
#define QWEN3D_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

/* Runs every test of S with check's normal output; the process exit status. */
static inline int qd_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
