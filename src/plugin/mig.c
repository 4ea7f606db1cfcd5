/* MIG strategies, as NVIDIA's plugin has them. none: a MIG GPU is
 * advertised whole. single: every MIG device is an nvidia.com/gpu, and only
 * if every GPU has MIG on with devices of one profile. mixed: each MIG
 * device under nvidia.com/mig-<profile> ('+' made '.'), GPUs without MIG as
 * usual. Also the capability device nodes a MIG device needs. */
#include "plugin/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool plugin_mig_skips(const struct config *cfg, const struct gpu_info *g)
{
    return cfg->mig_strategy != CONFIG_MIG_NONE && g->mig_mode == NVML_DEVICE_MIG_ENABLE &&
           !config_dra_takes(cfg, g);
}

/* NVIDIA's single rule, with its reasons. */
static int mig_single_check(const struct gpu_inventory *inv, struct err *e)
{
    int first = -1;
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        if (g->mig_mode != NVML_DEVICE_MIG_ENABLE)
            return err_set(e, "MIG strategy single: GPU %u (%s) has MIG disabled, and single "
                              "needs MIG on every GPU once one has it (use mixed)", i, g->uuid);
        if (!g->nmig)
            return err_set(e, "MIG strategy single: GPU %u (%s) has MIG enabled and no MIG "
                              "devices", i, g->uuid);
        for (unsigned k = 0; k < g->nmig; k++) {
            if (first < 0)
                first = (int)i;
            const char *want = inv->gpus[first].mig[0].profile;
            if (strcmp(g->mig[k].profile, want) && (int)i == first)
                return err_set(e, "MIG strategy single: GPU %u has MIG devices of two profiles, "
                                  "%s and %s; single needs one profile on the whole node (use "
                                  "mixed)", i, want, g->mig[k].profile);
            if (strcmp(g->mig[k].profile, want))
                return err_set(e, "MIG strategy single: GPU %u has a %s MIG device and GPU %d "
                                  "a %s one; single needs one profile on the whole node (use "
                                  "mixed)", i, g->mig[k].profile, first, want);
        }
    }
    return 0;
}

int plugin_mig_resources(const struct config *cfg, const struct gpu_inventory *inv,
                         struct plugin_resource *r, unsigned *n, struct err *e)
{
    unsigned mig_gpus = 0;
    for (unsigned i = 0; i < inv->count; i++)
        mig_gpus += plugin_mig_skips(cfg, &inv->gpus[i]);
    if (!mig_gpus)
        return 0; /* none, or no GPU with MIG: as without MIG */
    if (cfg->mig_strategy == CONFIG_MIG_SINGLE) {
        if (mig_single_check(inv, e) < 0)
            return -1;
        struct plugin_resource *x = plugin_resource_find(r, *n, "nvidia.com/gpu");
        if (!x)
            x = plugin_resources_add(r, n, "nvidia.com/gpu", inv->count);
        for (unsigned i = 0; i < inv->count; i++)
            for (unsigned k = 0; k < inv->gpus[i].nmig; k++)
                plugin_resources_put(x, i, k + 1);
        return 0;
    }
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        for (unsigned k = 0; plugin_mig_skips(cfg, g) && k < g->nmig; k++) {
            char name[80];
            snprintf(name, sizeof name, "nvidia.com/mig-%.40s", g->mig[k].profile);
            for (char *c = name; *c; c++)
                if (*c == '+')
                    *c = '.';
            struct plugin_resource *x = plugin_resource_find(r, *n, name);
            if (!x && *n >= PLUGIN_MIG_RESOURCES)
                return err_set(e, "more than %d MIG resources", PLUGIN_MIG_RESOURCES);
            if (!x)
                x = plugin_resources_add(r, n, name, inv->count);
            plugin_resources_put(x, i, k + 1);
        }
    }
    /* Every GPU in MIG: no whole GPUs to advertise (NVIDIA serves none). */
    struct plugin_resource *whole = plugin_resource_find(r, *n, "nvidia.com/gpu");
    if (whole && !whole->ngpus && !cfg->nresources) {
        free(whole->gpus);
        free(whole->replicas);
        free(whole->migs);
        free(whole->memory_mib);
        memmove(whole, whole + 1, (size_t)(r + *n - whole - 1) * sizeof *r);
        (*n)--;
    }
    return 0;
}
