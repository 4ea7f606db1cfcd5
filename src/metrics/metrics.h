/* GPU metrics for Prometheus, compatible with dcgm-exporter: a sampler
 * thread has every GPU read on its lane each interval and renders the
 * whole /metrics text; a scrape only copies the latest text, so it never
 * waits on NVML. Pod
 * labels come from the kubelet's PodResources API (docs/metrics.md). */
#ifndef GPULET_METRICS_H
#define GPULET_METRICS_H

#include <stdbool.h>
#include <uv.h>

#include "config/config.h"
#include "gpu/device.h"
#include "gpu/inventory.h"
#include "gpu/lane.h"
#include "http/http.h"
#include "metrics/collectors.h"
#include "util/err.h"

struct metrics;

/* What metrics tells its owner, on the loop. */
struct metrics_hooks {
    /* NVML said GPU_IS_LOST while sampling gpu. Metrics does not recover a
     * GPU itself: the owner finds out and tells it (metrics_on_device). */
    void (*on_lost)(void *ctx, unsigned gpu);
    void *ctx;
};

/* Starts the sampler, the HTTP endpoint and PodResources refreshes. devs
 * is the agent's model as it is now; later changes come through
 * metrics_on_device. Each GPU is read on its lane. n, lanes, inv and cfg
 * must outlive metrics; the lanes stop after metrics_stop and before
 * metrics is freed (the loop's next turn). */
/* The files metrics reads (the collectors CSV, the web config and the key
 * and certificate it names), read and checked at start, before the loop
 * serves (the loop never touches a disk): a bad one is a config error,
 * refused before anything is served, not metrics quietly off. metrics_start
 * takes what they say; free them after. */
struct metrics_files {
    bool collectors_given;           /* else dcgm-exporter's default counters */
    struct collectors collectors;
    struct http_security sec;
};
int metrics_read_files(const struct config *cfg, struct metrics_files *f, struct err *e);
void metrics_files_free(struct metrics_files *f);

int metrics_start(struct metrics **out, uv_loop_t *loop, struct nvml *n, struct gpu_lanes *lanes,
                  const struct gpu_inventory *inv, const struct gpu_device *devs,
                  const struct config *cfg, const struct metrics_files *files,
                  const struct metrics_hooks *hooks, struct err *e);

/* A GPU changed (enum gpu_change bits): metrics keeps a copy of what it
 * renders and samples with (loop thread; m may be NULL). */
void metrics_on_device(struct metrics *m, unsigned gpu, unsigned what, const struct gpu_device *d);

/* The kubelet's PodResources List answered (r; NULL: it failed): which
 * pod's container holds each GPU, for pod labels (loop thread; m may be
 * NULL). The agent reads it (agent/pods.c). */
struct V1__ListPodResourcesResponse;
void metrics_on_pods(struct metrics *m, const struct V1__ListPodResourcesResponse *r);

/* A container that holds a GPU or MIG device (its UUID) through a DRA
 * claim, which PodResources of 1.32 does not name. */
struct metrics_holder {
    char uuid[96];
    char pod[128], ns[128], container[128];
};

/* The DRA claims' holders now (n of them, copied): pod labels as for the
 * device plugin's devices; a device held by several containers gets one
 * gpulet_gpu_allocation series each (loop thread; m may be NULL). */
void metrics_on_claims(struct metrics *m, const struct metrics_holder *h, unsigned n);

/* The agent's configuration reloads (SIGHUP, the node's label, its
 * ConfigMap), for the gpulet_config_* series. */
struct metrics_config {
    char name[64];                   /* the named config in use; empty: none */
    bool last_ok;                    /* the last reload was applied */
    double last_ok_time;             /* wall seconds of the last applied config */
    unsigned long long failures;     /* reloads refused, since start */
};

/* The configuration changed, or a reload was refused (loop thread; m may
 * be NULL). */
void metrics_on_config(struct metrics *m, const struct metrics_config *c);

/* The API client's requests since start (loop thread; m may be NULL): the
 * rows are copied. */
struct kube_request_row;
void metrics_on_api(struct metrics *m, const struct kube_request_row *rows, unsigned n);

/* The loop's lag, in seconds: the worst of the last window (loop thread;
 * m may be NULL). */
void metrics_on_loop_lag(struct metrics *m, double seconds);

/* Stops the sampler thread and the endpoint; frees once libuv is done. */
void metrics_stop(struct metrics *m);

#endif
