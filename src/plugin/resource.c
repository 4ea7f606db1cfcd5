/* One resource's record: made with room for every GPU and MIG device,
 * found by name, given a device. resources.c (the whole set) and mig.c
 * (the MIG strategies) both build with these. */
#include "plugin/internal.h"

#include <stdio.h>
#include <string.h>

#include "util/xmalloc.h"

struct plugin_resource *plugin_resource_find(struct plugin_resource *r, unsigned n, const char *name)
{
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(r[i].name, name))
            return &r[i];
    return NULL;
}

struct plugin_resource *plugin_resources_add(struct plugin_resource *r, unsigned *n,
                                             const char *full_name, unsigned max_gpus)
{
    struct plugin_resource *x = &r[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", full_name);
    snprintf(x->socket, sizeof x->socket, "gpulet-nvidia-%s.sock", full_name + 11);
    /* Room for every GPU's MIG devices too. */
    size_t room = (size_t)max_gpus * (GPU_MIG_MAX + 1) + 1;
    x->gpus = xcalloc(room, sizeof *x->gpus);
    x->replicas = xcalloc(room, sizeof *x->replicas);
    x->migs = xcalloc(room, sizeof *x->migs);
    x->memory_mib = xcalloc(room, sizeof *x->memory_mib);
    return x;
}

void plugin_resources_put(struct plugin_resource *x, unsigned gpu, unsigned mig)
{
    x->gpus[x->ngpus] = gpu;
    x->migs[x->ngpus] = mig;
    x->replicas[x->ngpus++] = 1;
}
