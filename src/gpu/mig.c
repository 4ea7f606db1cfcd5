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

void gpu_mig_profiles_read(struct nvml *n, struct gpu_info *g)
{
    g->nmig_profiles = 0;
    if (g->mig_mode != NVML_DEVICE_MIG_ENABLE || !n->DeviceGetGpuInstanceProfileInfo ||
        !n->DeviceGetGpuInstancePossiblePlacements)
        return;
    for (unsigned idx = 0; idx < NVML_GPU_INSTANCE_PROFILE_COUNT; idx++) {
        struct gpu_mig_profile *p = &g->mig_profiles[g->nmig_profiles];
        nvmlGpuInstancePlacement_t at[GPU_MIG_SLICES];
        unsigned count = GPU_MIG_SLICES;
        if (g->nmig_profiles == GPU_MIG_PROFILES ||
            n->DeviceGetGpuInstanceProfileInfo(g->handle, idx, &p->info) != NVML_SUCCESS ||
            !p->info.sliceCount ||
            n->DeviceGetGpuInstancePossiblePlacements(g->handle, p->info.id, at, &count) !=
                NVML_SUCCESS)
            continue;
        p->starts = 0;
        p->size = 0;
        for (unsigned k = 0; k < count && k < GPU_MIG_SLICES; k++)
            if (at[k].start < GPU_MIG_SLICES && at[k].start + at[k].size <= GPU_MIG_SLICES) {
                p->starts |= 1u << at[k].start;
                p->size = at[k].size;
            }
        if (!p->starts)
            continue;
        nvmlDeviceAttributes_t a = {.gpuInstanceSliceCount = p->info.sliceCount,
                                    .computeInstanceSliceCount = p->info.sliceCount,
                                    .sharedOfaCount = p->info.ofaCount,
                                    .memorySizeMB = p->info.memorySizeMB};
        gpu_mig_profile_name(g->memory_total >> 20, &a, p->name, sizeof p->name);
        g->nmig_profiles++;
    }
}

/* The compute instance profile (NVML_COMPUTE_INSTANCE_PROFILE_*) that
 * spans a GPU instance of slices. */
static int gpu_mig_ci_profile(struct nvml *n, nvmlGpuInstance_t gi, unsigned slices, unsigned *id)
{
    for (unsigned idx = 0; idx < 8; idx++) {
        nvmlComputeInstanceProfileInfo_t info;
        if (n->GpuInstanceGetComputeInstanceProfileInfo(gi, idx, 0, &info) == NVML_SUCCESS &&
            info.sliceCount == slices) {
            *id = info.id;
            return 0;
        }
    }
    return -1;
}

static const struct gpu_mig_profile *gpu_mig_profile_of(const struct gpu_info *g, unsigned id)
{
    for (unsigned k = 0; k < g->nmig_profiles; k++)
        if (g->mig_profiles[k].info.id == id)
            return &g->mig_profiles[k];
    return NULL;
}

int gpu_mig_create(struct nvml *n, struct gpu_info *g, unsigned profile, unsigned start,
                   unsigned *made, struct err *e)
{
    const struct gpu_mig_profile *p = gpu_mig_profile_of(g, profile);
    if (!n->DeviceCreateGpuInstanceWithPlacement || !n->GpuInstanceCreateComputeInstance ||
        !n->GpuInstanceGetComputeInstanceProfileInfo || !n->GpuInstanceDestroy)
        return err_set(e, "this NVML cannot make MIG devices");
    if (!p)
        return err_set(e, "GPU %s has no MIG profile %u", g->uuid, profile);
    nvmlGpuInstancePlacement_t at = {start, p->size};
    nvmlGpuInstance_t gi;
    nvmlComputeInstance_t ci;
    nvmlGpuInstanceInfo_t info;
    unsigned ci_profile = 0;
    nvmlReturn_t rc = n->DeviceCreateGpuInstanceWithPlacement(g->handle, profile, &at, &gi);
    if (rc != NVML_SUCCESS)
        return err_set(e, "GPU %s: a %s GPU instance at memory slice %u: %s", g->uuid, p->name,
                       start, nvml_strerror(n, rc));
    if (gpu_mig_ci_profile(n, gi, p->info.sliceCount, &ci_profile) < 0)
        rc = NVML_ERROR_NOT_SUPPORTED;
    else
        rc = n->GpuInstanceCreateComputeInstance(gi, ci_profile, &ci);
    if (rc != NVML_SUCCESS) {
        n->GpuInstanceDestroy(gi);
        return err_set(e, "GPU %s: the compute instance of a %s GPU instance: %s", g->uuid,
                       p->name, nvml_strerror(n, rc));
    }
    unsigned id = 0;
    if (n->GpuInstanceGetInfo && n->GpuInstanceGetInfo(gi, &info) == NVML_SUCCESS)
        id = info.id;
    gpu_mig_read(n, g);
    for (unsigned k = 0; k < g->nmig; k++)
        if (g->mig[k].gi == id) {
            *made = k;
            return 0;
        }
    return err_set(e, "GPU %s: the new %s MIG device (GPU instance %u) is not listed", g->uuid,
                   p->name, id);
}

int gpu_mig_destroy(struct nvml *n, struct gpu_info *g, unsigned gi, unsigned ci, const char *uuid,
                    struct err *e)
{
    gpu_mig_read(n, g);
    const struct gpu_mig *m = NULL;
    for (unsigned k = 0; k < g->nmig && !m; k++)
        if (g->mig[k].gi == gi && g->mig[k].ci == ci && !strcmp(g->mig[k].uuid, uuid))
            m = &g->mig[k];
    if (!m) /* gone already, or another's now */
        return 0;
    nvmlGpuInstance_t gih;
    nvmlComputeInstance_t cih;
    nvmlReturn_t rc = NVML_ERROR_NOT_SUPPORTED;
    if (n->DeviceGetGpuInstanceById && n->GpuInstanceGetComputeInstanceById &&
        n->ComputeInstanceDestroy && n->GpuInstanceDestroy &&
        (rc = n->DeviceGetGpuInstanceById(g->handle, gi, &gih)) == NVML_SUCCESS &&
        (rc = n->GpuInstanceGetComputeInstanceById(gih, ci, &cih)) == NVML_SUCCESS &&
        (rc = n->ComputeInstanceDestroy(cih)) == NVML_SUCCESS)
        rc = n->GpuInstanceDestroy(gih);
    gpu_mig_read(n, g);
    if (rc != NVML_SUCCESS)
        return err_set(e, "GPU %s: MIG device %s (GPU instance %u): not destroyed: %s", g->uuid,
                       uuid, gi, nvml_strerror(n, rc));
    return 0;
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
