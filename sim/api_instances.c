/* GPU and compute instance handles, as NVIDIA's go-nvlib reads a MIG
 * device's profile: from the MIG device to its GPU instance (by ID) and
 * compute instance, their info (profile IDs, placements), and the compute
 * instance profiles. The simulator's instances are its MIG devices: one
 * GPU instance each, with one compute instance (ID 0) spanning it. */
#include "sim.h"

#include <string.h>

/* NVML_COMPUTE_INSTANCE_PROFILE_* by slices: 1, 2, 3, 4, 7 (8 and 6 unused). */
static const unsigned ci_profile_slices[] = {1, 2, 3, 4, 7};

/* The handle of GPU instance gi of GPU gpu, and of its compute instance. */
static nvmlGpuInstance_t sim_gi_handle(unsigned gpu, unsigned gi)
{
    struct sim_mig_handle *h = &sim_state.gi_handles[gpu][SIM_GI_SLOT(gi)];
    *h = (struct sim_mig_handle){gpu, 0, gi};
    return (nvmlGpuInstance_t)(void *)h;
}

static nvmlComputeInstance_t sim_ci_handle(unsigned gpu, unsigned gi)
{
    struct sim_mig_handle *h = &sim_state.ci_handles[gpu][SIM_GI_SLOT(gi)];
    *h = (struct sim_mig_handle){gpu, 0, gi};
    return (nvmlComputeInstance_t)(void *)h;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                  nvmlGpuInstance_t *gpuInstance)
{
    SIM_ENTER_DEVICE(device, gpuInstance);
    if (!device->desc.mig_enabled)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    for (unsigned k = 0; k < device->desc.nmig; k++) {
        if (device->desc.mig[k].gi != id)
            continue;
        *gpuInstance = sim_gi_handle(device->desc.index, id);
        return sim_leave(NVML_SUCCESS);
    }
    return sim_leave(NVML_ERROR_NOT_FOUND);
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                            nvmlGpuInstanceInfo_t *info)
{
    SIM_ENTER_HANDLE(gpuInstance, sim_state.gi_handles, info);
    *info = (nvmlGpuInstanceInfo_t){g, m->gi, m->profile->id, {m->start, m->profile->size}};
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance,
                                                           unsigned int id,
                                                           nvmlComputeInstance_t *computeInstance)
{
    SIM_ENTER_HANDLE(gpuInstance, sim_state.gi_handles, computeInstance);
    if (id != m->ci || m->bare)
        return sim_leave(NVML_ERROR_NOT_FOUND);
    *computeInstance = sim_ci_handle(g->desc.index, m->gi);
    return sim_leave(NVML_SUCCESS);
}

/* The compute instance profile index of a full-size instance of s slices. */
static unsigned ci_profile_of(unsigned slices)
{
    for (unsigned i = 0; i < sizeof ci_profile_slices / sizeof *ci_profile_slices; i++)
        if (ci_profile_slices[i] == slices)
            return i;
    return 0;
}

SIM_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                   nvmlComputeInstanceInfo_t *info)
{
    SIM_ENTER_HANDLE(computeInstance, sim_state.ci_handles, info);
    nvmlGpuInstance_t gi = sim_gi_handle(g->desc.index, m->gi);
    *info = (nvmlComputeInstanceInfo_t){g, gi, m->ci, ci_profile_of(m->profile->slices),
                                        {0, m->profile->slices}};
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                                nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

/* Compute instances of profile (slices k) in a GPU instance of s slices:
 * s / k of them, each with its share of the SMs; the engines are shared. */
SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t *info)
{
    struct nvmlDevice_st *g = NULL;
    const struct sim_mig_device *m = NULL;
    nvmlReturn_t rc = sim_enter_handle(gpuInstance, sim_state.gi_handles, &g, &m);
    if (rc)
        return rc;
    if (!info || engProfile != 0)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    const struct sim_mig_profile *p = m->profile;
    if (profile >= sizeof ci_profile_slices / sizeof *ci_profile_slices ||
        ci_profile_slices[profile] > p->slices)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    unsigned k = ci_profile_slices[profile];
    *info = (nvmlComputeInstanceProfileInfo_t){
        .id = profile, .sliceCount = k, .instanceCount = p->slices / k,
        .multiprocessorCount = p->sms * k / p->slices, .sharedCopyEngineCount = p->ce,
        .sharedDecoderCount = p->dec, .sharedEncoderCount = p->enc, .sharedJpegCount = p->jpeg,
        .sharedOfaCount = p->ofa};
    return sim_leave(NVML_SUCCESS);
}

/* --- making and destroying instances, as NVIDIA's dynamic MIG and
 * mig-parted do: a GPU instance at a placement, then its compute
 * instance; the compute instance goes first, then the GPU instance. */

/* The lowest GPU instance ID not in use (NVML hands out 1 and up). */
static unsigned gi_free_id(const struct sim_gpu *g)
{
    for (unsigned id = 1;; id++) {
        bool used = false;
        for (unsigned k = 0; k < g->nmig; k++)
            used |= g->mig[k].gi == id;
        if (!used)
            return id;
    }
}

static const struct sim_mig_profile *gi_profile(const struct sim_gpu *g, unsigned id)
{
    for (const struct sim_mig_profile *x = g->product->mig; x && x->name; x++)
        if (x->id == id)
            return x;
    return NULL;
}

/* A bare GPU instance of profile m at start (the lock held). */
static nvmlGpuInstance_t gi_make(struct sim_gpu *g, const struct sim_mig_profile *m, unsigned start)
{
    unsigned id = gi_free_id(g); /* before the new slot counts */
    g->mig[g->nmig++] = (struct sim_mig_device){m, start, id, 0, ++g->mig_generation, true};
    sim_state.mig_changed = true;
    return sim_gi_handle(g->index, id);
}

SIM_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t *placement,
    nvmlGpuInstance_t *gpuInstance)
{
    SIM_ENTER_DEVICE(device, gpuInstance);
    struct sim_gpu *g = &device->desc;
    if (!g->product->mig_capable || !g->mig_enabled)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    const struct sim_mig_profile *m = gi_profile(g, profileId);
    if (!m || !placement || placement->size != m->size)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (sim_mig_room(g, m, placement->start))
        return sim_leave(NVML_ERROR_INSUFFICIENT_RESOURCES);
    *gpuInstance = gi_make(g, m, placement->start);
    return sim_leave(NVML_SUCCESS);
}

/* Without a placement: the first of the profile's that has room, as the
 * driver picks (mig-parted's way). */
SIM_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                                 nvmlGpuInstance_t *gpuInstance)
{
    SIM_ENTER_DEVICE(device, gpuInstance);
    struct sim_gpu *g = &device->desc;
    if (!g->product->mig_capable || !g->mig_enabled)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    const struct sim_mig_profile *m = gi_profile(g, profileId);
    if (!m)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned k = 0; k < SIM_MIG_UNITS; k++)
        if (m->starts >> k & 1 && !sim_mig_room(g, m, k)) {
            *gpuInstance = gi_make(g, m, k);
            return sim_leave(NVML_SUCCESS);
        }
    return sim_leave(NVML_ERROR_INSUFFICIENT_RESOURCES);
}

/* The GPU instances of a profile, by ID. */
SIM_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                               nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
    SIM_ENTER_DEVICE(device, count);
    struct sim_gpu *g = &device->desc;
    if (!g->product->mig_capable || !g->mig_enabled)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    if (!gi_profile(g, profileId) || !gpuInstances)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned n = 0;
    for (unsigned k = 0; k < g->nmig; k++)
        if (g->mig[k].profile->id == profileId)
            gpuInstances[n++] = sim_gi_handle(g->index, g->mig[k].gi);
    *count = n;
    return sim_leave(NVML_SUCCESS);
}

/* The MIG mode: on Hopper and later it changes at once (no process may
 * run, no instance may be left); on Ampere at the next reset (pending). */
SIM_API nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                          nvmlReturn_t *activationStatus)
{
    SIM_ENTER_DEVICE(device, activationStatus);
    struct sim_gpu *g = &device->desc;
    if (!g->product->mig_capable)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    if (mode != NVML_DEVICE_MIG_ENABLE && mode != NVML_DEVICE_MIG_DISABLE)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    bool on = mode == NVML_DEVICE_MIG_ENABLE;
    if (on == g->mig_enabled && !device->mig_pending) {
        *activationStatus = NVML_SUCCESS;
        return sim_leave(NVML_SUCCESS);
    }
    if (g->nmig || device->nprocs)
        return sim_leave(NVML_ERROR_IN_USE); /* its instances first; no process on the GPU */
    if (g->product->arch < NVML_DEVICE_ARCH_HOPPER) {
        device->mig_pending = on != g->mig_enabled;
        sim_state.mig_changed = true;
        *activationStatus = device->mig_pending ? NVML_ERROR_RESET_REQUIRED : NVML_SUCCESS;
        return sim_leave(NVML_SUCCESS);
    }
    g->mig_enabled = on;
    device->mig_pending = false;
    sim_state.mig_changed = true;
    *activationStatus = NVML_SUCCESS;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int profileId,
                                                          nvmlComputeInstance_t *computeInstance)
{
    SIM_ENTER_HANDLE(gpuInstance, sim_state.gi_handles, computeInstance);
    /* The simulator's compute instance spans its GPU instance. */
    if (profileId != ci_profile_of(m->profile->slices))
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    if (!m->bare)
        return sim_leave(NVML_ERROR_INSUFFICIENT_RESOURCES);
    struct sim_mig_device *made = &g->desc.mig[m - g->desc.mig];
    made->bare = false;
    made->ci = 0;
    sim_state.mig_changed = true;
    *computeInstance = sim_ci_handle(g->desc.index, m->gi);
    return sim_leave(NVML_SUCCESS);
}

/* The compute instances of a GPU instance, of one profile: the one that
 * spans it, where it has one. */
SIM_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance,
                                                        unsigned int profileId,
                                                        nvmlComputeInstance_t *computeInstances,
                                                        unsigned int *count)
{
    SIM_ENTER_HANDLE(gpuInstance, sim_state.gi_handles, count);
    if (!computeInstances)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *count = 0;
    if (!m->bare && profileId == ci_profile_of(m->profile->slices))
        computeInstances[(*count)++] = sim_ci_handle(g->desc.index, m->gi);
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    SIM_ENTER_HANDLE(computeInstance, sim_state.ci_handles, computeInstance);
    if (g->nprocs)
        return sim_leave(NVML_ERROR_IN_USE); /* a process runs on the GPU: mig-parted's "In use" */
    g->desc.mig[m - g->desc.mig].bare = true;
    sim_state.mig_changed = true;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    SIM_ENTER_HANDLE(gpuInstance, sim_state.gi_handles, gpuInstance);
    if (!m->bare || g->nprocs)
        return sim_leave(NVML_ERROR_IN_USE); /* its compute instance first; no process on the GPU */
    struct sim_gpu *d = &g->desc;
    size_t k = (size_t)(m - d->mig);
    memmove(&d->mig[k], &d->mig[k + 1], (d->nmig - k - 1) * sizeof *d->mig);
    d->nmig--;
    sim_state.mig_changed = true;
    return sim_leave(NVML_SUCCESS);
}
