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

/* The GPU an advertised device ID names: by UUID, or by index. */
static int pods_gpu(const struct gpu_inventory *inv, const char *id, size_t len)
{
    for (unsigned i = 0; i < inv->count; i++)
        if (strlen(inv->gpus[i].uuid) == len && !strncmp(inv->gpus[i].uuid, id, len))
            return (int)i;
    char buf[16];
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, id, len);
    buf[len] = '\0';
    char *end;
    unsigned long idx = strtoul(buf, &end, 10);
    return !*end && idx < inv->count ? (int)idx : -1;
}

/* The MIG device an ID names (MIG UUID, or "<GPU>:<MIG index>"): GPU and
 * device index, or false. */
static bool pods_mig(const struct gpu_inventory *inv, const char *id, size_t len, unsigned *gpu,
                     unsigned *k)
{
    for (unsigned i = 0; i < inv->count; i++)
        for (unsigned j = 0; inv->gpus[i].mig_mode == NVML_DEVICE_MIG_ENABLE && j < inv->gpus[i].nmig;
             j++)
            if (strlen(inv->gpus[i].mig[j].uuid) == len && !strncmp(inv->gpus[i].mig[j].uuid, id, len)) {
                *gpu = i;
                *k = j;
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
    *k = m;
    return true;
}

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

static void pods_owner(struct metrics_owner *o, const V1__PodResources *pod, const V1__ContainerResources *c)
{
    snprintf(o->pod, sizeof o->pod, "%s", pod->name);
    snprintf(o->ns, sizeof o->ns, "%s", pod->namespace_);
    snprintf(o->container, sizeof o->container, "%s", c->name);
}

int metrics_pods_decode(struct metrics_state *s, const struct gpu_inventory *inv,
                        const uint8_t *msg, size_t len)
{
    V1__ListPodResourcesResponse *r = v1__list_pod_resources_response__unpack(NULL, len, msg);
    if (!r)
        return -1;
    unsigned *holders = xcalloc(inv->count + 1, sizeof *holders);
    unsigned *mig_holders = xcalloc((size_t)inv->count * GPU_MIG_MAX + 1, sizeof *mig_holders);
    free(s->shares);
    s->shares = xcalloc(PODS_MAX_SHARES, sizeof *s->shares);
    s->nshares = 0;
    memset(s->owned, 0, inv->count * sizeof *s->owned);
    for (size_t p = 0; p < r->n_pod_resources; p++) {
        const V1__PodResources *pod = r->pod_resources[p];
        for (size_t c = 0; c < pod->n_containers; c++) {
            const V1__ContainerResources *ct = pod->containers[c];
            for (size_t d = 0; d < ct->n_devices; d++) {
                const V1__ContainerDevices *dev = ct->devices[d];
                if (!pods_wanted(s, dev->resource_name))
                    continue;
                for (size_t k = 0; k < dev->n_device_ids; k++) {
                    const char *id = dev->device_ids[k];
                    const char *colons = strstr(id, "::");
                    size_t idlen = colons ? (size_t)(colons - id) : strlen(id);
                    unsigned mg, mk;
                    if (pods_mig(inv, id, idlen, &mg, &mk)) {
                        /* A MIG device: its own owner (twice held: shared, none). */
                        size_t at = (size_t)mg * GPU_MIG_MAX + mk;
                        if (!colons && mig_holders[at]++ == 0)
                            pods_owner(&s->mig_owner[at], pod, ct);
                        else
                            mig_holders[at] += 2;
                        continue;
                    }
                    int gpu = pods_gpu(inv, id, idlen);
                    if (gpu < 0)
                        continue; /* not one of ours */
                    if (pods_shared(dev->resource_name, colons)) {
                        if (s->nshares < PODS_MAX_SHARES) {
                            s->shares[s->nshares].gpu = (unsigned)gpu;
                            pods_owner(&s->shares[s->nshares++].owner, pod, ct);
                        }
                        holders[gpu] += 2; /* shared: never one pod's labels */
                        continue;
                    }
                    if (holders[gpu]++ == 0)
                        pods_owner(&s->owner[gpu], pod, ct);
                }
            }
        }
    }
    for (unsigned i = 0; i < inv->count; i++)
        s->owned[i] = holders[i] == 1;
    for (size_t i = 0; i < (size_t)inv->count * GPU_MIG_MAX; i++)
        s->mig_owned[i] = mig_holders[i] == 1;
    free(holders);
    free(mig_holders);
    v1__list_pod_resources_response__free_unpacked(r, NULL);
    return 0;
}
