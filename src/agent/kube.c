/* The agent's one client of the API server, and its Node watched: every
 * module that talks to the API server (labels, the fault report, DRA, the
 * node config) does so through these, so that one agent holds one
 * connection and one watch of its Node, whatever it publishes. */
#include "agent/internal.h"

#include <stdio.h>

#include "util/log.h"

/* What the configuration asks of the API server by name, for the error
 * when it cannot be had (NULL: nothing; --labels auto falls back to the
 * feature file, and the fault report is an extra). */
static const char *agent_kube_needed(const struct config *cfg)
{
    if (cfg->labels_output == CONFIG_LABELS_API)
        return "--labels api";
    if (cfg->dra == CONFIG_DRA_ALL)
        return "--dra all";
    return cfg->config_map[0] ? "--config-map" : NULL;
}

int agent_kube_check(const struct config *cfg, struct err *e)
{
    const char *need = agent_kube_needed(cfg);
    if (need && !cfg->node_name[0])
        return err_usage(e, "%s needs the Node's name: set NODE_NAME (from the downward API, "
                         "spec.nodeName) or --node-name", need);
    if (need && !cfg->kubeconfig[0] && !kube_in_cluster())
        return err_usage(e, "%s needs the API server, and there are no credentials: give "
                         "--kubeconfig, or run in a pod with its service account", need);
    return 0;
}

int agent_kube_start(struct agent *a, struct err *e)
{
    const struct config *cfg = &a->cfg;
    const char *need = agent_kube_needed(cfg); /* checked by agent_kube_check */
    if (!cfg->node_name[0] || (!cfg->kubeconfig[0] && !kube_in_cluster()))
        return 0;
    struct err why = {.msg = ""};
    if (kube_client_start(&a->kube, &a->loop, cfg->kubeconfig, &why) < 0) {
        if (need)
            return err_set(e, "%s needs the API server: %s", need, why.msg);
        log_error("the API server cannot be used: %s; the fault report is off", why.msg);
        return 0;
    }
    char what[200];
    snprintf(what, sizeof what, "Node %s", cfg->node_name);
    const struct kube_watch_spec spec = {"/api/v1/nodes", cfg->node_name, what};
    kube_watch_start(&a->node, a->kube, &spec, e);
    log_info("API server %s (credentials: %s): one client for Node %s", kube_client_creds(a->kube)->server,
             kube_client_creds(a->kube)->source, cfg->node_name);
    return 0;
}

void agent_kube_report(struct agent *a)
{
    unsigned n;
    const struct kube_request_row *rows = kube_client_requests(a->kube, &n);
    if (n)
        metrics_on_api(a->metrics, rows, n);
}

void agent_kube_stop(struct agent *a)
{
    kube_watch_stop(a->node);
    a->node = NULL;
    kube_client_close(a->kube); /* freed once a last request (the slice's delete) ends */
    a->kube = NULL;
}
