/* GPUs still held through the device plugin. A node moved from the device
 * plugin to DRA keeps its running pods (the kubelet does not stop them when
 * a device plugin goes), and the GPUs they hold must not be handed out
 * again through a claim: those devices stay in the slice tainted
 * gpulet.io/device-plugin (NoSchedule; left out without taints) until the
 * kubelet's PodResources List no longer shows them. The agent reads the
 * List (agent/pods.c) at start and, while one is held, more often. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "podresources.pb-c.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* Marks in held the devices of r's containers that are not DRA's; returns
 * how many, and names the first holder in who. */
static unsigned dra_held_decode(const struct dra *d, const V1__ListPodResourcesResponse *r,
                                bool *held, char *who, size_t len)
{
    unsigned n = 0;
    for (size_t p = 0; p < r->n_pod_resources; p++) {
        const V1__PodResources *pod = r->pod_resources[p];
        for (size_t c = 0; c < pod->n_containers; c++) {
            const V1__ContainerResources *ct = pod->containers[c];
            for (size_t k = 0; k < ct->n_devices; k++) {
                const V1__ContainerDevices *dev = ct->devices[k];
                for (size_t x = 0; x < dev->n_device_ids; x++) {
                    const char *id = dev->device_ids[x], *colons = strstr(id, "::");
                    unsigned gpu;
                    int mig;
                    if (!gpu_inventory_find_id(d->inv, id, colons ? (size_t)(colons - id) : strlen(id),
                                               &gpu, &mig) ||
                        !config_dra_takes(d->cfg, &d->inv->gpus[gpu]))
                        continue;
                    if (!n++)
                        snprintf(who, len, "%s/%s", pod->namespace_, pod->name);
                    held[DRA_AT(gpu, (unsigned)(mig + 1))] = true;
                }
            }
        }
    }
    return n;
}

void dra_on_pods(struct dra *d, const V1__ListPodResourcesResponse *r)
{
    if (!d || d->stopping)
        return;
    size_t slots = DRA_AT(d->inv->count, 0);
    bool *held = xcalloc(slots + 1, sizeof *held);
    char who[300] = "";
    /* No answer: nothing is known held (as before a move). */
    unsigned n = r ? dra_held_decode(d, r, held, who, sizeof who) : 0;
    bool first = !d->pool.held;
    bool changed = first ? n > 0 : memcmp(held, d->pool.held, slots * sizeof *held) != 0;
    free(d->pool.held);
    d->pool.held = held;
    d->pool.nheld = n;
    if (changed && n)
        log_info("DRA: %u device(s) still held by pods of the device plugin (%s first): tainted "
                 DRA_TAINT_HELD " until they end", n, who);
    else if (changed)
        log_info("DRA: no pod of the device plugin holds a GPU any more");
    if (changed || first) /* the slice waits for the first answer */
        dra_publish(d);
    if (r)
        dra_consumers_from_pods(d, r);
}

bool dra_waits_for_pods(const struct dra *d)
{
    return d && (!d->pool.held || d->pool.nheld);
}
