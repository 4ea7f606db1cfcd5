/* The agent's one client of the API server, and its Node watched: every
 * module that talks to the API server (labels, the fault report, DRA, the
 * node config) does so through these, so that one agent holds one
 * connection and one watch of its Node, whatever it publishes. */
#include "agent/internal.h"

#include <stdio.h>

#include "util/log.h"

void agent_kube_start(struct agent *a)
{
    const struct config *cfg = &a->cfg;
    if (!cfg->node_name[0] || (!cfg->kubeconfig[0] && !kube_in_cluster()))
        return;
    struct err e = {.msg = ""};
    if (kube_client_start(&a->kube, &a->loop, cfg->kubeconfig, &e) < 0) {
        log_error("the API server cannot be used: %s; labels, the fault report, DRA and the node "
                  "config are off", e.msg);
        return;
    }
    char what[200];
    snprintf(what, sizeof what, "Node %s", cfg->node_name);
    const struct kube_watch_spec spec = {"/api/v1/nodes", cfg->node_name, what};
    kube_watch_start(&a->node, a->kube, &spec, &e);
    log_info("API server %s (credentials: %s): one client for Node %s", kube_client_creds(a->kube)->server,
             kube_client_creds(a->kube)->source, cfg->node_name);
}

void agent_kube_stop(struct agent *a)
{
    kube_watch_stop(a->node);
    a->node = NULL;
    kube_client_close(a->kube); /* freed once a last request (the slice's delete) ends */
    a->kube = NULL;
}
