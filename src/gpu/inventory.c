#include "gpu/inventory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

static const char *inventory_arch_name(nvmlDeviceArchitecture_t arch)
{
    switch (arch) {
    case NVML_DEVICE_ARCH_KEPLER: return "kepler";
    case NVML_DEVICE_ARCH_MAXWELL: return "maxwell";
    case NVML_DEVICE_ARCH_PASCAL: return "pascal";
    case NVML_DEVICE_ARCH_VOLTA: return "volta";
    case NVML_DEVICE_ARCH_TURING: return "turing";
    case NVML_DEVICE_ARCH_AMPERE: return "ampere";
    case NVML_DEVICE_ARCH_ADA: return "ada-lovelace";
    case NVML_DEVICE_ARCH_HOPPER: return "hopper";
    case NVML_DEVICE_ARCH_BLACKWELL: return "blackwell";
    default: return "unknown";
    }
}

/* Records the first failure of a GPU's read; NOT_SUPPORTED is an answer, not a problem. */
static bool inventory_check(struct nvml *n, struct gpu_info *g, const char *what, nvmlReturn_t rc)
{
    if (rc == NVML_SUCCESS)
        return true;
    if (rc == NVML_ERROR_GPU_IS_LOST)
        g->lost = true;
    if (rc != NVML_ERROR_NOT_SUPPORTED && !g->problem[0])
        snprintf(g->problem, sizeof g->problem, "%s: %s", what, nvml_strerror(n, rc));
    return false;
}

/* The NUMA node NVML reports the GPU's memory is closest to, the same
 * source as nvidia-smi topo's "NUMA Affinity"; -1 unless exactly one node. */
static int inventory_numa(struct nvml *n, struct gpu_info *g)
{
    if (!n->DeviceGetMemoryAffinity)
        return -1;
    unsigned long set[4] = {0};
    nvmlReturn_t rc = n->DeviceGetMemoryAffinity(g->handle, 4, set, NVML_AFFINITY_SCOPE_NODE);
    if (!inventory_check(n, g, "memory affinity", rc))
        return -1;
    int node = -1;
    for (int i = 0; i < 4 * 64; i++) {
        if (set[i / 64] & (1UL << (i % 64))) {
            if (node >= 0)
                return -1; /* spans nodes: no single answer */
            node = i;
        }
    }
    return node;
}

static void inventory_memory(struct nvml *n, struct gpu_info *g)
{
    /* v2 separates reserved memory; total is the same in both. */
    if (n->DeviceGetMemoryInfoV2) {
        nvmlMemory_v2_t m = {.version = nvmlMemory_v2};
        nvmlReturn_t rc = n->DeviceGetMemoryInfoV2(g->handle, &m);
        if (rc == NVML_SUCCESS) {
            g->memory_total = m.total;
            return;
        }
        if (rc != NVML_ERROR_FUNCTION_NOT_FOUND && rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH &&
            rc != NVML_ERROR_NOT_SUPPORTED) {
            inventory_check(n, g, "memory info", rc);
            return;
        }
    }
    if (n->DeviceGetMemoryInfo) {
        nvmlMemory_t m;
        if (inventory_check(n, g, "memory info", n->DeviceGetMemoryInfo(g->handle, &m)))
            g->memory_total = m.total;
    }
}

/* What the device plugin needs to advertise and allocate a GPU. */
static void inventory_read_ids(struct nvml *n, struct gpu_info *g)
{
    unsigned minor, cur, pending;
    if (inventory_check(n, g, "uuid", n->DeviceGetUUID(g->handle, g->uuid, sizeof g->uuid)) &&
        inventory_check(n, g, "minor number", n->DeviceGetMinorNumber(g->handle, &minor)))
        g->minor = minor;
    if (!g->lost && n->DeviceGetMigMode &&
        inventory_check(n, g, "MIG mode", n->DeviceGetMigMode(g->handle, &cur, &pending)))
        g->mig_mode = (int)cur;
    /* MIG devices are what the MIG strategies advertise. */
    if (!g->lost)
        gpu_mig_read(n, g);
    /* The product name picks a GPU's resource (resources.gpus). */
    if (!g->lost)
        inventory_check(n, g, "name", n->DeviceGetName(g->handle, g->name, sizeof g->name));
}

/* The PCI class code (compute or graphics mode), where NVML can say. */
static void inventory_pci_class(struct nvml *n, struct gpu_info *g)
{
    nvmlPciInfoExt_t pci = {.version = nvmlPciInfoExt_v1};
    if (n->DeviceGetPciInfoExt && n->DeviceGetPciInfoExt(g->handle, &pci) == NVML_SUCCESS)
        g->pci_class = (int)((pci.baseClass & 0xff) << 8 | (pci.subClass & 0xff));
}

/* The GPU's NVLink clique on a multi-node fabric, once its registration is
 * complete; not supported on most systems. */
static void inventory_clique(struct nvml *n, struct gpu_info *g)
{
    nvmlGpuFabricInfo_t f;
    if (!n->DeviceGetGpuFabricInfo || n->DeviceGetGpuFabricInfo(g->handle, &f) != NVML_SUCCESS ||
        f.state != NVML_GPU_FABRIC_STATE_COMPLETED || f.status != NVML_SUCCESS)
        return;
    const unsigned char *u = f.clusterUuid;
    snprintf(g->clique, sizeof g->clique,
             "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x.%u", u[0], u[1],
             u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
             u[15], f.cliqueId);
}

/* The rest, which may cost milliseconds on a real GPU. */
static void inventory_read_facts(struct nvml *n, struct gpu_info *g)
{
    nvmlPciInfo_t pci;
    if (g->lost || !g->handle)
        return;
    if (inventory_check(n, g, "name", n->DeviceGetName(g->handle, g->name, sizeof g->name)) &&
        inventory_check(n, g, "pci info", n->DeviceGetPciInfo(g->handle, &pci)))
    {
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%s", pci.busId);
        g->pci_device_id = pci.pciDeviceId;
    }
    if (g->lost)
        return;
    inventory_memory(n, g);
    g->numa_node = inventory_numa(n, g);
    int major, minor_cc;
    if (n->DeviceGetCudaComputeCapability &&
        inventory_check(n, g, "compute capability",
                        n->DeviceGetCudaComputeCapability(g->handle, &major, &minor_cc))) {
        g->cc_major = major;
        g->cc_minor = minor_cc;
    }
    nvmlDeviceArchitecture_t arch;
    if (n->DeviceGetArchitecture &&
        inventory_check(n, g, "architecture", n->DeviceGetArchitecture(g->handle, &arch)))
        g->architecture = inventory_arch_name(arch);
    inventory_pci_class(n, g);
    inventory_clique(n, g);
    gpu_mig_profiles_read(n, g);
    nvmlBrandType_t brand;
    if (n->DeviceGetBrand && inventory_check(n, g, "brand", n->DeviceGetBrand(g->handle, &brand)))
        g->brand = (int)brand;
}

static void inventory_system(struct nvml *n, struct gpu_inventory *inv)
{
    if (n->SystemGetDriverVersion(inv->driver_version, sizeof inv->driver_version) != NVML_SUCCESS)
        inv->driver_version[0] = '\0';
    if (!n->SystemGetNVMLVersion ||
        n->SystemGetNVMLVersion(inv->nvml_version, sizeof inv->nvml_version) != NVML_SUCCESS)
        inv->nvml_version[0] = '\0';
    int cuda;
    inv->cuda_version = -1;
    if (n->SystemGetCudaDriverVersion && n->SystemGetCudaDriverVersion(&cuda) == NVML_SUCCESS)
        inv->cuda_version = cuda;
    snprintf(inv->library, sizeof inv->library, "%s", n->path);
}

int gpu_inventory_build_ids(struct nvml *n, struct gpu_inventory *inv, struct err *e)
{
    memset(inv, 0, sizeof *inv);
    inventory_system(n, inv);
    unsigned count;
    nvmlReturn_t rc = n->DeviceGetCount(&count);
    if (rc != NVML_SUCCESS)
        return err_set(e, "cannot count GPUs: %s", nvml_strerror(n, rc));
    inv->count = count;
    inv->gpus = xcalloc(count, sizeof *inv->gpus);
    inv->links = xcalloc((size_t)count * count, sizeof *inv->links);
    for (unsigned i = 0; i < count; i++) {
        struct gpu_info *g = &inv->gpus[i];
        g->index = g->minor = i;
        g->numa_node = g->cc_major = g->cc_minor = g->mig_mode = g->pci_class = g->brand = -1;
        g->architecture = "unknown";
        if (inventory_check(n, g, "handle", n->DeviceGetHandleByIndex(i, &g->handle)))
            inventory_read_ids(n, g);
    }
    return 0;
}

void gpu_inventory_read_facts(struct nvml *n, struct gpu_inventory *inv)
{
    for (unsigned i = 0; i < inv->count; i++)
        inventory_read_facts(n, &inv->gpus[i]);
    gpu_topology_read(n, inv);
}

int gpu_inventory_build(struct nvml *n, struct gpu_inventory *inv, struct err *e)
{
    if (gpu_inventory_build_ids(n, inv, e) < 0)
        return -1;
    gpu_inventory_read_facts(n, inv);
    return 0;
}

void gpu_inventory_copy(struct gpu_inventory *dst, const struct gpu_inventory *src)
{
    *dst = *src;
    dst->gpus = xcalloc(src->count, sizeof *dst->gpus);
    dst->links = xcalloc((size_t)src->count * src->count, sizeof *dst->links);
    memcpy(dst->gpus, src->gpus, src->count * sizeof *src->gpus);
    memcpy(dst->links, src->links, (size_t)src->count * src->count * sizeof *src->links);
}

void gpu_inventory_merge(struct gpu_inventory *inv, const struct gpu_inventory *from, int *map)
{
    memcpy(inv->driver_version, from->driver_version, sizeof inv->driver_version);
    memcpy(inv->nvml_version, from->nvml_version, sizeof inv->nvml_version);
    memcpy(inv->library, from->library, sizeof inv->library);
    inv->cuda_version = from->cuda_version;
    for (unsigned i = 0; i < inv->count; i++) {
        map[i] = -1;
        for (unsigned j = 0; j < from->count && map[i] < 0; j++)
            if (!strcmp(inv->gpus[i].uuid, from->gpus[j].uuid))
                map[i] = (int)j;
        /* In place, GPU by GPU: others hold pointers into inv->gpus. */
        if (map[i] >= 0)
            inv->gpus[i] = from->gpus[map[i]];
    }
    for (unsigned a = 0; a < inv->count; a++)
        for (unsigned b = 0; b < inv->count; b++)
            if (map[a] >= 0 && map[b] >= 0)
                inv->links[(size_t)a * inv->count + b] =
                    from->links[(size_t)map[a] * from->count + (size_t)map[b]];
}

void gpu_inventory_free(struct gpu_inventory *inv)
{
    free(inv->gpus);
    free(inv->links);
    inv->gpus = NULL;
    inv->links = NULL;
    inv->count = 0;
}

const struct gpu_link *gpu_inventory_link(const struct gpu_inventory *inv, unsigned a, unsigned b)
{
    return &inv->links[(size_t)a * inv->count + b];
}

/* A MIG device by its UUID, or as "<GPU index>:<MIG index>". */
static bool gpu_inventory_find_mig(const struct gpu_inventory *inv, const char *id, size_t len,
                                   unsigned *gpu, int *mig)
{
    for (unsigned i = 0; i < inv->count; i++)
        for (unsigned j = 0; inv->gpus[i].mig_mode == NVML_DEVICE_MIG_ENABLE && j < inv->gpus[i].nmig;
             j++)
            if (strlen(inv->gpus[i].mig[j].uuid) == len && !strncmp(inv->gpus[i].mig[j].uuid, id, len)) {
                *gpu = i;
                *mig = (int)j;
                return true;
            }
    unsigned g, m;
    char buf[24], tail;
    if (len >= sizeof buf)
        return false;
    memcpy(buf, id, len);
    buf[len] = '\0';
    if (sscanf(buf, "%u:%u%c", &g, &m, &tail) != 2 || g >= inv->count || m >= inv->gpus[g].nmig)
        return false;
    *gpu = g;
    *mig = (int)m;
    return true;
}

bool gpu_inventory_find_id(const struct gpu_inventory *inv, const char *id, size_t len,
                           unsigned *gpu, int *mig)
{
    if (gpu_inventory_find_mig(inv, id, len, gpu, mig))
        return true;
    *mig = -1;
    for (unsigned i = 0; i < inv->count; i++)
        if (strlen(inv->gpus[i].uuid) == len && !strncmp(inv->gpus[i].uuid, id, len)) {
            *gpu = i;
            return true;
        }
    char buf[16];
    if (len == 0 || len >= sizeof buf)
        return false;
    memcpy(buf, id, len);
    buf[len] = '\0';
    char *end;
    unsigned long idx = strtoul(buf, &end, 10);
    if (*end || idx >= inv->count)
        return false;
    *gpu = (unsigned)idx;
    return true;
}
