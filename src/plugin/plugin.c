/* The DevicePlugin service: options, ListAndWatch streams, and the
 * handlers that hand Allocate and GetPreferredAllocation to their files. */
#include "plugin/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

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
        bool ok = !p->unavailable &&
                  gpu_device_healthy(&p->records[p->devs[i].gpu], (int)p->devs[i].mig - 1);
        d->health = ok ? "Healthy" : "Unhealthy";
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

int plugin_serve(struct plugin *p, struct err *e)
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
    return grpc_server_start(&p->server, p->loop, p->socket, p->methods, 5, e);
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

int plugin_start(struct plugin **out, uv_loop_t *loop, const struct config *cfg,
                 const struct gpu_inventory *inv, const struct gpu_device *devs,
                 const struct plugin_resource *res, const struct driver *drv,
                 const struct plugin_hooks *hooks, struct err *e)
{
    struct plugin *p = xcalloc(1, sizeof *p);
    p->driver = drv;
    p->loop = loop;
    p->cfg = cfg;
    p->inv = inv;
    p->records = devs;
    p->res = res;
    if (hooks)
        p->hooks = *hooks;
    plugin_build_devices(p);
    snprintf(p->dir, sizeof p->dir, "%s/device-plugins", cfg->kubelet_root);
    snprintf(p->socket, sizeof p->socket, "%s/%s", p->dir, res->socket);
    snprintf(p->kubelet_socket, sizeof p->kubelet_socket, "%s/kubelet.sock", p->dir);
    *out = NULL;
    /* A unix socket path has 107 bytes at most: a kubelet root too long for
     * it can never work, so it fails now rather than retrying forever. */
    if (strlen(p->socket) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
        err_set(e, "--kubelet-root %s is too long: the plugin's socket %s would be %zu bytes, "
                   "and unix sockets take at most %zu", cfg->kubelet_root, p->socket,
                strlen(p->socket), sizeof ((struct sockaddr_un *)0)->sun_path - 1);
        free(p->devs);
        free(p);
        return -1;
    }
    if (plugin_lifecycle_start(p, e) < 0) {
        plugin_stop(p);
        return -1;
    }
    *out = p;
    return 0;
}

void plugin_maybe_free(struct plugin *p)
{
    if (p->stopping && p->open_handles == 0) {
        free(p->devs);
        free(p);
    }
}

void plugin_stop(struct plugin *p)
{
    if (!p)
        return;
    /* The streams' connections close later, after p is gone: they must not
     * call back into it. */
    while (p->watchers) {
        struct plugin_watcher *w = p->watchers;
        p->watchers = w->next;
        grpc_call_on_cancel(w->call, NULL, NULL);
        free(w);
    }
    plugin_lifecycle_stop(p);
    grpc_server_close(p->server);
    p->server = NULL;
    plugin_maybe_free(p);
}
