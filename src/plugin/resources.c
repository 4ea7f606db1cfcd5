/* Which resource each GPU is advertised under, and how many replicas it
 * has: nvidia.com/gpu, or one resource per pattern of product names
 * (NVIDIA's resources.gpus, which its plugin parses and then ignores); then
 * time-slicing or MPS replicas for the GPUs each sharing entry selects
 * (NVIDIA's plugin also ignores `devices` and gives every GPU the same
 * count). */
#include "plugin/internal.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

/* MPS limits of the k-th GPU of x under entry s: the configured memory
 * (or 0, the GPU's share); the thread share is the smallest of its GPUs'. */
static void resources_mps_limits(struct plugin_resource *x, unsigned k,
                                 const struct config_shared *s)
{
    x->memory_mib[k] = s->memory_limit_mib;
    unsigned pct = s->thread_percentage ? s->thread_percentage : 100 / s->replicas;
    if (pct < 1)
        pct = 1;
    if (!x->thread_percentage || pct < x->thread_percentage)
        x->thread_percentage = pct;
}

/* Each GPU under the resource whose pattern its name matches. */
static int resources_by_model(const struct config *cfg, const struct gpu_inventory *inv,
                              struct plugin_resource *r, unsigned *n, struct err *e)
{
    char full[80];
    if (cfg->nresources == 0) {
        struct plugin_resource *all = plugin_resources_add(r, n, "nvidia.com/gpu", inv->count);
        for (unsigned i = 0; i < inv->count; i++)
            if (!plugin_mig_skips(cfg, &inv->gpus[i]) && !config_dra_takes(cfg, &inv->gpus[i]))
                plugin_resources_put(all, i, 0);
        return 0;
    }
    /* Every named resource is advertised, even with no GPU of its model:
     * the kubelet then shows 0 rather than nothing. */
    for (unsigned k = 0; k < cfg->nresources; k++) {
        snprintf(full, sizeof full, "nvidia.com/%s", cfg->resources[k].name);
        if (!plugin_resource_find(r, *n, full))
            plugin_resources_add(r, n, full, inv->count);
    }
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        struct plugin_resource *mine = NULL;
        if (plugin_mig_skips(cfg, g) || config_dra_takes(cfg, g))
            continue; /* served as MIG devices, or through DRA */
        for (unsigned k = 0; k < cfg->nresources; k++) {
            if (fnmatch(cfg->resources[k].pattern, g->name, 0) != 0)
                continue;
            snprintf(full, sizeof full, "nvidia.com/%s", cfg->resources[k].name);
            struct plugin_resource *x = plugin_resource_find(r, *n, full);
            if (mine && mine != x)
                return err_set(e, "GPU %u (%s, %s) matches two resources, %s and %s: "
                                  "make resources.gpus patterns exclusive", i, g->name, g->uuid,
                               mine->name, x->name);
            mine = x;
        }
        if (!mine)
            return err_set(e, "GPU %u (%s, %s) matches no resources.gpus pattern: every GPU "
                              "needs one", i, g->name[0] ? g->name : "name unknown", g->uuid);
        plugin_resources_put(mine, i, 0);
    }
    return 0;
}

/* Does the sharing entry's device list select the k-th GPU of res? Fails
 * on a list naming a GPU that res does not have. */
static int shared_selects(const struct config_shared *s, const struct gpu_inventory *inv,
                          const struct plugin_resource *res, unsigned k, const char *where,
                          bool *yes, struct err *e)
{
    *yes = false;
    if (!strcmp(s->devices, "all")) {
        *yes = true;
        return 0;
    }
    char *end;
    unsigned long count = strtoul(s->devices, &end, 10);
    if (!s->devices_listed) {
        if (count > res->ngpus)
            return err_set(e, "%s.devices asks for %lu GPUs, and %s has %u on this node", where,
                           count, s->name, res->ngpus);
        *yes = k < count;
        return 0;
    }
    char list[sizeof s->devices];
    snprintf(list, sizeof list, "%s", s->devices);
    char *save = NULL;
    for (char *id = strtok_r(list, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
        bool known = false;
        for (unsigned j = 0; j < res->ngpus; j++) {
            const struct gpu_info *g = &inv->gpus[res->gpus[j]];
            char index[16];
            snprintf(index, sizeof index, "%u", g->index);
            if (!strcmp(id, index) || !strcmp(id, g->uuid)) {
                known = true;
                *yes |= j == k;
            }
        }
        if (!known)
            return err_set(e, "%s.devices names GPU '%s', which is not a GPU of %s on this node",
                           where, id, s->name);
    }
    return 0;
}

/* The replicas of the k-th GPU of res: which sharing entry selects it, or
 * -1 for none; fails when two do. */
static int shared_entry_of(const struct config *cfg, const struct gpu_inventory *inv,
                           const struct plugin_resource *res, unsigned k, int *entry, struct err *e)
{
    *entry = -1;
    for (unsigned i = 0; i < cfg->nshared; i++) {
        const struct config_shared *s = &cfg->shared[i];
        char where[96];
        snprintf(where, sizeof where, "sharing.%s.resources[%u]", config_sharing_keys[cfg->sharing], i);
        bool yes;
        if (strcmp(s->name, res->name))
            continue;
        if (shared_selects(s, inv, res, k, where, &yes, e) < 0)
            return -1;
        if (!yes)
            continue;
        if (*entry >= 0)
            return err_set(e, "GPU %u is selected by both sharing.%s.resources[%d] and [%u]",
                           inv->gpus[res->gpus[k]].index, config_sharing_keys[cfg->sharing], *entry, i);
        *entry = (int)i;
    }
    return 0;
}

/* Which entry shares each GPU of base (-1: none); fails on a GPU that two
 * entries select, or an MPS entry on a MIG GPU. */
static int resources_entries(const struct config *cfg, const struct gpu_inventory *inv,
                             const struct plugin_resource *base, int *entry, unsigned *exclusive,
                             struct err *e)
{
    *exclusive = 0;
    for (unsigned k = 0; k < base->ngpus; k++) {
        if (shared_entry_of(cfg, inv, base, k, &entry[k], e) < 0)
            return -1;
        *exclusive += entry[k] < 0;
        if (entry[k] >= 0 && cfg->sharing == GPU_SHARING_MPS &&
            inv->gpus[base->gpus[k]].mig_mode == NVML_DEVICE_MIG_ENABLE)
            return err_set(e, "sharing.mps.resources[%d]: GPU %u has MIG enabled, and MPS does "
                              "not run on MIG devices", entry[k], base->gpus[k]);
    }
    return 0;
}

/* Moves base's shared GPUs to their shared resources (base itself where
 * every GPU of it is shared and nothing is renamed). */
static int resources_share_base(const struct config *cfg, const struct gpu_inventory *inv,
                                struct plugin_resource *r, unsigned *n, unsigned nbase,
                                struct plugin_resource *base, struct err *e)
{
    int *entry = xcalloc(base->ngpus + 1, sizeof *entry);
    unsigned exclusive, keep = 0;
    int rc = resources_entries(cfg, inv, base, entry, &exclusive, e);
    for (unsigned k = 0; rc == 0 && k < base->ngpus; k++) {
        unsigned g = base->gpus[k];
        if (entry[k] < 0) {
            base->gpus[keep] = g;
            base->migs[keep] = base->migs[k];
            base->replicas[keep++] = 1;
            continue;
        }
        const struct config_shared *s = &cfg->shared[entry[k]];
        /* Whole GPUs and replicas never share a name: a pod asking for one
         * must know which it gets. */
        char name[80];
        bool renamed = s->rename[0] || cfg->rename_by_default || exclusive > 0;
        if (s->rename[0])
            snprintf(name, sizeof name, "%s", s->rename);
        else
            snprintf(name, sizeof name, "%.72s%s", base->name, renamed ? ".shared" : "");
        if (renamed && plugin_resource_find(r, nbase, name)) {
            rc = err_set(e, "sharing.%s.resources[%d]: %s would hold both whole GPUs and "
                            "replicas", config_sharing_keys[cfg->sharing], entry[k], name);
            break;
        }
        struct plugin_resource *x = renamed ? plugin_resource_find(r, *n, name) : base;
        if (!x)
            x = plugin_resources_add(r, n, name, inv->count);
        unsigned at = x == base ? keep++ : x->ngpus++;
        x->gpus[at] = g;
        x->migs[at] = base->migs[k];
        x->replicas[at] = s->replicas;
        if (cfg->sharing == GPU_SHARING_MPS)
            resources_mps_limits(x, at, s);
        x->sharing = cfg->sharing;
        x->renamed = renamed;
    }
    if (rc == 0)
        base->ngpus = keep;
    free(entry);
    return rc;
}

/* Moves the shared GPUs of the base resources into their shared resources. */
static int resources_share(const struct config *cfg, const struct gpu_inventory *inv,
                           struct plugin_resource *r, unsigned *n, struct err *e)
{
    for (unsigned i = 0; i < cfg->nshared; i++)
        if (!plugin_resource_find(r, *n, cfg->shared[i].name))
            return err_set(e, "sharing.%s.resources[%u].name: %s is not a resource of this node",
                           config_sharing_keys[cfg->sharing], i, cfg->shared[i].name);
    unsigned nbase = *n;
    bool *had = xcalloc(nbase + 1, sizeof *had);
    for (unsigned b = 0; b < nbase; b++)
        had[b] = r[b].ngpus > 0;
    for (unsigned b = 0; b < nbase; b++) {
        if (resources_share_base(cfg, inv, r, n, nbase, &r[b], e) < 0) {
            free(had);
            return -1;
        }
    }
    /* A base resource whose GPUs all went to a renamed one is not advertised. */
    unsigned out = 0;
    for (unsigned i = 0; i < *n; i++) {
        if (i < nbase && had[i] && r[i].ngpus == 0) {
            free(r[i].gpus);
            free(r[i].replicas);
            free(r[i].migs);
            free(r[i].memory_mib);
            continue;
        }
        r[out++] = r[i];
    }
    *n = out;
    free(had);
    return 0;
}

int plugin_resources(const struct config *cfg, const struct gpu_inventory *inv,
                     struct plugin_resource **out, unsigned *count, struct err *e)
{
    struct plugin_resource *r = xcalloc(cfg->nresources + cfg->nshared + 2 + PLUGIN_MIG_RESOURCES,
                                        sizeof *r);
    unsigned n = 0;
    if (resources_by_model(cfg, inv, r, &n, e) < 0 || plugin_mig_resources(cfg, inv, r, &n, e) < 0 ||
        (cfg->nshared && resources_share(cfg, inv, r, &n, e) < 0)) {
        plugin_resources_free(r, n);
        return -1;
    }
    *out = r;
    *count = n;
    return 0;
}

void plugin_resources_free(struct plugin_resource *r, unsigned count)
{
    for (unsigned i = 0; r && i < count; i++) {
        free(r[i].gpus);
        free(r[i].replicas);
        free(r[i].migs);
        free(r[i].memory_mib);
    }
    free(r);
}

unsigned long long plugin_mps_memory_mib(const struct plugin_resource *r, unsigned k,
                                         const struct gpu_inventory *inv)
{
    if (r->memory_mib[k])
        return r->memory_mib[k];
    return inv->gpus[r->gpus[k]].memory_total / (1024 * 1024) / (r->replicas[k] ? r->replicas[k] : 1);
}

void plugin_resources_apply(const struct plugin_resource *r, unsigned count,
                            struct gpu_device *devs, unsigned ndevs)
{
    /* A GPU that went into MIG mode, or out of it, keeps nothing stale. */
    for (unsigned g = 0; g < ndevs; g++) {
        memset(&devs[g].share, 0, sizeof devs[g].share);
        memset(devs[g].mig_share, 0, sizeof devs[g].mig_share);
    }
    for (unsigned i = 0; i < count; i++)
        for (unsigned k = 0; k < r[i].ngpus; k++) {
            struct gpu_device *d = &devs[r[i].gpus[k]];
            struct gpu_share *s = r[i].migs[k] ? &d->mig_share[r[i].migs[k] - 1] : &d->share;
            snprintf(s->resource, sizeof s->resource, "%s", r[i].name);
            s->replicas = r[i].replicas[k];
            s->sharing = r[i].replicas[k] > 1 ? r[i].sharing : GPU_SHARING_NONE;
            s->renamed = r[i].renamed;
        }
}
