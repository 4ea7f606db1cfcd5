/* The devices one resource serves: built from its GPUs, replicas and MIG
 * devices with IDs per the ID strategy, and found by ID. */
#include "plugin/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

/* A binary search: 8 GPUs x 48 replicas are 384 IDs, and a preferred
 * allocation looks every available one up. */
const struct plugin_device *plugin_find(const struct plugin *p, const char *id)
{
    unsigned lo = 0, hi = p->ndevs;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        int c = strcmp(p->devs[p->by_id[mid]].id, id);
        if (c == 0)
            return &p->devs[p->by_id[mid]];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static int plugin_cmp_id(const void *a, const void *b, void *devs)
{
    const struct plugin_device *d = devs;
    return strcmp(d[*(const unsigned *)a].id, d[*(const unsigned *)b].id);
}

bool plugin_shared(const struct plugin *p)
{
    for (unsigned k = 0; k < p->res->ngpus; k++)
        if (p->res->replicas[k] > 1)
            return true;
    return false;
}

bool plugin_many_per_gpu(const struct plugin *p)
{
    for (unsigned k = 0; k < p->res->ngpus; k++)
        if (p->res->replicas[k] > 1 || p->res->migs[k])
            return true;
    return false;
}

void plugin_build_devices(struct plugin *p)
{
    const struct gpu_inventory *inv = p->inv;
    unsigned total = 0;
    for (unsigned k = 0; k < p->res->ngpus; k++)
        total += p->res->replicas[k];
    /* One allocation for both arrays: whoever frees devs frees the index. */
    p->devs = xcalloc(total + 1, sizeof *p->devs + sizeof *p->by_id);
    p->by_id = (unsigned *)(p->devs + total + 1);
    p->ndevs = 0;
    for (unsigned k = 0; k < p->res->ngpus; k++) {
        unsigned i = p->res->gpus[k], replicas = p->res->replicas[k], mig = p->res->migs[k];
        char id[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        /* NVIDIA's IDs: a MIG device by its MIG UUID, or "<GPU>:<MIG index>". */
        if (p->cfg->id_strategy == CONFIG_ID_INDEX && mig)
            snprintf(id, sizeof id, "%u:%u", inv->gpus[i].index, mig - 1);
        else if (p->cfg->id_strategy == CONFIG_ID_INDEX)
            snprintf(id, sizeof id, "%u", inv->gpus[i].index);
        else
            snprintf(id, sizeof id, "%s", mig ? inv->gpus[i].mig[mig - 1].uuid : inv->gpus[i].uuid);
        for (unsigned n = 0; n < replicas; n++) {
            struct plugin_device *d = &p->devs[p->ndevs++];
            d->gpu = i;
            d->mig = mig;
            d->replica = n;
            /* NVIDIA's replica IDs: <ID>::<n>, for shared resources only. */
            if (replicas > 1)
                snprintf(d->id, sizeof d->id, "%s::%u", id, n);
            else
                snprintf(d->id, sizeof d->id, "%s", id);
        }
    }
    for (unsigned i = 0; i < p->ndevs; i++)
        p->by_id[i] = i;
    qsort_r(p->by_id, p->ndevs, sizeof *p->by_id, plugin_cmp_id, p->devs);
}

const char *plugin_device_unhealthy(const struct plugin *p, const struct plugin_device *d)
{
    if (p->unavailable)
        return "the resource's MPS daemon is down";
    return gpu_device_unhealthy(&p->records[d->gpu], (int)d->mig - 1);
}
