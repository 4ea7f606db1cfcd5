/* Kubernetes credentials: kubeconfig contexts, files relative to the
 * kubeconfig, *-data fields, the service account, and clear errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube/kube.h"
#include "util/backoff.h"
#include "testutil.h"

static const char kubeconfig[] =
    "apiVersion: v1\n"
    "kind: Config\n"
    "current-context: ctx\n"
    "clusters:\n"
    "- name: other\n"
    "  cluster: {server: https://10.0.0.1:6443}\n"
    "- name: c\n"
    "  cluster:\n"
    "    server: https://127.0.0.1:6443/\n"
    "    certificate-authority: pki/ca.crt\n"
    "contexts:\n"
    "- name: ctx\n"
    "  context: {cluster: c, user: u}\n"
    "users:\n"
    "- name: u\n"
    "  user:\n"
    "    client-certificate-data: aGVsbG8=\n"
    "    client-key: /abs/key.pem\n"
    "    token: abc\n";

static int parse(const char *text, struct kube_creds *c, struct err *e)
{
    return kube_creds_parse(c, "kc.yaml", "/home/me/.kube", text, strlen(text), e);
}

static void test_kubeconfig(void **state)
{
    (void)state;
    struct kube_creds c;
    struct err e;
    if (parse(kubeconfig, &c, &e) < 0)
        fail_msg("%s", e.msg);
    assert_string_equal(c.server, "https://127.0.0.1:6443");
    assert_string_equal(c.ca_file, "/home/me/.kube/pki/ca.crt");
    assert_string_equal(c.cert_pem.data, "hello");
    assert_string_equal(c.key_file, "/abs/key.pem");
    assert_string_equal(c.token.data, "abc");
    assert_false(c.insecure);
    kube_creds_free(&c);
}

static void expect_error(const char *text, const char *what)
{
    struct kube_creds c;
    struct err e;
    if (parse(text, &c, &e) == 0)
        fail_msg("accepted:\n%s", text);
    assert_contains(e.msg, "kc.yaml");
    assert_contains(e.msg, what);
}

static void test_kubeconfig_errors(void **state)
{
    (void)state;
    expect_error("", "a kubeconfig must be a mapping");
    expect_error("[1, 2]", "a kubeconfig must be a mapping");
    expect_error("clusters: []\n", "no current-context");
    expect_error("current-context: x\n", "contexts must be a list");
    expect_error("current-context: x\ncontexts: []\n", "no context named 'x'");
    expect_error("current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
                 "clusters: [{name: c, cluster: {server: ftp://h}}]\n", "is not an http(s) URL");
    expect_error("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                 "clusters: [{name: c, cluster: {server: https://h}}]\n"
                 "users: [{name: u, user: {client-key-data: '%%%'}}]\n", "client-key-data is not base64");
    expect_error("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
                 "clusters: [{name: c, cluster: {server: https://h}}]\n"
                 "users: [{name: u, user: {exec: {command: aws}}}]\n", "exec and auth-provider");
    expect_error("current-context: x\ncontexts: [{name: x, context: 7}]\n", "has no context mapping");
    expect_error("current-context: [x]\n", "current-context");
}

static void test_base64(void **state)
{
    (void)state;
    struct strbuf b = {0};
    assert_true(kube_base64_decode("LS0tLS1CRUdJTg==", 16, &b));
    assert_string_equal(b.data, "-----BEGIN");
    strbuf_free(&b);
    assert_true(kube_base64_decode("", 0, &b));
    assert_int_equal(b.len, 0);
    strbuf_free(&b);
    assert_false(kube_base64_decode("ab*c", 4, &b));
    strbuf_free(&b);
}

static void test_service_account(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpulet-sa-XXXXXX", path[96];
    assert_non_null(mkdtemp(dir));
    struct kube_creds c;
    struct err e;
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_false(kube_in_cluster());
    assert_int_equal(kube_creds_load(&c, NULL, &e), -1);
    assert_contains(e.msg, "KUBERNETES_SERVICE_HOST is not set");
    setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    setenv("GPULET_SERVICEACCOUNT_DIR", dir, 1);
    assert_int_equal(kube_creds_load(&c, "", &e), -1);
    assert_contains(e.msg, "token");
    snprintf(path, sizeof path, "%s/token", dir);
    FILE *f = fopen(path, "w");
    fputs("tok\n", f);
    fclose(f);
    assert_int_equal(kube_creds_load(&c, "", &e), 0);
    assert_string_equal(c.server, "https://[fd00::1]:443");
    assert_string_equal(c.token_file, path);
    kube_creds_free(&c);
    unlink(path);
    rmdir(dir);
    assert_int_equal(kube_creds_load(&c, "/nonexistent/kubeconfig", &e), -1);
    assert_contains(e.msg, "/nonexistent/kubeconfig");
    unsetenv("KUBERNETES_SERVICE_HOST");
}

/* No server listens: one error naming the server, no crash. */
static void test_request_unreachable(void **state)
{
    (void)state;
    struct kube_creds c;
    struct err e;
    const char *kc = "current-context: x\ncontexts: [{name: x, context: {cluster: c}}]\n"
                     "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n";
    assert_int_equal(parse(kc, &c, &e), 0);
    if (kube_client_init(&e) < 0)
        skip();
    struct kube_response r;
    assert_int_equal(kube_request(&c, "GET", "/api/v1/nodes/x", NULL, NULL, &r, &e), -1);
    assert_contains(e.msg, "GET http://127.0.0.1:1/api/v1/nodes/x");
    assert_int_equal(r.status, 0);
    kube_creds_free(&c);
}

/* The one backoff: doubling from min to max, each wait within a fifth of
 * its step, and back to min after a success (step 0). */
static void test_backoff_bounds(void **state)
{
    (void)state;
    unsigned step = 0, want = KUBE_RETRY_MIN_MS;
    for (int i = 0; i < 12; i++) {
        unsigned wait = backoff_next(&step, KUBE_RETRY_MIN_MS, KUBE_RETRY_MAX_MS);
        assert_int_equal(step, want);
        assert_true(wait >= want - want / 5 && wait <= want + want / 5);
        want = want * 2 > KUBE_RETRY_MAX_MS ? KUBE_RETRY_MAX_MS : want * 2;
    }
    step = 0;
    backoff_next(&step, KUBE_RETRY_MIN_MS, KUBE_RETRY_MAX_MS);
    assert_int_equal(step, KUBE_RETRY_MIN_MS);
}

/* A watch's lines: each kind of event with its object; anything else, and
 * an event without an object, is no event. */
static void test_watch_events(void **state)
{
    (void)state;
    static const struct { const char *line; enum kube_event kind; } cases[] = {
        {"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\"}}}", KUBE_EVENT_SET},
        {"{\"type\":\"MODIFIED\",\"object\":{}}", KUBE_EVENT_SET},
        {"{\"type\":\"DELETED\",\"object\":{}}", KUBE_EVENT_DELETED},
        {"{\"type\":\"BOOKMARK\",\"object\":{}}", KUBE_EVENT_BOOKMARK},
        {"{\"type\":\"ERROR\",\"object\":{\"code\":410}}", KUBE_EVENT_ERROR},
        {"{\"type\":\"ADDED\"}", KUBE_EVENT_BAD},
        {"{\"type\":\"ADDED\",\"object\":[]}", KUBE_EVENT_BAD},
        {"{\"type\":\"SOMETHING\",\"object\":{}}", KUBE_EVENT_BAD},
        {"not json", KUBE_EVENT_BAD},
        {"", KUBE_EVENT_BAD},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *obj;
        assert_int_equal(kube_event_parse(cases[i].line, strlen(cases[i].line), &obj), cases[i].kind);
        assert_true((obj != NULL) == (cases[i].kind != KUBE_EVENT_BAD));
        json_decref(obj);
    }
}

/* One line per answer: RBAC's 403 names the right, an admission policy's
 * 403 (deploy/confine/) its own message, any other status the server's. */
static void test_explain(void **state)
{
    (void)state;
    char out[1024];
    static const char rbac[] = "{\"kind\":\"Status\",\"message\":\"nodes \\\"n2\\\" is forbidden: "
                               "User \\\"x\\\" cannot patch resource \\\"nodes\\\"\"}";
    struct kube_answer a = {.status = 403, .body = rbac, .len = sizeof rbac - 1};
    kube_explain("PATCH /api/v1/nodes/n2", "patch on nodes", &a, out, sizeof out);
    assert_string_equal(out, "PATCH /api/v1/nodes/n2: 403 Forbidden: the service account needs patch "
                             "on nodes (deploy/base/rbac.yaml)");
    static const char vap[] = "{\"kind\":\"Status\",\"message\":\"nodes \\\"n2\\\" is forbidden: "
                              "ValidatingAdmissionPolicy 'gpulet-node' with binding 'gpulet-node' denied "
                              "request: gpulet of node n1 may not change Node n2\"}";
    a = (struct kube_answer){.status = 403, .body = vap, .len = sizeof vap - 1};
    kube_explain("PATCH /api/v1/nodes/n2", "patch on nodes", &a, out, sizeof out);
    assert_non_null(strstr(out, "refused by the cluster's admission policy: "));
    assert_non_null(strstr(out, "'gpulet-node' with binding 'gpulet-node' denied request: gpulet of node "
                                "n1 may not change Node n2"));
    a = (struct kube_answer){.status = 0, .error = "connection refused"};
    kube_explain("GET x", "get", &a, out, sizeof out);
    assert_string_equal(out, "connection refused");
}

/* The resource a request's path names, for gpulet_api_requests_total. */
static void test_path_resource(void **state)
{
    (void)state;
    static const char *const cases[][2] = {
        {"/api/v1/nodes/n1", "nodes"},
        {"/api/v1/nodes/n1/status", "nodes/status"},
        {"/api/v1/nodes?fieldSelector=metadata.name%3Dn1&watch=1", "nodes"},
        {"/api/v1/namespaces/default/events", "events"},
        {"/api/v1/namespaces/default/events/n1.1a", "events"},
        {"/apis/resource.k8s.io/v1/resourceslices/n1-gpu.nvidia.com", "resourceslices"},
        {"/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c", "resourceclaims"},
        {"/apis/resource.k8s.io/v1", "discovery"},
        {"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "selfsubjectaccessreviews"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[64];
        kube_path_resource(cases[i][0], out, sizeof out);
        assert_string_equal(out, cases[i][1]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kubeconfig),
        cmocka_unit_test(test_path_resource),
        cmocka_unit_test(test_kubeconfig_errors),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_service_account),
        cmocka_unit_test(test_request_unreachable),
        cmocka_unit_test(test_backoff_bounds),
        cmocka_unit_test(test_watch_events),
        cmocka_unit_test(test_explain),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
