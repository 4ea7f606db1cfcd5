/* One request on a unix socket: a line out, the whole answer back. */
#include "util/unixsock.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int unixsock_request(const char *path, const char *line, char *reply, size_t len,
                     struct err *e)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return err_set(e, "socket path too long: %s", path);
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int saved = errno;
        err_set(e, "cannot reach %s: %s", path, strerror(saved));
        if (fd >= 0)
            close(fd);
        errno = saved;
        return -1;
    }
    size_t n = strlen(line);
    if (send(fd, line, n, MSG_NOSIGNAL) != (ssize_t)n) {
        err_set(e, "writing to %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    size_t got = 0;
    ssize_t r;
    while (got + 1 < len && (r = read(fd, reply + got, len - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    reply[got] = '\0';
    return 0;
}
