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

/* Who the credentials are (SelfSubjectReview): the user and the node its
 * token was issued for ("" for none); -1 where the server does not say. */
static int api_whoami(const struct kube_creds *creds, char *user, size_t ulen, char *node,
                      size_t nlen, struct err *e)
{
    struct kube_response resp = {0};
    int rc = kube_request(creds, "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                          "application/json",
                          "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":\"SelfSubjectReview\"}",
                          &resp, e);
    if (rc == 0 && resp.status != 201 && resp.status != 200)
        rc = err_set(e, "SelfSubjectReview: HTTP %ld", resp.status);
    if (rc == 0) {
        json_t *ans = json_loadb(resp.body.data, resp.body.len, 0, NULL);
        json_t *info = json_object_get(json_object_get(ans, "status"), "userInfo");
        const char *u = json_string_value(json_object_get(info, "username"));
        const char *n = json_string_value(json_array_get(
            json_object_get(json_object_get(info, "extra"), "authentication.kubernetes.io/node-name"), 0));
        snprintf(user, ulen, "%s", u ? u : "");
        snprintf(node, nlen, "%s", n ? n : "");
        json_decref(ans);
    }
    kube_response_free(&resp);
    return rc;
}

/* Whether the API server keeps these credentials' writes to their own node
 * (deploy/confine/): a write the policies must refuse, asked with dryRun
 * so that nothing changes either way: a label that is not gpulet's on its
 * own Node. */
static void api_confinement(struct doctor *d, const struct kube_creds *creds, const struct config *c,
                            unsigned asked, struct doctor_result *r)
{
    char user[256], node[256], path[512];
    struct err e;
    doctor_step(d, "asking the API server who these credentials are");
    if (api_whoami(creds, user, sizeof user, node, sizeof node, &e) < 0) {
        doctor_set(r, DOCTOR_WARN, NULL, "all %u rights; whether writes are confined is unknown: %s",
                   asked, e.msg);
        return;
    }
    if (!node[0]) {
        doctor_set(r, DOCTOR_WARN, "run doctor in gpulet's pod (kubectl exec), on Kubernetes 1.30 or later",
                   "all %u rights, but the credentials (%s) name no node, so no policy can keep "
                   "their writes to node %s: gpulet's pod token names its node from Kubernetes 1.30",
                   asked, user, c->node_name);
        return;
    }
    doctor_step(d, "trying a write the admission policies must refuse (dry run)");
    snprintf(path, sizeof path, "/api/v1/nodes/%s?dryRun=All", node);
    struct kube_response resp = {0};
    int rc = kube_request(creds, "PATCH", path, "application/merge-patch+json",
                          "{\"metadata\":{\"labels\":{\"example.com/gpulet-doctor-probe\":\"x\"}}}", &resp, &e);
    if (rc < 0)
        doctor_set(r, DOCTOR_WARN, NULL, "all %u rights; the dry-run write went unanswered: %s", asked, e.msg);
    else if (resp.status == 200)
        doctor_set(r, DOCTOR_FAIL, "apply deploy/confine/ (Kubernetes 1.30 or later; docs/deploy.md)",
                   "all %u rights, and writes are NOT confined: %s may set a label that is not "
                   "gpulet's on its Node (dry run), so it could write other nodes' objects as well", asked, user);
    else if ((resp.status == 403 || resp.status == 422) && kube_policy_refused(resp.body.data))
        doctor_set(r, DOCTOR_PASS, NULL, "all %u rights gpulet uses, and its writes are confined to "
                   "node %s (an admission policy refused a dry-run label that is not gpulet's)", asked, node);
    else
        doctor_set(r, DOCTOR_WARN, NULL, "all %u rights; the dry-run write answered HTTP %ld", asked,
                   resp.status);
    kube_response_free(&resp);
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
        api_confinement(d, &creds, c, asked, r);
    strbuf_free(&missing);
    kube_creds_free(&creds);
}
