/* The patch that makes one of NVIDIA's DaemonSets leave the nodes labelled
 * for gpulet. NVIDIA's chart gives its device plugin and GFD three ORed
 * node selector terms (NFD's PCI label, the CPU vendor for Tegra,
 * nvidia.com/gpu.present); its static manifest and dcgm-exporter's chart
 * give none. A requirement must therefore go into every term, or become
 * the one term: with it in only one, the other terms still match the
 * labelled node. */
#include "deploy/deploy.h"

#include <jansson.h>
#include <stdbool.h>
#include <string.h>

#include "util/jsonx.h"

#define DEPLOY_POD "/spec/template/spec"
#define DEPLOY_REQUIRED "requiredDuringSchedulingIgnoredDuringExecution"

/* {"key": key, "operator": "NotIn", "values": [value]} */
static json_t *deploy_expression(const char *key, const char *value)
{
    return jsonx_ok(json_pack("{s:s, s:s, s:[s]}", "key", key, "operator", "NotIn", "values",
                              value));
}

static bool deploy_has(const json_t *exprs, const json_t *want)
{
    size_t i;
    json_t *x;
    json_array_foreach(exprs, i, x) {
        if (json_equal(x, want))
            return true;
    }
    return false;
}

static void deploy_op(json_t *ops, const char *op, const char *path, json_t *value)
{
    jsonx_append(ops, jsonx_ok(json_pack("{s:s, s:s, s:o}", "op", op, "path", path, "value",
                                         value)));
}

/* The object at obj[key], or NULL; an error where it is there and not an
 * object. */
static int deploy_object(json_t *obj, const char *key, const char *where, json_t **out,
                         struct err *e)
{
    *out = obj ? json_object_get(obj, key) : NULL;
    if (*out && json_is_null(*out))
        *out = NULL;
    if (*out && !json_is_object(*out))
        return err_set(e, "%s.%s is not an object", where, key);
    return 0;
}

/* Where the affinity stops, the rest of it is added whole, one level down
 * from what exists: nothing else of the pod's affinity is replaced. */
static void deploy_add_missing(json_t *ops, json_t *affinity, json_t *node_affinity,
                               json_t *expr)
{
    json_t *value = jsonx_ok(json_pack("{s:[{s:[o]}]}", "nodeSelectorTerms", "matchExpressions",
                                       expr));
    const char *path = DEPLOY_POD "/affinity/nodeAffinity/" DEPLOY_REQUIRED;
    if (!node_affinity) {
        value = jsonx_ok(json_pack("{s:o}", DEPLOY_REQUIRED, value));
        path = DEPLOY_POD "/affinity/nodeAffinity";
    }
    if (!affinity) {
        value = jsonx_ok(json_pack("{s:o}", "nodeAffinity", value));
        path = DEPLOY_POD "/affinity";
    }
    deploy_op(ops, "add", path, value);
}

/* The requirement into each term that lacks it, after a test that the
 * terms are what was read. */
static int deploy_each_term(json_t *ops, json_t *terms, json_t *expr, struct err *e)
{
    const char *base = DEPLOY_POD "/affinity/nodeAffinity/" DEPLOY_REQUIRED "/nodeSelectorTerms";
    if (!json_is_array(terms) || json_array_size(terms) == 0)
        return err_set(e, "its nodeSelectorTerms is %s: it runs on no node",
                       json_is_array(terms) ? "empty" : "not a list");
    size_t i;
    json_t *term;
    bool added = false;
    json_array_foreach(terms, i, term) {
        if (!json_is_object(term))
            return err_set(e, "nodeSelectorTerms[%zu] is not an object", i);
        json_t *exprs = json_object_get(term, "matchExpressions");
        if (exprs && !json_is_null(exprs) && !json_is_array(exprs))
            return err_set(e, "nodeSelectorTerms[%zu].matchExpressions is not a list", i);
        if (exprs && json_is_array(exprs) && deploy_has(exprs, expr))
            continue;
        if (!added)
            deploy_op(ops, "test", base, json_deep_copy(terms));
        added = true;
        char path[256];
        bool list = exprs && json_is_array(exprs);
        snprintf(path, sizeof path, "%s/%zu/matchExpressions%s", base, i, list ? "/-" : "");
        deploy_op(ops, "add", path, list ? json_incref(expr) : jsonx_ok(json_pack("[O]", expr)));
    }
    return 0;
}

static int deploy_patch(json_t *root, json_t *ops, json_t *expr, struct err *e)
{
    json_t *spec, *tmpl, *pod, *affinity, *node_affinity, *required;
    if (!json_is_object(root))
        return err_set(e, "not a JSON object");
    if (deploy_object(root, "spec", "the object", &spec, e) < 0 ||
        deploy_object(spec, "template", "spec", &tmpl, e) < 0 ||
        deploy_object(tmpl, "spec", "spec.template", &pod, e) < 0)
        return -1;
    if (!pod)
        return err_set(e, "%s has no spec.template.spec: give a DaemonSet, as `kubectl get "
                          "daemonset NAME -o json` prints it",
                       json_is_string(json_object_get(root, "kind"))
                           ? json_string_value(json_object_get(root, "kind")) : "the object");
    if (deploy_object(pod, "affinity", "spec.template.spec", &affinity, e) < 0 ||
        deploy_object(affinity, "nodeAffinity", "affinity", &node_affinity, e) < 0 ||
        deploy_object(node_affinity, DEPLOY_REQUIRED, "nodeAffinity", &required, e) < 0)
        return -1;
    if (!required) {
        deploy_add_missing(ops, affinity, node_affinity, json_incref(expr));
        return 0;
    }
    return deploy_each_term(ops, json_object_get(required, "nodeSelectorTerms"), expr, e);
}

int deploy_replace_patch(const char *json, size_t len, const char *key, const char *value,
                         struct strbuf *out, int *already, struct err *e)
{
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return err_set(e, "not JSON: line %d, column %d: %s", je.line, je.column, je.text);
    json_t *ops = jsonx_ok(json_array());
    json_t *expr = deploy_expression(key, value);
    int rc = deploy_patch(root, ops, expr, e);
    if (rc == 0) {
        *already = json_array_size(ops) == 0;
        jsonx_dump(ops, JSON_COMPACT, out);
        strbuf_puts(out, "\n");
    }
    json_decref(expr);
    json_decref(ops);
    json_decref(root);
    return rc;
}
