/* Topology: NVLinks (to peers or NVSwitches) and the PCIe common ancestor. */
#include "sim.h"

static nvmlReturn_t topo_link(nvmlDevice_t device, unsigned link, const struct sim_link **out)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!device->desc.product->nvlinks)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    if (link >= device->desc.product->nvlinks)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *out = link < device->desc.nlinks ? &device->desc.links[link] : NULL;
    return NVML_SUCCESS; /* still locked: the caller reads *out, then leaves */
}

SIM_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                              nvmlEnableState_t *isActive)
{
    const struct sim_link *l = NULL;
    nvmlReturn_t rc = topo_link(device, link, &l);
    if (rc)
        return rc;
    if (!isActive)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *isActive = l ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                         nvmlPciInfo_t *pci)
{
    const struct sim_link *l = NULL;
    nvmlReturn_t rc = topo_link(device, link, &l);
    if (rc)
        return rc;
    if (!pci)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!l)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED); /* inactive link: nothing at the far end */
    if (l->remote_gpu >= 0) {
        const struct sim_gpu *r = &sim_state.gpus[l->remote_gpu].desc;
        sim_fill_pci(pci, r->domain, r->bus, r->device, r->product->pci_device_id,
                     r->product->pci_subsystem_id);
    } else {
        /* An NVSwitch: driver 580 reports no PCI address for it, only
         * FFFFFFFF:FF:FF.0 (read on a 4x H200 HGX VM, docs/real-gpu.md). */
        sim_fill_pci(pci, 0xFFFFFFFFu, 0xFF, 0xFF, 0, 0);
    }
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                         nvmlIntNvLinkDeviceType_t *type)
{
    const struct sim_link *l = NULL;
    nvmlReturn_t rc = topo_link(device, link, &l);
    if (rc)
        return rc;
    if (!type)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (!l)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    *type = l->remote_type;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                         nvmlDevice_t device2,
                                                         nvmlGpuTopologyLevel_t *pathInfo)
{
    nvmlReturn_t rc = sim_enter_device(device1);
    if (rc)
        return rc;
    if (!pathInfo || !sim_is_device(device2))
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (device2->lost)
        return sim_leave(NVML_ERROR_GPU_IS_LOST);
    const struct sim_gpu *a = &device1->desc, *b = &device2->desc;
    if (a == b)
        *pathInfo = NVML_TOPOLOGY_INTERNAL;
    else if (a->numa_node != b->numa_node)
        *pathInfo = NVML_TOPOLOGY_SYSTEM;
    else if (a->pcie_switch < 0)
        *pathInfo = NVML_TOPOLOGY_HOSTBRIDGE; /* no switches: both on the host bridge */
    else if (a->pcie_switch == b->pcie_switch)
        *pathInfo = NVML_TOPOLOGY_SINGLE;
    else
        *pathInfo = NVML_TOPOLOGY_NODE;
    return sim_leave(NVML_SUCCESS);
}
