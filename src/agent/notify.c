/* The one way news of a GPU travels: every reader (the watcher, metrics,
 * the plugins, labels, the fault report) hears of every change from here,
 * with what changed. health.c, probe.c, mig.c and start.c tell it. */
#include "agent/internal.h"
#include "util/log.h"

/* The GPU's own health, said when it changed: a change of one of its MIG
 * devices (said where it happens, health.c) leaves the GPU's as it was. */
static void agent_say_health(struct agent *a, unsigned gpu)
{
    const struct gpu_device *d = &a->devs[gpu];
    if (d->health.reason == a->health_said[gpu])
        return;
    a->health_said[gpu] = d->health.reason;
    if (d->health.reason == HEALTH_OK) {
        log_info("GPU %u (%s) is healthy again", gpu, d->info->uuid);
        return;
    }
    char why[200];
    gpu_health_describe(&d->health, why, sizeof why);
    log_warn("GPU %u (%s) is unhealthy: %s", gpu, d->info->uuid, why);
}

/* The one way news of a GPU travels: every reader hears of every change
 * from here, with what changed. */
void agent_device_changed(struct agent *a, unsigned gpu, unsigned what)
{
    if (gpu == GPU_DEVICE_ALL) {
        for (unsigned r = 0; r < a->nplugins; r++)
            plugin_on_device(a->plugins[r], gpu, what);
        agent_labels_refresh(a);
        agent_dra_refresh(a);
        return;
    }
    const struct gpu_device *d = &a->devs[gpu];
    if (what & GPU_CHANGED_HANDLE)
        gpu_watch_set_handle(&a->watch, a->lanes, gpu, d->handle);
    if (what & GPU_CHANGED_HEALTH)
        agent_say_health(a, gpu);
    metrics_on_device(a->metrics, gpu, what, d);
    for (unsigned r = 0; r < a->nplugins; r++)
        plugin_on_device(a->plugins[r], gpu, what);
    if (what & (GPU_CHANGED_HEALTH | GPU_CHANGED_FACTS)) {
        agent_labels_refresh(a);
        agent_dra_refresh(a); /* a MIG layout is facts: the slice follows both */
    }
    if (what & GPU_CHANGED_HEALTH)
        agent_report_refresh(a);
}
