/* MPS built in: one nvidia-cuda-mps-control per MPS resource, run in the
 * foreground so that libuv sees it exit, restarted with backoff when it
 * dies, given its resource's limits as defaults, and told to quit on stop
 * (docs/sharing.md). Runs on the agent's loop. */
#ifndef GPULET_MPS_H
#define GPULET_MPS_H

#include <stdbool.h>
#include <uv.h>

#include "config/config.h"
#include "gpu/inventory.h"
#include "plugin/plugin.h"

struct mps_daemon;

/* What the daemon tells its owner. */
struct mps_hooks {
    void (*on_state)(void *ctx, const struct plugin_resource *res, bool up);
    void *ctx;
};

/* The control program to run: --mps-control, else the driver's, searched
 * under the driver root, the usual places and PATH. Fails naming where it
 * looked. */
int mps_find_control(const struct config *cfg, char *out, size_t len, struct err *e);

/* Starts the daemon of one MPS resource (its GPUs, pipe and log
 * directories under --mps-root). cfg, inv and res must outlive it. The
 * resource is up once the daemon runs and has taken the limits. */
int mps_start(struct mps_daemon **out, uv_loop_t *loop, const struct config *cfg,
              const struct gpu_inventory *inv, const struct plugin_resource *res,
              const char *control, const struct mps_hooks *hooks, struct err *e);

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
