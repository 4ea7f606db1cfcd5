/* gpulet's rights on the API server, asked of the API server itself
 * (SelfSubjectAccessReview), one row per right its configuration uses: a
 * missing one says what goes without it, rather than a 403 in the log. */
#include "doctor/internal.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "dra/dra.h"
#include "kube/kube.h"
#include "util/jsonx.h"
#include "util/strbuf.h"

/* What a right is for; which configurations need it. */
enum api_use { USE_LABELS = 1, USE_REPORT = 2, USE_CONFIG = 4, USE_DRA = 8 };

static const struct api_right {
    const char *group, *verb, *resource, *subresource;
    unsigned use;
    const char *why;
} api_rights[] = {
    {"", "get", "nodes", "", USE_LABELS | USE_REPORT | USE_DRA,
     "node labels, the fault report and the slice's owner"},
    {"", "patch", "nodes", "", USE_LABELS | USE_REPORT, "node labels and the fault taint"},
    {"", "patch", "nodes", "status", USE_REPORT, "the Node condition GPUUnhealthy"},
    {"", "create", "events", "", USE_REPORT, "GPU events on the Node"},
    {"", "patch", "events", "", USE_REPORT, "GPU events' counts"},
    {"", "watch", "nodes", "", USE_CONFIG, "the per-node config label"},
    {"", "get", "configmaps", "", USE_CONFIG, "the per-node configs"},
    {"", "watch", "configmaps", "", USE_CONFIG, "the per-node configs"},
    {DRA_GROUP, "patch", "resourceslices", "", USE_DRA, "publishing the node's ResourceSlice"},
    {DRA_GROUP, "delete", "resourceslices", "", USE_DRA, "removing the slice on exit"},
    {DRA_GROUP, "watch", "resourceslices", "", USE_DRA, "publishing the slice again once deleted"},
    {DRA_GROUP, "get", "resourceclaims", "", USE_DRA, "preparing claims"},
    {"", "get", "pods", "", USE_DRA, "pod labels for the containers of claims"},
};

/* The configuration's uses of the API server. */
static unsigned api_uses(const struct config *c)
{
    bool labels = c->labels_output == CONFIG_LABELS_API || c->labels_output == CONFIG_LABELS_AUTO;
    return (labels ? USE_LABELS : 0) | (c->fault_report != CONFIG_REPORT_NONE ? USE_REPORT : 0) |
           (c->config_map[0] ? USE_CONFIG : 0) | (c->dra == CONFIG_DRA_ALL ? USE_DRA : 0);
}

/* The namespace and object a right is asked for. */
static void api_target(const struct config *c, const struct api_right *r, char *ns, size_t nslen,
                       char *name, size_t namelen)
{
    ns[0] = name[0] = '\0';
    if (!strcmp(r->resource, "resourceslices")) {
        dra_slice_name(NULL, c->node_name, 0, name, namelen);
    } else if (!strcmp(r->resource, "resourceclaims") || !strcmp(r->resource, "pods")) {
        return; /* any namespace's */
    } else if (!strcmp(r->resource, "nodes")) {
        snprintf(name, namelen, "%s", c->node_name);
    } else if (!strcmp(r->resource, "events")) {
        snprintf(ns, nslen, "default"); /* where the kubelet puts a Node's events too */
    } else {
        const char *slash = strchr(c->config_map, '/');
        if (slash) {
            snprintf(ns, nslen, "%.*s", (int)(slash - c->config_map), c->config_map);
            snprintf(name, namelen, "%s", slash + 1);
        } else {
            kube_namespace(ns, nslen);
            snprintf(name, namelen, "%s", c->config_map);
        }
    }
}

/* 1 allowed, 0 not, -1 the API server did not say (e). */
static int api_allowed(const struct kube_creds *creds, const struct config *c,
                       const struct api_right *r, struct err *e)
{
    char ns[128], name[256];
    api_target(c, r, ns, sizeof ns, name, sizeof name);
    json_t *req = jsonx_ok(json_pack("{s:s, s:s, s:{s:{s:s, s:s, s:s, s:s, s:s, s:s}}}", "apiVersion",
                                     "authorization.k8s.io/v1", "kind", "SelfSubjectAccessReview",
                                     "spec", "resourceAttributes", "group", r->group, "verb", r->verb,
                                     "resource", r->resource, "subresource", r->subresource,
                                     "namespace", ns, "name", name));
    struct strbuf body = {0};
    jsonx_dump(req, JSON_COMPACT, &body);
    json_decref(req);
    struct kube_response resp = {0};
    int rc = kube_request(creds, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                          "application/json", body.data, &resp, e);
    strbuf_free(&body);
    if (rc == 0 && resp.status != 201 && resp.status != 200)
        rc = err_set(e, "SelfSubjectAccessReview: HTTP %ld", resp.status);
    if (rc == 0) {
        json_t *ans = json_loadb(resp.body.data, resp.body.len, 0, NULL);
        json_t *allowed = json_object_get(json_object_get(ans, "status"), "allowed");
        rc = json_is_boolean(allowed) ? json_is_true(allowed)
                                      : err_set(e, "SelfSubjectAccessReview: no status.allowed");
        json_decref(ans);
    }
    kube_response_free(&resp);
    return rc;
}

void doctor_api_rights(struct doctor *d, struct doctor_result *r)
{
    const struct config *c = d->o->cfg;
    unsigned uses = api_uses(c);
    if ((!c->kubeconfig[0] && !kube_in_cluster()) || !c->node_name[0] || !uses) {
        doctor_set(r, DOCTOR_SKIP, NULL, "no API server to ask (or nothing gpulet asks of it)");
        return;
    }
    struct kube_creds creds = {0};
    struct err e;
    if (kube_creds_load(&creds, c->kubeconfig, &e) < 0) {
        doctor_set(r, DOCTOR_WARN, "check the kubeconfig or the pod's service account", "%s", e.msg);
        return;
    }
    struct strbuf missing = {0};
    unsigned asked = 0;
    int failed = 0;
    for (size_t k = 0; k < sizeof api_rights / sizeof *api_rights && !failed; k++) {
        const struct api_right *right = &api_rights[k];
        if (!(right->use & uses))
            continue;
        doctor_step(d, "asking the API server whether gpulet may %s %s%s%s", right->verb,
                    right->resource, right->subresource[0] ? "/" : "", right->subresource);
        int ok = api_allowed(&creds, c, right, &e);
        asked++;
        if (ok < 0)
            failed = 1;
        else if (!ok)
            strbuf_printf(&missing, "%s%s %s%s%s (%s)", missing.len ? "; " : "", right->verb,
                          right->resource, right->subresource[0] ? "/" : "", right->subresource,
                          right->why);
    }
    if (failed)
        doctor_set(r, DOCTOR_WARN, NULL, "cannot ask the API server: %s", e.msg);
    else if (missing.len)
        doctor_set(r, DOCTOR_WARN, "apply deploy/base/rbac.yaml (its ClusterRole lists each)",
                   "gpulet may not: %s", missing.data);
    else
        doctor_set(r, DOCTOR_PASS, NULL, "the API server allows all %u rights gpulet uses", asked);
    strbuf_free(&missing);
    kube_creds_free(&creds);
}
