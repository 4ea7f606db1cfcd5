/* The agent's side of GPU health: NVML events mark GPUs unhealthy (probes
 * and the hang watchdog are probe.c's) and an operator clears one; every
 * change reaches every reader through notify.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/internal.h"
#include "util/log.h"
#include "util/xmalloc.h"

static int agent_mig_of(const struct gpu_device *d, unsigned gi);

static void agent_on_event(void *ctx, const struct gpu_event *ev)
{
    struct agent *a = ctx;
    double now = (double)uv_now(&a->loop);
    if (ev->rc != NVML_SUCCESS) {
        /* The wait does not say which GPU: probe them all to find out. */
        log_warn("NVML event wait: %s; probing every GPU", nvml_strerror(&a->nvml, ev->rc));
        agent_probe_start(a);
        return;
    }
    if (ev->gpu >= a->inv.count)
        return; /* an event for a device we do not advertise */
    struct gpu_device *d = &a->devs[ev->gpu];
    unsigned what = 0;
    if (ev->type & nvmlEventTypeXidCriticalError) {
        unsigned xid = (unsigned)ev->data;
        gpu_device_count_xid(d, xid); /* counted whatever the policy says */
        what |= GPU_CHANGED_XID;
        /* In a GPU instance: only the MIG device on it (NVIDIA's #1929 marks
         * one device per GPU at most); else the GPU and everything on it. */
        int k = agent_mig_of(d, ev->gi);
        struct gpu_health *h = k >= 0 ? &d->mig_health[k] : &d->health;
        if (!gpu_health_xid_fatal(&a->policy, xid))
            log_info("GPU %u (%s): XID %u, not a GPU fault by the health policy", ev->gpu,
                     d->info->uuid, xid);
        else if (gpu_health_on_xid(h, xid, now)) {
            what |= GPU_CHANGED_HEALTH;
            if (k >= 0)
                log_warn("GPU %u: XID %u in GPU instance %u: MIG device %s is unhealthy", ev->gpu,
                         xid, ev->gi, d->info->mig[k].uuid);
        } else
            log_warn("GPU %u (%s): XID %u while unhealthy", ev->gpu, d->info->uuid, xid);
    } else if (ev->type & nvmlEventTypeDoubleBitEccError) {
        if (gpu_health_on_ecc(&d->health, now))
            what |= GPU_CHANGED_HEALTH;
    }
    if (what)
        agent_device_changed(a, ev->gpu, what);
}

/* The MIG device of d in GPU instance gi, or -1 (the whole GPU). */
static int agent_mig_of(const struct gpu_device *d, unsigned gi)
{
    for (unsigned k = 0; gi != 0xFFFFFFFFU && k < d->info->nmig; k++)
        if (d->info->mig[k].gi == gi)
            return (int)k;
    return -1;
}

int agent_health_watch(struct agent *a, struct err *e)
{
    if (!a->watch_wanted)
        return 0;
    if (a->watch_rc < 0) {
        *e = a->watch_err;
        return -1;
    }
    return gpu_watch_start(&a->watch, &a->loop, agent_on_event, a, e);
}

void agent_health_stop(struct agent *a)
{
    gpu_watch_stop(&a->watch);
}

int agent_health_clear(struct agent *a, const char *gpu, struct err *e)
{
    char *end;
    unsigned long idx = strtoul(gpu, &end, 10);
    unsigned found = a->inv.count;
    for (unsigned i = 0; i < a->inv.count; i++)
        if ((*gpu && !*end && idx == i) || !strcmp(a->inv.gpus[i].uuid, gpu))
            found = i;
    if (found == a->inv.count)
        return err_set(e, "no GPU '%s' (this node has GPUs 0-%d)", gpu, (int)a->inv.count - 1);
    if (gpu_health_clear(&a->devs[found].health)) {
        log_warn("GPU %u (%s) cleared by an operator", found, a->inv.gpus[found].uuid);
        agent_device_changed(a, found, GPU_CHANGED_HEALTH);
    }
    return 0;
}
