/*
 * notify: sd_notify without libsystemd (see notify.h). One datagram per
 * call on a fresh socket: notifications are rare (start, status, stop and
 * the watchdog ping), so nothing is kept open.
 *
 * Event-loop thread.
 */
#include "server/notify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int srv_notify(const char *state)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return 1;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    size_t n = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || n >= sizeof sa.sun_path)
        return -EINVAL;
    memcpy(sa.sun_path, path, n);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (path[0] == '@' ? 0 : 1));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    ssize_t w = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
    int rc = w < 0 ? -errno : 0;
    close(fd);
    return rc;
}

int srv_notifyf(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return srv_notify(buf);
}

uint64_t srv_notify_watchdog_usec(void)
{
    const char *us = getenv("WATCHDOG_USEC");
    if (!us || !*us)
        return 0;
    const char *pid = getenv("WATCHDOG_PID");
    if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid())
        return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(us, &end, 10);
    if (errno || *end)
        return 0;
    return v;
}
