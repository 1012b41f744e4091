/*
 * stop: stop-string matching on streamed text (see stop.h).
 *
 * State per stop string: its bytes, its KMP failure table and the length of
 * the longest suffix of the text so far that is a prefix of it. The matcher
 * keeps the bytes not yet emitted in one buffer; the held-back tail is the
 * largest of those suffix lengths. One thread at a time.
 */
#include "engine/stop.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *eng_stop_strerror(int err)
{
    switch (err) {
#define ENG_STOP_STR(name, value, msg) \
    case value:                        \
        return msg;
        ENG_STOP_ERRORS(ENG_STOP_STR)
#undef ENG_STOP_STR
    }
    return "unknown stop-string error";
}

typedef struct stop_string {
    char s[ENG_STOP_MAX_LEN];
    uint16_t fail[ENG_STOP_MAX_LEN]; /* fail[i]: longest proper border of s[0..i] */
    size_t len;
    size_t state;                     /* matched prefix length of the text's tail */
} stop_string;

struct eng_stop {
    stop_string str[ENG_STOP_MAX_STRINGS];
    size_t n;
    char *buf;        /* bytes received and not yet emitted */
    size_t len, cap;
    size_t emitted;   /* bytes at the front of buf handed out by the last call */
    int matched;      /* index of the completed stop string, or -1 */
};

int eng_stop_validate(const char *const *stops, size_t n, eng_stop_error *err)
{
    int rc = ENG_STOP_OK;
    int index = -1;
    if (n > ENG_STOP_MAX_STRINGS) {
        rc = ENG_STOP_ETOOMANY;
    } else {
        for (size_t i = 0; i < n && rc == ENG_STOP_OK; i++) {
            size_t len = stops && stops[i] ? strlen(stops[i]) : 0;
            index = (int)i;
            if (len == 0)
                rc = ENG_STOP_EEMPTY;
            else if (len > ENG_STOP_MAX_LEN)
                rc = ENG_STOP_ETOOLONG;
        }
    }
    if (err) {
        err->index = rc == ENG_STOP_OK || rc == ENG_STOP_ETOOMANY ? -1 : index;
        err->message[0] = '\0';
        if (rc == ENG_STOP_ETOOMANY)
            snprintf(err->message, sizeof err->message, "stop has %zu strings, at most %d allowed",
                     n, ENG_STOP_MAX_STRINGS);
        else if (rc == ENG_STOP_EEMPTY)
            snprintf(err->message, sizeof err->message, "stop[%d] is empty", index);
        else if (rc == ENG_STOP_ETOOLONG)
            snprintf(err->message, sizeof err->message, "stop[%d] is longer than %d bytes", index,
                     ENG_STOP_MAX_LEN);
    }
    return rc;
}

/* The classic failure function: fail[i] is the length of the longest proper
 * prefix of s[0..i] that is also its suffix. */
static void build_fail(stop_string *t)
{
    t->fail[0] = 0;
    size_t k = 0;
    for (size_t i = 1; i < t->len; i++) {
        while (k > 0 && t->s[i] != t->s[k])
            k = t->fail[k - 1];
        if (t->s[i] == t->s[k])
            k++;
        t->fail[i] = (uint16_t)k;
    }
}

eng_stop *eng_stop_new(const char *const *stops, size_t n)
{
    if (eng_stop_validate(stops, n, NULL) != ENG_STOP_OK)
        return NULL;
    eng_stop *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n = n;
    for (size_t i = 0; i < n; i++) {
        stop_string *t = &s->str[i];
        t->len = strlen(stops[i]);
        memcpy(t->s, stops[i], t->len);
        build_fail(t);
    }
    s->matched = -1;
    return s;
}

void eng_stop_free(eng_stop *s)
{
    if (!s)
        return;
    free(s->buf);
    free(s);
}

void eng_stop_reset(eng_stop *s)
{
    for (size_t i = 0; i < s->n; i++)
        s->str[i].state = 0;
    s->len = 0;
    s->emitted = 0;
    s->matched = -1;
}

int eng_stop_matched(const eng_stop *s) { return s->matched; }

/* Drops the bytes handed out by the previous call. */
static void drop_emitted(eng_stop *s)
{
    if (s->emitted > 0) {
        memmove(s->buf, s->buf + s->emitted, s->len - s->emitted);
        s->len -= s->emitted;
        s->emitted = 0;
    }
}

int eng_stop_feed(eng_stop *s, const char *piece, size_t len, const char **emit, size_t *emit_len)
{
    static const char empty[1] = "";
    *emit = empty;
    *emit_len = 0;
    if (s->matched >= 0)
        return 1;
    drop_emitted(s);
    if (len > SIZE_MAX - s->len - 1)
        return ENG_STOP_ENOMEM;
    if (s->len + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 64;
        while (cap < s->len + len + 1)
            cap = cap > SIZE_MAX / 2 ? s->len + len + 1 : cap * 2;
        char *nb = realloc(s->buf, cap);
        if (!nb)
            return ENG_STOP_ENOMEM;
        s->buf = nb;
        s->cap = cap;
    }
    size_t start = s->len;
    if (len > 0)
        memcpy(s->buf + start, piece, len);
    s->len += len;
    s->buf[s->len] = '\0';

    for (size_t pos = start; pos < s->len; pos++) {
        char ch = s->buf[pos];
        int hit = -1;
        for (size_t i = 0; i < s->n; i++) {
            stop_string *t = &s->str[i];
            size_t k = t->state;
            while (k > 0 && t->s[k] != ch)
                k = t->fail[k - 1];
            if (t->s[k] == ch)
                k++;
            t->state = k;
            if (k == t->len && (hit < 0 || t->len > s->str[hit].len))
                hit = (int)i;
        }
        if (hit >= 0) {
            /* Everything from the start of the stop string on is dropped. */
            s->matched = hit;
            size_t begin = pos + 1 - s->str[hit].len;
            *emit = s->buf;
            *emit_len = begin;
            s->len = 0;
            s->emitted = 0;
            return 1;
        }
    }
    size_t hold = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->str[i].state > hold)
            hold = s->str[i].state;
    s->emitted = s->len - hold;
    *emit = s->buf;
    *emit_len = s->emitted;
    return 0;
}

void eng_stop_finish(eng_stop *s, const char **emit, size_t *emit_len)
{
    static const char empty[1] = "";
    *emit = empty;
    *emit_len = 0;
    if (s->matched < 0) {
        drop_emitted(s);
        *emit = s->buf ? s->buf : empty;
        *emit_len = s->len;
        /* The bytes stay valid until the next call, which starts afresh. */
        s->emitted = s->len;
    }
    for (size_t i = 0; i < s->n; i++)
        s->str[i].state = 0;
    s->matched = -1;
}
