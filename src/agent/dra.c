/* The agent's side of DRA (src/dra): with --dra all the driver publishes
 * the GPUs and prepares claims, and no device plugin serves them. */
#include "agent/internal.h"

#include <string.h>

#include "util/log.h"

/* The settings a reload must compare. */
static bool agent_dra_same(const struct config *a, const struct config *b)
{
    return a->dra == b->dra && !strcmp(a->kubeconfig, b->kubeconfig) &&
           !strcmp(a->node_name, b->node_name) &&
           !strcmp(a->kubelet_registry_dir, b->kubelet_registry_dir) &&
           !strcmp(a->dra_plugin_dir, b->dra_plugin_dir);
}

void agent_dra_start(struct agent *a, const struct config *old)
{
    if (old && agent_dra_same(old, &a->cfg))
        return;
    agent_dra_stop(a);
    if (a->cfg.dra != CONFIG_DRA_ALL)
        return;
    struct err e;
    if (dra_start(&a->dra, &a->loop, &a->cfg, &a->inv, a->devs, &e) < 0)
        log_error("DRA: %s; the GPUs are not served", e.msg);
}

void agent_dra_refresh(struct agent *a)
{
    dra_on_device(a->dra);
}

void agent_dra_stop(struct agent *a)
{
    dra_stop(a->dra);
    a->dra = NULL;
}
