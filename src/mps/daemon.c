/* One MPS control daemon: started detached (exec.c) or adopted, watched
 * through a pidfd (it is no child of gpulet's), given its limits through
 * the control program's own command interface, restarted with backoff,
 * left running when gpulet stops or reloads, told to quit when nothing
 * needs it any more. */
#include "mps/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/backoff.h"
#include "util/dirs.h"
#include "util/log.h"
#include "util/xmalloc.h"

static void mps_spawn(struct mps_daemon *m);
static void mps_begin_found(struct mps_daemon *m, pid_t pid, const struct err *e);
static void mps_gpu_list(const struct mps_daemon *m, struct strbuf *out);


static void mps_on_spawn_timer(uv_timer_t *t)
{
    mps_spawn(t->data);
}


static void mps_state(struct mps_daemon *m, bool up)
{
    if (m->hooks.on_state)
        m->hooks.on_state(m->hooks.ctx, up);
}


static int mps_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}


/* A removal of a daemon's directory, on the worker pool: nobody waits for it. */
struct mps_removal {
    uv_work_t work;
    char dir[sizeof ((struct config_mps_dirs *)0)->dir];
};

static void mps_remove_work(uv_work_t *w)
{
    const struct mps_removal *r = w->data;
    nftw(r->dir, mps_remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void mps_removed(uv_work_t *w, int status)
{
    (void)status;
    free(w->data);
}

void mps_maybe_free(struct mps_daemon *m)
{
    if (m->state != MPS_STOPPING || m->handles)
        return;
    if (m->remove_dir) {
        struct mps_removal *r = xcalloc(1, sizeof *r);
        snprintf(r->dir, sizeof r->dir, "%s", m->dirs.dir);
        r->work.data = r;
        uv_queue_work(m->loop, &r->work, mps_remove_work, mps_removed);
    }
    for (char **e = m->env; e && *e; e++)
        free(*e);
    free(m->env);
    strbuf_free(&m->cmd_text);
    free(m);
}


void mps_closed(uv_handle_t *h)
{
    struct mps_daemon *m = h->data;
    m->handles--;
    mps_maybe_free(m);
}


/* The daemon's environment: the agent's, its GPUs, its directories. */
char **mps_environment(struct mps_daemon *m)
{
    extern char **environ;
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = xcalloc(n + 4, sizeof *env);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) &&
            strncmp(environ[i], "CUDA_MPS_PIPE_DIRECTORY=", 24) &&
            strncmp(environ[i], "CUDA_MPS_LOG_DIRECTORY=", 23))
            env[k++] = xstrdup(environ[i]);
    struct strbuf v = {0};
    strbuf_puts(&v, "CUDA_VISIBLE_DEVICES=");
    mps_gpu_list(m, &v);
    env[k++] = xstrdup(v.data);
    strbuf_free(&v);
    size_t plen = strlen(m->dirs.pipe) + 32, llen = strlen(m->dirs.log) + 32;
    env[k] = xmalloc(plen);
    snprintf(env[k++], plen, "CUDA_MPS_PIPE_DIRECTORY=%s", m->dirs.pipe);
    env[k] = xmalloc(llen);
    snprintf(env[k++], llen, "CUDA_MPS_LOG_DIRECTORY=%s", m->dirs.log);
    return env;
}


/* The GPUs m serves, as its daemon's CUDA_VISIBLE_DEVICES. */
static void mps_gpu_list(const struct mps_daemon *m, struct strbuf *out)
{
    for (unsigned i = 0; i < m->spec.ngpus; i++)
        strbuf_printf(out, "%s%s", i ? "," : "", m->spec.uuids[i]);
}


static void mps_up_found(struct mps_daemon *m, pid_t pid, const struct err *e);

/* The limits were taken: the daemon is up, and now its pid is known (read
 * from its pid file where it is not yet). */
void mps_up(struct mps_daemon *m)
{
    if (!m->pid) {
        mps_look(m, MPS_LOOK_PID, mps_up_found);
        return;
    }
    mps_up_found(m, 0, NULL);
}

static void mps_up_found(struct mps_daemon *m, pid_t pid, const struct err *e)
{
    (void)e;
    if (m->state != MPS_STARTING) { /* stopped, or gone, meanwhile */
        mps_maybe_free(m);
        return;
    }
    if (pid && !m->pid)
        mps_watch(m, pid);
    if (m->state != MPS_STARTING)
        return; /* it was gone already: restarted with backoff */
    m->state = MPS_UP;
    m->backoff_ms = 0;
    m->failing = false;
    log_info("MPS daemon for %s is up, %s (pid %d, %u GPU(s), active threads %u%%, pipe %s)",
             m->spec.name, m->adopted ? "adopted: it and its clients ran on" : "started",
             (int)m->pid, m->spec.ngpus, m->spec.thread_percentage, m->dirs.pipe);
    mps_state(m, true);
}


/* Its last handles: the daemon's owner lets go. */
void mps_close(struct mps_daemon *m)
{
    uv_close((uv_handle_t *)&m->timer, mps_closed);
    uv_close((uv_handle_t *)&m->check, mps_closed);
    uv_close((uv_handle_t *)&m->touch, mps_closed);
}


/* On the worker pool: the loop never waits on a disk (--mps-root may be on
 * one). The lease is made at the first touch. */
static void mps_touch_work(uv_work_t *w)
{
    const struct mps_daemon *m = w->data;
    int fd = open(m->lease, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) {
        futimens(fd, NULL);
        close(fd);
    }
}

static void mps_touched(uv_work_t *w, int status)
{
    (void)status;
    struct mps_daemon *m = w->data;
    m->touching = false;
    m->handles--;
    mps_maybe_free(m);
}

/* The lease, touched while gpulet runs. A touch still under way is
 * enough. */
static void mps_touch(uv_timer_t *t)
{
    struct mps_daemon *m = t->data;
    if (m->touching)
        return;
    m->touch_work.data = m;
    if (uv_queue_work(m->loop, &m->touch_work, mps_touch_work, mps_touched) == 0) {
        m->touching = true;
        m->handles++; /* m stays until it is back */
    }
}


/* How long gpulet may be away before the keeper ends an idle daemon:
 * GPULET_MPS_LEASE seconds (the tests' knob), else MPS_LEASE_S. */
static unsigned mps_lease_s(void)
{
    const char *v = getenv("GPULET_MPS_LEASE");
    long s = v ? strtol(v, NULL, 10) : 0;
    return s > 0 && s < 86400 ? (unsigned)s : MPS_LEASE_S;
}


static void mps_unwatch(struct mps_daemon *m)
{
    if (m->checking) {
        m->checking = false;
        uv_timer_stop(&m->check);
    }
    if (!m->watching)
        return;
    m->watching = false;
    uv_close((uv_handle_t *)&m->watch, mps_closed);
    close(m->pidfd); /* the closed handle polls it no more */
    m->pidfd = -1;
}


/* It has exited: restarted, or what was waited for. */
static void mps_gone(struct mps_daemon *m)
{
    pid_t pid = m->pid;
    mps_unwatch(m);
    m->pid = 0;
    if (m->state == MPS_STOPPING) {
        log_info("MPS daemon for %s stopped (pid %d)", m->spec.name, (int)pid);
        mps_close(m);
        return;
    }
    if (m->state == MPS_REPLACING) {
        log_info("MPS daemon for %s stopped (pid %d); starting it for its GPUs now",
                 m->spec.name, (int)pid);
        uv_timer_stop(&m->timer);
        mps_spawn(m);
        return;
    }
    mps_failed(m, "pid", (int)pid);
}


static void mps_on_gone(uv_poll_t *w, int status, int events)
{
    (void)status, (void)events;
    mps_gone(w->data);
}


static void mps_on_check(uv_timer_t *t)
{
    struct mps_daemon *m = t->data;
    if (!mps_alive(m->pid))
        mps_gone(m);
}


/* Watches pid, the daemon, which is no child of gpulet's: its pidfd
 * becomes readable once it has exited. */
void mps_watch(struct mps_daemon *m, pid_t pid)
{
    m->pid = pid;
    m->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (m->pidfd < 0) {
        if (errno == ESRCH) { /* gone already */
            mps_gone(m);
            return;
        }
        m->checking = true; /* no pidfd here: a look twice a second */
        uv_timer_start(&m->check, mps_on_check, MPS_CHECK_MS, MPS_CHECK_MS);
        return;
    }
    uv_poll_init(m->loop, &m->watch, m->pidfd);
    m->watch.data = m;
    m->handles++;
    m->watching = true;
    uv_poll_start(&m->watch, UV_READABLE, mps_on_gone);
}


/* A daemon that keeps dying is one outage: said once, then restarted
 * with a growing backoff, quietly, until it is up. */
void mps_failed(struct mps_daemon *m, const char *how, int code)
{
    bool was_up = m->state == MPS_UP;
    m->state = MPS_WAITING;
    m->adopted = false;
    unsigned wait = backoff_next(&m->backoff_ms, MPS_BACKOFF_MIN_MS, MPS_BACKOFF_MAX_MS);
    if (!m->failing)
        log_error("MPS daemon for %s exited (%s %d); restarting it with a backoff of %u ms "
                  "doubling to %u s (logged again once it is up)", m->spec.name, how, code,
                  MPS_BACKOFF_MIN_MS, MPS_BACKOFF_MAX_MS / 1000);
    m->failing = true;
    if (was_up)
        mps_state(m, false);
    uv_timer_start(&m->timer, mps_on_spawn_timer, wait, 0);
}


static void mps_started_found(struct mps_daemon *m, pid_t pid, const struct err *e)
{
    (void)e;
    if (m->state == MPS_STOPPING)
        mps_maybe_free(m);
    else if (pid > 0 && !m->pid && (m->state == MPS_STARTING || m->state == MPS_UP))
        mps_watch(m, pid);
}

/* gpulet mps-exec has started the daemon (0), or could not. */
static void mps_helper_exit(uv_process_t *p, int64_t status, int sig)
{
    struct mps_daemon *m = p->data;
    m->helper_alive = false;
    uv_close((uv_handle_t *)p, mps_closed);
    if (m->state == MPS_STOPPING || m->state == MPS_REPLACING) {
        mps_maybe_free(m);
        return;
    }
    if (status != 0 || sig != 0) {
        uv_timer_stop(&m->timer);
        mps_failed(m, sig ? "signal" : "status", sig ? sig : (int)status);
        return;
    }
    /* It runs: watched from now on (an exit at once is seen at once); the
     * limits, being tried, say when it is up. */
    mps_look(m, MPS_LOOK_STARTED, mps_started_found);
}


static void mps_spawn(struct mps_daemon *m)
{
    if (m->state == MPS_STOPPING)
        return;
    char *args[20];
    unsigned n = 0;
    args[n++] = m->self;
    args[n++] = "mps-exec";
    if (m->failing) /* its warnings are said once an outage, as the exit is */
        args[n++] = "--quiet";
    if (m->host[0]) {
        args[n++] = "--host";
        args[n++] = m->host;
        args[n++] = "--rw";
        args[n++] = (char *)m->cfg->mps_root;
    }
    args[n++] = "--out";
    args[n++] = m->out;
    args[n++] = "--pid-file";
    args[n++] = m->started;
    char lease_s[16];
    snprintf(lease_s, sizeof lease_s, "%u", mps_lease_s());
    args[n++] = "--lease";
    args[n++] = m->lease;
    args[n++] = lease_s;
    args[n++] = m->dirs.shm;
    args[n++] = m->host[0] ? m->host_control : m->control;
    args[n++] = "-f";
    args[n] = NULL;
    uv_process_options_t o = {.exit_cb = mps_helper_exit, .file = m->self, .args = args, .env = m->env};
    uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
                                     {.flags = UV_INHERIT_FD, .data.fd = 2},
                                     {.flags = UV_INHERIT_FD, .data.fd = 2}};
    o.stdio = stdio;
    o.stdio_count = 3;
    m->helper.data = m;
    m->adopted = false;
    int rc = uv_spawn(m->loop, &m->helper, &o);
    if (rc < 0) {
        log_error("MPS: cannot start %s for %s: %s", m->control, m->spec.name, uv_strerror(rc));
        m->state = MPS_WAITING;
        uv_timer_start(&m->timer, mps_on_spawn_timer, MPS_BACKOFF_MAX_MS, 0);
        return;
    }
    m->handles++;
    m->helper_alive = true;
    m->state = MPS_STARTING;
    m->tries = 0;
    uv_timer_start(&m->timer, mps_on_limits_timer, MPS_READY_RETRY_MS, 0);
}


static void mps_on_begin_timer(uv_timer_t *t)
{
    mps_look(t->data, MPS_LOOK_DIRS | MPS_LOOK_PID, mps_begin_found);
}

/* Adopts the daemon that serves the pipe directory, if one does: the same
 * GPUs keep it, with its clients; other GPUs end it first. Else starts
 * one. Its directories are made first. */
static void mps_begin_found(struct mps_daemon *m, pid_t pid, const struct err *e)
{
    if (m->state == MPS_STOPPING) {
        mps_maybe_free(m);
        return;
    }
    if (e) { /* its directories: tried again as a daemon's restart is */
        log_error("%s; trying again in %u s", e->msg, MPS_BACKOFF_MAX_MS / 1000);
        m->state = MPS_WAITING;
        uv_timer_start(&m->timer, mps_on_begin_timer, MPS_BACKOFF_MAX_MS, 0);
        return;
    }
    if (!uv_is_active((uv_handle_t *)&m->touch)) { /* the lease, in the directory made now */
        unsigned every = mps_lease_s() * 500; /* twice a lease at least */
        uv_timer_start(&m->touch, mps_touch, 0, every < MPS_TOUCH_MS ? every : MPS_TOUCH_MS);
    }
    if (!pid) {
        mps_spawn(m);
        return;
    }
    char has[MPS_MAX_GPUS * 48] = "";
    struct strbuf want = {0};
    mps_gpu_list(m, &want);
    bool other = mps_environ(pid, "CUDA_VISIBLE_DEVICES", has, sizeof has) == 1 &&
                 strcmp(has, want.data ? want.data : "");
    if (other) {
        log_warn("MPS daemon for %s (pid %d) serves GPUs %s, not %s: it is stopped, and its "
                 "running clients lose it in %d s at most if they have not ended",
                 m->spec.name, (int)pid, has, want.data ? want.data : "none", MPS_DRAIN_MS / 1000);
        m->state = MPS_REPLACING;
        mps_watch(m, pid);
        if (m->pid)
            mps_quit(m);
    } else {
        m->adopted = true;
        m->state = MPS_STARTING;
        m->tries = 0;
        mps_watch(m, pid);
        if (m->pid)
            mps_send_limits(m); /* the same when unchanged; else for its new servers */
    }
    strbuf_free(&want);
}


struct mps_daemon *mps_new(uv_loop_t *loop, const struct config *cfg,
                                  const struct mps_spec *spec, const char *control)
{
    struct mps_daemon *m = xcalloc(1, sizeof *m);
    m->loop = loop;
    m->cfg = cfg;
    m->spec = *spec;
    m->pidfd = -1;
    ssize_t n = readlink("/proc/self/exe", m->self, sizeof m->self - 1); /* for mps-exec */
    m->self[n > 0 ? n : 0] = '\0';
    snprintf(m->control, sizeof m->control, "%s", control);
    config_mps_dirs(cfg, spec->name, &m->dirs);
    snprintf(m->out, sizeof m->out, "%s/gpulet-daemon.out", m->dirs.log);
    snprintf(m->started, sizeof m->started, "%s/gpulet-daemon.pid", m->dirs.log);
    snprintf(m->lease, sizeof m->lease, "%s/gpulet-alive", m->dirs.dir);
    /* In a container, the daemon runs on the driver root's files. */
    config_tool_place(cfg, m->control, m->host, sizeof m->host, m->host_control,
                      sizeof m->host_control);
    uv_timer_init(loop, &m->timer);
    uv_timer_init(loop, &m->check);
    uv_timer_init(loop, &m->touch);
    m->timer.data = m->check.data = m->touch.data = m;
    m->handles = 3;
    return m;
}


int mps_start(struct mps_daemon **out, uv_loop_t *loop, const struct config *cfg,
              const struct mps_spec *spec, const char *control, const struct mps_hooks *hooks,
              struct err *e)
{
    *out = NULL;
    struct mps_daemon *m = mps_new(loop, cfg, spec, control);
    if (!m->self[0]) {
        err_set(e, "MPS: cannot find gpulet's own binary: %s", strerror(errno));
        m->state = MPS_STOPPING; /* freed once its timers are closed */
        mps_close(m);
        return -1;
    }
    if (hooks)
        m->hooks = *hooks;
    m->env = mps_environment(m);
    mps_look(m, MPS_LOOK_DIRS | MPS_LOOK_PID, mps_begin_found);
    *out = m;
    return 0;
}


/* Let go of: the daemon runs on. A helper or command still running ends
 * by itself; gpulet no longer waits for it. */
static void mps_leave(struct mps_daemon *m)
{
    if (m->pid)
        log_info("MPS daemon for %s (pid %d) runs on, with its clients, to be adopted",
                 m->spec.name, (int)m->pid);
    mps_unwatch(m);
    if (m->helper_alive) {
        m->helper_alive = false;
        uv_close((uv_handle_t *)&m->helper, mps_closed);
    }
    if (m->cmd_alive) {
        m->cmd_alive = false;
        uv_close((uv_handle_t *)&m->cmd, mps_closed);
    }
    mps_close(m);
}


void mps_stop(struct mps_daemon *m, enum mps_stop_mode mode, bool remove_dir)
{
    if (!m)
        return;
    bool replacing = m->state == MPS_REPLACING;
    m->state = MPS_STOPPING;
    m->remove_dir = remove_dir;
    uv_timer_stop(&m->timer);
    uv_timer_stop(&m->touch);
    if (mode == MPS_LEAVE && !replacing) { /* one being replaced is ended already */
        mps_leave(m);
        return;
    }
    if (!m->pid && !m->helper_alive) {
        mps_look(m, MPS_LOOK_PID, mps_end_found);
        return;
    }
    mps_end_found(m, 0, NULL);
}

/* MPS_END, once the daemon's pid is known (pid: read from its file). */
void mps_end_found(struct mps_daemon *m, pid_t pid, const struct err *e)
{
    (void)e;
    if (pid && !m->pid) {
        mps_watch(m, pid);
        if (!m->pid)
            return; /* it was gone already: its handles are closing */
    }
    if (!m->pid) {
        mps_close(m);
        return;
    }
    mps_quit(m); /* a command still running (the limits): quit goes at the next tick */
}
