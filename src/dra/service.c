/* The kubelet's side of a DRA driver: a registration socket in its
 * plugins_registry directory (found by inotify) that says where the DRA
 * plugin API is served, and that API's two methods, in both of its
 * versions: v1 (kubelets of 1.34 on pick it) and v1beta1 (1.32 and 1.33).
 * The two carry the same messages, field for field. Beside them the
 * devices' health stream (health.c), which kubelets of 1.34 on open. */
#include "dra/internal.h"

#include <stdlib.h>
#include <string.h>

#include "dra.pb-c.h"
#include "pluginregistration.pb-c.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* A call that came while the claims were loading. */
struct dra_parked {
    struct dra_parked *next;
    struct grpc_call *call;               /* NULL once the kubelet gave up on it */
    bool unprepare;
    size_t len;
    uint8_t msg[];
};

static void dra_parked_cancelled(struct grpc_call *call, void *ctx)
{
    (void)call;
    struct dra_parked *p = ctx;
    p->call = NULL;
}

/* A repeated prepare must find its claim, and an unprepare the claim to
 * undo: until the checkpoint's claims are in, both wait (a few ms). */
static bool dra_park(struct dra *d, struct grpc_call *call, const uint8_t *msg, size_t len,
                     bool unprepare)
{
    if (!d->claims.loading)
        return false;
    struct dra_parked *p = xmalloc(sizeof *p + len);
    p->next = NULL;
    p->call = call;
    p->unprepare = unprepare;
    p->len = len;
    if (len)
        memcpy(p->msg, msg, len);
    if (!d->service.parked_tail)
        d->service.parked_tail = &d->service.parked;
    *d->service.parked_tail = p;
    d->service.parked_tail = &p->next;
    grpc_call_on_cancel(call, dra_parked_cancelled, p);
    return true;
}

/* Each parked call answered in order (d->claims.loading false), or ended
 * (d stopping). */
void dra_service_unpark(struct dra *d)
{
    struct dra_parked *p = d->service.parked;
    d->service.parked = NULL;
    d->service.parked_tail = NULL;
    while (p) {
        struct dra_parked *next = p->next;
        if (p->call) {
            grpc_call_on_cancel(p->call, NULL, NULL);
            if (d->stopping)
                grpc_call_finish(p->call, GRPC_UNAVAILABLE, "gpulet is stopping; ask again");
            else if (p->unprepare)
                dra_unprepare(d, p->call, p->msg, p->len);
            else
                dra_prepare(d, p->call, p->msg, p->len);
        }
        free(p);
        p = next;
    }
}

static void rpc_get_info(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)msg;
    (void)len;
    struct dra *d = ctx;
    /* The gRPC services served, as "<version>.<service>": a kubelet picks
     * the newest it knows. */
    char *versions[] = {"v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"};
    Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
    info.type = "DRAPlugin";
    info.name = DRA_DRIVER;
    info.endpoint = d->service.plugin_socket;
    info.n_supported_versions = sizeof versions / sizeof *versions;
    info.supported_versions = versions;
    dra_reply(call, &info.base);
}

static void rpc_status(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    struct dra *d = ctx;
    Pluginregistration__RegistrationStatus *s =
        pluginregistration__registration_status__unpack(NULL, len, msg);
    if (!s) {
        grpc_call_finish(call, GRPC_INVALID_ARGUMENT, "not a RegistrationStatus");
        return;
    }
    if (s->plugin_registered && !d->service.registered)
        log_info("DRA: registered " DRA_DRIVER " with the kubelet (%s)", d->service.plugin_socket);
    else if (!s->plugin_registered)
        log_error("DRA: the kubelet refused " DRA_DRIVER ": %s", s->error ? s->error : "");
    d->service.registered = s->plugin_registered;
    pluginregistration__registration_status__free_unpacked(s, NULL);
    Pluginregistration__RegistrationStatusResponse r = PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
    dra_reply(call, &r.base);
}

static void rpc_prepare(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    if (!dra_park(ctx, call, msg, len, false))
        dra_prepare(ctx, call, msg, len);
}

static void rpc_watch_health(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)msg; /* NodeWatchResourcesRequest has no fields */
    (void)len;
    dra_health_watch(ctx, call);
}

static void rpc_unprepare(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    if (!dra_park(ctx, call, msg, len, true))
        dra_unprepare(ctx, call, msg, len);
}

/* A socket of the service bound: the plugin's, then the registration's. */
static void service_bound(void *ctx, int fd, struct unixsock_id id, const struct err *why)
{
    struct dra *d = ctx;
    struct dra_service *sv = &d->service;
    sv->binding = NULL;
    bool plugin = !sv->plugin;
    struct err e;
    int rc = why ? -1
             : plugin ? grpc_server_start(&sv->plugin, d->loop, sv->plugin_socket, fd, id,
                                          sv->plugin_methods, 5, &e)
                      : grpc_server_start(&sv->registration, d->loop, sv->registry_socket, fd, id,
                                          sv->registration_methods, 2, &e);
    if (rc < 0) {
        if (why)
            e = *why;
        if (d->hooks.on_failed)
            d->hooks.on_failed(d->hooks.ctx, &e);
        return;
    }
    if (plugin) {
        sv->binding = unixsock_bind_start(d->loop, sv->registry_socket, 0750, 128, service_bound, d);
        return;
    }
    log_info("DRA: " DRA_DRIVER " serving on %s; registration on %s", sv->plugin_socket,
             sv->registry_socket);
}

void dra_service_start(struct dra *d)
{
    d->service.registration_methods[0] = (struct grpc_method){"/pluginregistration.Registration/GetInfo",
                                                      rpc_get_info, d};
    d->service.registration_methods[1] = (struct grpc_method){
        "/pluginregistration.Registration/NotifyRegistrationStatus", rpc_status, d};
    static const char *const services[] = {"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/",
                                           "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"};
    for (unsigned i = 0; i < 2; i++) {
        snprintf(d->service.plugin_paths[2 * i], sizeof d->service.plugin_paths[0], "%sNodePrepareResources",
                 services[i]);
        snprintf(d->service.plugin_paths[2 * i + 1], sizeof d->service.plugin_paths[0],
                 "%sNodeUnprepareResources", services[i]);
        d->service.plugin_methods[2 * i] = (struct grpc_method){d->service.plugin_paths[2 * i], rpc_prepare, d};
        d->service.plugin_methods[2 * i + 1] =
            (struct grpc_method){d->service.plugin_paths[2 * i + 1], rpc_unprepare, d};
    }
    d->service.plugin_methods[4] = (struct grpc_method){"/v1alpha1.DRAResourceHealth/NodeWatchResources",
                                                 rpc_watch_health, d};
    /* The service first: the kubelet dials it as soon as it reads GetInfo.
     * Each socket is bound on the worker pool (its file is on the node's
     * disk, which the loop never touches), its directory made first. */
    d->service.binding = unixsock_bind_start(d->loop, d->service.plugin_socket, 0750, 128,
                                             service_bound, d);
}

void dra_service_stop(struct dra *d)
{
    dra_service_unpark(d); /* d->stopping: each ended */
    unixsock_bind_cancel(d->service.binding); /* a socket it binds is closed and removed */
    d->service.binding = NULL;
    /* The registration socket first: removing it deregisters the driver. */
    grpc_server_close(d->service.registration);
    d->service.registration = NULL;
    grpc_server_close(d->service.plugin);
    d->service.plugin = NULL;
}
