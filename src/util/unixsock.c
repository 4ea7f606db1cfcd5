/* One request on a unix socket: a line out, the whole answer back; and
 * what a server needs to know of the socket files it makes. */
#include "util/unixsock.h"

#include "util/dirs.h"
#include "util/strbuf.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Connects to path and sends line: the connected socket, or -1 (errno
 * says why, as the caller's hints need). */
#define UNIXSOCK_ANSWER_S 10

static int unixsock_send(const char *path, const char *line, struct err *e)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) {
        errno = ENAMETOOLONG;
        return err_set(e, "socket path too long: %s", path);
    }
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
    /* An answer that does not come (a stuck agent) is none, not a hang of
     * the asking command or of a starting agent. */
    struct timeval wait = {.tv_sec = UNIXSOCK_ANSWER_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    size_t n = strlen(line);
    if (send(fd, line, n, MSG_NOSIGNAL) != (ssize_t)n) {
        err_set(e, "writing to %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int unixsock_request(const char *path, const char *line, char *reply, size_t len,
                     struct err *e)
{
    int fd = unixsock_send(path, line, e);
    if (fd < 0)
        return -1;
    size_t got = 0;
    ssize_t r;
    while (got + 1 < len && (r = read(fd, reply + got, len - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    reply[got] = '\0';
    return 0;
}

int unixsock_request_all(const char *path, const char *line, struct strbuf *reply,
                         struct err *e)
{
    int fd = unixsock_send(path, line, e);
    if (fd < 0)
        return -1;
    char buf[4096];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0)
        strbuf_append(reply, buf, (size_t)r);
    close(fd);
    if (!reply->data)
        strbuf_puts(reply, "");
    return 0;
}

bool unixsock_live(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return false;
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    bool live = fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0;
    if (fd >= 0)
        close(fd);
    return live;
}

struct unixsock_id unixsock_id_of(const char *path)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return (struct unixsock_id){0, 0};
    return (struct unixsock_id){st.st_ino,
                                (long long)st.st_ctim.tv_sec * 1000000000LL + st.st_ctim.tv_nsec};
}

bool unixsock_id_same(struct unixsock_id a, struct unixsock_id b)
{
    return a.ino == b.ino && a.ctime_ns == b.ctime_ns;
}

bool unixsock_ours(const char *path, struct unixsock_id id)
{
    return id.ino && unixsock_id_same(unixsock_id_of(path), id);
}

int unixsock_listen(uv_pipe_t *p, const char *path, int backlog, uv_connection_cb on_connection,
                    struct unixsock_id *id, struct err *e)
{
    if (unixsock_live(path))
        return err_set(e, "%s: another process serves it (another gpulet agent on the same "
                          "paths?)", path);
    /* One we may not remove is what to report, not the bind's "address in use". */
    int stale = unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
    int rc = uv_pipe_bind(p, path);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)p, backlog, on_connection);
    if (rc == UV_EADDRINUSE && stale)
        rc = stale;
    if (rc < 0) {
        char why[600];
        return err_set(e, "%s: %s%s", path, uv_strerror(rc), dirs_why(path, -rc, why, sizeof why));
    }
    *id = unixsock_id_of(path);
    return 0;
}
