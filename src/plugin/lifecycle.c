/* Staying registered. One reconcile step makes the world right: our socket
 * exists (re-created if the kubelet or anyone removed it) and we are
 * registered with the kubelet socket that exists now (its inode tells a
 * restarted kubelet apart). inotify on the device-plugins directory runs
 * the step within milliseconds of a change; failures retry with backoff;
 * a slow timer covers missed events. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin.pb-c.h"
#include "grpc/client.h"
#include "plugin/internal.h"
#include "util/backoff.h"
#include "util/log.h"
#include "util/unixsock.h"

#define LIFECYCLE_DEBOUNCE_MS 5       /* gather a burst of directory events */
#define LIFECYCLE_BACKOFF_MIN_MS 100
#define LIFECYCLE_BACKOFF_MAX_MS 5000
#define LIFECYCLE_SAFETY_MS 30000     /* re-check even without events */
#define LIFECYCLE_REGISTER_TIMEOUT_MS 5000
#define LIFECYCLE_HOLD_MS 10000       /* an MPS daemon's own start limit (MPS_READY_TRIES) */

static void lifecycle_reconcile(uv_timer_t *t);

/* The identity of the file at path; all zero when there is none. */
static const struct unixsock_id lifecycle_none = {0, 0};

static void lifecycle_schedule(struct plugin *p, uint64_t delay_ms)
{
    if (p->stopping)
        return;
    /* Keep an earlier pending run: a burst of events must not postpone it. */
    if (uv_is_active((uv_handle_t *)&p->reconcile_timer) &&
        uv_timer_get_due_in(&p->reconcile_timer) <= delay_ms)
        return;
    uv_timer_start(&p->reconcile_timer, lifecycle_reconcile, delay_ms, 0);
}

static void lifecycle_retry(struct plugin *p)
{
    lifecycle_schedule(p, backoff_next(&p->backoff_ms, LIFECYCLE_BACKOFF_MIN_MS,
                                       LIFECYCLE_BACKOFF_MAX_MS));
}

static void lifecycle_registered(void *ctx, enum grpc_status status, const char *message,
                                 const uint8_t *resp, size_t len)
{
    (void)resp;
    (void)len;
    struct plugin *p = ctx;
    p->registering = NULL;
    if (status != GRPC_OK) {
        log_warn("registering %s with the kubelet failed (gRPC %d: %s); retrying",
                 p->res->name, (int)status, message);
        lifecycle_retry(p);
        return;
    }
    p->registered_id = p->registering_id;
    p->waiting_said = false;
    p->backoff_ms = 0;
    p->registrations++;
    p->registered_ms = uv_now(p->loop);
    log_info("registered %s with the kubelet (%s, endpoint %s, %u device(s))", p->res->name,
             p->kubelet_socket, p->res->socket, p->ndevs);
    lifecycle_schedule(p, LIFECYCLE_SAFETY_MS);
}

static void lifecycle_register(struct plugin *p, struct unixsock_id kubelet)
{
    V1beta1__DevicePluginOptions opts = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    opts.get_preferred_allocation_available = true;
    V1beta1__RegisterRequest req = V1BETA1__REGISTER_REQUEST__INIT;
    req.version = PLUGIN_API_VERSION;
    req.endpoint = (char *)p->res->socket;
    req.resource_name = (char *)p->res->name;
    req.options = &opts;
    uint8_t buf[512]; /* names are bounded (struct plugin_resource) */
    size_t n = v1beta1__register_request__pack(&req, buf);
    p->registering_id = kubelet;
    p->registering = grpc_client_unary(p->loop, p->kubelet_socket, "/v1beta1.Registration/Register",
                                       buf, n, LIFECYCLE_REGISTER_TIMEOUT_MS, lifecycle_registered, p);
}

/* How much longer a first registration waits for an MPS resource's daemon
 * (plugin->unavailable): registered with every device Unhealthy, the
 * kubelet's next node status (every 10 s) may catch the resource's
 * allocatable at 0, as a rollout's hand-over did before its new agent had
 * adopted the daemon. A daemon not up within its own start limit still
 * gets the resource registered, Unhealthy, so the node shows it. */
static uint64_t lifecycle_hold(struct plugin *p)
{
    uint64_t waited = uv_now(p->loop) - (uint64_t)p->started_ms;
    if (!p->unavailable || p->registrations || waited >= LIFECYCLE_HOLD_MS)
        return 0;
    if (!p->holding_said)
        log_info("%s: registering with the kubelet once its MPS daemon is up (%u s at most)",
                 p->res->name, LIFECYCLE_HOLD_MS / 1000);
    p->holding_said = true;
    return LIFECYCLE_HOLD_MS - waited;
}

static void lifecycle_dir_event(uv_fs_event_t *h, const char *name, int events, int status);

/* The socket, bound on the worker pool (its file is on the node's disk,
 * which the loop never touches), is served here; then the step goes on. */
static void lifecycle_bound(void *ctx, int fd, struct unixsock_id id, const struct err *why)
{
    struct plugin *p = ctx;
    p->binding = NULL;
    struct err e;
    if (why || plugin_serve(p, fd, id, &e) < 0) {
        if (!p->served && p->hooks.on_unserved)
            p->hooks.on_unserved(p->hooks.ctx, why ? why : &e);
        else
            log_error("%s; trying again", why ? why->msg : e.msg);
        if (!p->stopping)
            lifecycle_retry(p);
        return;
    }
    p->served = true;
    p->socket_id = id;
    if (!uv_is_active((uv_handle_t *)&p->dir_watch)) { /* the directory is there now */
        int rc = uv_fs_event_start(&p->dir_watch, lifecycle_dir_event, p->dir, 0);
        if (rc < 0)
            log_error("cannot watch %s: %s (raise fs.inotify.max_user_instances?); looking every "
                      "%d s instead", p->dir, uv_strerror(rc), LIFECYCLE_SAFETY_MS / 1000);
    }
    lifecycle_schedule(p, 0);
}

static void lifecycle_reconcile(uv_timer_t *t)
{
    struct plugin *p = t->data;
    struct unixsock_id ours = unixsock_id_of(p->socket);
    if (!p->server || !ours.ino || !unixsock_id_same(ours, p->socket_id)) {
        if (p->binding)
            return; /* its answer runs the step again */
        if (p->server)
            log_warn("%s was removed; serving on it again", p->socket);
        if (p->registering)
            grpc_client_cancel(p->registering);
        p->registering = NULL;
        p->registered_id = lifecycle_none; /* a new socket must be registered anew */
        /* The kubelet may not have run yet: the directory is made (the
         * agent made and records it at start, so this is for one removed
         * since). */
        p->binding = unixsock_bind_start(p->loop, p->socket, 0755, 128, lifecycle_bound, p);
        return;
    }
    struct unixsock_id kubelet = unixsock_id_of(p->kubelet_socket);
    if (!kubelet.ino) {
        if (p->registered_id.ino)
            log_warn("%s is gone (kubelet restarting?); waiting for it", p->kubelet_socket);
        else if (!p->waiting_said)
            log_info("%s: serving on %s; waiting for the kubelet's %s to register", p->res->name,
                     p->socket, p->kubelet_socket);
        p->waiting_said = true;
        p->registered_id = lifecycle_none;
        lifecycle_schedule(p, LIFECYCLE_SAFETY_MS); /* inotify will be sooner */
        return;
    }
    if (unixsock_id_same(kubelet, p->registered_id)) {
        lifecycle_schedule(p, LIFECYCLE_SAFETY_MS);
        return;
    }
    if (p->registering && unixsock_id_same(p->registering_id, kubelet))
        return; /* that very registration is in flight */
    if (p->registering)
        grpc_client_cancel(p->registering); /* it targets a kubelet that is gone */
    p->registering = NULL;
    uint64_t hold = lifecycle_hold(p);
    if (hold) {
        lifecycle_schedule(p, hold); /* plugin_set_available is sooner */
        return;
    }
    if (p->registered_id.ino)
        log_info("kubelet restarted; registering again");
    lifecycle_register(p, kubelet);
}

static void lifecycle_dir_event(uv_fs_event_t *h, const char *name, int events, int status)
{
    (void)events;
    struct plugin *p = h->data;
    if (status < 0) {
        log_warn("watching %s: %s", p->dir, uv_strerror(status));
        return;
    }
    /* No name means the kernel dropped events: check everything. */
    if (!name || !strcmp(name, "kubelet.sock") || !strcmp(name, p->res->socket))
        lifecycle_schedule(p, LIFECYCLE_DEBOUNCE_MS);
}

void plugin_lifecycle_start(struct plugin *p)
{
    uv_timer_init(p->loop, &p->reconcile_timer);
    p->reconcile_timer.data = p;
    uv_fs_event_init(p->loop, &p->dir_watch); /* started once the socket is bound */
    p->dir_watch.data = p;
    p->watching = true;
    p->open_handles = 2;
    p->started_ms = uv_now(p->loop);
    lifecycle_reconcile(&p->reconcile_timer); /* serve and register right away */
}

/* Frees a stopping plugin once its last handle has closed. */
static void lifecycle_maybe_free(struct plugin *p)
{
    if (p->stopping && p->open_handles == 0) {
        free(p->devs);
        free(p);
    }
}

static void lifecycle_closed(uv_handle_t *h)
{
    struct plugin *p = h->data;
    p->open_handles--;
    lifecycle_maybe_free(p);
}

void plugin_lifecycle_stop(struct plugin *p)
{
    p->stopping = true;
    if (p->registering)
        grpc_client_cancel(p->registering);
    p->registering = NULL;
    unixsock_bind_cancel(p->binding); /* a socket it binds is closed and removed */
    p->binding = NULL;
    if (p->watching) {
        uv_fs_event_stop(&p->dir_watch);
        uv_close((uv_handle_t *)&p->dir_watch, lifecycle_closed);
        uv_timer_stop(&p->reconcile_timer);
        uv_close((uv_handle_t *)&p->reconcile_timer, lifecycle_closed);
        p->watching = false;
    }
    lifecycle_maybe_free(p);
}

void plugin_lifecycle_poke(struct plugin *p)
{
    if (p->watching)
        lifecycle_schedule(p, 0);
}

bool plugin_registered(const struct plugin *p)
{
    return p->registered_id.ino != 0;
}
