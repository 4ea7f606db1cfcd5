/* Pairwise interconnect: NVLink counts and PCIe common ancestors. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "gpu/inventory.h"
#include "util/xmalloc.h"

/* Per GPU: active links to each peer (by bus id) and to NVSwitches. */
struct topo_links {
    unsigned to_switch;
    unsigned to_gpu[NVML_NVLINK_MAX_LINKS];
    char peer_bus[NVML_NVLINK_MAX_LINKS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    unsigned npeers;
};

static void topo_add_peer(struct topo_links *t, const char *bus)
{
    for (unsigned i = 0; i < t->npeers; i++) {
        if (!strcmp(t->peer_bus[i], bus)) {
            t->to_gpu[i]++;
            return;
        }
    }
    if (t->npeers < NVML_NVLINK_MAX_LINKS) {
        strcpy(t->peer_bus[t->npeers], bus);
        t->to_gpu[t->npeers++] = 1;
    }
}

static void topo_read_links(struct nvml *n, const struct gpu_info *g, struct topo_links *t)
{
    memset(t, 0, sizeof *t);
    if (g->lost || !g->handle || !n->DeviceGetNvLinkState || !n->DeviceGetNvLinkRemotePciInfo)
        return;
    for (unsigned l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
        nvmlEnableState_t active;
        nvmlReturn_t rc = n->DeviceGetNvLinkState(g->handle, l, &active);
        if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT)
            break; /* no NVLink at all, or past this GPU's last link */
        if (rc != NVML_SUCCESS || active != NVML_FEATURE_ENABLED)
            continue;
        nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_GPU;
        if (n->DeviceGetNvLinkRemoteDeviceType &&
            n->DeviceGetNvLinkRemoteDeviceType(g->handle, l, &type) != NVML_SUCCESS)
            type = NVML_NVLINK_DEVICE_TYPE_GPU;
        if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
            t->to_switch++;
            continue;
        }
        nvmlPciInfo_t pci;
        if (n->DeviceGetNvLinkRemotePciInfo(g->handle, l, &pci) == NVML_SUCCESS)
            topo_add_peer(t, pci.busId);
    }
}

static unsigned topo_direct(const struct topo_links *t, const char *bus)
{
    for (unsigned i = 0; i < t->npeers; i++)
        if (!strcasecmp(t->peer_bus[i], bus))
            return t->to_gpu[i];
    return 0;
}

void gpu_topology_read(struct nvml *n, struct gpu_inventory *inv)
{
    unsigned count = inv->count;
    struct topo_links *t = xcalloc(count, sizeof *t);
    for (unsigned i = 0; i < count; i++)
        topo_read_links(n, &inv->gpus[i], &t[i]);
    for (unsigned a = 0; a < count; a++) {
        for (unsigned b = 0; b < count; b++) {
            struct gpu_link *l = &inv->links[(size_t)a * count + b];
            const struct gpu_info *ga = &inv->gpus[a], *gb = &inv->gpus[b];
            l->pcie = -1;
            if (a == b) {
                l->pcie = NVML_TOPOLOGY_INTERNAL;
                continue;
            }
            /* Through an NVSwitch fabric, a pair can use as many links as the
             * less-connected GPU has: what nvidia-smi topo shows as NV18. */
            unsigned via_switch = t[a].to_switch < t[b].to_switch ? t[a].to_switch : t[b].to_switch;
            l->nvlinks = topo_direct(&t[a], gb->pci_bus_id) + via_switch;
            nvmlGpuTopologyLevel_t level;
            if (!ga->lost && !gb->lost && ga->handle && gb->handle &&
                n->DeviceGetTopologyCommonAncestor &&
                n->DeviceGetTopologyCommonAncestor(ga->handle, gb->handle, &level) == NVML_SUCCESS)
                l->pcie = (int)level;
        }
    }
    free(t);
}

const char *gpu_topology_level_name(int level)
{
    switch (level) {
    case NVML_TOPOLOGY_INTERNAL: return "X";
    case NVML_TOPOLOGY_SINGLE: return "PIX";
    case NVML_TOPOLOGY_MULTIPLE: return "PXB";
    case NVML_TOPOLOGY_HOSTBRIDGE: return "PHB";
    case NVML_TOPOLOGY_NODE: return "NODE";
    case NVML_TOPOLOGY_SYSTEM: return "SYS";
    default: return "N/A";
    }
}
