/* MPS built in: one nvidia-cuda-mps-control per MPS resource, run in the
 * foreground so that libuv sees it exit, restarted with backoff when it
 * dies, given its resource's limits as defaults, and told to quit on stop
 * (docs/sharing.md). Runs on the agent's loop. */
#ifndef GPULET_MPS_H
#define GPULET_MPS_H

#include <stdbool.h>
#include <uv.h>

#include "config/config.h"

#define MPS_MAX_GPUS 64

struct mps_daemon;

/* What one daemon serves, filled by its owner (a resource of the device
 * plugin, a DRA claim) and copied by mps_start. */
struct mps_spec {
    char name[80];                  /* its directories under --mps-root: config_mps_dirs */
    unsigned ngpus;
    char uuids[MPS_MAX_GPUS][96];   /* its CUDA_VISIBLE_DEVICES, in its device order */
    unsigned thread_percentage;     /* every client's active threads, % */
    unsigned long long memory_mib[MPS_MAX_GPUS]; /* each GPU's pinned memory per client */
};

/* What the daemon tells its owner: it is up (has taken the limits), or not. */
struct mps_hooks {
    void (*on_state)(void *ctx, bool up);
    void *ctx;
};

/* The control program to run: --mps-control, else the driver's, searched
 * under the driver root, the usual places and PATH. Fails naming where it
 * looked. */
int mps_find_control(const struct config *cfg, char *out, size_t len, struct err *e);

/* Starts the daemon of spec (its GPUs, its directories under --mps-root).
 * cfg must outlive it. It is up once it runs and has taken the limits. */
int mps_start(struct mps_daemon **out, uv_loop_t *loop, const struct config *cfg,
              const struct mps_spec *spec, const char *control, const struct mps_hooks *hooks,
              struct err *e);

/* Tells the daemon to quit (then SIGTERM, then SIGKILL) and frees it once
 * it has exited; with remove_dir, its pipe and log directory go then too
 * (a DRA claim's, unprepared). Without, a daemon started again later uses
 * the same directory, which running containers have mounted. NULL is fine. */
void mps_stop(struct mps_daemon *m, bool remove_dir);

/* `gpulet mps-exec SHM PROGRAM ARGS...`: runs PROGRAM with SHM as its
 * /dev/shm (a private mount namespace), so that the MPS server and the
 * containers that mount SHM share one; without the privilege for that, it
 * says so once and runs PROGRAM as it is. Does not return on success. */
int mps_exec(int argc, char **argv);

#endif
