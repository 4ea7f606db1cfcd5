/* GPUs still held through the device plugin. A node moved from the device
 * plugin to DRA keeps its running pods (the kubelet does not stop them when
 * a device plugin goes), and the GPUs they hold must not be handed out
 * again through a claim: those devices stay in the slice tainted
 * gpulet.io/device-plugin (NoSchedule; left out without taints) until the
 * kubelet's PodResources List no longer shows them, read at start and every
 * DRA_HELD_MS while one is held. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "podresources.pb-c.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define DRA_HELD_MS 5000
#define DRA_HELD_TIMEOUT_MS 5000

static void dra_held_timer(uv_timer_t *t);

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

static void dra_held_done(void *ctx, enum grpc_status status, const char *message,
                          const uint8_t *resp, size_t len)
{
    struct dra *d = ctx;
    d->pool.held_call = NULL;
    size_t slots = DRA_AT(d->inv->count, 0);
    bool *held = xcalloc(slots + 1, sizeof *held);
    V1__ListPodResourcesResponse *r = NULL;
    char who[300] = "";
    unsigned n = 0;
    if (status != GRPC_OK || !(r = v1__list_pod_resources_response__unpack(NULL, len, resp))) {
        /* No kubelet to ask: nothing is known held (as before a move). */
        if (!d->pool.held)
            log_warn("DRA: cannot read which GPUs pods of a device plugin hold (PodResources: %s); "
                     "every GPU is offered", status != GRPC_OK ? message : "not a List answer");
    } else {
        n = dra_held_decode(d, r, held, who, sizeof who);
        v1__list_pod_resources_response__free_unpacked(r, NULL);
    }
    bool first = !d->pool.held;
    bool changed = first ? n > 0 : memcmp(held, d->pool.held, slots * sizeof *held) != 0;
    free(d->pool.held);
    d->pool.held = held;
    if (changed && n)
        log_info("DRA: %u device(s) still held by pods of the device plugin (%s first): tainted "
                 DRA_TAINT_HELD " until they end", n, who);
    else if (changed)
        log_info("DRA: no pod of the device plugin holds a GPU any more");
    if (changed || first) /* the slice waits for the first answer */
        dra_publish(d);
    if (n && !d->stopping)
        uv_timer_start(&d->pool.held_timer, dra_held_timer, DRA_HELD_MS, 0);
}

void dra_held_read(struct dra *d)
{
    if (d->pool.held_call || d->stopping)
        return;
    char socket[CONFIG_PATH_MAX + 64];
    config_pod_resources_socket(d->cfg, socket, sizeof socket);
    d->pool.held_call = grpc_client_unary(d->loop, socket, "/v1.PodResourcesLister/List", NULL, 0,
                                     DRA_HELD_TIMEOUT_MS, dra_held_done, d);
}

static void dra_held_timer(uv_timer_t *t)
{
    dra_held_read(t->data);
}

void dra_held_stop(struct dra *d)
{
    if (d->pool.held_call)
        grpc_client_cancel(d->pool.held_call);
    d->pool.held_call = NULL;
}
