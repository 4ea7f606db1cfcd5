/* Device identity: names, ids, PCI, memory size, capability, MIG and ECC mode. */
#include <string.h>

#include "sim.h"

SIM_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    nvmlReturn_t rc = sim_enter_device(device);
    return rc ? rc : sim_leave(sim_copy_string(name, length, device->desc.product->name));
}

SIM_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct nvmlDevice_st *g = NULL;
    const struct sim_mig_device *m = NULL;
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    bool mig = sim_is_mig_handle(device);
    sim_leave(NVML_SUCCESS);
    if (mig) {
        if ((rc = sim_enter_mig(device, &g, &m)))
            return rc;
        char id[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        sim_mig_uuid(g->desc.uuid, m->uuid_gen, m->gi, id, sizeof id);
        return sim_leave(sim_copy_string(uuid, length, id));
    }
    rc = sim_enter_device(device);
    return rc ? rc : sim_leave(sim_copy_string(uuid, length, device->desc.uuid));
}

SIM_API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    nvmlReturn_t rc = sim_enter_device(device);
    return rc ? rc : sim_leave(sim_copy_string(serial, length, device->desc.serial));
}

SIM_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    SIM_ENTER_DEVICE(device, index);
    *index = device->desc.index;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    SIM_ENTER_DEVICE(device, minorNumber);
    *minorNumber = device->desc.minor;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    SIM_ENTER_DEVICE(device, pci);
    const struct sim_gpu *g = &device->desc;
    sim_fill_pci(pci, g->domain, g->bus, g->device, g->product->pci_device_id,
                 g->product->pci_subsystem_id);
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

/* Every simulated product is a 3D controller (class 0x0302), as data-centre GPUs are. */
SIM_API nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
    SIM_ENTER_DEVICE(device, pci);
    if (pci->version != nvmlPciInfoExt_v1)
        return sim_leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    nvmlPciInfo_t p;
    const struct sim_gpu *g = &device->desc;
    sim_fill_pci(&p, g->domain, g->bus, g->device, g->product->pci_device_id,
                 g->product->pci_subsystem_id);
    *pci = (nvmlPciInfoExt_t){.version = pci->version, .domain = p.domain, .bus = p.bus,
                              .device = p.device, .pciDeviceId = p.pciDeviceId,
                              .pciSubSystemId = p.pciSubSystemId, .baseClass = 0x03,
                              .subClass = 0x02};
    memcpy(pci->busId, p.busId, sizeof pci->busId);
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    SIM_ENTER_DEVICE(device, mode);
    *mode = device->compute_mode;
    return sim_leave(NVML_SUCCESS);
}

/* Setting a mode needs root on a real node; the simulator allows it. */
SIM_API nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (mode > NVML_COMPUTEMODE_EXCLUSIVE_PROCESS || mode == NVML_COMPUTEMODE_EXCLUSIVE_THREAD)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    device->compute_mode = mode;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info)
{
    SIM_ENTER_DEVICE(device, info);
    memset(info, 0, sizeof *info);
    const struct scenario *sc = &sim_state.sc;
    if (!sc->fabric)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    memcpy(info->clusterUuid, sc->cluster_uuid, sizeof info->clusterUuid);
    info->status = device->fabric_down ? NVML_ERROR_NOT_READY : NVML_SUCCESS;
    info->cliqueId = sc->clique_id;
    info->state = device->fabric_down ? NVML_GPU_FABRIC_STATE_NOT_STARTED
                                      : NVML_GPU_FABRIC_STATE_COMPLETED;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
                                                 unsigned long *nodeSet, nvmlAffinityScope_t scope)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!nodeSet || nodeSetSize == 0 || scope != NVML_AFFINITY_SCOPE_NODE)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    memset(nodeSet, 0, nodeSetSize * sizeof *nodeSet);
    unsigned node = (unsigned)device->desc.numa_node, bits = 8 * sizeof *nodeSet;
    if (node / bits < nodeSetSize)
        nodeSet[node / bits] |= 1UL << (node % bits);
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!major || !minor)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *major = device->desc.product->cc_major;
    *minor = device->desc.product->cc_minor;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    SIM_ENTER_DEVICE(device, arch);
    *arch = device->desc.product->arch;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                          unsigned int *pendingMode)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!currentMode || !pendingMode)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!device->desc.product->mig_capable)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    *currentMode = device->desc.mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = device->mig_pending ? !*currentMode : *currentMode;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    SIM_ENTER_DEVICE(device, mode);
    *mode = device->persistence_off ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    return sim_leave(NVML_SUCCESS);
}

/* Page retirement is the pre-Ampere mechanism; row remapping replaced it. */
SIM_API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                            nvmlEnableState_t *isPending)
{
    SIM_ENTER_DEVICE(device, isPending);
    if (device->desc.product->arch >= NVML_DEVICE_ARCH_AMPERE)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    *isPending = device->pages_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                               unsigned int *uncRows, unsigned int *isPending,
                                               unsigned int *failureOccurred)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!corrRows || !uncRows || !isPending || !failureOccurred)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (device->desc.product->arch < NVML_DEVICE_ARCH_AMPERE)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    *corrRows = 0;
    *uncRows = device->rows_pending || device->rows_failure ? 1 : 0;
    *isPending = device->rows_pending;
    *failureOccurred = device->rows_failure;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                          nvmlEnableState_t *pending)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!current || !pending)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *current = *pending = NVML_FEATURE_ENABLED;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device,
                                                     nvmlGpuVirtualizationMode_t *pVirtualMode)
{
    SIM_ENTER_DEVICE(device, pVirtualMode);
    *pVirtualMode = NVML_GPU_VIRTUALIZATION_MODE_NONE;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    nvmlReturn_t rc = sim_enter_device(device);
    return rc ? rc : sim_leave(sim_copy_string(version, length, "96.00.A5.00.1A"));
}

/* Only a GPU joined to a Grace CPU answers; others have no C2C link. */
SIM_API nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, nvmlC2cModeInfo_v1_t *info)
{
    SIM_ENTER_DEVICE(device, info);
    if (!device->desc.product->c2c)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    info->isC2cEnabled = 1;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    SIM_ENTER_DEVICE(device, type);
    *type = NVML_BRAND_NVIDIA;
    return sim_leave(NVML_SUCCESS);
}
