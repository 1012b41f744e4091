/*
 * log: structured one-line logs on stderr, "key=value" pairs after a
 * timestamp, level and event name, e.g.
 *
 *   ts=2025-01-01T12:00:00.123Z level=info event=request id=cmpl-1f path=/v1/completions status=200
 *
 * Values with spaces, quotes or '=' are written quoted with escapes, so a
 * line always parses back into pairs. Prompt text is never logged by the
 * server unless --log-prompts is given (the caller decides).
 *
 * Any thread: each line is written with one call under the stdio lock.
 */
#ifndef QWEN3D_SERVER_LOG_H
#define QWEN3D_SERVER_LOG_H

#include <stddef.h>

typedef enum srv_log_level { SRV_LOG_DEBUG, SRV_LOG_INFO, SRV_LOG_WARN, SRV_LOG_ERROR } srv_log_level;

/* Lines below LEVEL are dropped (default info). Any thread. */
void srv_log_set_level(srv_log_level level);

/*
 * Writes one line: EVENT, then the pairs FMT produces. FMT is a printf
 * format of space-separated key=value pairs; string values that may hold
 * spaces or quotes go through srv_log_quote() first.
 */
void srv_log(srv_log_level level, const char *event, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Writes S (N bytes) as a log value into BUF (quoted when needed); returns BUF. */
const char *srv_log_quote(char *buf, size_t cap, const char *s, size_t n);

/* Monotonic clock in seconds: what the server's durations and deadlines are measured with. Any thread. */
double srv_now(void);

#endif
