/* Start-up: find the device IDs (the driver's procfs, else NVML), register
 * with the kubelet, then bring up the rest off the loop (docs/architecture.md). */
#include "agent/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/procfs.h"
#include "gpu/render.h"
#include "util/log.h"
#include "util/xmalloc.h"

static void agent_log_inventory(const struct agent *a)
{
    const struct gpu_inventory *inv = &a->inv;
    log_info("NVML %s (driver %s, CUDA %d.%d) from %s: %u GPU(s)", inv->nvml_version,
             inv->driver_version, inv->cuda_version / 1000, inv->cuda_version % 1000 / 10,
             inv->library, inv->count);
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        log_info("GPU %u: %s %s bus %s NUMA %d %s%s%s", g->index, g->uuid, g->name, g->pci_bus_id,
                 g->numa_node, gpu_render_health(g, NULL), g->problem[0] ? ": " : "", g->problem);
    }
    if (inv->count == 0)
        log_warn("no GPUs found: advertising an empty %s list", PLUGIN_RESOURCE);
}

static void agent_on_allocate(void *ctx)
{
    agent_pods_soon(ctx, false); /* the container starts right after: its pod labels */
}

/* A plugin's socket cannot be served: at start, as any start-up error, a
 * node set up wrong (another agent serves the kubelet directory), said
 * once, exit 1; after a restart, the plugin tries again (the node served a
 * moment ago: whatever stops it now may pass). */
static void agent_on_unserved(void *ctx, const struct err *e)
{
    struct agent *a = ctx;
    if (a->plugins_restarted) {
        log_error("device plugin: %s; trying again", e->msg);
        return;
    }
    log_error("%s", e->msg);
    a->exit_code = 1;
    uv_stop(&a->loop);
}

int agent_plugin_start(struct agent *a, struct err *e)
{
    plugin_resources_free(a->resources, a->nresources); /* the last plugins' are freed by now */
    a->resources = NULL;
    if (plugin_resources(&a->cfg, &a->inv, &a->resources, &a->nresources, e) < 0)
        return -1;
    plugin_resources_apply(a->resources, a->nresources, a->devs, a->inv.count);
    for (unsigned i = 0; i < a->inv.count; i++)
        metrics_on_device(a->metrics, i, 0, &a->devs[i]);
    /* Never one GPU through both: the resources leave out DRA's GPUs
     * (config_dra_takes), and where DRA has them all, no plugin registers. */
    unsigned dra_gpus = 0;
    for (unsigned i = 0; i < a->inv.count; i++)
        dra_gpus += config_dra_takes(&a->cfg, &a->inv.gpus[i]);
    if (a->cfg.dra == CONFIG_DRA_ALL && a->inv.count && !dra_gpus)
        log_warn("--dra-gpus '%s' names none of this node's %u GPUs (indexes 0-%u, %s): the device "
                 "plugin serves them all", a->cfg.dra_gpus, a->inv.count, a->inv.count - 1,
                 a->inv.gpus[0].name);
    if (a->inv.count && dra_gpus == a->inv.count) {
        log_info("DRA serves every GPU: no device plugin registers");
        return 0;
    }
    if (dra_gpus)
        log_info("DRA serves %u of %u GPUs (--dra-gpus %s); device plugins the rest", dra_gpus,
                 a->inv.count, a->cfg.dra_gpus);
    const struct plugin_hooks hooks = {agent_on_allocate, agent_on_unserved, a};
    a->plugins = xcalloc(a->nresources + 1, sizeof *a->plugins);
    for (unsigned r = 0; r < a->nresources; r++) {
        if (plugin_start(&a->plugins[r], &a->loop, &a->cfg, &a->inv, a->devs, &a->resources[r],
                         a->driver_ok ? &a->driver : NULL, &hooks, e) < 0) {
            agent_plugin_stop(a);
            return -1;
        }
        a->nplugins = r + 1;
    }
    if (agent_mps_start(a, e) < 0) {
        agent_plugin_stop(a);
        return -1;
    }
    return 0;
}

/* The kubelet closed the last connection of a plugin stopped here. */
static void agent_plugin_drained(void *ctx)
{
    struct agent *a = ctx;
    if (--a->draining)
        return;
    a->drained_at = uv_now(&a->loop);
    log_info("device plugins: the kubelet let go of the old ones in %llu ms",
             (unsigned long long)(a->drained_at - a->drain_begun));
    agent_restart_later(a);
}

void agent_plugin_stop(struct agent *a)
{
    agent_mps_stop(a);
    if (!a->draining)
        a->drain_begun = uv_now(&a->loop);
    for (unsigned r = 0; r < a->nplugins; r++)
        a->draining += plugin_stop(a->plugins[r], agent_plugin_drained, a);
    free(a->plugins);
    a->plugins = NULL;
    a->nplugins = 0;
}

/* The sampler found a GPU lost: the probe decides, for everyone. */
static void agent_on_lost(void *ctx, unsigned gpu)
{
    (void)gpu;
    agent_probe_start(ctx);
}

/* Which procfs lists the node's GPUs for registering before NVML is up, or
 * NULL where the fast start does not apply: simulated or given NVML (the
 * node's procfs is not theirs), IDs that only NVML can give (indexes), MIG
 * strategies that need NVML's word first, or the driver's files (they need
 * its version). --proc-root points the tests at a procfs of their own,
 * simulator included. */
static const char *agent_proc_root(const struct agent *a)
{
    if (a->cfg.id_strategy != CONFIG_ID_UUID || a->cfg.mig_strategy != CONFIG_MIG_NONE ||
        a->cfg.nresources > 0 || /* per-model resources need the product names */
        a->cfg.list_strategy & CONFIG_LIST_DRIVER_MOUNTS || config_cdi_wanted(&a->cfg) ||
        a->cfg.dra != CONFIG_DRA_OFF) /* which GPUs DRA takes needs their names */
        return NULL;             /* the driver's files need NVML's driver version */
    if (strcmp(a->cfg.proc_root, "/proc"))
        return a->cfg.proc_root;
    return a->cfg.simulate[0] || a->cfg.nvml_path[0] ? NULL : "/proc";
}

/* Off the loop: NVML itself where the IDs came from procfs, then the
 * inventory's slow half, into an inventory of its own (the loop reads its
 * own meanwhile). */
static void agent_nvml_work(uv_work_t *w)
{
    struct agent *a = w->data;
    struct gpu_inventory *found = &a->found;
    if (!a->nvml_up) {
        a->nvml_rc = nvml_init(&a->nvml, &a->nvml_err);
        if (a->nvml_rc == 0)
            a->nvml_rc = gpu_inventory_build_ids(&a->nvml, found, &a->nvml_err);
    } else {
        gpu_inventory_copy(found, &a->inv);
    }
    if (a->nvml_rc == 0)
        gpu_inventory_read_facts(&a->nvml, found);
    /* NVML's events registered here too, off the loop (agent_health_watch
     * starts their thread once back on it). */
    if (a->nvml_rc == 0 && a->watch_wanted)
        a->watch_rc = gpu_watch_register(&a->watch, &a->nvml, found->gpus, found->count,
                                         &a->watch_err);
}

/* NVML never came up behind a procfs start: the GPUs are advertised, so
 * they turn unhealthy, and the agent stops where it must fail. */
static void agent_nvml_failed(struct agent *a)
{
    double now = (double)uv_now(&a->loop);
    char why[128];
    snprintf(why, sizeof why, "%.127s", a->nvml_err.msg);
    for (unsigned i = 0; i < a->inv.count; i++)
        if (gpu_health_on_missing(&a->devs[i].health, why, now))
            agent_device_changed(a, i, GPU_CHANGED_HEALTH);
    if (a->cfg.fail_on_init_error) {
        log_error("%s", a->nvml_err.msg);
        a->exit_code = 1;
        uv_stop(&a->loop);
        return;
    }
    log_error("%s; its GPUs are advertised unhealthy (fail-on-init-error is false)",
              a->nvml_err.msg);
    log_info("agent running; stop with SIGINT or SIGTERM, reload with SIGHUP");
}

/* NVML's inventory joins the one the agent started with, matched by UUID. */
static void agent_take_inventory(struct agent *a)
{
    int *map = xcalloc(a->inv.count, sizeof *map);
    gpu_inventory_merge(&a->inv, &a->found, map);
    double now = (double)uv_now(&a->loop);
    for (unsigned i = 0; i < a->inv.count; i++) {
        struct gpu_device *d = &a->devs[i];
        unsigned what = 0;
        if (map[i] < 0) {
            if (gpu_health_on_missing(&d->health, "the driver lists it, NVML does not", now))
                what |= GPU_CHANGED_HEALTH;
        } else {
            if (gpu_device_set_handle(d, a->inv.gpus[i].handle))
                what |= GPU_CHANGED_HANDLE;
            if (a->inv.gpus[i].lost && gpu_health_on_lost(&d->health, now))
                what |= GPU_CHANGED_HEALTH;
        }
        if (what)
            agent_device_changed(a, i, what);
    }
    for (unsigned j = 0; j < a->found.count; j++) {
        bool known = false;
        for (unsigned i = 0; i < a->inv.count; i++)
            known |= map[i] == (int)j;
        if (!known)
            log_warn("NVML lists GPU %s, which the driver's procfs did not: it is not advertised "
                     "until the agent restarts", a->found.gpus[j].uuid);
    }
    free(map);
    gpu_inventory_free(&a->found);
}

/* Back on the loop: NVML's inventory joins the agent's, and the rest
 * starts: NVML events, metrics; the plugin re-sends its list with NUMA
 * nodes. */
static void agent_nvml_done(uv_work_t *w, int status)
{
    struct agent *a = w->data;
    if (status == UV_ECANCELED || a->stopping) {
        gpu_inventory_free(&a->found);
        return;
    }
    if (a->nvml_rc < 0) {
        gpu_inventory_free(&a->found);
        agent_nvml_failed(a);
        return;
    }
    a->nvml_up = true;
    agent_take_inventory(a);
    struct err e;
    if (agent_health_watch(a, &e) < 0)
        log_error("%s; GPU faults are noticed by probes only", e.msg);
    double t_facts = nvml_clock_ms();
    agent_log_inventory(a);
    a->facts_known = true;
    agent_labels_start(a, NULL);
    agent_report_start(a, NULL);
    agent_dra_start(a, NULL);
    if (agent_mps_start(a, &e) < 0)
        log_error("%s; the MPS resources stay unavailable", e.msg);
    agent_mig_start(a);
    agent_migmgr_start(a, &a->migparted);
    agent_device_changed(a, GPU_DEVICE_ALL, GPU_CHANGED_FACTS);
    double t_modules = nvml_clock_ms();
    /* Metrics matter less than scheduling GPUs: without them the plugin runs on. */
    const struct metrics_hooks mh = {agent_on_lost, a};
    if (!a->cfg.no_metrics &&
        metrics_start(&a->metrics, &a->loop, &a->nvml, a->lanes, &a->inv, a->devs, &a->cfg,
                      &a->metrics_files, &mh,
                      &e) < 0)
        log_error("metrics are off: %s", e.msg);
    metrics_on_config(a->metrics, &a->config_state);
    double t_metrics = nvml_clock_ms();
    agent_dra_holders(a);
    agent_pods_soon(a, true);
    const double *t = a->start_ms;
    char metrics[32];
    snprintf(metrics, sizeof metrics, a->metrics ? "%.1f ms" : "off", t_metrics - t_modules);
    log_info("start-up: %s %.1f ms, plugin %.1f ms; then %sthe rest of the inventory and events "
             "%.1f ms, labels, faults, DRA, MPS and MIG %.1f ms, metrics %s; total %.1f ms",
             a->early ? "device IDs from procfs" : "NVML and device IDs", t[1] - t[0],
             t[2] - t[1], a->early ? "NVML, " : "", t_facts - t[2], t_modules - t_facts, metrics,
             nvml_clock_ms() - t[0]);
    log_info("NVML load %.1f ms, nvmlInit %.1f ms", a->nvml.load_ms, a->nvml.init_ms);
    log_info("agent running; stop with SIGINT or SIGTERM, reload with SIGHUP");
}

/* The device IDs: from the driver's procfs where it has them (microseconds:
 * NVML is then loaded here and initialized off the loop), else from NVML,
 * started here. 0, 1 or 2 to exit with, or -1 for a node without NVML where
 * that is allowed. */
static int agent_find_ids(struct agent *a)
{
    struct err e;
    const char *simulate = a->cfg.simulate[0] ? a->cfg.simulate : NULL;
    const char *path = a->cfg.nvml_path[0] ? a->cfg.nvml_path : NULL;
    const char *proc = agent_proc_root(a); /* NULL where NVML must come first */
    if (proc && gpu_procfs_read(proc, &a->inv, &e) == 0) {
        if (nvml_select(&a->nvml, simulate, path, &e) == 0) {
            a->early = true;
            log_info("%u GPU(s) in %s/driver/nvidia/gpus: registering them while NVML starts",
                     a->inv.count, proc);
            return 0;
        }
        gpu_inventory_free(&a->inv);
        nvml_close(&a->nvml);
    } else if (proc) {
        log_debug("%s; registering once NVML is up", e.msg);
    }
    if (nvml_start(&a->nvml, simulate, path, &e) < 0) {
        if (a->cfg.fail_on_init_error || e.usage) {
            log_error("%s", e.msg);
            return e.usage ? 2 : 1; /* 2: --simulate names no preset */
        }
        /* failOnInitError=false: one DaemonSet can run on nodes without GPUs. */
        log_error("%s; advertising no GPUs (fail-on-init-error is false)", e.msg);
        snprintf(a->no_gpu, sizeof a->no_gpu, "%s", e.msg);
        return -1;
    }
    a->nvml_up = true;
    if (gpu_inventory_build_ids(&a->nvml, &a->inv, &e) < 0) {
        log_error("%s", e.msg);
        return 1;
    }
    return 0;
}

/* The directories the agent serves in, made where missing and recorded,
 * so that exit leaves none of them behind: the user's own for a simulated
 * node (checked to be theirs), the kubelet's device-plugins directory. */
static int agent_dirs_make(struct agent *a, struct err *e)
{
    char dir[CONFIG_PATH_MAX + 32];
    if (a->cfg.simulate[0] && dirs_user_make(&a->made, e) < 0)
        return -1;
    snprintf(dir, sizeof dir, "%s/device-plugins", a->cfg.kubelet_root);
    return dirs_make(&a->made, dir, 0755, e);
}

/* A node without GPUs (failOnInitError=false, NVML did not start): nothing
 * to advertise, but the agent serves what says it is well and why it has
 * no GPU: the status socket (`gpulet health`, doctor) and /healthz,
 * /readyz, /metrics (its own series) for the DaemonSet's probes, which
 * would otherwise restart it for ever. */
static int agent_start_without_gpus(struct agent *a)
{
    struct err e;
    a->devs = gpu_devices_new(&a->inv, (double)uv_now(&a->loop));
    a->health_said = xcalloc(1, sizeof *a->health_said);
    if (agent_probe_init(a, &e) < 0 || agent_dirs_make(a, &e) < 0 || agent_status_start(a, &e) < 0) {
        log_error("%s", e.msg);
        return 1;
    }
    /* As on a node with GPUs, a port that cannot be had leaves metrics off. */
    if (!a->cfg.no_metrics &&
        metrics_start(&a->metrics, &a->loop, &a->nvml, a->lanes, &a->inv, a->devs, &a->cfg,
                      &a->metrics_files, NULL,
                      &e) < 0)
        log_error("metrics are off: %s", e.msg);
    metrics_on_config(a->metrics, &a->config_state);
    log_info("agent running, with no GPU; stop with SIGINT or SIGTERM, reload with SIGHUP");
    return 0;
}

/* Everything the kubelet needs first, so that the agent registers as soon
 * as it knows the device IDs: the IDs, the device model, the status socket
 * and the plugin. NVML (where the IDs came from procfs) and the rest of the
 * inventory follow off the loop, then event watching and metrics
 * (agent_nvml_done): an XID in the first milliseconds after registering is
 * not seen, as with NVIDIA's plugin, whose health checks also start after
 * it registers. 0, or the code to exit with. */
int agent_start(struct agent *a)
{
    struct err e;
    double *t = a->start_ms;
    t[0] = nvml_clock_ms();
    int rc = agent_find_ids(a);
    if (rc != 0)
        return rc < 0 ? agent_start_without_gpus(a) : rc;
    a->devs = gpu_devices_new(&a->inv, (double)uv_now(&a->loop));
    a->health_said = xcalloc(a->inv.count + 1, sizeof *a->health_said); /* all HEALTH_OK */
    if (agent_mps_check(&a->cfg, &e) < 0) {
        log_error("%s", e.msg);
        return 1;
    }
    t[1] = nvml_clock_ms();
    if (agent_probe_init(a, &e) < 0 || agent_dirs_make(a, &e) < 0 ||
        agent_status_start(a, &e) < 0 || (agent_driver_start(a), agent_plugin_start(a, &e)) < 0) {
        log_error("%s", e.msg);
        return 1;
    }
    t[2] = nvml_clock_ms();
    /* after the status socket: an agent handed over has written its last */
    agent_dra_read(a); /* beside NVML's start: DRA starts once both are in */
    a->nvml_work.data = a;
    a->watch_wanted = gpu_health_policy_active(&a->policy); /* the worker reads this, not the policy */
    uv_queue_work(&a->loop, &a->nvml_work, agent_nvml_work, agent_nvml_done);
    return 0;
}

