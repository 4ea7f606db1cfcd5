/* Metrics without HTTP: the collectors CSV, the text rendering and its label
 * order, and pod attribution from a PodResources answer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/internal.h"
#include "podresources.pb-c.h"
#include "testutil.h"

static void expect_csv_error(const char *csv, const char *what)
{
    struct collectors c;
    struct err e;
    if (collectors_parse(&c, "c.csv", csv, strlen(csv), &e) == 0)
        fail_msg("accepted: %s", csv);
    assert_contains(e.msg, what);
}

static void test_collectors(void **state)
{
    (void)state;
    struct collectors c;
    struct err e;
    collectors_default(&c);
    assert_int_equal(c.count, 26); /* 25 metrics and the driver-version label */
    assert_string_equal(c.items[0].field->name, "DCGM_FI_DEV_SM_CLOCK");
    /* A dcgm-exporter user's file, comments and all, works unchanged. */
    const char *csv = "# Format\n# If line starts with a '#' it is considered a comment\n"
                      "# DCGM FIELD, Prometheus metric type, help message\n\n"
                      "# Clocks\nDCGM_FI_DEV_SM_CLOCK,  gauge, SM clock frequency (in MHz).\n"
                      "# DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).\n"
                      "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, Total number of double-bit volatile ECC errors.\n"
                      "DCGM_FI_PROF_SM_ACTIVE, gauge, The ratio of cycles an SM has at least 1 warp assigned.\n"
                      "DCGM_EXP_XID_ERRORS_COUNT, gauge, Count of XID Errors within user-specified time window.\n"
                      "DCGM_FI_DEV_SERIAL, label, Device Serial Number\n";
    assert_int_equal(collectors_parse(&c, "user.csv", csv, strlen(csv), &e), 0);
    assert_int_equal(c.count, 4);
    assert_int_equal(c.skipped, 1);
    assert_string_equal(c.items[1].type, "counter");
    expect_csv_error("DCGM_FI_DEV_SM_CLOCK, gauge, x\nDCGM_FI_DEV_FAN_SPEED, gauge, y\n",
                     "c.csv:2: unknown field 'DCGM_FI_DEV_FAN_SPEED'");
    expect_csv_error("DCGM_FI_DEV_SM_CLOCK, gaug, x\n", "c.csv:1: DCGM_FI_DEV_SM_CLOCK: unknown type 'gaug'");
    expect_csv_error("DCGM_FI_DEV_SM_CLOCK gauge\n", "c.csv:1: expected 'FIELD, type, help'");
    expect_csv_error("DCGM_FI_DRIVER_VERSION, gauge, x\n", "must be declared as label");
    expect_csv_error("DCGM_FI_DEV_GPU_TEMP, label, x\n", "must be declared as a metric type");
    expect_csv_error("DCGM_FI_DEV_GPU_TEMP, gauge, x\nDCGM_FI_DEV_GPU_TEMP, gauge, x\n", "listed twice");
    expect_csv_error("# only comments\n", "no fields enabled");
    assert_int_equal(collectors_load(&c, "/nonexistent.csv", &e), -1);
    assert_contains(e.msg, "/nonexistent.csv: No such file");
}

static void test_render_labels(void **state)
{
    (void)state;
    struct gpu_inventory inv = {0};
    struct gpu_info g = {0};
    g.index = 0;
    strcpy(g.uuid, "GPU-1");
    strcpy(g.name, "NVIDIA \"Quoted\" GPU");
    strcpy(g.pci_bus_id, "00000000:01:00.0");
    inv.count = 1;
    inv.gpus = &g;
    struct collectors c;
    struct err e;
    const char *csv = "DCGM_FI_DEV_POWER_USAGE, gauge, Power\nDCGM_FI_DEV_XID_ERRORS, gauge, Xid\n"
                      "DCGM_FI_DRIVER_VERSION, label, d\nDCGM_FI_DEV_SERIAL, label, s\n";
    assert_int_equal(collectors_parse(&c, "c", csv, strlen(csv), &e), 0);
    struct metrics_state st;
    metrics_state_alloc(&st, 1);
    st.owned[0] = true;
    strcpy(st.owner[0].pod, "train-0");
    strcpy(st.owner[0].ns, "ml");
    strcpy(st.owner[0].container, "main");
    st.dev[0].last_xid = 79;
    struct metrics_gpu gpus[1] = {{.up = true}};
    gpus[0].value[0] = 123.4567;
    gpus[0].have[0] = gpus[0].have[1] = true;
    gpus[0].value[1] = 79;
    const char *labels[4] = {NULL, NULL, "580.159.04", "1653"};
    unsigned long long errors[FN_COUNT] = {0};
    errors[FN_TEMP] = 3;
    struct metrics_frame f = {&c, &inv, "node-1", labels, gpus, &st, 0.001, errors};
    struct strbuf out = {0};
    metrics_render(&out, &f);
    /* dcgm-exporter's order: identity, Hostname, label fields by name, then the
     * attributes by name; quotes in values escaped. */
    assert_contains(out.data, "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-1\","
                              "pci_bus_id=\"00000000:01:00.0\",device=\"nvidia0\","
                              "modelName=\"NVIDIA \\\"Quoted\\\" GPU\",Hostname=\"node-1\","
                              "DCGM_FI_DEV_SERIAL=\"1653\",DCGM_FI_DRIVER_VERSION=\"580.159.04\","
                              "container=\"main\",namespace=\"ml\",pod=\"train-0\"} 123.456700\n");
    assert_contains(out.data, "DCGM_FI_DRIVER_VERSION=\"580.159.04\",container=\"main\","
                              "err_code=\"79\",err_msg=\"GPU has fallen off the bus\","
                              "namespace=\"ml\",pod=\"train-0\"} 79\n");
    assert_contains(out.data, "# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n");
    assert_contains(out.data, "gpulet_nvml_errors_total{function=\"nvmlDeviceGetTemperature\"} 3\n");
    gpus[0].up = false; /* a GPU that stopped answering has no value series */
    st.dev[0].health = HEALTH_LOST; /* and the agent's record says why: up follows it */
    strbuf_free(&out);
    metrics_render(&out, &f);
    assert_null(strstr(out.data, "DCGM_FI_DEV_POWER_USAGE{"));
    assert_contains(out.data, "gpulet_gpu_up{gpu=\"0\"");
    assert_contains(out.data, "Hostname=\"node-1\"} 0\n");
    strbuf_free(&out);
    metrics_state_free(&st);
}

static void test_pods_decode(void **state)
{
    (void)state;
    struct gpu_info g[3] = {{0}};
    for (unsigned i = 0; i < 3; i++) {
        g[i].index = i;
        snprintf(g[i].uuid, sizeof g[i].uuid, "GPU-%u", i);
    }
    struct gpu_inventory inv = {.count = 3, .gpus = g};
    /* pod a owns GPU-0; pod b owns GPU 1 by index; GPU-2 is shared by c and d. */
    char *ids_a[] = {"GPU-0"}, *ids_b[] = {"1"}, *ids_c[] = {"GPU-2::0"}, *ids_d[] = {"GPU-2::1"},
         *ids_x[] = {"nic-0"};
    V1__ContainerDevices da = V1__CONTAINER_DEVICES__INIT, db = da, dc = da, dd = da, dx = da;
    da.resource_name = db.resource_name = dc.resource_name = dd.resource_name = "nvidia.com/gpu";
    dx.resource_name = "example.com/nic";
    da.n_device_ids = db.n_device_ids = dc.n_device_ids = dd.n_device_ids = dx.n_device_ids = 1;
    da.device_ids = ids_a, db.device_ids = ids_b, dc.device_ids = ids_c, dd.device_ids = ids_d;
    dx.device_ids = ids_x;
    V1__ContainerDevices *la[] = {&da, &dx}, *lb[] = {&db}, *lc[] = {&dc}, *ld[] = {&dd};
    V1__ContainerResources ca = V1__CONTAINER_RESOURCES__INIT, cb = ca, cc = ca, cd = ca;
    ca.name = "main", cb.name = "side", cc.name = "c1", cd.name = "d1";
    ca.n_devices = 2, ca.devices = la;
    cb.n_devices = cc.n_devices = cd.n_devices = 1;
    cb.devices = lb, cc.devices = lc, cd.devices = ld;
    V1__ContainerResources *pa[] = {&ca}, *pb[] = {&cb}, *pc[] = {&cc}, *pd[] = {&cd};
    V1__PodResources pods[4];
    V1__PodResources *plist[4];
    const char *names[] = {"a", "b", "c", "d"};
    V1__ContainerResources **cl[] = {pa, pb, pc, pd};
    for (int i = 0; i < 4; i++) {
        v1__pod_resources__init(&pods[i]);
        pods[i].name = (char *)names[i];
        pods[i].namespace_ = "ns";
        pods[i].n_containers = 1;
        pods[i].containers = cl[i];
        plist[i] = &pods[i];
    }
    V1__ListPodResourcesResponse resp = V1__LIST_POD_RESOURCES_RESPONSE__INIT;
    resp.n_pod_resources = 4;
    resp.pod_resources = plist;
    uint8_t buf[1024];
    size_t len = v1__list_pod_resources_response__pack(&resp, buf);
    struct metrics_state s;
    metrics_state_alloc(&s, 3);
    assert_int_equal(metrics_pods_decode(&s, &inv, buf, len), 0);
    assert_true(s.owned[0]);
    assert_string_equal(s.owner[0].pod, "a");
    assert_string_equal(s.owner[0].container, "main");
    assert_true(s.owned[1]);
    assert_string_equal(s.owner[1].pod, "b");
    assert_false(s.owned[2]); /* shared: no single pod's labels */
    assert_int_equal(s.nshares, 2);
    assert_string_equal(s.shares[1].owner.pod, "d");
    assert_int_equal(metrics_pods_decode(&s, &inv, (const uint8_t *)"\xff\xff", 2), -1);
    metrics_state_free(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collectors),
        cmocka_unit_test(test_render_labels),
        cmocka_unit_test(test_pods_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
