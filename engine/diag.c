/*
 * diag: collects one-line problem reports (see diag.h). Not thread-safe; each
 * eng_diag belongs to one caller.
 */
#include "engine/diag.h"

#include <stdarg.h>
#include <stdlib.h>

void eng_diag_init(eng_diag *d)
{
    d->n_kept = 0;
    d->n_total = 0;
}

void eng_diag_clear(eng_diag *d)
{
    for (size_t i = 0; i < d->n_kept; i++)
        free(d->lines[i]);
    eng_diag_init(d);
}

void eng_diag_add(eng_diag *d, const char *fmt, ...)
{
    d->n_total++;
    if (d->n_kept >= ENG_DIAG_MAX_KEPT)
        return;
    va_list ap;
    va_start(ap, fmt);
    char *line = NULL;
    int n = vasprintf(&line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    /* One problem, one line: fold any newline a quoted name may carry. */
    for (char *p = line; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    d->lines[d->n_kept++] = line;
}

void eng_diag_print(const eng_diag *d, FILE *out, const char *prefix)
{
    for (size_t i = 0; i < d->n_kept; i++)
        fprintf(out, "%s: %s\n", prefix, d->lines[i]);
    if (d->n_total > d->n_kept)
        fprintf(out, "%s: ... and %zu more problems\n", prefix, d->n_total - d->n_kept);
}
