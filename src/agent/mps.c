/* MPS daemons for the resources shared with sharing.mps: started with the
 * plugins, each plugin's devices Unhealthy while its daemon is not up. */
#include "agent/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/lane.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* A resource's daemon's state: its hooks' ctx says whose. */
struct agent_mps_owner {
    struct agent *a;
    unsigned r;
};

static void agent_mps_state(void *ctx, bool up)
{
    const struct agent_mps_owner *o = ctx;
    if (o->r < o->a->nplugins)
        plugin_set_available(o->a->plugins[o->r], up);
}

/* What a resource's daemon serves: its GPUs' UUIDs and its limits. */
static void agent_mps_spec(const struct agent *a, const struct plugin_resource *res,
                           struct mps_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    snprintf(spec->name, sizeof spec->name, "%s", res->name);
    spec->thread_percentage = res->thread_percentage;
    for (unsigned k = 0; k < res->ngpus && spec->ngpus < MPS_MAX_GPUS; k++) {
        snprintf(spec->uuids[spec->ngpus], sizeof spec->uuids[0], "%s", a->inv.gpus[res->gpus[k]].uuid);
        spec->memory_mib[spec->ngpus++] = plugin_mps_memory_mib(res, k, &a->inv);
    }
}

/* Checks that an MPS configuration can run: the control program exists. */
int agent_mps_check(const struct config *cfg, struct err *e)
{
    char control[CONFIG_PATH_MAX];
    if (cfg->sharing != GPU_SHARING_MPS || cfg->nshared == 0)
        return 0;
    return mps_find_control(cfg, control, sizeof control, e);
}

/* Whether GPU g is shared through MPS in the config. */
static bool agent_mps_gpu(const struct agent *a, unsigned g)
{
    for (unsigned r = 0; r < a->nresources; r++)
        for (unsigned k = 0; a->resources[r].sharing == GPU_SHARING_MPS && k < a->resources[r].ngpus; k++)
            if (a->resources[r].gpus[k] == g)
                return true;
    return false;
}

/* --mps-compute-mode exclusive-process: only the MPS server may then hold a
 * context on the GPU, so no pod can bypass MPS and its limits. Set when MPS
 * starts; the mode each GPU had is given back when MPS leaves the config
 * (not when gpulet stops: the daemons and their clients run on). Each
 * change is NVML's on the GPU's lane; the loop takes the result back
 * (agent_mps_modes_collect). */
struct agent_mode_job {
    struct gpu_lane_job job;         /* first: the lane hands it back */
    struct nvml *nvml;
    nvmlDevice_t handle;
    bool set;                        /* EXCLUSIVE_PROCESS; else the mode `was` given back */
    int was;                         /* set: read on the lane first */
    nvmlReturn_t rc;
    bool posted;                     /* loop: its result not taken yet */
};

static void agent_mode_run(struct gpu_lane_job *job)
{
    struct agent_mode_job *j = (struct agent_mode_job *)job;
    nvmlComputeMode_t was = NVML_COMPUTEMODE_DEFAULT;
    if (j->set) {
        if (NVML_CALL(j->nvml, DeviceGetComputeMode, j->handle, &was) != NVML_SUCCESS)
            was = NVML_COMPUTEMODE_DEFAULT;
        j->was = (int)was;
    }
    nvmlComputeMode_t mode = j->set ? NVML_COMPUTEMODE_EXCLUSIVE_PROCESS : (nvmlComputeMode_t)j->was;
    j->rc = NVML_CALL(j->nvml, DeviceSetComputeMode, j->handle, mode);
}

static void agent_mps_compute_mode(struct agent *a, bool set)
{
    struct nvml *n = &a->nvml;
    if (a->cfg.mps_compute_mode != CONFIG_COMPUTE_EXCLUSIVE || !a->nvml_up ||
        !n->DeviceGetComputeMode || !n->DeviceSetComputeMode)
        return;
    if (!a->mode_jobs)
        a->mode_jobs = xcalloc(a->inv.count + 1, sizeof *a->mode_jobs);
    for (unsigned g = 0; g < a->inv.count; g++) {
        if (set != (a->mps_modes[g] < 0) || (set && !agent_mps_gpu(a, g)))
            continue;
        struct agent_mode_job *j = &a->mode_jobs[g];
        if (j->posted) {
            log_warn("MPS: GPU %u's compute mode is still being changed; not changed again", g);
            continue;
        }
        j->job.run = agent_mode_run;
        j->job.notify = &a->lanes_done;
        j->nvml = n;
        j->handle = a->devs[g].handle;
        j->set = set;
        j->was = a->mps_modes[g];
        j->posted = gpu_lanes_post(a->lanes, g, &j->job);
        if (!j->posted)
            log_error("MPS: GPU %u's compute mode not changed: its lane is not running", g);
    }
}

void agent_mps_modes_collect(struct agent *a)
{
    for (unsigned g = 0; a->mode_jobs && g < a->inv.count; g++) {
        struct agent_mode_job *j = &a->mode_jobs[g];
        if (!j->posted || gpu_lane_job_busy(&j->job))
            continue;
        j->posted = false;
        int mode = j->set ? NVML_COMPUTEMODE_EXCLUSIVE_PROCESS : j->was;
        if (j->rc != NVML_SUCCESS) {
            log_error("MPS: cannot set GPU %u's compute mode to %d: %s", g, mode,
                      nvml_strerror(&a->nvml, j->rc));
            continue;
        }
        a->mps_modes[g] = j->set ? j->was : -1;
        log_info("MPS: GPU %u compute mode %s", g, j->set ? "EXCLUSIVE_PROCESS" : "restored");
    }
}

void agent_mps_modes_free(struct agent *a)
{
    bool busy = false; /* a change still in a stuck lane's hands is left to it */
    for (unsigned g = 0; a->mode_jobs && g < a->inv.count; g++)
        busy |= gpu_lane_job_busy(&a->mode_jobs[g].job);
    if (!busy)
        free(a->mode_jobs);
    a->mode_jobs = NULL;
}

/* Ends the daemons of resources that are no longer in the config (or
 * all, without MPS), and gives back the compute modes this agent set for
 * MPS where MPS is gone. */
static void agent_mps_sweep(struct agent *a, const char *control)
{
    const char *keep[a->nresources + 1];
    unsigned n = 0;
    for (unsigned r = 0; a->cfg.sharing == GPU_SHARING_MPS && r < a->nresources; r++)
        if (a->resources[r].sharing == GPU_SHARING_MPS)
            keep[n++] = a->resources[r].name;
    mps_sweep(&a->loop, &a->cfg, control, MPS_OWNER_PLUGIN, keep, n);
    if (!n)
        agent_mps_compute_mode(a, false);
}

int agent_mps_start(struct agent *a, struct err *e)
{
    if (a->mps || !a->nplugins)
        return 0;
    bool mps = a->cfg.sharing == GPU_SHARING_MPS;
    /* An MPS resource is unavailable until its daemon is up (or adopted). */
    for (unsigned r = 0; mps && r < a->nresources; r++)
        if (a->resources[r].sharing == GPU_SHARING_MPS)
            plugin_set_available(a->plugins[r], false);
    /* The limits need each GPU's memory: daemons start once the facts are in. */
    if (!a->facts_known)
        return 0;
    char control[CONFIG_PATH_MAX] = "";
    if (!a->mps_modes) { /* -1: a mode this agent did not set */
        a->mps_modes = xmalloc((a->inv.count + 1) * sizeof *a->mps_modes);
        for (unsigned g = 0; g <= a->inv.count; g++)
            a->mps_modes[g] = -1;
    }
    struct err why;
    if (mps_find_control(&a->cfg, control, sizeof control, mps ? e : &why) < 0 && mps)
        return -1;
    agent_mps_sweep(a, control);
    if (!mps)
        return 0;
    a->mps = xcalloc(a->nresources + 1, sizeof *a->mps);
    agent_mps_compute_mode(a, true);
    struct agent_mps_owner *owners = xcalloc(a->nresources + 1, sizeof *owners);
    a->mps_owners = owners;
    for (unsigned r = 0; r < a->nresources; r++) {
        const struct plugin_resource *res = &a->resources[r];
        if (res->sharing != GPU_SHARING_MPS)
            continue;
        struct mps_spec spec;
        agent_mps_spec(a, res, &spec);
        owners[r] = (struct agent_mps_owner){a, r};
        const struct mps_hooks hooks = {agent_mps_state, &owners[r]};
        if (mps_start(&a->mps[r], &a->loop, &a->cfg, &spec, control, &hooks, e) < 0)
            return -1;
    }
    return 0;
}

/* The plugins stop (a reload, or gpulet's stop): their daemons run on,
 * with their clients, and are adopted when the plugins start again. */
void agent_mps_stop(struct agent *a)
{
    if (!a->mps)
        return;
    for (unsigned r = 0; r < a->nresources; r++)
        mps_stop(a->mps[r], MPS_LEAVE, false);
    free(a->mps);
    free(a->mps_owners);
    a->mps = NULL;
    a->mps_owners = NULL;
}
