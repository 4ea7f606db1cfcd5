/* GPU metrics for Prometheus, compatible with dcgm-exporter: a sampler
 * thread reads NVML every interval and renders the whole /metrics text; a
 * scrape only copies the latest text, so it never waits on NVML. Pod
 * labels come from the kubelet's PodResources API (docs/metrics.md). */
#ifndef GPULET_METRICS_H
#define GPULET_METRICS_H

#include <stdbool.h>
#include <uv.h>

#include "config/config.h"
#include "gpu/health.h"
#include "gpu/inventory.h"
#include "util/err.h"

struct metrics;

/* Starts the sampler, the HTTP endpoint and PodResources refreshes. */
int metrics_start(struct metrics **out, uv_loop_t *loop, struct nvml *n,
                  const struct gpu_inventory *inv, const struct config *cfg, struct err *e);

/* Counts an XID of a GPU (loop thread). */
void metrics_on_xid(struct metrics *m, unsigned gpu, unsigned xid);

/* Records a GPU's health (loop thread). */
void metrics_on_health(struct metrics *m, unsigned gpu, const struct gpu_health *h);

/* Pods changed (an Allocate happened): refresh the pod labels soon. */
void metrics_on_allocate(struct metrics *m);

/* Stops the sampler thread and the endpoint; frees once libuv is done. */
void metrics_stop(struct metrics *m);

#endif
