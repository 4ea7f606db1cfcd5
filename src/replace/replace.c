/* The patch that makes NVIDIA's DaemonSets leave the nodes labelled for
 * gpulet: for one DaemonSet, its JSON patch; for several (a List, or YAML
 * documents), a kubectl command for each of NVIDIA's, found by image or
 * chart label whatever the release named them. NVIDIA's chart gives its device plugin and GFD three ORed
 * node selector terms (NFD's PCI label, the CPU vendor for Tegra,
 * nvidia.com/gpu.present); its static manifest and dcgm-exporter's chart
 * give none. A requirement must therefore go into every term, or become
 * the one term: with it in only one, the other terms still match the
 * labelled node. */
#include "replace/replace.h"

#include <jansson.h>
#include <stdbool.h>
#include <string.h>

#include "util/jsonx.h"
#include "util/yjson.h"

#define REPLACE_POD "/spec/template/spec"
#define REPLACE_REQUIRED "requiredDuringSchedulingIgnoredDuringExecution"

/* {"key": key, "operator": "NotIn", "values": [value]} */
static json_t *replace_expression(const char *key, const char *value)
{
    return jsonx_ok(json_pack("{s:s, s:s, s:[s]}", "key", key, "operator", "NotIn", "values",
                              value));
}

static bool replace_has(const json_t *exprs, const json_t *want)
{
    size_t i;
    json_t *x;
    json_array_foreach(exprs, i, x) {
        if (json_equal(x, want))
            return true;
    }
    return false;
}

static void replace_op(json_t *ops, const char *op, const char *path, json_t *value)
{
    jsonx_append(ops, jsonx_ok(json_pack("{s:s, s:s, s:o}", "op", op, "path", path, "value",
                                         value)));
}

/* The object at obj[key], or NULL; an error where it is there and not an
 * object. */
static int replace_object(json_t *obj, const char *key, const char *where, json_t **out,
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
static void replace_add_missing(json_t *ops, json_t *affinity, json_t *node_affinity,
                               json_t *expr)
{
    json_t *value = jsonx_ok(json_pack("{s:[{s:[o]}]}", "nodeSelectorTerms", "matchExpressions",
                                       expr));
    const char *path = REPLACE_POD "/affinity/nodeAffinity/" REPLACE_REQUIRED;
    if (!node_affinity) {
        value = jsonx_ok(json_pack("{s:o}", REPLACE_REQUIRED, value));
        path = REPLACE_POD "/affinity/nodeAffinity";
    }
    if (!affinity) {
        value = jsonx_ok(json_pack("{s:o}", "nodeAffinity", value));
        path = REPLACE_POD "/affinity";
    }
    replace_op(ops, "add", path, value);
}

/* The requirement into each term that lacks it, after a test that the
 * terms are what was read. */
static int replace_each_term(json_t *ops, json_t *terms, json_t *expr, struct err *e)
{
    const char *base = REPLACE_POD "/affinity/nodeAffinity/" REPLACE_REQUIRED "/nodeSelectorTerms";
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
        if (exprs && json_is_array(exprs) && replace_has(exprs, expr))
            continue;
        if (!added)
            replace_op(ops, "test", base, json_deep_copy(terms));
        added = true;
        char path[256];
        bool list = exprs && json_is_array(exprs);
        snprintf(path, sizeof path, "%s/%zu/matchExpressions%s", base, i, list ? "/-" : "");
        replace_op(ops, "add", path, list ? json_incref(expr) : jsonx_ok(json_pack("[O]", expr)));
    }
    return 0;
}

static int replace_patch(json_t *root, json_t *ops, json_t *expr, struct err *e)
{
    json_t *spec, *tmpl, *pod, *affinity, *node_affinity, *required;
    if (!json_is_object(root))
        return err_set(e, "not a JSON object");
    if (replace_object(root, "spec", "the object", &spec, e) < 0 ||
        replace_object(spec, "template", "spec", &tmpl, e) < 0 ||
        replace_object(tmpl, "spec", "spec.template", &pod, e) < 0)
        return -1;
    if (!pod)
        return err_set(e, "%s has no spec.template.spec: give a DaemonSet, as `kubectl get "
                          "daemonset NAME -o yaml` (or -o json) prints it",
                       json_is_string(json_object_get(root, "kind"))
                           ? json_string_value(json_object_get(root, "kind")) : "the object");
    if (replace_object(pod, "affinity", "spec.template.spec", &affinity, e) < 0 ||
        replace_object(affinity, "nodeAffinity", "affinity", &node_affinity, e) < 0 ||
        replace_object(node_affinity, REPLACE_REQUIRED, "nodeAffinity", &required, e) < 0)
        return -1;
    if (!required) {
        replace_add_missing(ops, affinity, node_affinity, json_incref(expr));
        return 0;
    }
    return replace_each_term(ops, json_object_get(required, "nodeSelectorTerms"), expr, e);
}

/* The patch for one object into out; *already where it needs none. */
static int replace_one(json_t *obj, json_t *expr, struct strbuf *out, int *already, struct err *e)
{
    json_t *ops = jsonx_ok(json_array());
    int rc = replace_patch(obj, ops, expr, e);
    if (rc == 0) {
        *already = json_array_size(ops) == 0;
        jsonx_dump(ops, JSON_COMPACT, out);
    }
    json_decref(ops);
    return rc;
}

/* The objects of the input: JSON or YAML (one or several documents), each
 * a workload or a List of them (kubectl get ds -o yaml prints a List). */
static json_t *replace_objects(const char *text, size_t len, struct err *e)
{
    size_t lead = 0; /* text need not end in a NUL */
    while (lead < len && text[lead] && strchr(" \t\r\n", text[lead]))
        lead++;
    json_t *docs;
    if (lead < len && (text[lead] == '{' || text[lead] == '[')) {
        json_error_t je;
        json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
        if (!root) {
            err_set(e, "not JSON: line %d, column %d: %s", je.line, je.column, je.text);
            return NULL;
        }
        docs = jsonx_ok(json_pack("[o]", root));
    } else if (!(docs = yjson_load_all("the input", text, len, e))) {
        return NULL;
    }
    json_t *objects = jsonx_ok(json_array()), *doc, *item;
    size_t i, k;
    json_array_foreach(docs, i, doc) {
        json_t *items = json_object_get(doc, "items");
        if (json_is_array(items) && !json_object_get(doc, "spec"))
            json_array_foreach(items, k, item)
                jsonx_append(objects, json_incref(item));
        else if (!json_is_null(doc))
            jsonx_append(objects, json_incref(doc));
    }
    json_decref(docs);
    return objects;
}

/* Whether a workload is NVIDIA's device plugin, GFD, MPS control daemon or
 * dcgm-exporter, whatever its name: by its images' repositories, or the
 * app.kubernetes.io/name their charts set. */
static bool replace_nvidias(json_t *obj)
{
    static const char *const names[] = {"k8s-device-plugin", "nvidia-device-plugin",
                                        "gpu-feature-discovery", "dcgm-exporter",
                                        "nvidia-dcgm-exporter"};
    const char *app = json_string_value(json_object_get(
        json_object_get(json_object_get(obj, "metadata"), "labels"), "app.kubernetes.io/name"));
    json_t *pod = json_object_get(json_object_get(json_object_get(obj, "spec"), "template"), "spec");
    for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
        if (app && !strcmp(app, names[n]))
            return true;
        static const char *const lists[] = {"containers", "initContainers"};
        for (size_t l = 0; l < 2; l++) {
            size_t i;
            json_t *c;
            json_array_foreach(json_object_get(pod, lists[l]), i, c) {
                const char *image = json_string_value(json_object_get(c, "image"));
                const char *repo = image ? strrchr(image, '/') : NULL;
                repo = repo ? repo + 1 : image;
                size_t len = repo ? strcspn(repo, ":@") : 0;
                if (repo && len == strlen(names[n]) && !strncmp(repo, names[n], len))
                    return true;
            }
        }
    }
    return false;
}

/* A word for the shell, in single quotes. */
static void replace_quote(struct strbuf *out, const char *s)
{
    strbuf_puts(out, "'");
    for (; *s; s++) {
        if (*s == '\'')
            strbuf_puts(out, "'\\''");
        else
            strbuf_append(out, s, 1);
    }
    strbuf_puts(out, "'");
}

/* Several workloads: a kubectl patch command for each of NVIDIA's that
 * needs one; what was taken and left said in notes. */
static int replace_commands(json_t *objects, json_t *expr, struct strbuf *out, struct strbuf *notes,
                           struct err *e)
{
    size_t i;
    json_t *obj;
    json_array_foreach(objects, i, obj) {
        json_t *meta = json_object_get(obj, "metadata");
        const char *kind = json_string_value(json_object_get(obj, "kind"));
        const char *name = json_string_value(json_object_get(meta, "name"));
        const char *ns = json_string_value(json_object_get(meta, "namespace"));
        if (!kind || strcmp(kind, "DaemonSet") || !name)
            continue;
        if (!replace_nvidias(obj)) {
            strbuf_printf(notes, "left alone (not NVIDIA's): %s/%s\n", ns ? ns : "", name);
            continue;
        }
        struct strbuf patch = {0};
        int already = 0;
        struct err why;
        if (replace_one(obj, expr, &patch, &already, &why) < 0) {
            strbuf_free(&patch);
            return err_set(e, "DaemonSet %s/%s: %s", ns ? ns : "", name, why.msg);
        }
        if (already) {
            strbuf_printf(notes, "already leaves the labelled nodes: %s/%s\n", ns ? ns : "", name);
        } else {
            strbuf_puts(out, "kubectl");
            if (ns) {
                strbuf_puts(out, " -n ");
                replace_quote(out, ns);
            }
            strbuf_puts(out, " patch daemonset ");
            replace_quote(out, name);
            strbuf_puts(out, " --type json -p ");
            replace_quote(out, patch.data);
            strbuf_puts(out, "\n");
            strbuf_printf(notes, "patched: %s/%s\n", ns ? ns : "", name);
        }
        strbuf_free(&patch);
    }
    return 0;
}

int replace_nvidia(const char *text, size_t len, const char *key, const char *value,
                   struct strbuf *out, struct strbuf *notes, struct err *e)
{
    json_t *objects = replace_objects(text, len, e);
    if (objects && !json_array_size(objects)) {
        json_decref(objects);
        err_set(e, "no workload in it: give kubectl get daemonset's -o json or -o yaml");
        return -1;
    }
    if (!objects)
        return -1;
    json_t *expr = replace_expression(key, value);
    int rc = 0, already = 0;
    json_t *only = json_array_size(objects) == 1 ? json_array_get(objects, 0) : NULL;
    const char *kind = json_string_value(json_object_get(only, "kind"));
    if (only && (!kind || strcmp(kind, "List"))) {
        rc = replace_one(only, expr, out, &already, e);
        if (rc == 0) {
            strbuf_puts(out, "\n");
            if (already)
                strbuf_printf(notes, "it already leaves nodes labelled %s=%s\n", key, value);
        }
    } else {
        rc = replace_commands(objects, expr, out, notes, e);
        if (rc == 0 && !out->len)
            strbuf_puts(notes, "no DaemonSet of NVIDIA's needs a patch\n");
    }
    json_decref(expr);
    json_decref(objects);
    return rc;
}
