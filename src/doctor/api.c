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
        snprintf(ns, nslen, "default"); /* the one namespace of a Node's Events */
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

/* The writes deploy/'s policies must refuse, each tried as a dry run (so
 * that nothing changes either way), where the configuration writes that
 * kind of object: the refusal must come from the policy named, so that a
 * policy missing, unbound or set to Warn is named. In path and body,
 * {node} is the token's node, {api} the version
 * of resource.k8s.io tried (v1, then v1beta1 where v1 is not served). */
static const struct api_probe {
    const char *policy;
    const char *what;
    const char *method, *path, *type, *body;
    unsigned use; /* 0: always */
} api_probes[] = {
    {"gpulet-node", "a label not gpulet's on its Node", "PATCH", "/api/v1/nodes/{node}?dryRun=All",
     "application/merge-patch+json", "{\"metadata\":{\"labels\":{\"example.com/gpulet-doctor-probe\":\"x\"}}}", 0},
    {"gpulet-node", "a label through nodes/status", "PATCH", "/api/v1/nodes/{node}/status?dryRun=All",
     "application/merge-patch+json", "{\"metadata\":{\"labels\":{\"example.com/gpulet-doctor-probe\":\"x\"}}}",
     USE_REPORT},
    {"gpulet-events", "an Event about another Node", "POST",
     "/api/v1/namespaces/default/events?dryRun=All", "application/json",
     "{\"apiVersion\":\"v1\",\"kind\":\"Event\",\"metadata\":{\"name\":\"{node}.d0c\"},"
     "\"involvedObject\":{\"kind\":\"Node\",\"name\":\"gpulet-doctor-probe-other\"},"
     "\"reason\":\"GPUUnhealthy\",\"message\":\"gpulet doctor's probe\",\"type\":\"Warning\"}", USE_REPORT},
    {"gpulet-resourceslices", "a slice named for another node, in its pool", "POST",
     "/apis/" DRA_GROUP "/{api}/resourceslices?dryRun=All", "application/json",
     "{\"apiVersion\":\"" DRA_GROUP "/{api}\",\"kind\":\"ResourceSlice\","
     "\"metadata\":{\"name\":\"gpulet-doctor-probe-other-" DRA_DRIVER "\"},"
     "\"spec\":{\"driver\":\"" DRA_DRIVER "\",\"nodeName\":\"{node}\",\"pool\":{\"name\":"
     "\"gpulet-doctor-probe-other\",\"generation\":1,\"resourceSliceCount\":1},\"devices\":[]}}",
     USE_DRA},
};

/* tmpl with {node} and {api} put in. */
static void api_expand(const char *tmpl, const char *node, const char *api, struct strbuf *out)
{
    static const char *const keys[] = {"{node}", "{api}"};
    const char *values[] = {node, api};
    for (const char *p = tmpl; *p;) {
        size_t k = 0;
        while (k < 2 && strncmp(p, keys[k], strlen(keys[k])))
            k++;
        if (k < 2) {
            strbuf_printf(out, "%s", values[k]);
            p += strlen(keys[k]);
        } else {
            strbuf_printf(out, "%c", *p++);
        }
    }
}

/* One probe: 1 refused by its policy, 0 accepted, -1 refused otherwise or
 * unanswered (why in e). */
static int api_probe_try(const struct kube_creds *creds, const struct api_probe *p, const char *node,
                         struct err *e)
{
    static const char *const versions[] = {"v1", "v1beta1"};
    char policy[128];
    snprintf(policy, sizeof policy, "ValidatingAdmissionPolicy '%s'", p->policy);
    struct kube_response resp = {0};
    int rc = 0;
    for (size_t v = 0; v < 2; v++) {
        struct strbuf path = {0}, body = {0};
        api_expand(p->path, node, versions[v], &path);
        api_expand(p->body, node, versions[v], &body);
        kube_response_free(&resp);
        rc = kube_request(creds, p->method, path.data, p->type, body.data, &resp, e);
        bool again = rc == 0 && resp.status == 404 && strstr(p->path, "{api}");
        strbuf_free(&path);
        strbuf_free(&body);
        if (!again)
            break;
    }
    if (rc == 0 && (resp.status == 200 || resp.status == 201))
        rc = 0;
    else if (rc == 0 && kube_policy_refused(resp.body.data) && strstr(resp.body.data, policy))
        rc = 1;
    else if (rc == 0)
        rc = err_set(e, "HTTP %ld%s%.200s", resp.status, resp.body.data ? ": " : "",
                     resp.body.data ? resp.body.data : "");
    kube_response_free(&resp);
    return rc;
}

/* Whether the API server runs NodeRestriction, which alone keeps a kubelet
 * from having a token made for a pod on another node (so the node a token
 * names is only as good as it): read from the API server's admission
 * metrics. 1 seen, 0 the metrics show admission but not it, -1 unknown
 * (why in e: gpulet's account may not read /metrics, as deploy/ has it). */
static int api_node_restriction(const struct kube_creds *creds, struct err *e)
{
    static const char family[] = "apiserver_admission_controller_admission_duration_seconds_count{";
    struct kube_response resp = {0};
    int rc = kube_request(creds, "GET", "/metrics", NULL, NULL, &resp, e);
    if (rc == 0 && resp.status != 200)
        rc = err_set(e, "the API server's /metrics answered HTTP %ld (gpulet's account may not read "
                     "it: bind the ClusterRole system:monitoring to it to have this confirmed)",
                     resp.status);
    else if (rc == 0 && !resp.body.data)
        rc = err_set(e, "the API server's /metrics is empty");
    else if (rc == 0) {
        rc = 0;
        bool any = false;
        for (const char *l = resp.body.data; (l = strstr(l, family)); l += sizeof family - 1) {
            any = true;
            const char *end = strchr(l, '}');
            const char *name = strstr(l, "name=\"NodeRestriction\"");
            if (name && end && name < end) {
                rc = 1;
                break;
            }
        }
        if (!any)
            rc = err_set(e, "the API server's /metrics has no admission metrics");
    }
    kube_response_free(&resp);
    return rc;
}

/* Whether the API server keeps these credentials' writes to their own node
 * (deploy/confine/): each probe above refused by its policy. */
static void api_confinement(struct doctor *d, const struct kube_creds *creds, const struct config *c,
                            unsigned asked, struct doctor_result *r)
{
    char user[256], node[256];
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
    struct strbuf open = {0}, odd = {0};
    unsigned tried = 0;
    for (size_t k = 0; k < sizeof api_probes / sizeof *api_probes; k++) {
        const struct api_probe *p = &api_probes[k];
        if (p->use && !(p->use & api_uses(c)))
            continue;
        doctor_step(d, "trying %s, which %s must refuse (dry run)", p->what, p->policy);
        int rc = api_probe_try(creds, p, node, &e);
        tried++;
        if (rc == 0)
            strbuf_printf(&open, "%s%s (policy %s missing, unbound or only warning)",
                          open.len ? "; " : "", p->what, p->policy);
        else if (rc < 0)
            strbuf_printf(&odd, "%s%s: %s", odd.len ? "; " : "", p->what, e.msg);
    }
    struct err why;
    int nr = open.len || odd.len ? 1 : api_node_restriction(creds, &why);
    if (open.len)
        doctor_set(r, DOCTOR_FAIL, "apply deploy/confine/ (and deploy/dra/ for DRA; Kubernetes 1.30 "
                   "or later; docs/deploy.md) and keep its bindings at Deny",
                   "all %u rights, and writes are NOT confined: %s may write %s, so it could write "
                   "other nodes' objects as well", asked, user, open.data);
    else if (odd.len)
        doctor_set(r, DOCTOR_WARN, NULL, "all %u rights; a probe was not refused by its policy: %s",
                   asked, odd.data);
    else if (nr == 0)
        doctor_set(r, DOCTOR_FAIL, "add NodeRestriction to the API server's --enable-admission-plugins",
                   "all %u rights; its writes are kept to node %s by the node its token names, but "
                   "the API server runs no NodeRestriction, so any node's kubelet can have a token "
                   "made that names another node", asked, node);
    else if (nr < 0)
        doctor_set(r, DOCTOR_WARN, "check that the API server's --enable-admission-plugins has "
                   "NodeRestriction (kubeadm and managed clusters do; docs/deploy.md)",
                   "all %u rights, and its writes are confined to node %s (each of %u dry-run writes "
                   "refused by its own policy), as far as the node its token names can be trusted: "
                   "NodeRestriction not confirmed: %s", asked, node, tried, why.msg);
    else
        doctor_set(r, DOCTOR_PASS, NULL, "all %u rights gpulet uses, and its writes are confined to "
                   "node %s (each of %u dry-run writes refused by its own policy; NodeRestriction "
                   "on)", asked, node, tried);
    strbuf_free(&open);
    strbuf_free(&odd);
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
