/*
 * notify: the systemd notification protocol, spoken natively: datagrams of
 * "KEY=VALUE" lines sent to the AF_UNIX socket named by $NOTIFY_SOCKET
 * (a path, or an abstract name when it starts with '@'). Without
 * NOTIFY_SOCKET every call is a no-op, so the daemon runs the same outside
 * systemd.
 *
 * Called on the event-loop thread (and once on the main thread at start).
 */
#ifndef QWEN3D_SERVER_NOTIFY_H
#define QWEN3D_SERVER_NOTIFY_H

#include <stdint.h>

/* Sends STATE (e.g. "READY=1\nSTATUS=serving"). Returns 0, 1 when there is
 * no NOTIFY_SOCKET, or -errno. */
int srv_notify(const char *state);

/* printf-style srv_notify. */
int srv_notifyf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * The watchdog interval systemd expects pings within ($WATCHDOG_USEC, when
 * $WATCHDOG_PID is absent or this process), in microseconds; 0 when the
 * watchdog is off.
 */
uint64_t srv_notify_watchdog_usec(void);

#endif
