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

/* --- a whole layout, as mig-parted makes one ------------------------------------------- */

/* Destroys every compute and GPU instance of g (the bare ones too). */
static nvmlReturn_t gpu_mig_clear(struct nvml *n, const struct gpu_info *g)
{
    for (unsigned k = 0; k < g->nmig_profiles; k++) {
        nvmlGpuInstance_t gis[GPU_MIG_MAX];
        unsigned count = GPU_MIG_MAX;
        nvmlReturn_t rc = n->DeviceGetGpuInstances(g->handle, g->mig_profiles[k].info.id, gis, &count);
        if (rc != NVML_SUCCESS)
            return rc;
        for (unsigned i = 0; i < count; i++) {
            for (unsigned cp = 0; cp < 8; cp++) {
                nvmlComputeInstance_t cis[GPU_MIG_MAX];
                unsigned ncis = GPU_MIG_MAX;
                nvmlComputeInstanceProfileInfo_t info;
                if (n->GpuInstanceGetComputeInstanceProfileInfo(gis[i], cp, 0, &info) != NVML_SUCCESS ||
                    n->GpuInstanceGetComputeInstances(gis[i], info.id, cis, &ncis) != NVML_SUCCESS)
                    continue;
                for (unsigned c = 0; c < ncis; c++)
                    if ((rc = n->ComputeInstanceDestroy(cis[c])) != NVML_SUCCESS)
                        return rc;
            }
            if ((rc = n->GpuInstanceDestroy(gis[i])) != NVML_SUCCESS)
                return rc;
        }
    }
    return NVML_SUCCESS;
}

/* One order of the items: each GPU instance where the driver places it. */
static nvmlReturn_t gpu_mig_make(struct nvml *n, const struct gpu_info *g,
                                 const struct gpu_mig_item *items, unsigned count, unsigned *failed)
{
    for (unsigned i = 0; i < count; i++) {
        nvmlGpuInstance_t gi;
        nvmlComputeInstance_t ci;
        unsigned ci_profile;
        *failed = i;
        nvmlReturn_t rc = n->DeviceCreateGpuInstance(g->handle, items[i].gi_profile, &gi);
        if (rc != NVML_SUCCESS)
            return rc;
        if (gpu_mig_ci_profile(n, gi, items[i].ci_slices, &ci_profile) < 0)
            return NVML_ERROR_NOT_SUPPORTED;
        if ((rc = n->GpuInstanceCreateComputeInstance(gi, ci_profile, &ci)) != NVML_SUCCESS)
            return rc;
    }
    return NVML_SUCCESS;
}

/* mig-parted's iteratePermutationsUntilSuccess: the orders of the items,
 * each distinct one once, tried until one fits (cleared between). */
struct gpu_mig_try {
    struct nvml *n;
    const struct gpu_info *g;
    struct gpu_mig_item *items;
    unsigned count, tries;
    nvmlReturn_t rc;
    unsigned failed;
};

static bool gpu_mig_same_item(const struct gpu_mig_item *a, const struct gpu_mig_item *b)
{
    return a->gi_profile == b->gi_profile && a->ci_slices == b->ci_slices;
}

static bool gpu_mig_orders(struct gpu_mig_try *t, unsigned i)
{
    if (i == t->count) {
        if (t->tries++ >= GPU_MIG_ORDERS)
            return false;
        nvmlReturn_t rc = gpu_mig_clear(t->n, t->g);
        if (rc == NVML_SUCCESS)
            rc = gpu_mig_make(t->n, t->g, t->items, t->count, &t->failed);
        t->rc = rc;
        return rc == NVML_SUCCESS;
    }
    for (unsigned j = i; j < t->count; j++) {
        bool seen = false;
        for (unsigned k = i; k < j && !seen; k++)
            seen = gpu_mig_same_item(&t->items[k], &t->items[j]);
        if (seen)
            continue;
        struct gpu_mig_item x = t->items[i];
        t->items[i] = t->items[j];
        t->items[j] = x;
        if (gpu_mig_orders(t, i + 1))
            return true;
        t->items[j] = t->items[i];
        t->items[i] = x;
    }
    return false;
}

/* Whether items[i..] can be placed in the memory slices free (a bit
 * each), some placement of each: a search, not the driver's first fit. */
static bool gpu_mig_place(const struct gpu_info *g, const struct gpu_mig_item *items, unsigned i,
                          unsigned count, unsigned used)
{
    if (i == count)
        return true;
    const struct gpu_mig_profile *p = gpu_mig_profile_of(g, items[i].gi_profile);
    if (!p || !p->size)
        return false;
    unsigned span = (1u << p->size) - 1;
    for (unsigned s = 0; s < GPU_MIG_SLICES; s++)
        if ((p->starts >> s & 1) && !(used & span << s) &&
            gpu_mig_place(g, items, i + 1, count, used | span << s))
            return true;
    return false;
}

bool gpu_mig_fits(const struct gpu_info *g, const struct gpu_mig_item *items, unsigned count)
{
    unsigned slices = 0, most = 0;
    for (unsigned k = 0; k < g->nmig_profiles; k++)
        most = g->mig_profiles[k].info.sliceCount > most ? g->mig_profiles[k].info.sliceCount : most;
    for (unsigned i = 0; i < count; i++) {
        const struct gpu_mig_profile *p = gpu_mig_profile_of(g, items[i].gi_profile);
        slices += p ? p->info.sliceCount : most + 1;
    }
    return count <= GPU_MIG_MAX && slices <= most && gpu_mig_place(g, items, 0, count, 0);
}

int gpu_mig_layout(struct nvml *n, struct gpu_info *g, const struct gpu_mig_item *items,
                   unsigned count, struct err *e)
{
    if (!n->DeviceCreateGpuInstance || !n->DeviceGetGpuInstances ||
        !n->GpuInstanceGetComputeInstances || !n->GpuInstanceGetComputeInstanceProfileInfo ||
        !n->GpuInstanceCreateComputeInstance || !n->ComputeInstanceDestroy || !n->GpuInstanceDestroy)
        return err_set(e, "this NVML cannot make MIG devices");
    if (count > GPU_MIG_MAX)
        return err_set(e, "GPU %u: %u MIG devices: more than %d", g->index, count, GPU_MIG_MAX);
    struct gpu_mig_item mine[GPU_MIG_MAX];
    if (count) /* none: items may be NULL (MIG turned off, every instance destroyed) */
        memcpy(mine, items, count * sizeof *items);
    struct gpu_mig_try t = {n, g, mine, count, 0, NVML_SUCCESS, 0};
    bool ok = count ? gpu_mig_orders(&t, 0) : (t.rc = gpu_mig_clear(n, g)) == NVML_SUCCESS;
    if (!ok && count)
        gpu_mig_clear(n, g); /* no half layout is left (mig-parted's ClearMigConfig) */
    gpu_mig_read(n, g);
    if (ok)
        return 0;
    if (!count)
        return err_set(e, "GPU %u: its MIG devices could not be destroyed: %s", g->index,
                       nvml_strerror(n, t.rc));
    return err_set(e, "GPU %u: the layout does not fit in any order (%u tried; the last stopped at "
                      "its MIG device %u: %s)", g->index, t.tries, t.failed + 1,
                   nvml_strerror(n, t.rc));
}

int gpu_mig_set_mode(struct nvml *n, struct gpu_info *g, bool on, bool *reset, struct err *e)
{
    *reset = false;
    if (!n->DeviceSetMigMode)
        return err_set(e, "this NVML cannot change the MIG mode");
    nvmlReturn_t activation = NVML_SUCCESS;
    nvmlReturn_t rc = n->DeviceSetMigMode(g->handle, on ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE,
                                          &activation);
    if (rc != NVML_SUCCESS)
        return err_set(e, "GPU %u: MIG mode not turned %s: %s", g->index, on ? "on" : "off",
                       nvml_strerror(n, rc));
    if (activation != NVML_SUCCESS) {
        *reset = true; /* the driver applies it at the next GPU reset */
        return err_set(e, "GPU %u: MIG mode turns %s only at a GPU reset or reboot (%s), which "
                          "gpulet never does", g->index, on ? "on" : "off",
                       nvml_strerror(n, activation));
    }
    unsigned current = 0, pending = 0;
    if (n->DeviceGetMigMode && n->DeviceGetMigMode(g->handle, &current, &pending) == NVML_SUCCESS)
        g->mig_mode = current;
    gpu_mig_profiles_read(n, g);
    gpu_mig_read(n, g);
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
