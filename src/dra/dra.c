/* The DRA driver's start and stop: the Node's name, the checkpoint of
 * prepared claims, the gRPC services, and the slice. It is freed once
 * stopped, its handles closed and its last job (a prepare, the slice's
 * delete) back. */
#include "dra/internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/xmalloc.h"

/* Each GPU's PCIe root as Kubernetes' pcieRoot attribute names it: the
 * pci<domain>:<bus> directory of sysfs that its device sits under. A
 * simulated GPU has none (the host's sysfs is not its). */
static void dra_read_pcie_roots(struct dra *d)
{
    if (d->cfg->simulate[0] || !d->inv->count)
        return;
    d->pcie_roots = xcalloc(d->inv->count, sizeof *d->pcie_roots);
    for (unsigned i = 0; i < d->inv->count; i++) {
        char bus[32], path[96], real[PATH_MAX];
        dra_pci_bus_id(d->inv->gpus[i].pci_bus_id, bus, sizeof bus);
        snprintf(path, sizeof path, "/sys/bus/pci/devices/%s", bus);
        const char *root = realpath(path, real) ? strstr(real, "/devices/pci") : NULL;
        if (root)
            snprintf(d->pcie_roots[i], sizeof d->pcie_roots[i], "%.*s",
                     (int)strcspn(root + 9, "/"), root + 9);
    }
}

static void dra_plugin_dir(const struct config *cfg, char *out, size_t len)
{
    if (cfg->dra_plugin_dir[0])
        snprintf(out, len, "%s", cfg->dra_plugin_dir);
    else
        snprintf(out, len, "%s/plugins/" DRA_DRIVER, cfg->kubelet_root);
}

void dra_checkpoint_path(const struct config *cfg, char *out, size_t len)
{
    char dir[CONFIG_PATH_MAX + 64];
    dra_plugin_dir(cfg, dir, sizeof dir);
    snprintf(out, len, "%s/checkpoint.json", dir);
}

/* What waits for the claims: their MPS daemons (and the sweep of those of
 * no claim), the slice (shares and placements they hold), their refresh,
 * and the calls parked meanwhile. */
static void dra_claims_begin(struct dra *d)
{
    if (d->claims.n)
        log_info("DRA: %u prepared claim(s) from %s", d->claims.n, d->claims.checkpoint);
    for (unsigned i = 0; i < d->claims.n; i++) {
        struct err me;
        if (dra_mps_start(d, &d->claims.prepared[i], NULL, &me) < 0)
            log_error("DRA: claim %s/%s (%s): %s", d->claims.prepared[i].ns, d->claims.prepared[i].name,
                      d->claims.prepared[i].uid, me.msg);
    }
    dra_mps_sweep(d);
    dra_api_search(d); /* then the slice */
    uv_timer_start(&d->claims.refresh, dra_refresh, DRA_REFRESH_MS, DRA_REFRESH_MS);
    dra_health_send(d);
    dra_service_unpark(d);
}

int dra_claims_in(struct dra *d, struct dra_loaded *loaded, struct err *e)
{
    if (!d || !d->claims.loading)
        return 0;
    if (loaded->rc < 0)
        return err_set(e, "%s", loaded->err.msg);
    dra_claims_adopt(&d->claims, loaded);
    d->claims.loading = false;
    dra_claims_begin(d);
    return 0;
}

int dra_start(struct dra **out, uv_loop_t *loop, const struct config *cfg,
              const struct gpu_inventory *inv, const struct gpu_device *devs,
              const struct dra_gpus *gpus, struct kube_client *kc, struct kube_watch *node,
              const struct dra_hooks *hooks, struct dra_loaded *loaded, struct err *e)
{
    *out = NULL;
    if (loaded && loaded->rc < 0)
        return err_set(e, "%s", loaded->err.msg);
    if (!cfg->node_name[0])
        return err_usage(e, "--dra needs the Node's name: set NODE_NAME (from the downward API, "
                            "spec.nodeName) or --node-name");
    if (!kc || !node)
        return err_set(e, "--dra needs the API server: a kubeconfig (--kubeconfig) or the pod's "
                          "service account");
    struct dra *d = xcalloc(1, sizeof *d);
    d->loop = loop;
    d->cfg = cfg;
    d->inv = inv;
    d->devs = devs;
    d->kc = kc;
    d->node_watch = node;
    if (hooks)
        d->hooks = *hooks;
    if (gpus)
        d->gpus = *gpus;
    snprintf(d->node, sizeof d->node, "%s", cfg->node_name);
    if (cfg->kubelet_registry_dir[0])
        snprintf(d->service.registry_socket, sizeof d->service.registry_socket, "%s/" DRA_DRIVER "-reg.sock",
                 cfg->kubelet_registry_dir);
    else
        snprintf(d->service.registry_socket, sizeof d->service.registry_socket,
                 "%s/plugins_registry/" DRA_DRIVER "-reg.sock", cfg->kubelet_root);
    dra_plugin_dir(cfg, d->service.plugin_dir, sizeof d->service.plugin_dir);
    snprintf(d->service.plugin_socket, sizeof d->service.plugin_socket, "%s/dra.sock", d->service.plugin_dir);
    dra_checkpoint_path(cfg, d->claims.checkpoint, sizeof d->claims.checkpoint);
    uv_timer_init(loop, &d->api.retry);
    uv_timer_init(loop, &d->claims.refresh);
    uv_timer_init(loop, &d->health.timer);
    d->api.retry.data = d->claims.refresh.data = d->health.timer.data = d;
    d->handles = 3;
    dra_lane_start(d);
    dra_read_pcie_roots(d);
    /* Served at once; a prepare or unprepare waits until the checkpoint's
     * claims are in (a repeated prepare must find its claim). */
    d->claims.loading = true;
    dra_service_start(d);
    if (loaded)
        dra_claims_in(d, loaded, NULL);
    *out = d;
    return 0;
}

void dra_status(const struct dra *d, struct strbuf *out)
{
    struct dra_slice_in in;
    dra_slice_of(d, "", 0, NULL, &in);
    strbuf_printf(out, DRA_DRIVER " %s %s %u %u %s%s\n", d->service.plugin_socket,
                  d->service.registered ? "registered" : "unregistered", dra_count(&in),
                  d->claims.n, d->api.version ? DRA_GROUP "/" : "", d->api.version ? dra_api_name(d->api.version) : "unknown");
    dra_slice_in_free(&in);
}

void dra_holders(const struct dra *d,
                 void (*fn)(void *ctx, const char *uuid, const struct dra_consumer *c), void *ctx)
{
    for (unsigned i = 0; d && i < d->claims.n; i++) {
        const struct dra_prepared *p = &d->claims.prepared[i];
        for (unsigned k = 0; k < p->count; k++)
            for (unsigned c = 0; c < p->nconsumers; c++)
                fn(ctx, p->devs[k].uuid, &p->consumers[c]);
    }
}

void dra_on_device(struct dra *d)
{
    if (!d)
        return;
    dra_publish(d);
    dra_health_send(d);
}

void dra_stop(struct dra *d, enum dra_stop_mode mode)
{
    if (!d)
        return;
    d->stopping = true;
    dra_service_stop(d);
    dra_prepare_stop(d);
    dra_lane_stop(d);
    dra_mps_stop_all(d);
    kube_client_cancel(d->kc, d); /* the claims being read, the API's version */
    dra_job_api(d);               /* prepares waiting for it end (d->stopping) */
    dra_unpublish(d, mode == DRA_STOP_WITHDRAW);
    uv_close((uv_handle_t *)&d->api.retry, dra_closed);
    uv_close((uv_handle_t *)&d->claims.refresh, dra_closed);
    uv_close((uv_handle_t *)&d->health.timer, dra_closed);
}

void dra_maybe_free(struct dra *d)
{
    if (!d->stopping || d->jobs.n || d->handles || d->claims.saves)
        return;
    writer_close(d->claims.writer); /* nothing in it: the saves have ended */
    free(d->pool.slices); /* their objects went with dra_unpublish */
    for (unsigned i = 0; i < d->claims.n; i++)
        dra_prepared_free(&d->claims.prepared[i]);
    free(d->claims.prepared);
    free(d->pcie_roots);
    free(d->pool.held);
    free(d);
}

void dra_closed(uv_handle_t *h)
{
    struct dra *d = h->data;
    d->handles--;
    dra_maybe_free(d);
}
