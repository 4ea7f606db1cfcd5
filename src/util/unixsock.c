/* One request on a unix socket: a line out, the whole answer back; and
 * what a server needs to know of the socket files it makes. */
#include "util/unixsock.h"

#include "util/dirs.h"
#include "util/strbuf.h"
#include "util/xmalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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

int unixsock_bind(const char *path, int backlog, int *fd, struct unixsock_id *id, struct err *e)
{
    *fd = -1;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return err_set(e, "socket path too long: %s", path);
    strcpy(addr.sun_path, path);
    if (unixsock_live(path))
        return err_set(e, "%s: another process serves it (another gpulet agent on the same "
                          "paths?)", path);
    /* One we may not remove is what to report, not the bind's "address in use". */
    int stale = unlink(path) == 0 || errno == ENOENT ? 0 : errno;
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int rc = s < 0 ? errno : 0;
    if (!rc && bind(s, (struct sockaddr *)&addr, sizeof addr) < 0)
        rc = errno == EADDRINUSE && stale ? stale : errno;
    if (!rc && listen(s, backlog) < 0)
        rc = errno;
    if (rc) {
        if (s >= 0)
            close(s);
        char why[600];
        return err_set(e, "%s: %s%s", path, strerror(rc), dirs_why(path, rc, why, sizeof why));
    }
    *id = unixsock_id_of(path);
    *fd = s;
    return 0;
}

int unixsock_serve(uv_pipe_t *p, int fd, int backlog, uv_connection_cb on_connection, const char *path,
                   struct err *e)
{
    int rc = uv_pipe_open(p, fd);
    if (rc < 0)
        close(fd); /* not the pipe's */
    else
        rc = uv_listen((uv_stream_t *)p, backlog, on_connection);
    if (rc < 0)
        return err_set(e, "%s: %s", path, uv_strerror(rc));
    return 0;
}

/* --- on the worker pool: the socket's file is on the node's disk ----------------------- */

static unsigned unixsock_jobs; /* the loop's only */

unsigned unixsock_pending(void)
{
    return unixsock_jobs;
}

struct unixsock_binding {
    uv_work_t work;
    char path[512];                  /* unixsock_bind says when it is too long */
    mode_t dir_mode;
    int backlog;
    unixsock_bound_cb done;          /* NULL once cancelled */
    void *ctx;
    int fd;                          /* pool: the result */
    struct unixsock_id id;
    struct err e;
};

static void unixsock_bind_work(uv_work_t *w)
{
    struct unixsock_binding *b = w->data;
    char dir[sizeof b->path];
    dirs_parent(b->path, dir, sizeof dir);
    if (b->dir_mode && dirs_make(NULL, dir, b->dir_mode, &b->e) < 0)
        return;
    unixsock_bind(b->path, b->backlog, &b->fd, &b->id, &b->e);
}

static void unixsock_bind_done(uv_work_t *w, int status)
{
    struct unixsock_binding *b = w->data;
    if (status == UV_ECANCELED && b->done)
        err_set(&b->e, "%s: not bound (the agent is stopping)", b->path);
    if (b->done) {
        b->done(b->ctx, b->fd, b->id, b->fd < 0 ? &b->e : NULL);
    } else if (b->fd >= 0) { /* cancelled meanwhile: nobody serves it */
        close(b->fd);
        unixsock_remove(w->loop, b->path, b->id);
    }
    unixsock_jobs--;
    free(b);
}

struct unixsock_binding *unixsock_bind_start(uv_loop_t *loop, const char *path, mode_t dir_mode,
                                             int backlog, unixsock_bound_cb done, void *ctx)
{
    struct unixsock_binding *b = xcalloc(1, sizeof *b);
    snprintf(b->path, sizeof b->path, "%s", path);
    b->dir_mode = dir_mode;
    b->backlog = backlog;
    b->done = done;
    b->ctx = ctx;
    b->fd = -1;
    b->e.msg[0] = '\0';
    b->work.data = b;
    unixsock_jobs++;
    uv_queue_work(loop, &b->work, unixsock_bind_work, unixsock_bind_done);
    return b;
}

void unixsock_bind_cancel(struct unixsock_binding *b)
{
    if (b)
        b->done = NULL;
}

struct unixsock_removal {
    uv_work_t work;
    char path[512];
    struct unixsock_id id;
};

static void unixsock_remove_work(uv_work_t *w)
{
    struct unixsock_removal *r = w->data;
    if (unixsock_ours(r->path, r->id))
        unlink(r->path); /* not one another process bound there since */
}

static void unixsock_remove_done(uv_work_t *w, int status)
{
    (void)status;
    unixsock_jobs--;
    free(w->data);
}

void unixsock_remove(uv_loop_t *loop, const char *path, struct unixsock_id id)
{
    if (!id.ino)
        return;
    struct unixsock_removal *r = xcalloc(1, sizeof *r);
    snprintf(r->path, sizeof r->path, "%s", path);
    r->id = id;
    r->work.data = r;
    unixsock_jobs++;
    uv_queue_work(loop, &r->work, unixsock_remove_work, unixsock_remove_done);
}
