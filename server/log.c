/*
 * log: the structured log sink (see log.h). The level is the only state,
 * atomic: the loop thread sets it at start-up and on SIGHUP.
 */
#include "server/log.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static _Atomic srv_log_level min_level = SRV_LOG_INFO;

void srv_log_set_level(srv_log_level level) { min_level = level; }

static const char *level_name(srv_log_level l)
{
    switch (l) {
    case SRV_LOG_DEBUG: return "debug";
    case SRV_LOG_INFO: return "info";
    case SRV_LOG_WARN: return "warn";
    case SRV_LOG_ERROR: return "error";
    }
    return "info";
}

void srv_log(srv_log_level level, const char *event, const char *fmt, ...)
{
    if (level < min_level)
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s event=%s", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000),
                     level_name(level), event);
    if (n < 0)
        return;
    if (fmt && *fmt && (size_t)n < sizeof line - 2) {
        line[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof line - 1)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    line[n] = '\0';
    /* One write per line so lines from different threads never interleave. */
    flockfile(stderr);
    fputs(line, stderr);
    fflush(stderr);
    funlockfile(stderr);
}

const char *srv_log_quote(char *buf, size_t cap, const char *s, size_t n)
{
    if (!cap)
        return buf;
    bool plain = n > 0;
    for (size_t i = 0; i < n && plain; i++)
        if (s[i] <= ' ' || s[i] == '"' || s[i] == '=' || s[i] == '\\' || (unsigned char)s[i] == 0x7f)
            plain = false;
    size_t w = 0;
    if (plain) {
        for (size_t i = 0; i < n && w + 1 < cap; i++)
            buf[w++] = s[i];
        buf[w] = '\0';
        return buf;
    }
    buf[w++] = '"';
    for (size_t i = 0; i < n && w + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            buf[w++] = '\\';
            buf[w++] = (char)c;
        } else if (c == '\n') {
            buf[w++] = '\\';
            buf[w++] = 'n';
        } else if (c < ' ' || c == 0x7f) {
            w += (size_t)snprintf(buf + w, cap - w, "\\x%02x", c);
        } else {
            buf[w++] = (char)c;
        }
    }
    if (w + 1 < cap)
        buf[w++] = '"';
    buf[w < cap ? w : cap - 1] = '\0';
    return buf;
}

double srv_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}
