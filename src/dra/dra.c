/* The DRA driver's start and stop: credentials and the Node's name, the
 * checkpoint of prepared claims, the two gRPC services, and the slice. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/xmalloc.h"

int dra_start(struct dra **out, uv_loop_t *loop, const struct config *cfg,
              const struct gpu_inventory *inv, const struct gpu_device *devs,
              const struct dra_hooks *hooks, struct err *e)
{
    *out = NULL;
    if (!cfg->node_name[0])
        return err_usage(e, "--dra needs the Node's name: set NODE_NAME (from the downward API, "
                            "spec.nodeName) or --node-name");
    struct dra *d = xcalloc(1, sizeof *d);
    d->loop = loop;
    d->cfg = cfg;
    d->inv = inv;
    d->devs = devs;
    if (hooks)
        d->hooks = *hooks;
    snprintf(d->node, sizeof d->node, "%s", cfg->node_name);
    if (cfg->kubelet_registry_dir[0])
        snprintf(d->registry_socket, sizeof d->registry_socket, "%s/" DRA_DRIVER "-reg.sock",
                 cfg->kubelet_registry_dir);
    else
        snprintf(d->registry_socket, sizeof d->registry_socket,
                 "%s/plugins_registry/" DRA_DRIVER "-reg.sock", cfg->kubelet_root);
    if (cfg->dra_plugin_dir[0])
        snprintf(d->plugin_dir, sizeof d->plugin_dir, "%s", cfg->dra_plugin_dir);
    else
        snprintf(d->plugin_dir, sizeof d->plugin_dir, "%s/plugins/" DRA_DRIVER, cfg->kubelet_root);
    snprintf(d->plugin_socket, sizeof d->plugin_socket, "%s/dra.sock", d->plugin_dir);
    snprintf(d->checkpoint, sizeof d->checkpoint, "%s/checkpoint.json", d->plugin_dir);
    uv_timer_init(loop, &d->retry);
    uv_timer_init(loop, &d->refresh);
    uv_async_init(loop, &d->gone, dra_on_gone);
    d->retry.data = d->refresh.data = d->gone.data = d;
    d->handles = 3;
    /* The checkpoint before the service: a repeated prepare must find it. */
    if (kube_creds_load(&d->creds, cfg->kubeconfig, e) < 0 || kube_client_init(e) < 0 ||
        dra_checkpoint_load(d, e) < 0 || dra_service_start(d, e) < 0 || dra_watch_start(d, e) < 0) {
        dra_stop(d);
        return -1;
    }
    if (d->nprepared)
        log_info("DRA: %u prepared claim(s) from %s", d->nprepared, d->checkpoint);
    for (unsigned i = 0; i < d->nprepared; i++) {
        struct err me;
        if (dra_mps_start(d, &d->prepared[i], dra_prepare_wake, &me) < 0)
            log_error("DRA: claim %s/%s (%s): %s", d->prepared[i].ns, d->prepared[i].name,
                      d->prepared[i].uid, me.msg);
    }
    dra_publish(d);
    uv_timer_start(&d->refresh, dra_refresh, DRA_REFRESH_MS, DRA_REFRESH_MS);
    *out = d;
    return 0;
}

void dra_status(const struct dra *d, struct strbuf *out)
{
    strbuf_printf(out, DRA_DRIVER " %s %s %u %u\n", d->plugin_socket,
                  d->registered ? "registered" : "unregistered", dra_count(d->cfg, d->inv, d->devs),
                  d->nprepared);
}

void dra_holders(const struct dra *d,
                 void (*fn)(void *ctx, const char *uuid, const struct dra_consumer *c), void *ctx)
{
    for (unsigned i = 0; d && i < d->nprepared; i++) {
        const struct dra_prepared *p = &d->prepared[i];
        for (unsigned k = 0; k < p->count; k++)
            for (unsigned c = 0; c < p->nconsumers; c++)
                fn(ctx, p->devs[k].uuid, &p->consumers[c]);
    }
}

void dra_on_device(struct dra *d)
{
    if (d)
        dra_publish(d);
}

void dra_stop(struct dra *d)
{
    if (!d)
        return;
    d->stopping = true;
    dra_service_stop(d);
    dra_prepare_stop(d);
    dra_mps_stop_all(d);
    dra_unpublish(d);
    uv_close((uv_handle_t *)&d->retry, dra_closed);
    uv_close((uv_handle_t *)&d->refresh, dra_closed); /* d->gone: once the watch is joined */
}
