/* The control plane's view of GPU faults: reasons, the condition, its
 * patch (the transition time kept while the status stays), the taint's
 * patch (others' taints kept, a foreign one of gpulet's key never
 * touched), event bodies; the taint's fault list. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/report.h"
#include "testutil.h"

static struct report_gpu gpu(unsigned i, enum health_reason r, unsigned xid, const char *detail)
{
    struct report_gpu g;
    memset(&g, 0, sizeof g);
    g.index = i;
    g.mig = -1;
    snprintf(g.uuid, sizeof g.uuid, "GPU-%u", i);
    g.health.reason = r;
    g.health.xid = xid;
    snprintf(g.health.detail, sizeof g.health.detail, "%s", detail);
    return g;
}

static void test_reasons(void **state)
{
    (void)state;
    char b[64];
    struct report_gpu g = gpu(0, HEALTH_LOST, 79, "XID 79: fallen off the bus");
    assert_string_equal(report_reason(&g.health, b, sizeof b), "XID79");
    g.health.xid = 0;
    assert_string_equal(report_reason(&g.health, b, sizeof b), "GPULost");
    g.health.reason = HEALTH_HUNG;
    assert_string_equal(report_reason(&g.health, b, sizeof b), "GPUHung");
    g.health.reason = HEALTH_ECC;
    assert_string_equal(report_reason(&g.health, b, sizeof b), "ECCUncorrectable");
    g.health.reason = HEALTH_XID;
    g.health.xid = 94;
    assert_string_equal(report_reason(&g.health, b, sizeof b), "XID94");
}

static void test_condition(void **state)
{
    (void)state;
    struct report_gpu g[3] = {gpu(0, HEALTH_OK, 0, ""), gpu(1, HEALTH_XID, 94, "XID 94"),
                              gpu(2, HEALTH_HUNG, 0, "hung: nvmlDeviceGetPowerUsage has not returned for 10 s")};
    struct report_condition c;
    report_condition_build(g, 1, &c);
    assert_false(c.unhealthy);
    assert_string_equal(c.reason, "GPUsHealthy");
    report_condition_build(g, 3, &c);
    assert_true(c.unhealthy);
    assert_string_equal(c.reason, "GPUHung"); /* the worst */
    assert_string_equal(c.message, "2 of 3 GPUs unhealthy: GPU 1 (GPU-1): XID 94; GPU 2 (GPU-2): "
                                   "hung: nvmlDeviceGetPowerUsage has not returned for 10 s");
    /* A fault in one MIG device of a healthy GPU: the condition names it. */
    struct report_gpu m[3] = {gpu(0, HEALTH_OK, 0, ""), gpu(0, HEALTH_OK, 0, ""),
                              gpu(1, HEALTH_OK, 0, "")};
    m[1].mig = 2;
    m[1].health = (struct gpu_health){.reason = HEALTH_XID, .xid = 94, .detail = "XID 94"};
    snprintf(m[1].uuid, sizeof m[1].uuid, "MIG-a");
    snprintf(m[1].profile, sizeof m[1].profile, "1g.10gb");
    report_condition_build(m, 3, &c);
    assert_true(c.unhealthy);
    assert_string_equal(c.reason, "XID94");
    assert_string_equal(c.message, "1 of 2 GPUs unhealthy: GPU 0 MIG device 0:2 1g.10gb (MIG-a): XID 94");
}

static char *patch_of(const char *node, const struct report_condition *c)
{
    struct strbuf p = {0};
    struct err e;
    json_t *obj = json_loads(node, 0, NULL); /* as the watch hands it */
    assert_int_equal(report_condition_patch(obj, c, "2026-11-26T12:00:00Z", &p, &e), 0);
    json_decref(obj);
    return p.data;
}

static void test_condition_patch(void **state)
{
    (void)state;
    struct report_gpu g = gpu(3, HEALTH_LOST, 79, "XID 79: fallen off the bus");
    struct report_condition bad, good;
    report_condition_build(&g, 1, &bad);
    g.health.reason = HEALTH_OK;
    report_condition_build(&g, 1, &good);
    /* A Node without it: set, transition now. */
    char *p = patch_of("{\"metadata\":{\"name\":\"n\"}}", &bad);
    json_t *j = json_loads(p, 0, NULL);
    json_t *c = json_array_get(json_object_get(json_object_get(j, "status"), "conditions"), 0);
    assert_string_equal(json_string_value(json_object_get(c, "type")), "GPUUnhealthy");
    assert_string_equal(json_string_value(json_object_get(c, "status")), "True");
    assert_string_equal(json_string_value(json_object_get(c, "reason")), "XID79");
    assert_string_equal(json_string_value(json_object_get(c, "lastTransitionTime")), "2026-11-26T12:00:00Z");
    json_decref(j);
    free(p);
    /* A fault with its time: the transition is when it began, the time its
     * DRA taints say (timeAdded), not when the patch is made. */
    struct report_gpu timed = g;
    timed.health.reason = HEALTH_LOST;
    timed.health.since_ms = 1795694398250LL; /* 2026-11-26T11:59:58.25Z */
    struct report_condition at;
    report_condition_build(&timed, 1, &at);
    p = patch_of("{\"metadata\":{\"name\":\"n\"}}", &at);
    assert_non_null(strstr(p, "\"lastTransitionTime\":\"2026-11-26T11:59:58Z\""));
    free(p);
    /* The same: no patch. The same status, another message: the transition time stays. */
    char node[2400];
    snprintf(node, sizeof node, "{\"metadata\":{},\"status\":{\"conditions\":[{\"type\":\"Ready\","
             "\"status\":\"True\"},{\"type\":\"GPUUnhealthy\",\"status\":\"True\",\"reason\":\"%s\","
             "\"message\":\"%s\",\"lastTransitionTime\":\"2026-01-01T00:00:00Z\"}]}}", bad.reason,
             bad.message);
    p = patch_of(node, &bad);
    assert_null(p);
    struct report_condition other = bad;
    snprintf(other.message, sizeof other.message, "another");
    p = patch_of(node, &other);
    assert_non_null(strstr(p, "\"lastTransitionTime\":\"2026-01-01T00:00:00Z\""));
    assert_null(strstr(p, "Ready")); /* only its own condition */
    free(p);
    p = patch_of(node, &good);
    assert_non_null(strstr(p, "\"status\":\"False\""));
    assert_non_null(strstr(p, "\"lastTransitionTime\":\"2026-11-26T12:00:00Z\""));
    free(p);
    struct strbuf s = {0};
    struct err e;
    json_t *list = json_array();
    assert_int_equal(report_condition_patch(list, &good, "x", &s, &e), -1);
    json_decref(list);
    assert_contains(e.msg, "not a Node object");
}

static json_t *taint_patch(const char *node, const char *value, bool *foreign)
{
    struct strbuf p = {0};
    struct err e;
    json_t *obj = json_loads(node, 0, NULL);
    assert_int_equal(report_taint_patch(obj, value, &p, foreign, &e), 0);
    json_decref(obj);
    json_t *j = p.data ? json_loads(p.data, 0, NULL) : NULL;
    strbuf_free(&p);
    return j;
}

static void test_taint_patch(void **state)
{
    (void)state;
    bool foreign;
    const char *plain = "{\"metadata\":{\"resourceVersion\":\"7\"},\"spec\":{\"taints\":"
                        "[{\"key\":\"other\",\"effect\":\"NoExecute\"}]}}";
    json_t *p = taint_patch(plain, "XID79", &foreign);
    assert_false(foreign);
    json_t *taints = json_object_get(json_object_get(p, "spec"), "taints");
    assert_int_equal(json_array_size(taints), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(taints, 0), "key")), "other");
    assert_string_equal(json_string_value(json_object_get(json_array_get(taints, 1), "value")), "XID79");
    assert_string_equal(json_string_value(json_object_get(json_object_get(p, "metadata"),
                                                           "resourceVersion")), "7");
    json_decref(p);
    assert_null(taint_patch(plain, NULL, &foreign)); /* nothing of gpulet's to take off */
    const char *ours = "{\"metadata\":{\"resourceVersion\":\"8\",\"annotations\":{"
                       "\"gpulet.io/gpu-fault-taint\":\"XID79\"}},\"spec\":{\"taints\":[{\"key\":"
                       "\"gpulet.io/gpu-fault\",\"value\":\"XID79\",\"effect\":\"NoSchedule\"}]}}";
    assert_null(taint_patch(ours, "XID79", &foreign)); /* already so */
    p = taint_patch(ours, NULL, &foreign);
    assert_true(json_is_null(json_object_get(json_object_get(p, "spec"), "taints")));
    assert_true(json_is_null(json_object_get(json_object_get(json_object_get(p, "metadata"),
                                                             "annotations"), "gpulet.io/gpu-fault-taint")));
    json_decref(p);
    const char *theirs = "{\"metadata\":{},\"spec\":{\"taints\":[{\"key\":\"gpulet.io/gpu-fault\","
                         "\"value\":\"manual\",\"effect\":\"NoSchedule\"}]}}";
    assert_null(taint_patch(theirs, NULL, &foreign));
    assert_true(foreign);
    assert_null(taint_patch(theirs, "XID79", &foreign));
    assert_true(foreign);
}

static void test_events(void **state)
{
    (void)state;
    struct report_event ev = {.name = "n.1", .type = "Warning", .reason = "GPUUnhealthy",
                              .message = "GPU 1 (GPU-1): XID 94", .first = "a", .last = "b",
                              .count = 3, .create = true};
    struct strbuf s = {0};
    report_event_json(&ev, "n", &s);
    json_t *j = json_loads(s.data, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "involvedObject"), "kind")), "Node");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "metadata"), "namespace")), "default");
    assert_int_equal(json_integer_value(json_object_get(j, "count")), 3);
    json_decref(j);
    strbuf_free(&s);
    ev.create = false;
    report_event_json(&ev, "n", &s);
    assert_string_equal(s.data, "{\"count\":3,\"lastTimestamp\":\"b\"}");
    strbuf_free(&s);
}

static void test_fault_list(void **state)
{
    (void)state;
    struct health_faults f;
    struct err e;
    assert_int_equal(gpu_health_faults_parse(&f, "--x", "79, 74,lost,HUNG", &e), 0);
    struct gpu_health h = {.reason = HEALTH_LOST, .xid = 79};
    assert_true(gpu_health_faults_match(&f, &h));
    h.xid = 0;
    assert_true(gpu_health_faults_match(&f, &h)); /* lost */
    h.reason = HEALTH_XID;
    h.xid = 74;
    assert_true(gpu_health_faults_match(&f, &h));
    h.xid = 94;
    assert_false(gpu_health_faults_match(&f, &h));
    h.reason = HEALTH_ECC;
    h.xid = 48;
    assert_false(gpu_health_faults_match(&f, &h));
    h.reason = HEALTH_HUNG;
    assert_true(gpu_health_faults_match(&f, &h));
    assert_int_equal(gpu_health_faults_parse(&f, "--x", "79,maybe", &e), -1);
    assert_true(e.usage);
    assert_contains(e.msg, "--x: 'maybe' is neither an XID number nor lost, hung, ecc or xid");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reasons),       cmocka_unit_test(test_condition),
        cmocka_unit_test(test_condition_patch), cmocka_unit_test(test_taint_patch),
        cmocka_unit_test(test_events),        cmocka_unit_test(test_fault_list),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
