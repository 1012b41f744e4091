/*
 * fuzz_tokfile: the loading of tokenizer.json files, differentially. Each
 * input is a file's text, loaded twice from memory (tok_load_text): the way
 * eng_tok_load() goes, where engine/tok_read.c reads the vocabulary and
 * merges straight from the text and jansson the rest, and with jansson
 * alone. Checked: both accept or both refuse; accepted, they built the same
 * tables (tok_same_tables); refused, they give the same messages. The input
 * buffer is exactly the file (no NUL after it), so a read past its end is
 * caught. The seeds are small tokenizers with escaped spellings and both
 * forms of merges.
 */
#include <string.h>

#include "engine/tok_internal.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    eng_tok_text file = {(char *)(uintptr_t)data, size, size};
    eng_diag da, db;
    eng_diag_init(&da);
    eng_diag_init(&db);
    eng_tok *a = NULL, *b = NULL;
    int ra = tok_load_text("input", &file, true, &a, &da);
    int rb = tok_load_text("input", &file, false, &b, &db);
    if (fuzz_report()) {
        for (size_t i = 0; i < db.n_kept; i++)
            fprintf(stderr, "%s\n", db.lines[i]);
        if (ra == 0)
            fprintf(stderr, "loaded, %s\n", a->read_directly ? "read directly" : "by jansson alone");
    }
    FUZZ_CHECK(ra == rb);
    if (ra == 0) {
        FUZZ_CHECK(!b->read_directly);
        FUZZ_CHECK(tok_same_tables(a, b));
    } else {
        FUZZ_CHECK(da.n_total == db.n_total && da.n_kept == db.n_kept);
        for (size_t i = 0; i < da.n_kept; i++)
            FUZZ_CHECK(!strcmp(da.lines[i], db.lines[i]));
    }
    eng_tok_free(a);
    eng_tok_free(b);
    eng_diag_clear(&da);
    eng_diag_clear(&db);
    return 0;
}
