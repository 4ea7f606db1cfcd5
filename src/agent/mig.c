/* MIG reconfiguration without a restart. NVIDIA's plugin reads MIG devices
 * once and needs a restart after mig-parted changes them. Here, with a MIG
 * strategy, each MIG GPU's lane reads its devices every 2 s (a handful of
 * NVML calls, microseconds each); when the set differs, the plugins stop
 * and start again on the new devices, and the labels follow. Pods holding a
 * device that went keep running: the kubelet never takes a device back, it
 * only stops offering it. */
#include "agent/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/strbuf.h"
#include "util/xmalloc.h"

#define MIG_CHECK_MS 2000

/* One GPU's check: the loop owns it but between post and done. */
struct agent_mig_job {
    struct gpu_lane_job job;         /* first: the lane hands it back */
    struct nvml *nvml;
    struct gpu_info seen;            /* the GPU as the check found it (the lane's while posted) */
    bool posted;                     /* loop: its result not taken yet */
    unsigned generation;             /* the agent's mig_generation when posted */
};

static bool mig_any(const struct agent *a)
{
    for (unsigned i = 0; i < a->inv.count; i++)
        if (a->inv.gpus[i].mig_mode == NVML_DEVICE_MIG_ENABLE)
            return true;
    return false;
}

/* On the GPU's lane: its MIG devices, into seen. */
static void mig_run(struct gpu_lane_job *job)
{
    struct agent_mig_job *j = (struct agent_mig_job *)job;
    gpu_mig_read(j->nvml, &j->seen);
}

static bool mig_same(const struct gpu_info *a, const struct gpu_info *b)
{
    if (a->nmig != b->nmig)
        return false;
    for (unsigned k = 0; k < a->nmig; k++)
        if (strcmp(a->mig[k].uuid, b->mig[k].uuid))
            return false;
    return true;
}

/* "3g.40gb MIG-..., 1g.10gb MIG-..." of the devices of from that to lacks. */
static void mig_diff(const struct gpu_info *from, const struct gpu_info *to, struct strbuf *out)
{
    for (unsigned k = 0; k < from->nmig; k++) {
        bool kept = false;
        for (unsigned j = 0; j < to->nmig && !kept; j++)
            kept = !strcmp(from->mig[k].uuid, to->mig[j].uuid);
        if (!kept)
            strbuf_printf(out, "%s%s %s", out->len ? ", " : "", from->mig[k].profile,
                          from->mig[k].uuid);
    }
    if (!out->len)
        strbuf_puts(out, "none");
}

/* A GPU whose check is back and finds other devices; NULL otherwise. */
static const struct gpu_info *mig_changed(const struct agent *a, unsigned i)
{
    const struct agent_mig_job *j = &a->mig_jobs[i];
    /* A check that read before DRA made or destroyed a device is stale. */
    if (j->posted || j->generation != a->mig_generation ||
        j->seen.mig_mode != NVML_DEVICE_MIG_ENABLE ||
        mig_same(&j->seen, &a->inv.gpus[i]))
        return NULL;
    return &j->seen;
}

void agent_mig_collect(struct agent *a)
{
    if (!a->mig_jobs)
        return;
    bool changed = false;
    for (unsigned i = 0; i < a->inv.count; i++) {
        struct agent_mig_job *j = &a->mig_jobs[i];
        if (!j->posted || gpu_lane_job_busy(&j->job))
            continue;
        j->posted = false;
        const struct gpu_info *now = mig_changed(a, i), *was = &a->inv.gpus[i];
        if (!now)
            continue;
        struct strbuf gone = {0}, added = {0};
        mig_diff(was, now, &gone);
        mig_diff(now, was, &added);
        log_info("GPU %u: MIG devices changed: gone %s; new %s", i, gone.data, added.data);
        strbuf_free(&gone);
        strbuf_free(&added);
        changed = true;
    }
    if (!changed || a->mig_update)
        return;
    log_info("MIG: re-advertising; pods holding a device that went keep running, and it is no "
             "longer offered");
    a->mig_update = true;
    agent_plugins_restart(a);
}

static void mig_tick(uv_timer_t *t)
{
    struct agent *a = t->data;
    if (a->mig_update || a->restart_pending || !a->nvml_up)
        return;
    /* Each check reads with the device model's handle, into its own copy;
     * a GPU whose check is still out (a hung one) is left to it. */
    for (unsigned i = 0; i < a->inv.count; i++) {
        struct agent_mig_job *j = &a->mig_jobs[i];
        if (j->posted || a->inv.gpus[i].mig_mode != NVML_DEVICE_MIG_ENABLE ||
            a->devs[i].health.reason == HEALTH_LOST || !a->devs[i].handle)
            continue;
        j->seen = a->inv.gpus[i];
        j->seen.handle = a->devs[i].handle;
        j->generation = a->mig_generation;
        j->posted = gpu_lanes_post(a->lanes, i, &j->job);
    }
}

void agent_mig_start(struct agent *a)
{
    /* With a MIG strategy the plugins serve MIG devices; with --dra-mig
     * DRA keeps MIG devices others make out of its placements' way. */
    if ((a->cfg.mig_strategy == CONFIG_MIG_NONE && !a->cfg.dra_mig[0]) || !mig_any(a) ||
        a->mig_timer_on)
        return;
    if (!a->mig_jobs) {
        a->mig_jobs = xcalloc(a->inv.count + 1, sizeof *a->mig_jobs);
        for (unsigned i = 0; i < a->inv.count; i++) {
            a->mig_jobs[i].job.run = mig_run;
            a->mig_jobs[i].job.notify = &a->lanes_done;
            a->mig_jobs[i].nvml = &a->nvml;
        }
    }
    uv_timer_init(&a->loop, &a->mig_timer);
    a->mig_timer.data = a;
    uv_timer_start(&a->mig_timer, mig_tick, MIG_CHECK_MS, MIG_CHECK_MS);
    a->mig_timer_on = true;
}

void agent_mig_apply(struct agent *a)
{
    if (!a->mig_update)
        return;
    for (unsigned i = 0; i < a->inv.count; i++) {
        const struct gpu_info *now = mig_changed(a, i);
        if (!now)
            continue;
        memcpy(a->inv.gpus[i].mig, now->mig, sizeof a->inv.gpus[i].mig);
        a->inv.gpus[i].nmig = now->nmig;
        /* New devices start healthy; the GPU's own health stays. */
        memset(a->devs[i].mig_health, 0, sizeof a->devs[i].mig_health);
    }
    a->mig_update = false;
    agent_dra_refresh(a); /* its MIG devices, or the placements others' leave free */
}

struct writer *agent_mig_take(struct agent *a, unsigned gpu, const struct gpu_info *seen)
{
    struct gpu_info *g = &a->inv.gpus[gpu];
    struct gpu_device *dev = &a->devs[gpu];
    struct gpu_health health[GPU_MIG_MAX] = {0};
    for (unsigned k = 0; k < seen->nmig; k++)
        for (unsigned j = 0; j < g->nmig; j++)
            if (!strcmp(seen->mig[k].uuid, g->mig[j].uuid))
                health[k] = dev->mig_health[j];
    memcpy(g->mig, seen->mig, sizeof g->mig);
    g->nmig = seen->nmig;
    memcpy(dev->mig_health, health, sizeof dev->mig_health);
    a->mig_generation++;
    struct writer *cdi = agent_driver_cdi(a); /* the prepare answers once it is on disk */
    agent_device_changed(a, gpu, GPU_CHANGED_FACTS);
    return cdi;
}

void agent_mig_stop(struct agent *a)
{
    if (a->mig_timer_on)
        uv_close((uv_handle_t *)&a->mig_timer, NULL);
    a->mig_timer_on = false;
}

void agent_mig_free(struct agent *a)
{
    bool busy = false; /* a check still in a stuck lane's hands is left to it */
    for (unsigned i = 0; a->mig_jobs && i < a->inv.count; i++)
        busy |= gpu_lane_job_busy(&a->mig_jobs[i].job);
    if (!busy)
        free(a->mig_jobs);
    a->mig_jobs = NULL;
}
