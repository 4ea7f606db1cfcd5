/* NVIDIA's GpuConfig TimeSlicing interval (Short, Medium, Long), set as
 * NVIDIA's driver sets it, with the driver's nvidia-smi compute-policy
 * --set-timeslice, for the life of a claim that holds its GPU whole, and
 * set back to Default at unprepare. The interval is the GPU's, shared by
 * every process on it, so a MIG device (whose GPU other claims share)
 * takes Default only (prepare.c refuses the rest). nvidia-smi runs on
 * libuv's worker pool, never on the loop: it may wait on a hung GPU. */
#include "dra/internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver/driver.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define DRA_SMI_TIMEOUT_MS 10000   /* one nvidia-smi run; a GPU that hangs it fails the prepare */

extern char **environ;

bool dra_timeslice_wanted(const struct dra_prepared *p)
{
    for (unsigned k = 0; k < p->count; k++)
        if (p->devs[k].timeslice)
            return true;
    return false;
}

/* Runs argv, its output in out; 0 when it exited 0 within the timeout. */
static int dra_run(char *const argv[], char *out, size_t len)
{
    int fd[2];
    if (pipe2(fd, O_CLOEXEC) < 0)
        return snprintf(out, len, "pipe: %s", strerror(errno)), -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd[1]);
    if (rc != 0) {
        close(fd[0]);
        return snprintf(out, len, "cannot run %s: %s", argv[0], strerror(rc)), -1;
    }
    size_t n = 0;
    uint64_t deadline = uv_hrtime() + (uint64_t)DRA_SMI_TIMEOUT_MS * 1000000;
    bool timed_out = false;
    for (;;) {
        uint64_t now = uv_hrtime();
        struct pollfd p = {fd[0], POLLIN, 0};
        if (now >= deadline || poll(&p, 1, (int)((deadline - now) / 1000000) + 1) == 0) {
            timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        char buf[256];
        ssize_t r = read(fd[0], buf, sizeof buf);
        if (r <= 0 && !(r < 0 && errno == EINTR))
            break;
        for (ssize_t i = 0; i < r && n + 1 < len; i++)
            out[n++] = buf[i] == '\n' ? ' ' : buf[i];
    }
    out[n] = '\0';
    close(fd[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out)
        return snprintf(out, len, "%s did not finish in %d s", argv[0], DRA_SMI_TIMEOUT_MS / 1000), -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Sets one GPU's interval (0: Default). */
static int dra_timeslice_one(const struct config *cfg, const char *uuid, unsigned interval,
                             char *error, size_t len)
{
    char smi[CONFIG_PATH_MAX + 64], root[CONFIG_PATH_MAX], inside[CONFIG_PATH_MAX + 64];
    char self[CONFIG_PATH_MAX], value[8], out[512];
    struct err e;
    if (config_find_tool(cfg, "nvidia-smi", smi, sizeof smi, &e) < 0) {
        snprintf(error, len, "a TimeSlicing interval needs the driver's %s", e.msg);
        return -1;
    }
    snprintf(value, sizeof value, "%u", interval);
    /* In a container, nvidia-smi runs on the driver root's files (its
     * loader and libraries, not gpulet's image): through mps-exec. */
    config_tool_place(cfg, smi, root, sizeof root, inside, sizeof inside);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char *direct[] = {smi, "compute-policy", "-i", (char *)uuid, "--set-timeslice", value, NULL};
    char *hosted[] = {self, "mps-exec", "--client", "--host", root, inside, "compute-policy", "-i",
                      (char *)uuid, "--set-timeslice", value, NULL};
    if (dra_run(root[0] ? hosted : direct, out, sizeof out) == 0)
        return 0;
    snprintf(error, len, "%s compute-policy -i %s --set-timeslice %u failed: %.300s", smi, uuid,
             interval, out);
    return -1;
}

int dra_timeslice_set(const struct config *cfg, const struct dra_prepared *p, char *error,
                      size_t len)
{
    for (unsigned k = 0; k < p->count; k++) {
        if (!p->devs[k].timeslice || dra_timeslice_one(cfg, p->devs[k].uuid, p->devs[k].timeslice,
                                                        error, len) == 0)
            continue;
        char ignored[512];
        while (k-- > 0) /* the devices set before it go back */
            if (p->devs[k].timeslice)
                dra_timeslice_one(cfg, p->devs[k].uuid, 0, ignored, sizeof ignored);
        return -1;
    }
    return 0;
}

/* An unprepared claim's intervals set back, on the worker pool. */
struct dra_timeslice_reset {
    uv_work_t work;
    struct dra *d;
    struct config cfg;          /* its own: a reload replaces the agent's meanwhile */
    struct dra_prepared p;
    char error[1024];
};

static void dra_timeslice_reset_work(uv_work_t *w)
{
    struct dra_timeslice_reset *r = w->data;
    for (unsigned k = 0; k < r->p.count; k++)
        if (r->p.devs[k].timeslice &&
            dra_timeslice_one(&r->cfg, r->p.devs[k].uuid, 0, r->error, sizeof r->error) < 0)
            log_error("DRA: claim %s/%s: the time slice of GPU %s stays as the claim set it: %s",
                      r->p.ns, r->p.name, r->p.devs[k].uuid, r->error);
}

static void dra_timeslice_reset_done(uv_work_t *w, int status)
{
    (void)status;
    struct dra_timeslice_reset *r = w->data;
    struct dra *d = r->d;
    dra_prepared_free(&r->p);
    free(r);
    d->jobs.n--;
    dra_maybe_free(d);
}

void dra_timeslice_reset(struct dra *d, const struct dra_prepared *p)
{
    if (!dra_timeslice_wanted(p))
        return;
    struct dra_timeslice_reset *r = xcalloc(1, sizeof *r);
    r->d = d;
    r->cfg = *d->cfg;
    r->p = *p;
    r->p.devs = xmalloc((p->count + 1) * sizeof *p->devs); /* its own: p goes at unprepare */
    memcpy(r->p.devs, p->devs, p->count * sizeof *p->devs);
    r->p.consumers = NULL; /* not its to free, nor needed */
    r->p.nconsumers = 0;
    r->work.data = r;
    d->jobs.n++;
    uv_queue_work(d->loop, &r->work, dra_timeslice_reset_work, dra_timeslice_reset_done);
}
