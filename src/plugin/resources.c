/* Which resource each GPU is advertised under: nvidia.com/gpu, or with
 * NVIDIA's resources.gpus config (which NVIDIA's plugin parses and then
 * ignores) one resource per pattern of product names. */
#include "plugin/plugin.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

static struct plugin_resource *resources_find(struct plugin_resource *r, unsigned n,
                                              const char *name)
{
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(r[i].name, name))
            return &r[i];
    return NULL;
}

static struct plugin_resource *resources_add(struct plugin_resource *r, unsigned *n,
                                             const char *short_name, unsigned max_gpus)
{
    struct plugin_resource *x = &r[(*n)++];
    snprintf(x->name, sizeof x->name, "nvidia.com/%s", short_name);
    snprintf(x->socket, sizeof x->socket, "gpulet-nvidia-%s.sock", short_name);
    x->gpus = xcalloc(max_gpus + 1, sizeof *x->gpus);
    return x;
}

int plugin_resources(const struct config *cfg, const struct gpu_inventory *inv,
                     struct plugin_resource **out, unsigned *count, struct err *e)
{
    unsigned nrules = cfg->nresources;
    struct plugin_resource *r = xcalloc(nrules + 1, sizeof *r);
    unsigned n = 0;
    if (nrules == 0) {
        struct plugin_resource *all = resources_add(r, &n, "gpu", inv->count);
        for (unsigned i = 0; i < inv->count; i++)
            all->gpus[all->ngpus++] = i;
        *out = r;
        *count = n;
        return 0;
    }
    /* Every named resource is advertised, even with no GPU of its model:
     * the kubelet then shows 0 rather than nothing. */
    for (unsigned k = 0; k < nrules; k++) {
        char full[80];
        snprintf(full, sizeof full, "nvidia.com/%s", cfg->resources[k].name);
        if (!resources_find(r, n, full))
            resources_add(r, &n, cfg->resources[k].name, inv->count);
    }
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        struct plugin_resource *mine = NULL;
        for (unsigned k = 0; k < nrules; k++) {
            const struct config_resource *rule = &cfg->resources[k];
            if (fnmatch(rule->pattern, g->name, 0) != 0)
                continue;
            char full[80];
            snprintf(full, sizeof full, "nvidia.com/%s", rule->name);
            struct plugin_resource *x = resources_find(r, n, full);
            if (mine && mine != x) {
                err_set(e, "GPU %u (%s, %s) matches two resources, %s and %s: "
                           "make resources.gpus patterns exclusive", i, g->name, g->uuid,
                        mine->name, x->name);
                plugin_resources_free(r, n);
                return -1;
            }
            mine = x;
        }
        if (!mine) {
            err_set(e, "GPU %u (%s, %s) matches no resources.gpus pattern: every GPU needs "
                       "one", i, g->name[0] ? g->name : "name unknown", g->uuid);
            plugin_resources_free(r, n);
            return -1;
        }
        mine->gpus[mine->ngpus++] = i;
    }
    *out = r;
    *count = n;
    return 0;
}

void plugin_resources_free(struct plugin_resource *r, unsigned count)
{
    for (unsigned i = 0; r && i < count; i++)
        free(r[i].gpus);
    free(r);
}
