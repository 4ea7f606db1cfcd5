/* MPS built in: one nvidia-cuda-mps-control per MPS resource, claim or
 * shared GPU, that outlives gpulet. gpulet starts it detached (exec.c),
 * watches it through a pidfd, gives it its limits through the control
 * program's own commands, restarts it with backoff when it dies, and ends
 * it only when nothing needs it any more. A starting gpulet adopts the
 * daemon that already serves a pipe directory instead of starting a
 * second one (docs/sharing.md, "Upgrades, crashes and reloads"). Runs on
 * the agent's loop. */
#ifndef GPULET_MPS_H
#define GPULET_MPS_H

#include <stdbool.h>
#include <uv.h>

#include "cdi/cdi.h"
#include "config/config.h"

#define MPS_MAX_GPUS 64
#define MPS_DRAIN_MS 30000            /* an ended daemon's clients: quit, then SIGTERM */

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

/* What a container needs to be a client of the daemon `name`, the one
 * contract of the device plugin's Allocate and DRA's claim CDI spec
 * (client.c): CUDA_MPS_PIPE_DIRECTORY=pipe_at, the daemon's pipe directory
 * mounted there and its /dev/shm on /dev/shm, and the limits given, which a
 * client can only lower (thread_percentage 0, pinned NULL: none; pinned as
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT has it, "0=7680M,1=..."). */
void mps_client(const struct config *cfg, const char *name, const char *pipe_at,
                unsigned thread_percentage, const char *pinned, struct cdi_edits *out);

/* What the daemon tells its owner: it is up (has taken the limits), or not. */
struct mps_hooks {
    void (*on_state)(void *ctx, bool up);
    void *ctx;
};

/* Who let go of a daemon, and so what becomes of it. */
enum mps_stop_mode {
    MPS_LEAVE, /* gpulet stops or reloads: the daemon and its clients run on, to be adopted */
    MPS_END,   /* nothing needs it: quit, and its clients lose it MPS_DRAIN_MS later at most */
};

/* Whose daemons a sweep may end: the device plugin's are named by their
 * resource (a '/' in the name), DRA's by their claim or GPU. */
enum mps_owner { MPS_OWNER_PLUGIN, MPS_OWNER_DRA };

/* The control program to run: --mps-control, else the driver's, searched
 * under the driver root, the usual places and PATH. Fails naming where it
 * looked. */
int mps_find_control(const struct config *cfg, char *out, size_t len, struct err *e);

/* Starts the daemon of spec (its GPUs, its directories under --mps-root),
 * or adopts the one that serves its pipe directory: the same GPUs keep it
 * (and its clients), other GPUs end it first, saying so. cfg must outlive
 * it. It is up once it runs and has taken the limits. */
int mps_start(struct mps_daemon **out, uv_loop_t *loop, const struct config *cfg,
              const struct mps_spec *spec, const char *control, const struct mps_hooks *hooks,
              struct err *e);

/* Lets go of the daemon (mode above) and frees it, at once for MPS_LEAVE
 * and once it has exited for MPS_END; with remove_dir, its pipe and log
 * directory go then too (a DRA claim's, unprepared). NULL is fine. */
void mps_stop(struct mps_daemon *m, enum mps_stop_mode mode, bool remove_dir);

/* Ends every running daemon under --mps-root of owner's kind whose name
 * is not in keep: its resource left the config, or its claim was
 * unprepared while no gpulet ran. Without a control program (empty), by
 * SIGTERM. */
void mps_sweep(uv_loop_t *loop, const struct config *cfg, const char *control,
               enum mps_owner owner, const char *const *keep, unsigned nkeep);

/* `gpulet mps-exec [--quiet] [--host ROOT] [--out FILE] [--pid-file FILE] SHM PROGRAM
 * ARGS...`:
 * starts PROGRAM detached from gpulet, with SHM as its /dev/shm (exec.c).
 * Returns once it runs. */
int mps_exec(int argc, char **argv);

#endif
