/* gpulet replace-nvidia's patch: each of NVIDIA's DaemonSet shapes (the
 * chart's three ORed terms, the static manifest's none, a term of
 * matchFields only), a DaemonSet patched already, and bad input. The
 * patches are applied here as the API server would (add, test) and the
 * result read back. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replace/replace.h"
#include "testutil.h"

#define TERMS "/spec/template/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
#define EXPR "{\"key\":\"gpulet.io/replaces-nvidia\",\"operator\":\"NotIn\",\"values\":[\"true\"]}"

static const char chart[] =
    "{\"kind\":\"DaemonSet\",\"spec\":{\"template\":{\"spec\":{\"affinity\":{\"nodeAffinity\":"
    "{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":["
    "{\"matchExpressions\":[{\"key\":\"feature.node.kubernetes.io/pci-10de.present\","
    "\"operator\":\"In\",\"values\":[\"true\"]}]},"
    "{\"matchExpressions\":[{\"key\":\"feature.node.kubernetes.io/cpu-model.vendor_id\","
    "\"operator\":\"In\",\"values\":[\"NVIDIA\"]}]},"
    "{\"matchExpressions\":[{\"key\":\"nvidia.com/gpu.present\",\"operator\":\"In\","
    "\"values\":[\"true\"]}]}]}}},\"containers\":[]}}}}";

static json_t *patch_of(const char *ds, int *already)
{
    struct strbuf out = {0}, notes = {0};
    struct err e;
    assert_int_equal(replace_nvidia(ds, strlen(ds), REPLACE_LABEL_KEY, REPLACE_LABEL_VALUE, &out,
                                    &notes, &e), 0);
    *already = notes.data && strstr(notes.data, "already") != NULL;
    json_t *p = json_loads(out.data, 0, NULL);
    strbuf_free(&out);
    strbuf_free(&notes);
    assert_non_null(p);
    return p;
}

/* The value at a JSON pointer of doc (numbers index arrays), or NULL. */
static json_t *at(json_t *doc, const char *pointer)
{
    char buf[512], *save = NULL;
    snprintf(buf, sizeof buf, "%s", pointer);
    for (char *t = strtok_r(buf, "/", &save); t && doc; t = strtok_r(NULL, "/", &save))
        doc = json_is_array(doc) ? json_array_get(doc, strtoul(t, NULL, 10)) : json_object_get(doc, t);
    return doc;
}

/* Applies patch to doc as RFC 6902 does for the ops the patch uses. */
static void apply(json_t *doc, json_t *patch)
{
    size_t i;
    json_t *op;
    json_array_foreach(patch, i, op) {
        const char *kind = json_string_value(json_object_get(op, "op"));
        char path[512];
        snprintf(path, sizeof path, "%s", json_string_value(json_object_get(op, "path")));
        json_t *value = json_object_get(op, "value");
        if (!strcmp(kind, "test")) {
            assert_true(json_equal(at(doc, path), value));
            continue;
        }
        assert_string_equal(kind, "add");
        char *last = strrchr(path, '/');
        *last = '\0';
        json_t *parent = at(doc, path);
        assert_non_null(parent);
        if (!strcmp(last + 1, "-"))
            json_array_append(parent, value);
        else
            json_object_set(parent, last + 1, value);
    }
}

static void test_chart_every_term(void **state)
{
    (void)state;
    int already = -1;
    json_t *patch = patch_of(chart, &already);
    assert_int_equal(already, 0);
    assert_int_equal(json_array_size(patch), 4); /* a test, then one add per term */
    assert_string_equal(json_string_value(json_object_get(json_array_get(patch, 0), "op")), "test");
    json_t *doc = json_loads(chart, 0, NULL), *expr = json_loads(EXPR, 0, NULL);
    apply(doc, patch);
    for (int t = 0; t < 3; t++) {
        char p[300];
        snprintf(p, sizeof p, TERMS "/%d/matchExpressions", t);
        assert_int_equal(json_array_size(at(doc, p)), 2);
        assert_true(json_equal(json_array_get(at(doc, p), 1), expr));
    }
    /* Patched once, the DaemonSet needs nothing more. */
    char *again = json_dumps(doc, JSON_COMPACT);
    json_decref(patch);
    patch = patch_of(again, &already);
    assert_int_equal(already, 1);
    assert_int_equal(json_array_size(patch), 0);
    free(again);
    json_decref(patch);
    json_decref(doc);
    json_decref(expr);
}

static void test_no_affinity_gets_one_term(void **state)
{
    (void)state;
    static const char *const shapes[] = {
        "{\"spec\":{\"template\":{\"spec\":{\"containers\":[],\"nodeSelector\":{\"a\":\"b\"}}}}}",
        "{\"spec\":{\"template\":{\"spec\":{\"affinity\":{\"podAffinity\":{}}}}}}",
        ("{\"spec\":{\"template\":{\"spec\":{\"affinity\":{\"nodeAffinity\":"
         "{\"preferredDuringSchedulingIgnoredDuringExecution\":[]}}}}}}"),
        "{\"spec\":{\"template\":{\"spec\":{\"affinity\":null}}}}",
    };
    json_t *expr = json_loads(EXPR, 0, NULL);
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int already = -1;
        json_t *patch = patch_of(shapes[i], &already), *doc = json_loads(shapes[i], 0, NULL);
        assert_int_equal(already, 0);
        assert_int_equal(json_array_size(patch), 1);
        if (json_is_null(at(doc, "/spec/template/spec/affinity")))
            json_object_del(at(doc, "/spec/template/spec"), "affinity");
        apply(doc, patch);
        assert_int_equal(json_array_size(at(doc, TERMS)), 1);
        assert_true(json_equal(at(doc, TERMS "/0/matchExpressions/0"), expr));
        /* Nothing else of the affinity is replaced. */
        if (i == 1)
            assert_non_null(at(doc, "/spec/template/spec/affinity/podAffinity"));
        if (i == 2)
            assert_non_null(at(doc, "/spec/template/spec/affinity/nodeAffinity/"
                                    "preferredDuringSchedulingIgnoredDuringExecution"));
        json_decref(patch);
        json_decref(doc);
    }
    json_decref(expr);
}

static void test_match_fields_term(void **state)
{
    (void)state;
    const char *ds = "{\"spec\":{\"template\":{\"spec\":{\"affinity\":{\"nodeAffinity\":"
                     "{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":["
                     "{\"matchFields\":[{\"key\":\"metadata.name\",\"operator\":\"In\","
                     "\"values\":[\"gpu-1\"]}]}]}}}}}}}";
    int already;
    json_t *patch = patch_of(ds, &already), *doc = json_loads(ds, 0, NULL);
    apply(doc, patch);
    assert_non_null(at(doc, TERMS "/0/matchFields/0"));
    assert_string_equal(json_string_value(at(doc, TERMS "/0/matchExpressions/0/operator")), "NotIn");
    json_decref(patch);
    json_decref(doc);
}

static void test_bad_input(void **state)
{
    (void)state;
    static const struct { const char *in, *msg; } cases[] = {
        {"", "no workload in it"},
        {"kind: [", "the input:2:1: did not find expected node content"},
        {"[1]", "not a JSON object"},
        {"{\"kind\":\"Service\",\"spec\":{}}", "Service has no spec.template.spec"},
        {"{\"spec\":{\"template\":7}}", "spec.template is not an object"},
        {"{\"spec\":{\"template\":{\"spec\":{\"affinity\":{\"nodeAffinity\":"
         "{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":[]}}}}}}}",
         "nodeSelectorTerms is empty"},
        {"{\"spec\":{\"template\":{\"spec\":{\"affinity\":{\"nodeAffinity\":"
         "{\"requiredDuringSchedulingIgnoredDuringExecution\":{\"nodeSelectorTerms\":[3]}}}}}}}",
         "nodeSelectorTerms[0] is not an object"},
        {"{\"a\":1,\"a\":2}", "duplicate"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct strbuf out = {0}, notes = {0};
        struct err e;
        assert_int_equal(replace_nvidia(cases[i].in, strlen(cases[i].in), "k", "v", &out, &notes,
                                        &e), -1);
        assert_contains(e.msg, cases[i].msg);
        assert_null(out.data);
        strbuf_free(&notes);
    }
}

/* What kubectl get ds -o yaml prints for a chart install named "nvdp": a
 * List of the device plugin, GFD and the MPS control daemon (all NVIDIA's,
 * by image or chart label), beside a DaemonSet of someone else's. A
 * kubectl patch command for each of NVIDIA's, none for the other. */
static void test_yaml_list_finds_nvidias(void **state)
{
    (void)state;
    static const char list[] =
        "apiVersion: v1\n"
        "kind: List\n"
        "items:\n"
        "- apiVersion: apps/v1\n"
        "  kind: DaemonSet\n"
        "  metadata: {name: nvdp-nvidia-device-plugin, namespace: nvidia}\n"
        "  spec:\n"
        "    template:\n"
        "      spec:\n"
        "        containers:\n"
        "        - {name: p, image: \"nvcr.io/nvidia/k8s-device-plugin:v0.17.1\"}\n"
        "- apiVersion: apps/v1\n"
        "  kind: DaemonSet\n"
        "  metadata:\n"
        "    name: nvdp-gpu-feature-discovery\n"
        "    namespace: nvidia\n"
        "    labels: {app.kubernetes.io/name: gpu-feature-discovery}\n"
        "  spec: {template: {spec: {containers: [{name: g, image: busybox}]}}}\n"
        "- apiVersion: apps/v1\n"
        "  kind: DaemonSet\n"
        "  metadata: {name: nvdp-nvidia-device-plugin-mps-control-daemon, namespace: nvidia}\n"
        "  spec:\n"
        "    template:\n"
        "      spec:\n"
        "        nodeSelector: {nvidia.com/mps.capable: \"true\"}\n"
        "        initContainers: [{name: mount-shm, image: \"nvcr.io/nvidia/k8s-device-plugin@sha256:ab\"}]\n"
        "        containers: [{name: m, image: \"nvcr.io/nvidia/k8s-device-plugin:v0.17.1\"}]\n"
        "- apiVersion: apps/v1\n"
        "  kind: DaemonSet\n"
        "  metadata: {name: fluentd, namespace: nvidia}\n"
        "  spec: {template: {spec: {containers: [{name: f, image: fluentd}]}}}\n";
    struct strbuf out = {0}, notes = {0};
    struct err e;
    assert_int_equal(replace_nvidia(list, strlen(list), REPLACE_LABEL_KEY, REPLACE_LABEL_VALUE, &out,
                                    &notes, &e), 0);
    assert_contains(out.data, "kubectl -n 'nvidia' patch daemonset 'nvdp-nvidia-device-plugin' "
                              "--type json -p '[{");
    assert_contains(out.data, "patch daemonset 'nvdp-gpu-feature-discovery'");
    assert_contains(out.data, "patch daemonset 'nvdp-nvidia-device-plugin-mps-control-daemon'");
    assert_null(strstr(out.data, "fluentd"));
    assert_contains(notes.data, "left alone (not NVIDIA's): nvidia/fluentd");
    size_t lines = 0;
    for (const char *p = out.data; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 3);
    strbuf_free(&out);
    strbuf_free(&notes);
}

/* One DaemonSet in YAML, as -o yaml prints it: the same patch as its JSON. */
static void test_yaml_one(void **state)
{
    (void)state;
    static const char yaml[] = "kind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n"
                               "    spec:\n      containers: []\n";
    int already;
    json_t *from_yaml = patch_of(yaml, &already);
    json_t *from_json = patch_of("{\"kind\":\"DaemonSet\",\"metadata\":{\"name\":\"x\"},"
                                 "\"spec\":{\"template\":{\"spec\":{\"containers\":[]}}}}", &already);
    assert_true(json_equal(from_yaml, from_json));
    json_decref(from_yaml);
    json_decref(from_json);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chart_every_term),
        cmocka_unit_test(test_no_affinity_gets_one_term),
        cmocka_unit_test(test_match_fields_term),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_yaml_list_finds_nvidias),
        cmocka_unit_test(test_yaml_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
