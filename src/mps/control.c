/* Commands to a daemon through the control program's own interface (its
 * stdin): the limits, which also say it answers, and quit, said again
 * through a drain. In a container they run on the host's files, as the
 * daemon does (mps-exec --client). */
#include "mps/internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/driver.h"
#include "util/log.h"
#include "util/xmalloc.h"

static void mps_command(struct mps_daemon *m, const char *text);


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
    if (config_find_tool(cfg, MPS_CONTROL, out, len, &why) == 0)
        return 0;
    return err_set(e, "sharing.mps: %s: install the driver's utilities or set --mps-control",
                   why.msg);
}


void mps_on_limits_timer(uv_timer_t *t)
{
    mps_send_limits(t->data);
}


static void mps_cmd_exit(uv_process_t *p, int64_t status, int sig)
{
    struct mps_daemon *m = p->data;
    m->cmd_alive = false;
    uv_close((uv_handle_t *)p, mps_closed);
    if (m->state == MPS_STOPPING || m->state == MPS_REPLACING) {
        mps_maybe_free(m); /* a drain, if any, sends quit again by itself */
        return;
    }
    if (m->state != MPS_STARTING)
        return; /* the daemon died meanwhile: its restart is under way */
    if (status == 0 && sig == 0) {
        mps_up(m);
        return;
    }
    /* Not listening yet: it is still starting. */
    if (++m->tries < MPS_READY_TRIES) {
        uv_timer_start(&m->timer, mps_on_limits_timer, MPS_READY_RETRY_MS, 0);
        return;
    }
    log_error("MPS daemon for %s does not take its limits (%s exited %lld); restarting it",
              m->spec.name, m->control, (long long)status);
    if (m->pid)
        kill(m->pid, SIGTERM); /* its watch sees it go, and restarts it */
    else
        mps_failed(m, "status", (int)status);
}


static void mps_cmd_written(uv_write_t *w, int status)
{
    (void)status;
    struct mps_daemon *m = w->data;
    uv_close((uv_handle_t *)&m->cmd_in, mps_closed);
}


/* Runs the control program as a client with text on its stdin. */
static void mps_command(struct mps_daemon *m, const char *text)
{
    if (m->cmd_alive)
        return;
    uv_pipe_init(m->loop, &m->cmd_in, 0);
    m->cmd_in.data = m;
    m->handles++;
    /* In a container, the command runs where the daemon runs: on the host's
     * files (mps-exec --client). */
    char *direct[] = {m->control, NULL};
    char *hosted[] = {m->self,        "mps-exec", "--client", "--host", m->host, "--rw",
                      (char *)m->cfg->mps_root, m->host_control, NULL};
    char **args = m->host[0] ? hosted : direct;
    /* Its output is not logged: while the daemon starts, every try says it
     * cannot find it. A failure that lasts is logged once, below. */
    uv_stdio_container_t stdio[3] = {
        {.flags = UV_CREATE_PIPE | UV_READABLE_PIPE, .data.stream = (uv_stream_t *)&m->cmd_in},
        {.flags = UV_IGNORE},
        {.flags = UV_IGNORE},
    };
    uv_process_options_t o = {.exit_cb = mps_cmd_exit, .file = args[0], .args = args,
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
    strbuf_free(&m->cmd_text);
    strbuf_puts(&m->cmd_text, text);
    uv_buf_t buf = uv_buf_init(m->cmd_text.data, (unsigned)m->cmd_text.len);
    m->cmd_write.data = m;
    uv_write(&m->cmd_write, (uv_stream_t *)&m->cmd_in, &buf, 1, mps_cmd_written);
}


/* The resource's limits as the daemon's defaults for every MPS server it
 * starts. The device numbers are the daemon's: its CUDA_VISIBLE_DEVICES order.
 * A GPU without a limit (0) is left without: "0M" would be a limit of none. */
void mps_send_limits(struct mps_daemon *m)
{
    struct strbuf t = {0};
    strbuf_printf(&t, "set_default_active_thread_percentage %u\n", m->spec.thread_percentage);
    for (unsigned i = 0; i < m->spec.ngpus; i++)
        if (m->spec.memory_mib[i])
            strbuf_printf(&t, "set_default_device_pinned_mem_limit %u %lluM\n", i, m->spec.memory_mib[i]);
    mps_command(m, t.data);
    strbuf_free(&t);
}


/* Quit was not obeyed in time: SIGTERM, then SIGKILL. */
static void mps_kill(uv_timer_t *t)
{
    struct mps_daemon *m = t->data;
    if (!m->pid)
        return;
    log_warn("MPS daemon for %s (pid %d) did not quit; %s", m->spec.name, (int)m->pid,
             m->kills ? "killing it" : "terminating it: its clients lose it now");
    kill(m->pid, m->kills++ ? SIGKILL : SIGTERM);
    uv_timer_start(&m->timer, mps_kill, MPS_KILL_AFTER_MS, 0);
}


/* The drain: quit, and at the end of MPS_DRAIN_MS, SIGTERM. The real
 * control program's quit does not return while MPS clients run (the daemon
 * retries the shutdown itself, and ends once they have gone:
 * tests/realgpu/data/mps-control-580.json); one in flight is not sent twice
 * (mps_command), and one that returned with the daemon still up is sent
 * again a second later. */
static void mps_drain(uv_timer_t *t)
{
    struct mps_daemon *m = t->data;
    if (!m->pid)
        return;
    if (uv_now(m->loop) >= m->drain_end || !m->control[0]) { /* no program to say quit */
        mps_kill(t);
        return;
    }
    mps_command(m, "quit\n");
    uv_timer_start(&m->timer, mps_drain, MPS_QUIT_RETRY_MS, 0);
}


void mps_quit(struct mps_daemon *m)
{
    if (!m->drain_end)
        m->drain_end = uv_now(m->loop) + MPS_DRAIN_MS;
    mps_drain(&m->timer);
}
