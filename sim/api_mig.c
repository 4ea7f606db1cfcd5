/* The NVML MIG calls NVIDIA's device plugin and GFD make: MIG device
 * handles by index, their UUIDs, instance IDs and attributes, the parent
 * from a MIG handle, and the GPU instance profiles (which answer with MIG
 * disabled too, as on the real H200). MIG devices are the scenario's (or
 * `gpulet sim mig`'s): one GPU instance with one compute instance each. */
#include "sim.h"

#include <stdint.h>
#include <string.h>

/* Whether h points exactly at an entry of one of the handle tables. */
static bool mig_in_table(const void *h, struct sim_mig_handle (*table)[SIM_MIG_MAX])
{
    uintptr_t p = (uintptr_t)h, base = (uintptr_t)table;
    size_t size = sizeof table[0][0];
    return p >= base && (p - base) % size == 0 &&
           (p - base) / size < SIM_MAX_GPUS * SIM_MIG_MAX;
}

bool sim_is_mig_handle(nvmlDevice_t dev)
{
    return mig_in_table(dev, sim_state.mig_handles);
}

nvmlReturn_t sim_enter_handle(const void *h, struct sim_mig_handle (*table)[SIM_MIG_MAX],
                              struct nvmlDevice_st **gpu, const struct sim_mig_device **mig)
{
    nvmlReturn_t rc = sim_enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!mig_in_table(h, table))
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    const struct sim_mig_handle *x = h;
    if (x->gpu >= sim_state.sc.count)
        return sim_leave(NVML_ERROR_NOT_FOUND);
    struct nvmlDevice_st *g = &sim_state.gpus[x->gpu];
    sim_wait_hung(g); /* its instances hang with it */
    /* A handle kept across a reconfiguration that removed its device. */
    if (!g->desc.mig_enabled)
        return sim_leave(NVML_ERROR_NOT_FOUND);
    unsigned k = x->k;
    if (table != sim_state.mig_handles) /* an instance: found by its GPU instance's ID */
        for (k = 0; k < g->desc.nmig && g->desc.mig[k].gi != x->gi; k++)
            ;
    if (k >= g->desc.nmig)
        return sim_leave(NVML_ERROR_NOT_FOUND);
    if (g->lost)
        return sim_leave(NVML_ERROR_GPU_IS_LOST);
    /* A bare GPU instance is no MIG device and has no compute instance. */
    if (g->desc.mig[k].bare && table != sim_state.gi_handles)
        return sim_leave(NVML_ERROR_NOT_FOUND);
    *gpu = g;
    *mig = &g->desc.mig[k];
    return NVML_SUCCESS;
}

nvmlReturn_t sim_enter_mig(nvmlDevice_t dev, struct nvmlDevice_st **gpu,
                           const struct sim_mig_device **mig)
{
    return sim_enter_handle(dev, sim_state.mig_handles, gpu, mig);
}

SIM_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    SIM_ENTER_DEVICE(device, count);
    if (!device->desc.product->mig_capable)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    /* The real H200 answers 0 with MIG disabled. */
    *count = device->desc.mig_enabled ? SIM_MIG_MAX : 0;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice)
{
    SIM_ENTER_DEVICE(device, migDevice);
    if (!device->desc.product->mig_capable)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    if (!device->desc.mig_enabled || index >= device->desc.nmig || device->desc.mig[index].bare)
        return sim_leave(NVML_ERROR_NOT_FOUND); /* a hole, as NVML's indexes have */
    unsigned g = device->desc.index;
    struct sim_mig_handle *h = &sim_state.mig_handles[g][index];
    h->gpu = g;
    h->k = index;
    *migDevice = (nvmlDevice_t)(void *)h;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    if (!isMigDevice || (!sim_is_device(device) && !sim_is_mig_handle(device)))
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *isMigDevice = sim_is_mig_handle(device);
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                 nvmlDevice_t *device)
{
    SIM_ENTER_MIG(migDevice, device);
    *device = g;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    SIM_ENTER_MIG(device, id);
    *id = m->gi;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    SIM_ENTER_MIG(device, id);
    *id = m->ci;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attr)
{
    struct nvmlDevice_st *g = NULL;
    const struct sim_mig_device *m = NULL;
    nvmlReturn_t rc = sim_enter_mig(device, &g, &m);
    if (rc == NVML_ERROR_INVALID_ARGUMENT && sim_is_device(device))
        return sim_leave(NVML_ERROR_NOT_SUPPORTED); /* whole GPUs: not answered here */
    if (rc)
        return rc;
    if (!attr)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    const struct sim_mig_profile *p = m->profile;
    *attr = (nvmlDeviceAttributes_t){
        .multiprocessorCount = p->sms, .sharedCopyEngineCount = p->ce,
        .sharedDecoderCount = p->dec, .sharedEncoderCount = p->enc, .sharedJpegCount = p->jpeg,
        .sharedOfaCount = p->ofa, .gpuInstanceSliceCount = p->slices,
        .computeInstanceSliceCount = p->slices, .memorySizeMB = p->memory_mib};
    return sim_leave(NVML_SUCCESS);
}

/* By profile index (NVML_GPU_INSTANCE_PROFILE_*). */
static const struct sim_mig_profile *mig_by_index(const struct sim_product *p, unsigned index)
{
    for (const struct sim_mig_profile *m = p->mig; m && m->name; m++)
        if (m->index == index)
            return m;
    return NULL;
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                         nvmlGpuInstanceProfileInfo_t *info)
{
    SIM_ENTER_DEVICE(device, info);
    const struct sim_mig_profile *m = mig_by_index(device->desc.product, profile);
    if (!m)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    *info = (nvmlGpuInstanceProfileInfo_t){
        .id = m->id, .isP2pSupported = 0, .sliceCount = m->slices, .instanceCount = m->instances,
        .multiprocessorCount = m->sms, .copyEngineCount = m->ce, .decoderCount = m->dec,
        .encoderCount = m->enc, .jpegCount = m->jpeg, .ofaCount = m->ofa,
        .memorySizeMB = m->memory_mib};
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,
    unsigned int *count)
{
    SIM_ENTER_DEVICE(device, count);
    const struct sim_mig_profile *m = NULL;
    for (const struct sim_mig_profile *x = device->desc.product->mig; x && x->name && !m; x++)
        if (x->id == profileId)
            m = x;
    if (!m)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    unsigned n = 0;
    for (unsigned k = 0; k < SIM_MIG_UNITS; k++) {
        if (!(m->starts >> k & 1))
            continue;
        if (placements && n < *count)
            placements[n] = (nvmlGpuInstancePlacement_t){k, m->size};
        n++;
    }
    bool fits = placements && n <= *count;
    *count = n;
    return sim_leave(fits || !placements ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE);
}

/* The first versions: the same answers. */
SIM_API nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attr)
{
    return nvmlDeviceGetAttributes_v2(device, attr);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,
    unsigned int *count)
{
    return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}
