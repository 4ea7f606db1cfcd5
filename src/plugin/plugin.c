/* The DevicePlugin service: options, ListAndWatch streams, the handlers
 * that hand Allocate and GetPreferredAllocation to their files, and the
 * server on the plugin's socket. */
#include "plugin/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin.pb-c.h"
#include "grpc/server.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* An open ListAndWatch stream. */
struct plugin_watcher {
    struct plugin *p;
    struct grpc_call *call;
    struct plugin_watcher *next;
};

/* The device list as a serialized ListAndWatchResponse. */
static uint8_t *plugin_list(const struct plugin *p, size_t *len)
{
    struct arena a = {0};
    V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    resp.n_devices = p->ndevs;
    resp.devices = arena_alloc(&a, (p->ndevs + 1) * sizeof *resp.devices);
    for (unsigned i = 0; i < p->ndevs; i++) {
        const struct gpu_info *g = &p->inv->gpus[p->devs[i].gpu];
        V1beta1__Device *d = arena_alloc(&a, sizeof *d);
        v1beta1__device__init(d);
        d->id = (char *)p->devs[i].id;
        d->health = plugin_device_unhealthy(p, &p->devs[i]) ? "Unhealthy" : "Healthy";
        if (g->numa_node >= 0) {
            /* Lets the kubelet's topology manager align GPUs with CPUs. */
            V1beta1__TopologyInfo *t = arena_alloc(&a, sizeof *t);
            V1beta1__NUMANode *node = arena_alloc(&a, sizeof *node);
            v1beta1__topology_info__init(t);
            v1beta1__numanode__init(node);
            node->id = g->numa_node;
            t->n_nodes = 1;
            t->nodes = arena_alloc(&a, sizeof *t->nodes);
            t->nodes[0] = node;
            d->topology = t;
        }
        resp.devices[i] = d;
    }
    *len = v1beta1__list_and_watch_response__get_packed_size(&resp);
    uint8_t *buf = xmalloc(*len + 1);
    v1beta1__list_and_watch_response__pack(&resp, buf);
    arena_free(&a);
    return buf;
}

static void plugin_watcher_gone(struct grpc_call *call, void *ctx)
{
    (void)call;
    struct plugin_watcher *w = ctx;
    struct plugin *p = w->p;
    for (struct plugin_watcher **pp = &p->watchers; *pp; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    free(w);
    log_debug("ListAndWatch stream closed");
}

void plugin_on_device(struct plugin *p, unsigned gpu, unsigned what)
{
    (void)gpu; /* the kubelet takes the whole list */
    if (!(what & (GPU_CHANGED_HEALTH | GPU_CHANGED_FACTS)) || !p->watchers)
        return;
    size_t len;
    uint8_t *msg = plugin_list(p, &len);
    for (struct plugin_watcher *w = p->watchers; w; w = w->next)
        grpc_call_send(w->call, msg, len);
    free(msg);
}

void plugin_set_available(struct plugin *p, bool available)
{
    if (!p || p->unavailable == !available)
        return;
    p->unavailable = !available;
    plugin_on_device(p, GPU_DEVICE_ALL, GPU_CHANGED_HEALTH);
    if (available)
        plugin_lifecycle_poke(p); /* a first registration may wait for it (lifecycle.c) */
}

static void rpc_options(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)msg;
    (void)len;
    (void)ctx;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.get_preferred_allocation_available = true;
    uint8_t buf[16];
    size_t n = v1beta1__device_plugin_options__pack(&o, buf);
    grpc_call_send(call, buf, n);
    grpc_call_finish(call, GRPC_OK, NULL);
}

static void rpc_list_and_watch(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)msg;
    (void)len;
    struct plugin *p = ctx;
    struct plugin_watcher *w = xcalloc(1, sizeof *w);
    w->p = p;
    w->call = call;
    w->next = p->watchers;
    p->watchers = w;
    grpc_call_on_cancel(call, plugin_watcher_gone, w);
    size_t n;
    uint8_t *list = plugin_list(p, &n);
    grpc_call_send(call, list, n);
    free(list);
    log_info("kubelet opened ListAndWatch: %u device(s)", p->ndevs);
}

/* Allocate and GetPreferredAllocation: the same shape, a function apart. */
typedef int (*plugin_rpc_fn)(const struct plugin *p, const uint8_t *req, size_t len,
                             uint8_t **out, size_t *out_len, struct err *e);

static void plugin_answer(struct grpc_call *call, const struct plugin *p, plugin_rpc_fn fn,
                          const char *name, const uint8_t *msg, size_t len)
{
    uint8_t *out = NULL;
    size_t out_len = 0;
    struct err e;
    int status = fn(p, msg, len, &out, &out_len, &e);
    if (status == GRPC_OK) {
        grpc_call_send(call, out, out_len);
        grpc_call_finish(call, GRPC_OK, NULL);
    } else {
        log_warn("%s refused: %s", name, e.msg);
        grpc_call_finish(call, (enum grpc_status)status, e.msg);
    }
    free(out);
}

static void rpc_allocate(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    struct plugin *p = ctx;
    p->allocations++;
    plugin_answer(call, p, plugin_allocate, "Allocate", msg, len);
    if (p->hooks.on_allocate)
        p->hooks.on_allocate(p->hooks.ctx); /* a pod is starting: its labels are due */
}

static void rpc_preferred(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    plugin_answer(call, ctx, plugin_preferred, "GetPreferredAllocation", msg, len);
}

static void rpc_prestart(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)msg;
    (void)len;
    (void)ctx;
    grpc_call_send(call, NULL, 0); /* an empty PreStartContainerResponse */
    grpc_call_finish(call, GRPC_OK, NULL);
}

int plugin_serve(struct plugin *p, int fd, struct unixsock_id id, struct err *e)
{
    static const char *const paths[] = {
        "/v1beta1.DevicePlugin/GetDevicePluginOptions", "/v1beta1.DevicePlugin/ListAndWatch",
        "/v1beta1.DevicePlugin/GetPreferredAllocation", "/v1beta1.DevicePlugin/Allocate",
        "/v1beta1.DevicePlugin/PreStartContainer",
    };
    const grpc_handler_fn fns[] = {rpc_options, rpc_list_and_watch, rpc_preferred, rpc_allocate,
                                   rpc_prestart};
    for (int i = 0; i < 5; i++)
        p->methods[i] = (struct grpc_method){paths[i], fns[i], p};
    if (p->server)
        grpc_server_close(p->server); /* its streams end; the kubelet reconnects */
    p->server = NULL;
    return grpc_server_start(&p->server, p->loop, p->socket, fd, id, p->methods, 5, e);
}

/* Ends the streams and drains the server (plugin_stop). The streams'
 * connections close later, after p is gone: they must not call back into
 * it, and drained goes to the plugin's owner. */
bool plugin_service_stop(struct plugin *p, void (*drained)(void *ctx), void *ctx)
{
    while (p->watchers) {
        struct plugin_watcher *w = p->watchers;
        p->watchers = w->next;
        grpc_call_on_cancel(w->call, NULL, NULL);
        free(w);
    }
    struct grpc_server *s = p->server;
    p->server = NULL;
    if (!s)
        return false;
    if (!grpc_server_connections(s)) {
        grpc_server_close(s);
        return false;
    }
    grpc_server_drain(s, PLUGIN_DRAIN_MS, drained, ctx);
    return true;
}
