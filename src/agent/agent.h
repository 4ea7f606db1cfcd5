/* The node agent: one struct holds all of its state, one libuv loop runs it. */
#ifndef GPULET_AGENT_H
#define GPULET_AGENT_H

#include <stdbool.h>
#include <uv.h>

#include "config/config.h"
#include "gpu/health.h"
#include "gpu/inventory.h"
#include "gpu/watch.h"
#include "nvml/nvml.h"
#include "metrics/metrics.h"
#include "plugin/plugin.h"

struct agent_status;

struct agent {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm, sighup;
    struct config_args args;
    struct config cfg;
    struct nvml nvml;
    struct gpu_inventory inv;
    struct health_policy policy;
    struct gpu_health *health;           /* one per GPU */
    struct gpu_watch watch;
    struct plugin plugin;
    bool plugin_running;
    uv_timer_t restart_timer;            /* restarts the plugin after a reload */
    bool restart_pending;
    /* recovery probes, run on libuv's threadpool */
    uv_timer_t probe_timer;
    bool probe_timer_on;
    uv_work_t probe_work;
    bool probing, probe_again;
    struct health_probe *probe;          /* one per GPU, written by the worker */
    nvmlDevice_t *probe_handle;
    struct agent_status *status;
    struct metrics *metrics;             /* NULL with --no-metrics or when it could not start */
};

/* Runs the agent until SIGINT or SIGTERM; returns the exit code. */
int agent_run(struct agent *a, int argc, char **argv);

/* --- internal to src/agent ------------------------------------------------ */

/* Starts event handling and the probe timer. */
int agent_health_start(struct agent *a, struct err *e);

/* Stops the probe timer (a probe in flight finishes on its own). */
void agent_health_stop(struct agent *a);

/* Operator command: marks a GPU healthy now. Returns 0 or -1 with why. */
int agent_health_clear(struct agent *a, const char *gpu, char *why, size_t why_len);

/* Starts the status socket (best effort: a warning when it cannot). */
void agent_status_start(struct agent *a);

/* Closes the status socket. */
void agent_status_stop(struct agent *a);

/* Frees the status socket's memory once the loop has closed it. */
void agent_status_free(struct agent *a);

#endif
