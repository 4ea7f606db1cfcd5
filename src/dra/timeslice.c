/* NVIDIA's GpuConfig TimeSlicing interval (Short, Medium, Long), set as
 * NVIDIA's driver sets it, with the driver's nvidia-smi compute-policy
 * --set-timeslice, for the life of a claim that holds its GPU whole, and
 * set back to Default at unprepare. The interval is the GPU's, shared by
 * every process on it, so a MIG device (whose GPU other claims share)
 * takes Default only (map.c refuses the rest). nvidia-smi runs on its
 * GPU's lane (lane.c), never on the loop or the worker pool: it may wait
 * on a hung GPU, which then holds up its own lane and nothing else. */
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

void dra_timeslice_run(struct dra_lane_op *op)
{
    op->rc = dra_timeslice_one(op->cfg, op->uuid, op->interval, op->error, sizeof op->error);
}

/* One device's interval to its GPU's lane; false where it cannot go. */
static bool dra_timeslice_post(struct dra *d, struct dra_job *j, unsigned claim, const char *uuid,
                               unsigned interval)
{
    int gpu = dra_gpu_of(d, uuid);
    if (gpu < 0)
        return false;
    struct dra_lane_op *op = dra_lane_op_new(d, DRA_LANE_SLICE, (unsigned)gpu);
    op->j = j;
    op->claim = claim;
    op->interval = interval;
    snprintf(op->uuid, sizeof op->uuid, "%s", uuid);
    op->cfg = xmalloc(sizeof *op->cfg);
    *op->cfg = *d->cfg;
    return dra_lane_post(d, op);
}

void dra_timeslice_set(struct dra *d, struct dra_job *j)
{
    for (unsigned c = 0; c < j->n; c++) {
        struct dra_job_claim *jc = &j->claims[c];
        if (jc->known || jc->cancelled || jc->error[0] || !dra_timeslice_wanted(&jc->p))
            continue;
        jc->timeslice_set = true; /* a failure sets them all back */
        for (unsigned k = 0; k < jc->p.count; k++) {
            const struct dra_prepared_device *pd = &jc->p.devs[k];
            if (!pd->timeslice)
                continue;
            if (dra_timeslice_post(d, j, c, pd->uuid, pd->timeslice))
                j->making++;
            else if (!jc->error[0])
                snprintf(jc->error, sizeof jc->error, "%.100s/%.100s: GPU %s: its lane is not "
                         "running (gpulet is stopping, or has no GPU)", jc->ns, jc->name, pd->uuid);
        }
    }
}

void dra_timeslice_done(struct dra_lane_op *op)
{
    if (!op->j) {
        if (op->rc < 0)
            log_error("DRA: the time slice of GPU %s stays as a claim set it: %s", op->uuid,
                      op->error);
        return;
    }
    struct dra_job_claim *jc = &op->j->claims[op->claim];
    if (op->rc < 0 && !jc->error[0])
        snprintf(jc->error, sizeof jc->error, "%.100s/%.100s: %s", jc->ns, jc->name, op->error);
    if (--op->j->making == 0)
        dra_job_next(op->j);
}

void dra_timeslice_reset(struct dra *d, const struct dra_prepared *p)
{
    for (unsigned k = 0; k < p->count; k++)
        if (p->devs[k].timeslice && !dra_timeslice_post(d, NULL, 0, p->devs[k].uuid, 0))
            log_warn("DRA: the time slice of GPU %s of claim %s/%s stays as the claim set it: "
                     "gpulet is stopping", p->devs[k].uuid, p->ns, p->name);
}
