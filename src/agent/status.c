/* The status socket: a unix socket on which gpulet's commands ask the
 * running agent (answer.c says what). One request line in, the answer out,
 * then the connection closes. A client that says nothing for two seconds
 * is dropped, so none can hold the loop's resources. */
#include <ctype.h>
#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "agent/internal.h"
#include "util/dirs.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/unixsock.h"
#include "util/xmalloc.h"

#define STATUS_MAX_LINE 512
#define STATUS_IDLE_MS 2000
#define STATUS_GONE_MS 10000 /* how long a stopping agent may take to close its socket */

struct agent_status {
    struct agent *a;
    uv_pipe_t listener;
    char path[CONFIG_PATH_MAX];
    struct unixsock_id id;      /* the socket file this agent made: only that one it removes */
};

struct status_conn {
    uv_pipe_t pipe;
    uv_timer_t timer;
    int handles;
    struct agent_status *s;
    char line[STATUS_MAX_LINE];
    size_t len;
    bool answered;
};

static void status_conn_closed(uv_handle_t *h)
{
    struct status_conn *c = h->data;
    if (--c->handles == 0)
        free(c);
}

static void status_conn_close(struct status_conn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->pipe)) {
        uv_close((uv_handle_t *)&c->pipe, status_conn_closed);
        uv_close((uv_handle_t *)&c->timer, status_conn_closed);
    }
}

static void status_written(uv_write_t *req, int status)
{
    (void)status;
    struct status_conn *c = req->data;
    free(req);
    status_conn_close(c);
}

static void status_answer(struct status_conn *c)
{
    struct strbuf out = {0};
    char *nl = strchr(c->line, '\n');
    if (nl)
        *nl = '\0';
    agent_answer(c->s->a, c->line, &out);
    if (out.len && out.data[out.len - 1] != '\n')
        strbuf_puts(&out, "\n");
    c->answered = true;
    uv_write_t *req = xmalloc(sizeof *req + out.len);
    memcpy(req + 1, out.data, out.len);
    req->data = c;
    uv_buf_t buf = uv_buf_init((char *)(req + 1), (unsigned)out.len);
    if (uv_write(req, (uv_stream_t *)&c->pipe, &buf, 1, status_written) < 0) {
        free(req);
        status_conn_close(c);
    }
    strbuf_free(&out);
}

static void status_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct status_conn *c = h->data;
    *buf = uv_buf_init(c->line + c->len, (unsigned)(sizeof c->line - 1 - c->len));
}

static void status_read(uv_stream_t *st, ssize_t n, const uv_buf_t *buf)
{
    (void)buf;
    struct status_conn *c = st->data;
    if (c->answered)
        return;
    if (n < 0) {
        status_conn_close(c);
        return;
    }
    c->len += (size_t)n;
    c->line[c->len] = '\0';
    if (strchr(c->line, '\n') || c->len == sizeof c->line - 1) {
        uv_read_stop(st);
        status_answer(c);
    }
}

static void status_idle(uv_timer_t *t)
{
    status_conn_close(t->data);
}

static void status_accept(uv_stream_t *listener, int status)
{
    struct agent_status *s = listener->data;
    if (status < 0)
        return;
    struct status_conn *c = xcalloc(1, sizeof *c);
    c->s = s;
    uv_pipe_init(listener->loop, &c->pipe, 0);
    uv_timer_init(listener->loop, &c->timer);
    c->pipe.data = c->timer.data = c;
    c->handles = 2;
    if (uv_accept(listener, (uv_stream_t *)&c->pipe) < 0 ||
        uv_read_start((uv_stream_t *)&c->pipe, status_alloc, status_read) < 0) {
        status_conn_close(c);
        return;
    }
    uv_timer_start(&c->timer, status_idle, STATUS_IDLE_MS, 0);
}

/* Whether the agent at path is gone, or goes within STATUS_GONE_MS: its
 * socket no longer takes a connection. */
static bool agent_status_gone(const char *path)
{
    for (unsigned waited = 0; unixsock_live(path); waited += 50) {
        if (waited >= STATUS_GONE_MS)
            return false;
        usleep(50 * 1000);
    }
    return true;
}

/* --take-over: the agent at path (pid) lets go of everything it serves
 * and answers once it has; this one then takes its place. An agent that
 * is gone, or stopping (it closes without an answer, as a rollout's old
 * pod may as the new one starts), has nothing to hand over: go on. */
static int agent_status_take_over(const char *path, const char *pid, struct err *e)
{
    char request[64], reply[128];
    snprintf(request, sizeof request, "hand-over %d\n", (int)getpid());
    struct err why;
    uint64_t begun = uv_hrtime();
    int rc = unixsock_request(path, request, reply, sizeof reply, &why);
    /* "releasing": its last writes, or the kubelet's letting go of its
     * plugins, still under way; asked again. */
    for (unsigned waited = 0; rc == 0 && !strncmp(reply, "releasing", 9) && waited < STATUS_GONE_MS;
         waited += 20) {
        usleep(20 * 1000);
        rc = unixsock_request(path, request, reply, sizeof reply, &why);
    }
    if ((rc < 0 && (errno == ENOENT || errno == ECONNREFUSED)) ||
        (rc == 0 && !reply[0] && agent_status_gone(path))) {
        log_info("the gpulet agent (PID %s) on %s stopped before it handed over: nothing to take "
                 "over", pid, path);
        return 0;
    }
    if (rc < 0)
        return err_set(e, "the gpulet agent (PID %s) on %s did not hand over: %s", pid, path,
                       why.msg);
    if (!reply[0])
        return err_set(e, "the gpulet agent (PID %s) on %s did not hand over: it gave no answer "
                          "and still serves there", pid, path);
    reply[strcspn(reply, "\n")] = '\0';
    if (!strncmp(reply, "releasing", 9))
        return err_set(e, "the gpulet agent (PID %s) on %s is still releasing after %u s: its "
                          "disk hangs, or the kubelet holds its device plugins", pid, path,
                       STATUS_GONE_MS / 1000);
    if (strncmp(reply, "released", 8))
        return err_set(e, "the gpulet agent (PID %s) on %s does not hand over (it answered '%s'): "
                          "stop it first", pid, path, reply);
    log_info("took over from the gpulet agent (PID %s) in %.0f ms: it serves nothing now, and "
             "stops when its pod goes", pid, (double)(uv_hrtime() - begun) / 1e6);
    return 0;
}

int agent_status_start(struct agent *a, struct err *e)
{
    const char *path = a->cfg.status_socket;
    if (!*path)
        return 0;
    /* libuv would cut a longer path short and bind somewhere else. */
    if (strlen(path) >= sizeof ((struct sockaddr_un *)0)->sun_path)
        return err_set(e, "--status-socket %s is longer than the %zu bytes a unix socket takes",
                       path, sizeof ((struct sockaddr_un *)0)->sun_path - 1);
    char dir[CONFIG_PATH_MAX];
    dirs_parent(path, dir, sizeof dir);
    if (dirs_make(&a->made, dir, 0755, e) < 0) /* /run/gpulet on a fresh node */
        return -1;
    /* An agent answering there already (a user's second demo agent, or a
     * second agent on a node): refused, before it takes the first one's
     * sockets, rather than two fighting over them. */
    char pid[64];
    struct err none;
    if (unixsock_request(path, "pid\n", pid, sizeof pid, &none) == 0) {
        pid[strcspn(pid, "\n")] = '\0';
        if (!a->cfg.take_over)
            return err_set(e, "another gpulet agent (PID %s) serves %s: stop it, or give this one "
                              "paths of its own with --status-socket and --kubelet-root",
                           isdigit((unsigned char)pid[0]) ? pid : "unknown", path);
        if (agent_status_take_over(path, isdigit((unsigned char)pid[0]) ? pid : "unknown", e) < 0)
            return -1;
    }
    struct agent_status *s = xcalloc(1, sizeof *s);
    s->a = a;
    snprintf(s->path, sizeof s->path, "%s", path);
    uv_pipe_init(&a->loop, &s->listener, 0);
    s->listener.data = s;
    a->status = s; /* freed at stop, after the listener's close completes */
    /* Bound here, before the loop serves (start-up may block). */
    struct err why;
    int fd;
    if (unixsock_bind(path, 16, &fd, &s->id, &why) < 0 ||
        unixsock_serve(&s->listener, fd, 16, status_accept, path, &why) < 0) {
        err_set(e, "status socket %s (--status-socket names another)", why.msg);
        uv_close((uv_handle_t *)&s->listener, NULL);
        s->path[0] = '\0';
        return -1;
    }
    return 0;
}

void agent_status_stop(struct agent *a, bool remove)
{
    struct agent_status *s = a->status;
    if (!s)
        return;
    if (s->path[0]) {
        uv_close((uv_handle_t *)&s->listener, NULL);
        if (remove)
            unixsock_remove(&a->loop, s->path, s->id);
        s->path[0] = '\0'; /* stopped: a hand-over, then the agent's stop */
    }
}

/* Frees the status struct once the loop has closed its handle. */
void agent_status_free(struct agent *a)
{
    free(a->status);
    a->status = NULL;
}
