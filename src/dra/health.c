/* The kubelet's DRA resource health stream (KEP-4680, NodeWatchResources
 * of v1alpha1.DRAResourceHealth): the health of every device DRA serves
 * here, sent whole when the kubelet opens the stream, again at once on
 * every change, and every DRA_HEALTH_RESEND_MS so that the kubelet never
 * takes a quiet stream for a driver gone. The kubelet shows it in the pod's
 * status.containerStatuses[].allocatedResourcesStatus. A device is
 * unhealthy for gpulet's health (the same fault its taint names), or while
 * the MPS daemon of a claim prepared on it is down. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "drahealth.pb-c.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* An open NodeWatchResources stream. */
struct dra_health_watch {
    struct dra *d;
    struct grpc_call *call;
    struct dra_health_watch *next;
};

/* Why a claim's MPS daemon on device uuid leaves it unusable; "" if none. */
static void dra_health_mps(const struct dra *d, const char *uuid, char *why, size_t len)
{
    why[0] = '\0';
    for (unsigned i = 0; i < d->claims.n; i++) {
        const struct dra_prepared *p = &d->claims.prepared[i];
        if (!dra_prepared_mps(p) || dra_mps_ready(d, p->uid))
            continue;
        for (unsigned k = 0; k < p->count; k++)
            if (!strcmp(p->devs[k].uuid, uuid)) {
                snprintf(why, len, "the MPS daemon of claim %s/%s is not running", p->ns, p->name);
                return;
            }
    }
}

/* Device name, GPU i's MIG device k (-1: the GPU whole), as the stream tells it. */
static void dra_health_of(const struct dra *d, unsigned i, int k, const char *name, long long now,
                          struct dra_device_health *h)
{
    const struct gpu_info *g = &d->inv->gpus[i];
    h->pool = d->node;
    snprintf(h->name, sizeof h->name, "%s", name);
    h->updated = now;
    gpu_health_describe(gpu_device_health(&d->devs[i], k), h->message, sizeof h->message);
    if (!h->message[0])
        dra_health_mps(d, k >= 0 ? g->mig[k].uuid : g->uuid, h->message, sizeof h->message);
    h->healthy = !h->message[0];
}

/* The MIG device a prepared placement made or adopted: its index on GPU i, or -1. */
static int dra_health_placement(const struct dra *d, const struct dra_prepared_device *pd)
{
    const struct gpu_info *g = &d->inv->gpus[pd->gpu];
    for (unsigned k = 0; k < g->nmig; k++)
        if (!strcmp(g->mig[k].uuid, pd->uuid))
            return (int)k;
    return -1;
}

uint8_t *dra_health_pack(const struct dra_device_health *devs, unsigned n, size_t *len)
{
    struct arena a = {0};
    V1alpha1__NodeWatchResourcesResponse r = V1ALPHA1__NODE_WATCH_RESOURCES_RESPONSE__INIT;
    r.n_devices = n;
    r.devices = arena_alloc(&a, (n + 1) * sizeof *r.devices);
    for (unsigned k = 0; k < n; k++) {
        V1alpha1__DeviceHealth *h = arena_alloc(&a, sizeof *h);
        V1alpha1__DeviceIdentifier *id = arena_alloc(&a, sizeof *id);
        v1alpha1__device_health__init(h);
        v1alpha1__device_identifier__init(id);
        id->pool_name = (char *)devs[k].pool;
        id->device_name = (char *)devs[k].name;
        h->device = id;
        h->health = devs[k].healthy ? V1ALPHA1__HEALTH_STATUS__HEALTHY
                                    : V1ALPHA1__HEALTH_STATUS__UNHEALTHY;
        h->last_updated_time = devs[k].updated;
        h->health_check_timeout_seconds = DRA_HEALTH_TIMEOUT_S;
        h->message = (char *)devs[k].message;
        r.devices[k] = h;
    }
    *len = v1alpha1__node_watch_resources_response__get_packed_size(&r);
    uint8_t *buf = xmalloc(*len + 1);
    v1alpha1__node_watch_resources_response__pack(&r, buf);
    arena_free(&a);
    return buf;
}

uint8_t *dra_health_message(const struct dra *d, long long now, size_t *len)
{
    unsigned max = d->inv->count * (GPU_MIG_MAX + 1), n = 0;
    for (unsigned c = 0; c < d->claims.n; c++)
        max += d->claims.prepared[c].count;
    struct dra_device_health *devs = xcalloc(max + 1, sizeof *devs);
    /* Every device DRA serves, faulty or not: the slice's with taints;
     * of the placements (--dra-mig), those claims hold. */
    struct dra_slice_in in;
    dra_slice_of(d, "", 0, NULL, &in);
    in.tainted = true;
    for (unsigned i = 0; i < d->inv->count; i++)
        for (unsigned k = 0; k <= GPU_MIG_MAX; k++)
            if (dra_publishes(&in, i, k)) {
                char name[96];
                dra_device_name(&d->inv->gpus[i], k, name, sizeof name);
                dra_health_of(d, i, (int)k - 1, name, now, &devs[n++]);
            }
    dra_slice_in_free(&in);
    for (unsigned c = 0; c < d->claims.n; c++)
        for (unsigned k = 0; k < d->claims.prepared[c].count; k++) {
            const struct dra_prepared_device *pd = &d->claims.prepared[c].devs[k];
            if (pd->placement && pd->gpu < d->inv->count)
                dra_health_of(d, pd->gpu, dra_health_placement(d, pd), pd->device, now, &devs[n++]);
        }
    uint8_t *buf = dra_health_pack(devs, n, len);
    free(devs);
    return buf;
}

static void dra_health_send_one(struct dra *d, struct grpc_call *call)
{
    size_t len;
    uint8_t *msg = dra_health_message(d, (long long)time(NULL), &len);
    grpc_call_send(call, msg, len);
    free(msg);
}

void dra_health_send(struct dra *d)
{
    if (!d->health.watches)
        return;
    size_t len;
    uint8_t *msg = dra_health_message(d, (long long)time(NULL), &len);
    for (struct dra_health_watch *w = d->health.watches; w; w = w->next)
        grpc_call_send(w->call, msg, len);
    free(msg);
}

static void dra_health_resend(uv_timer_t *t)
{
    dra_health_send(t->data);
}

static void dra_health_gone(struct grpc_call *call, void *ctx)
{
    (void)call;
    struct dra_health_watch *w = ctx;
    struct dra *d = w->d;
    for (struct dra_health_watch **pp = &d->health.watches; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    free(w);
    if (!d->health.watches && !d->stopping)
        uv_timer_stop(&d->health.timer);
    log_debug("DRA: the kubelet closed its health stream");
}

void dra_health_watch(struct dra *d, struct grpc_call *call)
{
    struct dra_health_watch *w = xcalloc(1, sizeof *w);
    w->d = d;
    w->call = call;
    w->next = d->health.watches;
    d->health.watches = w;
    grpc_call_on_cancel(call, dra_health_gone, w);
    dra_health_send_one(d, call);
    if (!uv_is_active((uv_handle_t *)&d->health.timer))
        uv_timer_start(&d->health.timer, dra_health_resend, DRA_HEALTH_RESEND_MS,
                       DRA_HEALTH_RESEND_MS);
    log_info("DRA: the kubelet watches the devices' health");
}
