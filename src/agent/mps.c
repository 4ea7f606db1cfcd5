/* MPS daemons for the resources shared with sharing.mps: started with the
 * plugins, each plugin's devices Unhealthy while its daemon is not up. */
#include "agent/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* --mps-compute-mode exclusive-process: only the MPS server may then hold a
 * context on the GPU, so no pod can bypass MPS and its limits. The mode
 * each GPU had is restored when MPS stops. */
static void agent_mps_compute_mode(struct agent *a, bool set)
{
    struct nvml *n = &a->nvml;
    if (a->cfg.mps_compute_mode != CONFIG_COMPUTE_EXCLUSIVE || !a->nvml_up ||
        !n->DeviceGetComputeMode || !n->DeviceSetComputeMode)
        return;
    for (unsigned r = 0; r < a->nresources; r++) {
        const struct plugin_resource *res = &a->resources[r];
        for (unsigned k = 0; res->sharing == GPU_SHARING_MPS && k < res->ngpus; k++) {
            unsigned g = res->gpus[k];
            nvmlDevice_t h = a->devs[g].handle;
            nvmlComputeMode_t mode = set ? NVML_COMPUTEMODE_EXCLUSIVE_PROCESS : a->mps_modes[g];
            if (set && n->DeviceGetComputeMode(h, &a->mps_modes[g]) != NVML_SUCCESS)
                a->mps_modes[g] = NVML_COMPUTEMODE_DEFAULT;
            nvmlReturn_t rc = n->DeviceSetComputeMode(h, mode);
            if (rc != NVML_SUCCESS)
                log_error("MPS: cannot set GPU %u's compute mode to %d: %s", g, (int)mode,
                          nvml_strerror(n, rc));
            else
                log_info("MPS: GPU %u compute mode %s", g, set ? "EXCLUSIVE_PROCESS" : "restored");
        }
    }
}

int agent_mps_start(struct agent *a, struct err *e)
{
    /* The limits need each GPU's memory: daemons start once the facts are in. */
    if (a->cfg.sharing != GPU_SHARING_MPS || a->mps || !a->nplugins)
        return 0;
    for (unsigned r = 0; r < a->nresources; r++)
        if (a->resources[r].sharing == GPU_SHARING_MPS)
            plugin_set_available(a->plugins[r], false);
    if (!a->facts_known)
        return 0;
    char control[CONFIG_PATH_MAX];
    if (mps_find_control(&a->cfg, control, sizeof control, e) < 0)
        return -1;
    a->mps = xcalloc(a->nresources + 1, sizeof *a->mps);
    a->mps_modes = xcalloc(a->inv.count + 1, sizeof *a->mps_modes);
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

void agent_mps_stop(struct agent *a)
{
    if (!a->mps)
        return;
    for (unsigned r = 0; r < a->nresources; r++)
        mps_stop(a->mps[r], false);
    agent_mps_compute_mode(a, false);
    free(a->mps);
    free(a->mps_modes);
    free(a->mps_owners);
    a->mps = NULL;
    a->mps_modes = NULL;
    a->mps_owners = NULL;
}
