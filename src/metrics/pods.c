/* Pod attribution from the kubelet's PodResources List: which pod's
 * container holds each GPU. A GPU held by one container carries its pod,
 * namespace and container labels; a shared GPU (device IDs UUID::N) gets
 * one gpulet_gpu_allocation series per sharer instead of one arbitrary pod. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/internal.h"
#include "util/xmalloc.h"
#include "podresources.pb-c.h"

#define PODS_MAX_SHARES 1024

/* NVIDIA's resources, and whatever name the configuration gave ours
 * (per-model resources, renamed shared ones). */
static bool pods_wanted(const struct metrics_state *s, const char *resource)
{
    if (!strncmp(resource, "nvidia.com/", 11))
        return true;
    for (unsigned i = 0; i < s->count; i++) {
        if (!strcmp(resource, s->dev[i].resource))
            return true;
        for (unsigned k = 0; k < s->dev[i].nmig; k++)
            if (!strcmp(resource, s->dev[i].mig_resource[k]))
                return true;
    }
    return false;
}

static bool pods_shared(const char *resource, const char *colons)
{
    size_t n = strlen(resource);
    return colons || (n > 7 && !strcmp(resource + n - 7, ".shared"));
}

/* Who holds what, while it is counted. */
struct pods_count {
    struct metrics_state *s;
    const struct gpu_inventory *inv;
    unsigned *holders, *mig_holders;
};

/* One holder of device id (shared: one of several, by its ID or its
 * resource): a MIG device's owner, a GPU's owner, or a GPU's sharer. */
static void pods_hold(struct pods_count *n, const char *id, size_t idlen, bool shared,
                      const struct metrics_owner *who)
{
    struct metrics_state *s = n->s;
    unsigned mg;
    int mk;
    if (!gpu_inventory_find_id(n->inv, id, idlen, &mg, &mk))
        return; /* not one of ours */
    if (mk >= 0) {
        /* A MIG device: its own owner (twice held: shared, none). */
        size_t at = (size_t)mg * GPU_MIG_MAX + (size_t)mk;
        if (!shared && n->mig_holders[at]++ == 0)
            s->mig_owner[at] = *who;
        else
            n->mig_holders[at] += 2;
        return;
    }
    unsigned gpu = mg;
    if (shared) {
        if (s->nshares < PODS_MAX_SHARES) {
            s->shares[s->nshares].gpu = gpu;
            s->shares[s->nshares++].owner = *who;
        }
        n->holders[gpu] += 2; /* shared: never one pod's labels */
        return;
    }
    if (n->holders[gpu]++ == 0)
        s->owner[gpu] = *who;
}

static void pods_list(struct pods_count *n, const V1__ListPodResourcesResponse *r)
{
    for (size_t p = 0; r && p < r->n_pod_resources; p++) {
        const V1__PodResources *pod = r->pod_resources[p];
        for (size_t c = 0; c < pod->n_containers; c++) {
            const V1__ContainerResources *ct = pod->containers[c];
            struct metrics_owner who;
            snprintf(who.pod, sizeof who.pod, "%s", pod->name);
            snprintf(who.ns, sizeof who.ns, "%s", pod->namespace_);
            snprintf(who.container, sizeof who.container, "%s", ct->name);
            for (size_t d = 0; d < ct->n_devices; d++) {
                const V1__ContainerDevices *dev = ct->devices[d];
                if (!pods_wanted(n->s, dev->resource_name))
                    continue;
                for (size_t k = 0; k < dev->n_device_ids; k++) {
                    const char *id = dev->device_ids[k];
                    const char *colons = strstr(id, "::");
                    size_t idlen = colons ? (size_t)(colons - id) : strlen(id);
                    pods_hold(n, id, idlen, pods_shared(dev->resource_name, colons), &who);
                }
            }
        }
    }
}

/* A claim's device held by several containers is shared among them. */
static void pods_claims(struct pods_count *n, const struct metrics_holder *h, unsigned nh)
{
    for (unsigned i = 0; i < nh; i++) {
        unsigned same = 0;
        for (unsigned k = 0; k < nh; k++)
            same += !strcmp(h[k].uuid, h[i].uuid);
        struct metrics_owner who;
        snprintf(who.pod, sizeof who.pod, "%s", h[i].pod);
        snprintf(who.ns, sizeof who.ns, "%s", h[i].ns);
        snprintf(who.container, sizeof who.container, "%s", h[i].container);
        pods_hold(n, h[i].uuid, strlen(h[i].uuid), same > 1, &who);
    }
}

void metrics_pods_decode(struct metrics_state *s, const struct gpu_inventory *inv,
                         const V1__ListPodResourcesResponse *r, const struct metrics_holder *h,
                         unsigned nh)
{
    struct pods_count n = {s, inv, xcalloc(inv->count + 1, sizeof *n.holders),
                           xcalloc((size_t)inv->count * GPU_MIG_MAX + 1, sizeof *n.mig_holders)};
    unsigned *holders = n.holders, *mig_holders = n.mig_holders;
    free(s->shares);
    s->shares = xcalloc(PODS_MAX_SHARES, sizeof *s->shares);
    s->nshares = 0;
    memset(s->owned, 0, inv->count * sizeof *s->owned);
    pods_list(&n, r);
    pods_claims(&n, h, nh);
    for (unsigned i = 0; i < inv->count; i++)
        s->owned[i] = holders[i] == 1;
    for (size_t i = 0; i < (size_t)inv->count * GPU_MIG_MAX; i++)
        s->mig_owned[i] = mig_holders[i] == 1;
    free(holders);
    free(mig_holders);
}
