/* A claim's allocation mapped to this node's devices: each result's GPU
 * or MIG device (in this node's pool, served through DRA, healthy), and
 * how it is shared (MPS's limits resolved per device, a time slice where
 * the claim holds its GPU whole). On the loop, reading the agent's
 * records; no I/O, so fuzzed (fuzz_dra, on a simulated node). */
#include "dra/internal.h"

#include <stdio.h>
#include <string.h>

#include "util/xmalloc.h"

/* The GPU a result names on this node, and its MIG device (*mig, 0 for
 * the GPU whole), or -1 with why. */
static int dra_result_gpu(const struct dra *d, const struct dra_slice_in *in,
                          const struct dra_result *r, unsigned *mig, char *why, size_t len)
{
    if (strcmp(r->pool, d->node)) {
        snprintf(why, len, "device %s is in pool %s, not this node's (%s)", r->device, r->pool, d->node);
        return -1;
    }
    for (unsigned i = 0; i < d->inv->count; i++) {
        const struct gpu_info *g = &d->inv->gpus[i];
        for (unsigned k = 0; k <= dra_migs(g); k++) {
            char name[64];
            dra_device_name(g, k, name, sizeof name);
            if (strcmp(name, r->device))
                continue;
            if (!config_dra_takes(d->cfg, g)) {
                snprintf(why, len, "device %s (%s) is the device plugin's here, not DRA's (--dra-gpus)",
                         name, g->uuid);
                return -1;
            }
            /* A tainted device was allocated knowing it: a claim that
             * tolerates the taint, or one allocated before the fault (its
             * pod runs, as a NoSchedule taint means). */
            if (!dra_publishes(in, i, k)) {
                const char *h = gpu_device_unhealthy(&d->devs[i], (int)k - 1);
                snprintf(why, len, "device %s (%s) is unhealthy or not published: %s", name,
                         k ? g->mig[k - 1].uuid : g->uuid, h ? h : "not in the slice");
                return -1;
            }
            *mig = k;
            return (int)i;
        }
    }
    snprintf(why, len, "this node has no device %s", r->device);
    return -1;
}

/* How a prepared device is shared, from the configuration its result
 * names: MPS's limits resolved for it (an index counts the claim's devices
 * that configuration applies to, as NVIDIA's driver counts them). */
static bool dra_map_config(const struct dra_allocation *al, unsigned k, bool mig, struct dra_prepared *p,
                          char *why, size_t len)
{
    struct dra_prepared_device *pd = &p->devs[p->count - 1];
    int c = al->results[k].config;
    if (c < 0)
        return true;
    const struct dra_sharing *s = &al->configs[c];
    pd->strategy = s->strategy;
    pd->timeslice = s->timeslice;
    if (s->timeslice && mig) {
        snprintf(why, len, "device %s: a TimeSlicing interval other than Default is its whole "
                           "GPU's, which other claims' MIG devices share", pd->device);
        return false;
    }
    if (s->strategy != GPU_SHARING_MPS)
        return true;
    if (mig) {
        snprintf(why, len, "device %s: gpulet runs MPS on whole GPUs only, not on MIG devices",
                 pd->device);
        return false;
    }
    if (s->thread_percentage && p->thread_percentage && s->thread_percentage != p->thread_percentage) {
        snprintf(why, len, "the claim's MPS devices ask for different active thread percentages "
                           "(%u, %u): its one daemon takes one", p->thread_percentage,
                 s->thread_percentage);
        return false;
    }
    if (s->thread_percentage)
        p->thread_percentage = s->thread_percentage;
    unsigned index = 0;
    for (unsigned i = 0; i < k; i++)
        index += al->results[i].config == c;
    pd->pinned_mib = s->pinned_mib;
    for (unsigned l = 0; l < s->nlimits; l++) {
        char n[16];
        snprintf(n, sizeof n, "%u", index);
        if (!strcmp(s->limits[l].device, n) || !strcmp(s->limits[l].device, pd->uuid))
            pd->pinned_mib = s->limits[l].mib;
    }
    return true;
}

/* A share of a GPU (consumable capacity): MPS through its GPU's daemon,
 * with what the share consumed as its client's limits. */
static bool dra_map_share(const struct dra *d, const struct dra_allocation *al, unsigned k,
                          const struct gpu_info *g, unsigned mig, struct dra_prepared *p, char *why,
                          size_t len)
{
    const struct dra_result *r = &al->results[k];
    struct dra_prepared_device *pd = &p->devs[p->count - 1];
    if (mig || !config_dra_shares(d->cfg, g)) {
        snprintf(why, len, "device %s: a share (shareID %s) of a device gpulet does not publish for "
                           "shares (--dra-shares)", pd->device, r->share_id);
        return false;
    }
    if (r->config >= 0 && al->configs[r->config].strategy != GPU_SHARING_NONE) {
        snprintf(why, len, "device %s: a share is MPS with the limits it consumed; a GpuConfig "
                           "sharing strategy does not apply to it", pd->device);
        return false;
    }
    pd->strategy = GPU_SHARING_MPS;
    snprintf(pd->share_id, sizeof pd->share_id, "%s", r->share_id);
    pd->pinned_mib = r->share_bytes >> 20;
    pd->share_compute = r->share_compute;
    return true;
}

/* A claim's containers reach one MPS daemon: its shares are of one GPU,
 * and it has no other MPS device. */
static bool dra_map_shares_apart(const struct dra_prepared *p, char *why, size_t len)
{
    const struct dra_prepared_device *share = dra_prepared_share(p);
    for (unsigned k = 0; share && k < p->count; k++) {
        const struct dra_prepared_device *pd = &p->devs[k];
        if (pd->strategy == GPU_SHARING_MPS && (!pd->share_id[0] || strcmp(pd->uuid, share->uuid))) {
            snprintf(why, len, "devices %s and %s: a claim's shares are of one GPU, beside no other "
                               "MPS device (its containers reach one MPS daemon)", share->device,
                     pd->device);
            return false;
        }
    }
    return true;
}

/* A placement (--dra-mig): the MIG device to make at prepare, or the one
 * another made exactly there, adopted. False with why where its GPU is
 * faulty or its slices are held by a MIG device no claim made. */
static bool dra_map_placement(const struct dra *d, const struct dra_slice_in *in,
                              const struct dra_allocation *al, unsigned k,
                              const struct dra_placement *pl, struct dra_prepared *p, char *why,
                              size_t len)
{
    struct dra_prepared_device *pd = &p->devs[p->count - 1];
    const struct gpu_info *g = &d->inv->gpus[pl->gpu];
    int there = -1;
    bool open = dra_placement_open(in, pl, &there);
    bool made = there >= 0 && dra_made(in, g->mig[there].uuid); /* another claim's */
    if (al->results[k].share_id[0]) {
        snprintf(why, len, "device %s: a MIG device is not shared by capacity", pd->device);
        return false;
    }
    if (made) {
        snprintf(why, len, "device %s is MIG device %s, another claim's", pd->device,
                 g->mig[there].uuid);
        return false;
    }
    if (!open) {
        snprintf(why, len, "device %s: its memory slices are held by a MIG device no claim made "
                           "(mig-parted's, an operator's): gpulet's slice leaves it out", pd->device);
        return false;
    }
    const char *h = gpu_device_unhealthy(&d->devs[pl->gpu], there);
    if (h && !dra_tainted(d)) {
        snprintf(why, len, "device %s (GPU %s) is unhealthy: %s", pd->device, g->uuid, h);
        return false;
    }
    pd->placement = true;
    pd->gpu = pl->gpu;
    pd->mig_profile = pl->profile->info.id;
    pd->mig_start = pl->start;
    if (there >= 0) { /* adopted: another made it, and it stays */
        snprintf(pd->uuid, sizeof pd->uuid, "%s", g->mig[there].uuid);
        pd->gi = g->mig[there].gi;
        pd->ci = g->mig[there].ci;
    }
    return dra_map_config(al, k, true, p, why, len);
}

/* Result k as a prepared device: a placement (--dra-mig), or a GPU or
 * MIG device the node has, shared as its configuration or share says. */
static bool dra_map_result(const struct dra *d, const struct dra_slice_in *in,
                           const struct dra_allocation *al, unsigned k, struct dra_prepared *p,
                           char *why, size_t len)
{
    const struct dra_result *r = &al->results[k];
    struct dra_prepared_device *pd = &p->devs[p->count++];
    snprintf(pd->request, sizeof pd->request, "%s", r->request);
    snprintf(pd->device, sizeof pd->device, "%s", r->device);
    struct dra_placement pl;
    if (!strcmp(r->pool, d->node) && dra_placement_find(in, r->device, &pl))
        return dra_map_placement(d, in, al, k, &pl, p, why, len);
    unsigned mig = 0;
    int g = dra_result_gpu(d, in, r, &mig, why, len);
    if (g < 0)
        return false;
    /* gpulet's CDI spec names each GPU and each MIG device by its UUID. */
    snprintf(pd->uuid, sizeof pd->uuid, "%s",
             mig ? d->inv->gpus[g].mig[mig - 1].uuid : d->inv->gpus[g].uuid);
    return r->share_id[0] ? dra_map_share(d, al, k, &d->inv->gpus[g], mig, p, why, len)
                          : dra_map_config(al, k, mig != 0, p, why, len);
}

/* The allocation as prepared devices; false with why where one cannot be. */
bool dra_map(const struct dra *d, const char *uid, const char *ns, const char *name,
             const struct dra_allocation *al, struct dra_prepared *p, char *why, size_t len)
{
    memset(p, 0, sizeof *p);
    p->devs = xcalloc(al->count + 1, sizeof *p->devs);
    snprintf(p->uid, sizeof p->uid, "%s", uid);
    snprintf(p->ns, sizeof p->ns, "%s", ns);
    snprintf(p->name, sizeof p->name, "%s", name);
    struct dra_slice_in in;
    dra_slice_of(d, "", 0, NULL, &in);
    bool ok = true;
    for (unsigned k = 0; k < al->count && ok; k++)
        ok = dra_map_result(d, &in, al, k, p, why, len);
    dra_slice_in_free(&in);
    return ok && dra_map_shares_apart(p, why, len);
}
