/* Allocate: what the container runtime needs to give a container exactly
 * its GPUs, per the configured strategies, in the same order and form as
 * NVIDIA's plugin (docs/device-plugin.md). Every request is checked before
 * any response is built, so an error leaves nothing half-done. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "deviceplugin.pb-c.h"
#include "cdi/cdi.h"
#include "driver/driver.h"
#include "grpc/grpc.h"
#include "mps/mps.h"
#include "plugin/internal.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/xmalloc.h"
#include "util/strbuf.h"

#define VISIBLE "NVIDIA_VISIBLE_DEVICES"
#define DEVICES_DIR "/var/run/nvidia-container-devices"

/* Control nodes, passed only where they exist: nvidia-uvm and
 * nvidia-modeset are created on demand and may be missing. */
static const char *const control_nodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                            "nvidia-modeset"};

struct alloc_out {
    struct arena *a;
    V1beta1__ContainerAllocateResponse *r;
};

/* What one container asked for: its distinct GPUs and MIG devices, their
 * IDs, as a list ("a,b") and as CDI names, and the first device asked. */
struct alloc_container {
    const struct plugin *p;
    const struct plugin_device **gpus;
    size_t ng;
    const char **ids;
    const char *list, *names;
    const struct plugin_device *first;
};

static void alloc_env(struct alloc_out *o, const char *key, const char *value)
{
    V1beta1__ContainerAllocateResponse__EnvsEntry *e = arena_alloc(o->a, sizeof *e);
    v1beta1__container_allocate_response__envs_entry__init(e);
    e->key = arena_strdup(o->a, key);
    e->value = arena_strdup(o->a, value);
    o->r->envs[o->r->n_envs++] = e;
}

static void alloc_device_node(struct alloc_out *o, const struct plugin *p, const char *name)
{
    const char *root = p->cfg->dev_root;
    bool slash = root[0] == '\0' || !strcmp(root, "/");
    V1beta1__DeviceSpec *d = arena_alloc(o->a, sizeof *d);
    v1beta1__device_spec__init(d);
    d->container_path = arena_printf(o->a, "/dev/%s", name);
    d->host_path = arena_printf(o->a, "%s/dev/%s", slash ? "" : root, name);
    d->permissions = "rw";
    o->r->devices[o->r->n_devices++] = d;
}

static bool alloc_node_exists(const struct plugin *p, const char *name)
{
    char path[CONFIG_PATH_MAX + 64];
    struct stat st;
    const char *root = config_read_root(p->cfg, p->cfg->dev_root);
    snprintf(path, sizeof path, "%s/dev/%s", strcmp(root, "/") ? root : "", name);
    return stat(path, &st) == 0;
}

static void alloc_mount(struct alloc_out *o, const char *host, const char *container, bool ro)
{
    V1beta1__Mount *m = arena_alloc(o->a, sizeof *m);
    v1beta1__mount__init(m);
    m->host_path = arena_strdup(o->a, host);
    m->container_path = arena_strdup(o->a, container);
    m->read_only = ro;
    o->r->mounts[o->r->n_mounts++] = m;
}

/* What a container needs to reach its resource's MPS daemon (mps_client),
 * the pipe directory where NVIDIA's plugin puts it, and its limits, which a
 * client can only lower (docs/sharing.md). */
static void alloc_mps(struct alloc_out *o, const struct plugin *p,
                      const struct plugin_device **gpus, size_t ng)
{
    const struct plugin_resource *res = p->res;
    struct strbuf lim = {0};
    for (size_t i = 0; i < ng; i++)
        for (unsigned k = 0; k < res->ngpus; k++)
            if (res->gpus[k] == gpus[i]->gpu)
                strbuf_printf(&lim, "%s%zu=%lluM", i ? "," : "", i,
                              plugin_mps_memory_mib(res, k, p->inv));
    char pipe[CONFIG_PATH_MAX];
    snprintf(pipe, sizeof pipe, "/mps/%s/pipe", res->name);
    struct cdi_edits edits;
    mps_client(p->cfg, res->name, pipe, res->thread_percentage, lim.data ? lim.data : "", &edits);
    strbuf_free(&lim);
    for (unsigned i = 0; i < edits.nenv; i++) {
        char *eq = strchr(edits.env[i], '=');
        *eq = '\0';
        alloc_env(o, edits.env[i], eq + 1);
    }
    for (unsigned i = 0; i < edits.nmounts; i++)
        alloc_mount(o, edits.mounts[i].host, edits.mounts[i].container, false);
}

/* The control nodes that exist, then each GPU's node. */
static void alloc_device_specs(struct alloc_out *o, const struct plugin *p,
                               const struct plugin_device **gpus, size_t ng)
{
    for (size_t i = 0; i < sizeof control_nodes / sizeof *control_nodes; i++)
        if (alloc_node_exists(p, control_nodes[i]))
            alloc_device_node(o, p, control_nodes[i]);
    for (size_t i = 0; i < ng; i++) {
        const struct gpu_info *g = &p->inv->gpus[gpus[i]->gpu];
        char node[48];
        snprintf(node, sizeof node, "nvidia%u", g->minor);
        alloc_device_node(o, p, node);
        if (!gpus[i]->mig)
            continue;
        /* A MIG device: its GPU's node, and the access capabilities of its
         * GPU instance and compute instance (NVIDIA's device specs). */
        const struct gpu_mig *m = &g->mig[gpus[i]->mig - 1];
        snprintf(node, sizeof node, "nvidia-caps/nvidia-cap%u",
                 gpu_mig_cap_minor(p->cfg->proc_root, g->minor, m->gi, -1));
        alloc_device_node(o, p, node);
        snprintf(node, sizeof node, "nvidia-caps/nvidia-cap%u",
                 gpu_mig_cap_minor(p->cfg->proc_root, g->minor, m->gi, (int)m->ci));
        alloc_device_node(o, p, node);
    }
}

/* A device's GPU ID: its own ID without a replica's "::<n>". */
static const char *alloc_gpu_id(struct arena *a, const struct plugin_device *d)
{
    const char *sep = strstr(d->id, "::");
    return sep ? arena_printf(a, "%.*s", (int)(sep - d->id), d->id) : d->id;
}

/* One strategy's part of a container's response (docs/containers.md). */
typedef void (*alloc_strategy_fn)(struct alloc_out *o, const struct alloc_container *c);

/* envvar: NVIDIA_VISIBLE_DEVICES for the toolkit's hook, unless the mount
 * list is there too: with both, the mount list wins, as in NVIDIA's plugin. */
static void alloc_envvar(struct alloc_out *o, const struct alloc_container *c)
{
    if (!(c->p->cfg->list_strategy & CONFIG_LIST_VOLUME_MOUNTS))
        alloc_env(o, VISIBLE, c->list);
}

/* volume-mounts: the runtime reads the device list from the mount names,
 * which an unprivileged pod cannot forge the way it can an env var. */
static void alloc_volume_mounts(struct alloc_out *o, const struct alloc_container *c)
{
    alloc_env(o, VISIBLE, DEVICES_DIR);
    for (size_t i = 0; i < c->ng; i++)
        alloc_mount(o, "/dev/null", arena_printf(o->a, DEVICES_DIR "/%s", c->ids[i]), true);
}

/* cdi-annotations: one annotation naming the CDI devices, its key unique
 * per container (a device or replica belongs to one container at a time;
 * ':' is not allowed in a key). */
static void alloc_cdi_annotations(struct alloc_out *o, const struct alloc_container *c)
{
    V1beta1__ContainerAllocateResponse__AnnotationsEntry *an = arena_alloc(o->a, sizeof *an);
    v1beta1__container_allocate_response__annotations_entry__init(an);
    char *key = arena_printf(o->a, "%sgpulet_%s", c->p->cfg->cdi_prefix, c->first->id);
    for (char *k = key; *k; k++)
        if (*k == ':')
            *k = '_';
    an->key = key;
    an->value = arena_strdup(o->a, c->names);
    o->r->annotations[o->r->n_annotations++] = an;
}

/* cdi-cri: the CDI devices in the CRI field (Kubernetes 1.28+). */
static void alloc_cdi_cri(struct alloc_out *o, const struct alloc_container *c)
{
    for (size_t i = 0; i < c->ng; i++) {
        V1beta1__CDIDevice *d = arena_alloc(o->a, sizeof *d);
        v1beta1__cdidevice__init(d);
        d->name = arena_printf(o->a, CDI_KIND "=%s", c->ids[i]);
        o->r->cdi_devices[o->r->n_cdi_devices++] = d;
    }
}

/* driver-mounts: everything a stock runtime needs, the nodes and the
 * driver's files. CUDA images set NVIDIA_VISIBLE_DEVICES=all themselves:
 * on a node that still has the toolkit as its runtime, that would add
 * every GPU. "void" makes the toolkit add nothing, as gpulet's CDI spec
 * does, unless envvar or volume-mounts asked for it. */
static void alloc_driver_mounts(struct alloc_out *o, const struct alloc_container *c)
{
    const struct driver *drv = c->p->driver;
    alloc_device_specs(o, c->p, c->gpus, c->ng);
    for (unsigned i = 0; drv && i < drv->nmounts; i++)
        alloc_mount(o, drv->mounts[i].host, drv->mounts[i].container, true);
    if (!(c->p->cfg->list_strategy & (CONFIG_LIST_ENVVAR | CONFIG_LIST_VOLUME_MOUNTS)))
        alloc_env(o, VISIBLE, "void");
}

/* passDeviceSpecs with envvar or volume-mounts: the nodes too (driver-mounts
 * gives them already). */
static void alloc_pass_specs(struct alloc_out *o, const struct alloc_container *c)
{
    unsigned list = c->p->cfg->list_strategy;
    if (c->p->cfg->pass_device_specs && !(list & CONFIG_LIST_DRIVER_MOUNTS))
        alloc_device_specs(o, c->p, c->gpus, c->ng);
}

/* One row per strategy, run where the configured list has any of its bits,
 * in the order NVIDIA's plugin fills the response. */
static const struct {
    unsigned bits;
    alloc_strategy_fn fn;
} alloc_strategies[] = {
    {CONFIG_LIST_CDI_ANNOTATIONS, alloc_cdi_annotations},
    {CONFIG_LIST_CDI_CRI, alloc_cdi_cri},
    {CONFIG_LIST_DRIVER_MOUNTS, alloc_driver_mounts},
    {CONFIG_LIST_ENVVAR, alloc_envvar},
    {CONFIG_LIST_VOLUME_MOUNTS, alloc_volume_mounts},
    {CONFIG_LIST_ENVVAR | CONFIG_LIST_VOLUME_MOUNTS, alloc_pass_specs},
};

/* The distinct GPUs and MIG devices of devs[0..n), in order: replicas of
 * one GPU give it once. */
static size_t alloc_distinct(struct arena *a, const struct plugin_device **devs, size_t n,
                             const struct plugin_device ***out)
{
    const struct plugin_device **gpus = arena_alloc(a, (n + 1) * sizeof *gpus);
    size_t ng = 0;
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < ng && (gpus[j]->gpu != devs[i]->gpu || gpus[j]->mig != devs[i]->mig))
            j++;
        if (j == ng)
            gpus[ng++] = devs[i];
    }
    *out = gpus;
    return ng;
}

/* One container's response for devices devs[0..n): each GPU or MIG device
 * once, however many of its replicas were asked for. */
static V1beta1__ContainerAllocateResponse *alloc_container(const struct plugin *p, struct arena *a,
                                                           const struct plugin_device **devs,
                                                           size_t n)
{
    const struct config *cfg = p->cfg;
    V1beta1__ContainerAllocateResponse *r = arena_alloc(a, sizeof *r);
    v1beta1__container_allocate_response__init(r);
    struct alloc_out o = {a, r};
    unsigned ndriver = p->driver ? p->driver->nmounts : 0;
    r->envs = arena_alloc(a, 12 * sizeof *r->envs);
    r->mounts = arena_alloc(a, (n + 3 + ndriver) * sizeof *r->mounts);
    r->devices = arena_alloc(a, (3 * n + 4) * sizeof *r->devices);
    r->annotations = arena_alloc(a, sizeof *r->annotations);
    r->cdi_devices = arena_alloc(a, (n + 1) * sizeof *r->cdi_devices);

    struct alloc_container c = {.p = p, .first = devs[0]};
    c.ng = alloc_distinct(a, devs, n, &c.gpus);
    c.ids = arena_alloc(a, (c.ng + 1) * sizeof *c.ids);
    struct strbuf list = {0}, names = {0};
    for (size_t i = 0; i < c.ng; i++) {
        c.ids[i] = alloc_gpu_id(a, c.gpus[i]);
        strbuf_printf(&list, "%s%s", i ? "," : "", c.ids[i]);
        strbuf_printf(&names, "%s" CDI_KIND "=%s", i ? "," : "", c.ids[i]);
    }
    c.list = arena_strdup(a, list.data ? list.data : "");
    c.names = arena_strdup(a, names.data ? names.data : "");
    strbuf_free(&list);
    strbuf_free(&names);
    if (c.ng < n) {
        /* A request for k replicas on fewer than k GPUs: say so to the workload. */
        alloc_env(&o, "GPULET_SHARED_NOTE",
                  arena_printf(a, "%zu replicas of %s on %zu GPU(s): replicas share a GPU", n,
                               p->res->name, c.ng));
        log_info("Allocate: %zu replicas of %s on %zu GPU(s) (%s)", n, p->res->name, c.ng, c.list);
    }
    if (p->res->sharing == GPU_SHARING_MPS)
        alloc_mps(&o, p, c.gpus, c.ng);
    if (cfg->gds)
        alloc_env(&o, "NVIDIA_GDS", "enabled");
    if (cfg->mofed)
        alloc_env(&o, "NVIDIA_MOFED", "enabled");
    if (cfg->gdrcopy)
        alloc_env(&o, "NVIDIA_GDRCOPY", "enabled");
    for (size_t i = 0; i < sizeof alloc_strategies / sizeof *alloc_strategies; i++)
        if (cfg->list_strategy & alloc_strategies[i].bits)
            alloc_strategies[i].fn(&o, &c);
    return r;
}

/* Checks one container's IDs: known, and each device used once in the request. */
static int alloc_check(const struct plugin *p, V1beta1__AllocateRequest *req,
                       const struct plugin_device ***devs, struct arena *a, struct err *e)
{
    bool *taken = arena_alloc(a, (p->ndevs + 1) * sizeof *taken);
    for (size_t c = 0; c < req->n_container_requests; c++) {
        V1beta1__ContainerAllocateRequest *cr = req->container_requests[c];
        if (cr->n_devices_ids == 0)
            return err_set(e, "container request %zu names no device", c);
        /* NVIDIA's rule and message, for the kubelet's UnexpectedAdmissionError. */
        if (cr->n_devices_ids > 1 && p->cfg->fail_requests_gt_one && plugin_shared(p))
            return err_set(e, "request for '%s: %zu' too large: maximum request size for shared "
                              "resources is 1", p->res->name, cr->n_devices_ids);
        devs[c] = arena_alloc(a, cr->n_devices_ids * sizeof **devs);
        for (size_t i = 0; i < cr->n_devices_ids; i++) {
            const struct plugin_device *d = plugin_find(p, cr->devices_ids[i]);
            if (!d)
                return err_set(e, "unknown device ID '%s'", cr->devices_ids[i]);
            size_t k = (size_t)(d - p->devs);
            if (taken[k])
                return err_set(e, "device ID '%s' requested twice", cr->devices_ids[i]);
            taken[k] = true;
            devs[c][i] = d;
        }
    }
    return 0;
}

/* A device that turned unhealthy after the kubelet last heard (or that a
 * confused peer names anyway) is refused: a pod started on a GPU that has
 * fallen off the bus, or hangs, would only fail later and worse. */
static int alloc_healthy(const struct plugin *p, const V1beta1__AllocateRequest *r,
                         const struct plugin_device ***devs, struct err *e)
{
    for (size_t c = 0; c < r->n_container_requests; c++) {
        for (size_t i = 0; i < r->container_requests[c]->n_devices_ids; i++) {
            const struct plugin_device *d = devs[c][i];
            const char *why = plugin_device_unhealthy(p, d);
            if (why)
                return err_set(e, "device %s is unhealthy (%s): it is no longer offered", d->id,
                               why);
        }
    }
    return 0;
}

int plugin_allocate(const struct plugin *p, const uint8_t *req, size_t len, uint8_t **out,
                    size_t *out_len, struct err *e)
{
    V1beta1__AllocateRequest *r = v1beta1__allocate_request__unpack(NULL, len, req);
    if (!r)
        return err_set(e, "malformed AllocateRequest"), GRPC_INVALID_ARGUMENT;
    struct arena a = {0};
    const struct plugin_device ***devs = arena_alloc(&a, (r->n_container_requests + 1) * sizeof *devs);
    int status = GRPC_INVALID_ARGUMENT;
    if (p->cfg->list_strategy & CONFIG_LIST_DRIVER_MOUNTS && !p->driver) {
        /* A container without the driver would fail later, and less clearly. */
        err_set(e, "the driver-mounts strategy has no driver files to give (see the agent's "
                   "log: the driver was not found under %s)", p->cfg->driver_root);
        status = GRPC_FAILED_PRECONDITION;
    } else if (alloc_check(p, r, devs, &a, e) < 0) {
        status = GRPC_INVALID_ARGUMENT;
    } else if (alloc_healthy(p, r, devs, e) < 0) {
        status = GRPC_FAILED_PRECONDITION;
    } else {
        V1beta1__AllocateResponse resp = V1BETA1__ALLOCATE_RESPONSE__INIT;
        resp.n_container_responses = r->n_container_requests;
        resp.container_responses = arena_alloc(&a, (r->n_container_requests + 1) * sizeof(void *));
        for (size_t c = 0; c < r->n_container_requests; c++)
            resp.container_responses[c] =
                alloc_container(p, &a, devs[c], r->container_requests[c]->n_devices_ids);
        *out_len = v1beta1__allocate_response__get_packed_size(&resp);
        *out = xmalloc(*out_len + 1);
        v1beta1__allocate_response__pack(&resp, *out);
        status = GRPC_OK;
    }
    arena_free(&a);
    v1beta1__allocate_request__free_unpacked(r, NULL);
    return status;
}
