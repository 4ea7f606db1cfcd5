/* Probes and the hang watchdog, on the GPUs' lanes (gpu/lane.h). Every
 * NVML call the agent makes on a running GPU goes through that GPU's lane:
 * a probe of a GPU that hangs waits in its lane and stalls nothing else;
 * the watchdog sees the lane's call outlive --hang-seconds and marks the
 * GPU hung; the probe that runs once the call returns finds it answering.
 *
 * Every --health-probe-ms, each unhealthy GPU is probed for its recovery;
 * healthy ones too where metrics are off, so that a GPU that hangs or is
 * lost is found whether or not the sampler keeps it busy (where it does,
 * its lane's calls show a hang, and it reports a lost GPU itself). */
#include <stdlib.h>
#include <string.h>

#include "agent/internal.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define HANG_CHECK_MS 1000

/* One GPU's probe: the loop owns it but between post and done. */
struct agent_probe {
    struct gpu_lane_job job;         /* first: the lane hands it back */
    struct nvml *nvml;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    unsigned index;
    bool posted;                     /* loop: its result not taken yet */
    bool again;                      /* loop: asked for while posted */
    struct health_probe result;      /* the lane's while posted */
    nvmlDevice_t handle;             /* likewise: the handle that answered, or NULL */
};

/* On GPU's lane: does the GPU answer, is it lost, its volatile DBE count. */
static void probe_run(struct gpu_lane_job *job)
{
    struct agent_probe *p = (struct agent_probe *)job;
    struct nvml *n = p->nvml;
    struct health_probe *r = &p->result;
    memset(r, 0, sizeof *r);
    nvmlDevice_t h = NULL;
    nvmlReturn_t rc = n->DeviceGetHandleByUUID ? NVML_CALL(n, DeviceGetHandleByUUID, p->uuid, &h)
                                               : NVML_CALL(n, DeviceGetHandleByIndex, p->index, &h);
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (rc == NVML_SUCCESS)
        rc = NVML_CALL(n, DeviceGetUUID, h, uuid, sizeof uuid);
    r->lost = rc == NVML_ERROR_GPU_IS_LOST;
    r->answered = rc == NVML_SUCCESS;
    p->handle = r->answered ? h : NULL;
    unsigned long long dbe;
    if (r->answered && n->DeviceGetTotalEccErrors &&
        NVML_CALL(n, DeviceGetTotalEccErrors, h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                  NVML_VOLATILE_ECC, &dbe) == NVML_SUCCESS) {
        r->dbe_known = true;
        r->dbe = dbe;
    }
}

/* Back on the loop: what one probe found. */
static void probe_apply(struct agent *a, unsigned i, const struct agent_probe *p)
{
    double now = (double)uv_now(&a->loop);
    double quiet = (double)a->cfg.xid_recovery_s * 1000.0;
    unsigned what = 0;
    /* A reset can give the GPU a new handle: from now on, everyone uses that one. */
    if (p->handle && gpu_device_set_handle(&a->devs[i], p->handle))
        what |= GPU_CHANGED_HANDLE;
    if (gpu_health_on_probe(&a->devs[i].health, &p->result, now, quiet))
        what |= GPU_CHANGED_HEALTH;
    /* A MIG device's XID clears as a GPU's does: quiet, and the GPU answering. */
    for (unsigned k = 0; k < a->inv.gpus[i].nmig; k++)
        if (gpu_health_on_probe(&a->devs[i].mig_health[k], &p->result, now, quiet))
            what |= GPU_CHANGED_HEALTH;
    if (what)
        agent_device_changed(a, i, what);
}

static void probe_gpu(struct agent *a, unsigned i)
{
    struct agent_probe *p = &a->probes[i];
    if (p->posted) {
        p->again = true; /* once this one is back */
        return;
    }
    p->posted = gpu_lanes_post(a->lanes, i, &p->job);
}

void agent_probe_start(struct agent *a)
{
    if (!a->nvml_up || !a->probes)
        return; /* NVML is still starting: it will tell us */
    for (unsigned i = 0; i < a->inv.count; i++)
        probe_gpu(a, i);
}

/* A lane finished one of the agent's jobs: take every finished probe, the
 * MIG checks' and the compute mode changes'. */
static void probe_lanes_done(uv_async_t *h)
{
    struct agent *a = h->data;
    if (a->stopping)
        return;
    for (unsigned i = 0; i < a->inv.count; i++) {
        struct agent_probe *p = &a->probes[i];
        if (!p->posted || gpu_lane_job_busy(&p->job))
            continue;
        p->posted = false;
        probe_apply(a, i, p);
        if (p->again) {
            p->again = false;
            probe_gpu(a, i);
        }
    }
    agent_mig_collect(a);
    agent_migmgr_collect(a);
    agent_mps_modes_collect(a);
}

/* A GPU whose lane has been in one call for --hang-seconds is hung. */
static void probe_hang_check(uv_timer_t *t)
{
    struct agent *a = t->data;
    uint64_t now = uv_hrtime(), bound = (uint64_t)a->cfg.hang_s * 1000000000ULL;
    for (unsigned i = 0; i < a->inv.count; i++) {
        const char *call;
        uint64_t since = gpu_lanes_busy(a->lanes, i, &call);
        if (!since || since > now || now - since < bound)
            continue; /* idle, or a job begun after now was read */
        if (gpu_health_on_hung(&a->devs[i].health, call, (unsigned)((now - since) / 1000000000ULL),
                           (double)uv_now(&a->loop)))
            agent_device_changed(a, i, GPU_CHANGED_HEALTH);
    }
}

static void probe_tick(uv_timer_t *t)
{
    struct agent *a = t->data;
    if (!a->nvml_up)
        return;
    for (unsigned i = 0; i < a->inv.count; i++) {
        bool ok = a->devs[i].health.reason == HEALTH_OK;
        for (unsigned k = 0; k < a->inv.gpus[i].nmig; k++)
            ok &= a->devs[i].mig_health[k].reason == HEALTH_OK;
        if (!ok || !a->metrics)
            probe_gpu(a, i);
    }
}

int agent_probe_init(struct agent *a, struct err *e)
{
    if (gpu_lanes_start(&a->lanes, a->inv.count, e) < 0)
        return -1;
    a->probes = xcalloc(a->inv.count + 1, sizeof *a->probes);
    uv_async_init(&a->loop, &a->lanes_done, probe_lanes_done);
    a->lanes_done.data = a;
    for (unsigned i = 0; i < a->inv.count; i++) {
        struct agent_probe *p = &a->probes[i];
        p->job.run = probe_run;
        p->job.notify = &a->lanes_done;
        p->nvml = &a->nvml;
        p->index = a->inv.gpus[i].index;
        snprintf(p->uuid, sizeof p->uuid, "%s", a->inv.gpus[i].uuid);
    }
    if (!gpu_health_policy_active(&a->policy)) {
        log_warn("health checking is off (DP_DISABLE_HEALTHCHECKS)");
        return 0;
    }
    uv_timer_init(&a->loop, &a->probe_timer);
    a->probe_timer.data = a;
    uv_timer_start(&a->probe_timer, probe_tick, a->cfg.probe_ms, a->cfg.probe_ms);
    uv_timer_init(&a->loop, &a->hang_timer);
    a->hang_timer.data = a;
    uv_timer_start(&a->hang_timer, probe_hang_check, HANG_CHECK_MS, HANG_CHECK_MS);
    a->probe_timers_on = true;
    return 0;
}

void agent_probe_stop(struct agent *a)
{
    if (a->probe_timers_on) {
        uv_close((uv_handle_t *)&a->probe_timer, NULL);
        uv_close((uv_handle_t *)&a->hang_timer, NULL);
        a->probe_timers_on = false;
    }
    if (a->probes)
        uv_close((uv_handle_t *)&a->lanes_done, NULL);
}

void agent_lanes_stop(struct agent *a)
{
    unsigned stuck = gpu_lanes_stop(a->lanes, 200);
    a->lanes = NULL;
    a->lanes_stuck = stuck > 0;
    if (stuck)
        log_warn("%u GPU(s) still in an NVML call at exit: left to end with the process", stuck);
}

void agent_probe_free(struct agent *a)
{
    /* A probe still in a stuck lane's hands is left to it. */
    bool busy = false;
    for (unsigned i = 0; a->probes && i < a->inv.count; i++)
        busy |= gpu_lane_job_busy(&a->probes[i].job);
    if (!busy)
        free(a->probes);
    a->probes = NULL;
}
