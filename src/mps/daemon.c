/* One MPS control daemon: spawned in the foreground (so its exit is seen),
 * given its limits through the control program's own command interface,
 * restarted with backoff, told to quit on stop. */
#include "mps/mps.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/driver.h"
#include "util/backoff.h"
#include "util/dirs.h"
#include "util/log.h"
#include "util/strbuf.h"
#include "util/xmalloc.h"

#define MPS_CONTROL "nvidia-cuda-mps-control"
#define MPS_READY_TRIES 50            /* limits retried while the daemon starts: 10 s */
#define MPS_READY_RETRY_MS 200
#define MPS_BACKOFF_MIN_MS 1000
#define MPS_BACKOFF_MAX_MS 30000
#define MPS_QUIT_GRACE_MS 5000        /* then SIGTERM, and 2 s later SIGKILL */

enum mps_state { MPS_STARTING, MPS_UP, MPS_WAITING, MPS_STOPPING };

struct mps_daemon {
    uv_loop_t *loop;
    const struct config *cfg;
    struct mps_spec spec;
    struct mps_hooks hooks;
    char control[CONFIG_PATH_MAX];
    char self[CONFIG_PATH_MAX];       /* gpulet, for mps-exec */
    struct config_mps_dirs dirs;
    char **env;                       /* the daemon's and the commands' environment */
    uv_process_t proc;                /* the daemon */
    bool proc_alive;
    uv_process_t cmd;                 /* a command being sent, with its stdin */
    uv_pipe_t cmd_in;
    bool cmd_alive;
    uv_write_t cmd_write;
    struct strbuf cmd_text;
    bool cmd_quit;                    /* the command in flight is quit */
    unsigned tries;
    uv_timer_t timer;
    enum mps_state state;
    unsigned backoff_ms;
    unsigned kills;                   /* signals sent after quit was not obeyed */
    bool failing;                     /* an outage was logged: the restarts are quiet till up */
    bool remove_dir;                  /* dir goes once stopped */
    int handles;                      /* open libuv handles */
};

static void mps_spawn(struct mps_daemon *m);
static void mps_send_limits(struct mps_daemon *m);
static void mps_quit(struct mps_daemon *m);

static void mps_on_limits_timer(uv_timer_t *t)
{
    mps_send_limits(t->data);
}

static void mps_on_spawn_timer(uv_timer_t *t)
{
    mps_spawn(t->data);
}

int mps_find_control(const struct config *cfg, char *out, size_t len, struct err *e)
{
    if (cfg->mps_control[0]) {
        if (access(cfg->mps_control, X_OK) != 0)
            return err_set(e, "sharing.mps: --mps-control %s cannot be run: %s", cfg->mps_control,
                           strerror(errno));
        snprintf(out, len, "%s", cfg->mps_control);
        return 0;
    }
    struct err why;
    if (driver_find_tool(cfg->driver_root, MPS_CONTROL, out, len, &why) == 0)
        return 0;
    return err_set(e, "sharing.mps: %s: install the driver's utilities or set --mps-control",
                   why.msg);
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

static void mps_maybe_free(struct mps_daemon *m)
{
    if (m->state != MPS_STOPPING || m->handles || m->proc_alive || m->cmd_alive)
        return;
    if (m->remove_dir)
        nftw(m->dirs.dir, mps_remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    for (char **e = m->env; e && *e; e++)
        free(*e);
    free(m->env);
    strbuf_free(&m->cmd_text);
    free(m);
}

static void mps_closed(uv_handle_t *h)
{
    struct mps_daemon *m = h->data;
    m->handles--;
    mps_maybe_free(m);
}

/* The daemon's environment: the agent's, its GPUs, its directories. */
static char **mps_environment(struct mps_daemon *m)
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
    for (unsigned i = 0; i < m->spec.ngpus; i++)
        strbuf_printf(&v, "%s%s", i ? "," : "", m->spec.uuids[i]);
    env[k++] = xstrdup(v.data);
    strbuf_free(&v);
    size_t plen = strlen(m->dirs.pipe) + 32, llen = strlen(m->dirs.log) + 32;
    env[k] = xmalloc(plen);
    snprintf(env[k++], plen, "CUDA_MPS_PIPE_DIRECTORY=%s", m->dirs.pipe);
    env[k] = xmalloc(llen);
    snprintf(env[k++], llen, "CUDA_MPS_LOG_DIRECTORY=%s", m->dirs.log);
    return env;
}

static int mps_mkdirs(const char *path, struct err *e)
{
    struct err why;
    if (dirs_make(NULL, path, 0755, &why) < 0)
        return err_set(e, "sharing.mps: directory %s: %s", path, why.msg);
    return 0;
}

/* --- commands through the control program's stdin ------------------------------- */

static void mps_cmd_exit(uv_process_t *p, int64_t status, int sig)
{
    struct mps_daemon *m = p->data;
    m->cmd_alive = false;
    uv_close((uv_handle_t *)p, mps_closed);
    if (m->state == MPS_STOPPING) {
        if (!m->cmd_quit && m->proc_alive)
            mps_quit(m);
        mps_maybe_free(m);
        return;
    }
    if (m->state != MPS_STARTING)
        return; /* the daemon died meanwhile: its restart is under way */
    if (status == 0 && sig == 0) {
        m->state = MPS_UP;
        m->backoff_ms = 0;
        m->failing = false;
        log_info("MPS daemon for %s is up (pid %d, %u GPU(s), active threads %u%%, pipe %s)",
                 m->spec.name, m->proc.pid, m->spec.ngpus, m->spec.thread_percentage, m->dirs.pipe);
        mps_state(m, true);
        return;
    }
    /* Not listening yet: it is still starting. */
    if (++m->tries < MPS_READY_TRIES) {
        uv_timer_start(&m->timer, mps_on_limits_timer, MPS_READY_RETRY_MS, 0);
        return;
    }
    log_error("MPS daemon for %s does not take its limits (%s exited %lld); restarting it",
              m->spec.name, m->control, (long long)status);
    if (m->proc_alive)
        uv_process_kill(&m->proc, SIGTERM);
}

static void mps_cmd_written(uv_write_t *w, int status)
{
    (void)status;
    struct mps_daemon *m = w->data;
    uv_close((uv_handle_t *)&m->cmd_in, mps_closed);
}

/* Runs the control program as a client with text on its stdin. */
static void mps_command(struct mps_daemon *m, const char *text, bool quit)
{
    if (m->cmd_alive)
        return;
    uv_pipe_init(m->loop, &m->cmd_in, 0);
    m->cmd_in.data = m;
    m->handles++;
    char *args[] = {m->control, NULL};
    /* Its output is not logged: while the daemon starts, every try says it
     * cannot find it. A failure that lasts is logged once, below. */
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)&m->cmd_in},
        {.flags = UV_IGNORE},
        {.flags = UV_IGNORE},
    };
    uv_process_options_t o = {.exit_cb = mps_cmd_exit, .file = m->control, .args = args,
                              .env = m->env, .stdio_count = 3, .stdio = stdio};
    m->cmd.data = m;
    int rc = uv_spawn(m->loop, &m->cmd, &o);
    if (rc < 0) {
        log_error("MPS: cannot run %s: %s", m->control, uv_strerror(rc));
        uv_close((uv_handle_t *)&m->cmd_in, mps_closed);
        return;
    }
    m->handles++;
    m->cmd_alive = true;
    m->cmd_quit = quit;
    strbuf_free(&m->cmd_text);
    strbuf_puts(&m->cmd_text, text);
    uv_buf_t buf = uv_buf_init(m->cmd_text.data, (unsigned)m->cmd_text.len);
    m->cmd_write.data = m;
    uv_write(&m->cmd_write, (uv_stream_t *)&m->cmd_in, &buf, 1, mps_cmd_written);
}

/* The resource's limits as the daemon's defaults for every MPS server it
 * starts. The device numbers are the daemon's: its CUDA_VISIBLE_DEVICES order.
 * A GPU without a limit (0) is left without: "0M" would be a limit of none. */
static void mps_send_limits(struct mps_daemon *m)
{
    struct strbuf t = {0};
    strbuf_printf(&t, "set_default_active_thread_percentage %u\n", m->spec.thread_percentage);
    for (unsigned i = 0; i < m->spec.ngpus; i++)
        if (m->spec.memory_mib[i])
            strbuf_printf(&t, "set_default_device_pinned_mem_limit %u %lluM\n", i, m->spec.memory_mib[i]);
    mps_command(m, t.data, false);
    strbuf_free(&t);
}

/* --- the daemon ------------------------------------------------------------------------ */

static void mps_exit(uv_process_t *p, int64_t status, int sig)
{
    struct mps_daemon *m = p->data;
    m->proc_alive = false;
    uv_close((uv_handle_t *)p, mps_closed);
    if (m->state == MPS_STOPPING) {
        log_info("MPS daemon for %s stopped", m->spec.name);
        uv_close((uv_handle_t *)&m->timer, mps_closed);
        return;
    }
    bool was_up = m->state == MPS_UP;
    m->state = MPS_WAITING;
    unsigned wait = backoff_next(&m->backoff_ms, MPS_BACKOFF_MIN_MS, MPS_BACKOFF_MAX_MS);
    /* A daemon that keeps exiting is one outage: said once, then restarted
     * with a growing backoff, quietly, until it is up. */
    if (!m->failing)
        log_error("MPS daemon for %s exited (%s %d); restarting it with a backoff of %u ms "
                  "doubling to %u s (logged again once it is up)", m->spec.name,
                  sig ? "signal" : "status", sig ? sig : (int)status, MPS_BACKOFF_MIN_MS,
                  MPS_BACKOFF_MAX_MS / 1000);
    m->failing = true;
    if (was_up)
        mps_state(m, false);
    uv_timer_start(&m->timer, mps_on_spawn_timer, wait, 0);
}

static void mps_spawn(struct mps_daemon *m)
{
    if (m->state == MPS_STOPPING)
        return;
    char *args[7];
    unsigned n = 0;
    args[n++] = m->self;
    args[n++] = "mps-exec";
    if (m->failing) /* its /dev/shm warning is said once an outage, as the exit is */
        args[n++] = "--quiet";
    args[n++] = m->dirs.shm;
    args[n++] = m->control;
    args[n++] = "-f";
    args[n] = NULL;
    uv_process_options_t o = {.exit_cb = mps_exit, .file = m->self, .args = args, .env = m->env};
    uv_stdio_container_t stdio[3] = {{.flags = UV_IGNORE},
                                     {.flags = UV_INHERIT_FD, .data.fd = 2},
                                     {.flags = UV_INHERIT_FD, .data.fd = 2}};
    o.stdio = stdio;
    o.stdio_count = 3;
    m->proc.data = m;
    int rc = uv_spawn(m->loop, &m->proc, &o);
    if (rc < 0) {
        log_error("MPS: cannot start %s for %s: %s", m->control, m->spec.name, uv_strerror(rc));
        m->state = MPS_WAITING;
        uv_timer_start(&m->timer, mps_on_spawn_timer, MPS_BACKOFF_MAX_MS, 0);
        return;
    }
    m->handles++;
    m->proc_alive = true;
    m->state = MPS_STARTING;
    m->tries = 0;
    uv_timer_start(&m->timer, mps_on_limits_timer, MPS_READY_RETRY_MS, 0);
}

int mps_start(struct mps_daemon **out, uv_loop_t *loop, const struct config *cfg,
              const struct mps_spec *spec, const char *control, const struct mps_hooks *hooks,
              struct err *e)
{
    *out = NULL;
    struct mps_daemon *m = xcalloc(1, sizeof *m);
    m->loop = loop;
    m->cfg = cfg;
    m->spec = *spec;
    if (hooks)
        m->hooks = *hooks;
    snprintf(m->control, sizeof m->control, "%s", control);
    config_mps_dirs(cfg, spec->name, &m->dirs);
    ssize_t n = readlink("/proc/self/exe", m->self, sizeof m->self - 1);
    if (n <= 0) {
        free(m);
        return err_set(e, "MPS: cannot find gpulet's own binary: %s", strerror(errno));
    }
    m->self[n] = '\0';
    if (mps_mkdirs(m->dirs.pipe, e) < 0 || mps_mkdirs(m->dirs.log, e) < 0 ||
        mps_mkdirs(m->dirs.shm, e) < 0) {
        free(m);
        return -1;
    }
    m->env = mps_environment(m);
    uv_timer_init(loop, &m->timer);
    m->timer.data = m;
    m->handles = 1;
    mps_spawn(m);
    *out = m;
    return 0;
}

/* Quit was not obeyed in time: SIGTERM, then SIGKILL. */
static void mps_kill(uv_timer_t *t)
{
    struct mps_daemon *m = t->data;
    if (!m->proc_alive)
        return;
    log_warn("MPS daemon for %s did not quit; %s", m->spec.name,
             m->kills ? "killing it" : "terminating it");
    uv_process_kill(&m->proc, m->kills++ ? SIGKILL : SIGTERM);
    uv_timer_start(&m->timer, mps_kill, 2000, 0);
}

static void mps_quit(struct mps_daemon *m)
{
    mps_command(m, "quit\n", true);
    uv_timer_start(&m->timer, mps_kill, MPS_QUIT_GRACE_MS, 0);
}

void mps_stop(struct mps_daemon *m, bool remove_dir)
{
    if (!m)
        return;
    m->state = MPS_STOPPING;
    m->remove_dir = remove_dir;
    uv_timer_stop(&m->timer);
    if (!m->proc_alive) {
        uv_close((uv_handle_t *)&m->timer, mps_closed);
        return;
    }
    /* A command still running (the limits) goes first; quit follows it. */
    if (!m->cmd_alive)
        mps_quit(m);
}
