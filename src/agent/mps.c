/* MPS daemons for the resources shared with sharing.mps: started with the
 * plugins, each plugin's devices Unhealthy while its daemon is not up. */
#include "agent/internal.h"

#include <stdlib.h>

#include "util/log.h"
#include "util/xmalloc.h"

static void agent_mps_state(void *ctx, const struct plugin_resource *res, bool up)
{
    struct agent *a = ctx;
    unsigned r = (unsigned)(res - a->resources);
    if (r < a->nplugins)
        plugin_set_available(a->plugins[r], up);
}

/* Checks that an MPS configuration can run: the control program exists. */
int agent_mps_check(const struct config *cfg, struct err *e)
{
    char control[CONFIG_PATH_MAX];
    if (cfg->sharing != CONFIG_SHARING_MPS || cfg->nshared == 0)
        return 0;
    return mps_find_control(cfg, control, sizeof control, e);
}

int agent_mps_start(struct agent *a, struct err *e)
{
    /* The limits need each GPU's memory: daemons start once the facts are in. */
    if (a->cfg.sharing != CONFIG_SHARING_MPS || a->mps || !a->nplugins)
        return 0;
    for (unsigned r = 0; r < a->nresources; r++)
        if (a->resources[r].sharing == CONFIG_SHARING_MPS)
            plugin_set_available(a->plugins[r], false);
    if (!a->facts_known)
        return 0;
    char control[CONFIG_PATH_MAX];
    if (mps_find_control(&a->cfg, control, sizeof control, e) < 0)
        return -1;
    a->mps = xcalloc(a->nresources + 1, sizeof *a->mps);
    const struct mps_hooks hooks = {agent_mps_state, a};
    for (unsigned r = 0; r < a->nresources; r++) {
        const struct plugin_resource *res = &a->resources[r];
        if (res->sharing != CONFIG_SHARING_MPS)
            continue;
        if (mps_start(&a->mps[r], &a->loop, &a->cfg, &a->inv, res, control, &hooks, e) < 0)
            return -1;
    }
    return 0;
}

void agent_mps_stop(struct agent *a)
{
    for (unsigned r = 0; a->mps && r < a->nresources; r++)
        mps_stop(a->mps[r]);
    free(a->mps);
    a->mps = NULL;
}
