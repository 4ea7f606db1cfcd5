/* MIG devices from NVML, and their profile names. A MIG device is what a
 * container gets: NVML lists them per GPU by index, each with a MIG UUID,
 * its GPU and compute instance IDs and its attributes. */
#include "gpu/inventory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gpu_mig_profile_name(unsigned long long gpu_total_mib, const nvmlDeviceAttributes_t *a,
                          char *out, size_t len)
{
    /* go-nvlib's rule, which names the H200's seven profiles as its driver
     * does: the fraction of memory rounded up to eighths, times the GPU's
     * memory in whole GB (rounded up), rounded. */
    unsigned long long gb = 0;
    if (gpu_total_mib) {
        unsigned long long eighths = (a->memorySizeMB * 8 + gpu_total_mib - 1) / gpu_total_mib;
        unsigned long long total_gb = (gpu_total_mib + 1023) / 1024;
        gb = (eighths * total_gb * 2 + 8) / 16; /* rounded, halves up */
    }
    char ci[16] = "";
    if (a->computeInstanceSliceCount && a->computeInstanceSliceCount < a->gpuInstanceSliceCount)
        snprintf(ci, sizeof ci, "%uc.", a->computeInstanceSliceCount);
    bool me = a->sharedOfaCount && a->gpuInstanceSliceCount < 7;
    snprintf(out, len, "%s%ug.%llugb%s", ci, a->gpuInstanceSliceCount, gb, me ? "+me" : "");
}

/* The GPU instance's profile ID and placement, which name a MIG device in
 * NVIDIA's DRA driver (gpu-<minor>-mig-<profile>-<ID>-<start>). */
static void gpu_mig_placement(struct nvml *n, const struct gpu_info *g, struct gpu_mig *m)
{
    nvmlGpuInstance_t gi;
    nvmlGpuInstanceInfo_t info;
    if (!n->DeviceGetGpuInstanceById || !n->GpuInstanceGetInfo ||
        n->DeviceGetGpuInstanceById(g->handle, m->gi, &gi) != NVML_SUCCESS ||
        n->GpuInstanceGetInfo(gi, &info) != NVML_SUCCESS)
        return;
    m->gi_profile = info.profileId;
    m->placement_start = info.placement.start;
    m->placement_size = info.placement.size;
}

void gpu_mig_read(struct nvml *n, struct gpu_info *g)
{
    g->nmig = 0;
    unsigned max = 0;
    if (g->mig_mode != NVML_DEVICE_MIG_ENABLE || !n->DeviceGetMaxMigDeviceCount ||
        !n->DeviceGetMigDeviceHandleByIndex ||
        n->DeviceGetMaxMigDeviceCount(g->handle, &max) != NVML_SUCCESS)
        return;
    /* The GPU's memory names the profiles. */
    unsigned long long total_mib = 0;
    nvmlMemory_t mem;
    if (n->DeviceGetMemoryInfo && n->DeviceGetMemoryInfo(g->handle, &mem) == NVML_SUCCESS)
        total_mib = mem.total >> 20;
    for (unsigned k = 0; k < max && g->nmig < GPU_MIG_MAX; k++) {
        struct gpu_mig *m = &g->mig[g->nmig];
        memset(m, 0, sizeof *m);
        /* Indexes may have holes: NOT_FOUND is an empty slot. */
        if (n->DeviceGetMigDeviceHandleByIndex(g->handle, k, &m->handle) != NVML_SUCCESS ||
            n->DeviceGetUUID(m->handle, m->uuid, sizeof m->uuid) != NVML_SUCCESS)
            continue;
        if (n->DeviceGetGpuInstanceId)
            n->DeviceGetGpuInstanceId(m->handle, &m->gi);
        if (n->DeviceGetComputeInstanceId)
            n->DeviceGetComputeInstanceId(m->handle, &m->ci);
        gpu_mig_placement(n, g, m);
        if (n->DeviceGetAttributes && n->DeviceGetAttributes(m->handle, &m->attr) == NVML_SUCCESS)
            gpu_mig_profile_name(total_mib, &m->attr, m->profile, sizeof m->profile);
        else
            snprintf(m->profile, sizeof m->profile, "unknown");
        g->nmig++;
    }
}

unsigned gpu_mig_cap_minor(const char *proc_root, unsigned gpu_minor, unsigned gi, int ci)
{
    char want[64], path[512], line[128];
    if (ci < 0)
        snprintf(want, sizeof want, "gpu%u/gi%u/access", gpu_minor, gi);
    else
        snprintf(want, sizeof want, "gpu%u/gi%u/ci%d/access", gpu_minor, gi, ci);
    snprintf(path, sizeof path, "%s/driver/nvidia-caps/mig-minors", proc_root);
    FILE *f = fopen(path, "r");
    size_t len = strlen(want);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, want, len) && line[len] == ' ') {
            fclose(f);
            return (unsigned)strtoul(line + len + 1, NULL, 10);
        }
    if (f)
        fclose(f);
    return gpu_mig_cap_numbering(gpu_minor, gi, ci);
}

unsigned gpu_mig_cap_numbering(unsigned gpu_minor, unsigned gi, int ci)
{
    /* config 1, monitor 2, then per GPU 15 GPU instances of 9 minors each
     * (the instance's, then its 8 compute instances'). */
    unsigned base = 3 + gpu_minor * 15 * 9 + gi * 9;
    return ci < 0 ? base : base + 1 + (unsigned)ci;
}
