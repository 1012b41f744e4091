/*
 * notify_listen: stands in for systemd's notification socket in the serve
 * tests. Binds an AF_UNIX datagram socket at PATH and prints every datagram
 * on one line (its newlines shown as '|'), until SECONDS have passed or a
 * datagram holds STOPPING=1.
 *
 * usage: notify_listen PATH SECONDS
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: notify_listen PATH SECONDS\n");
        return 2;
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(argv[1]) >= sizeof sa.sun_path) {
        fprintf(stderr, "notify_listen: path too long\n");
        return 2;
    }
    strcpy(sa.sun_path, argv[1]);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    unlink(argv[1]);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("notify_listen");
        return 1;
    }
    double end = now() + atof(argv[2]);
    char buf[4096];
    while (now() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
        if (n < 0)
            break;
        buf[n] = '\0';
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] == '\n')
                buf[i] = '|';
        printf("%s\n", buf);
        fflush(stdout);
        if (strstr(buf, "STOPPING=1"))
            break;
    }
    close(fd);
    unlink(argv[1]);
    return 0;
}
