/* Metrics without HTTP: the collectors CSV, the text rendering and its label
 * order, pod attribution from a PodResources answer, and processes placed in
 * containers (cgroup paths, log link names, usage rows). */
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
    if (metrics_collectors_parse(&c, "c.csv", csv, strlen(csv), &e) == 0)
        fail_msg("accepted: %s", csv);
    assert_contains(e.msg, what);
}

static void test_collectors(void **state)
{
    (void)state;
    struct collectors c;
    struct err e;
    metrics_collectors_default(&c);
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
    assert_int_equal(metrics_collectors_parse(&c, "user.csv", csv, strlen(csv), &e), 0);
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
    assert_int_equal(metrics_collectors_load(&c, "/nonexistent.csv", &e), -1);
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
    assert_int_equal(metrics_collectors_parse(&c, "c", csv, strlen(csv), &e), 0);
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
    struct metrics_frame f = {&c, &inv, "node-1", labels, gpus, &st, 0.001, errors, NULL, NULL};
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
    struct metrics_state s;
    metrics_state_alloc(&s, 3);
    metrics_pods_decode(&s, &inv, &resp, NULL, 0);
    assert_true(s.owned[0]);
    assert_string_equal(s.owner[0].pod, "a");
    assert_string_equal(s.owner[0].container, "main");
    assert_true(s.owned[1]);
    assert_string_equal(s.owner[1].pod, "b");
    assert_false(s.owned[2]); /* shared: no single pod's labels */
    assert_int_equal(s.nshares, 2);
    assert_string_equal(s.shares[1].owner.pod, "d");
    /* DRA claims, without a List: GPU-1 held by one container, GPU-2 by two
     * containers of one shared claim. */
    const struct metrics_holder h[] = {
        {"GPU-1", "p", "ns2", "train"}, {"GPU-2", "q", "ns2", "c1"}, {"GPU-2", "r", "ns2", "c2"},
        {"GPU-9", "x", "ns2", "gone"},
    };
    metrics_pods_decode(&s, &inv, NULL, h, 4);
    assert_false(s.owned[0]);
    assert_true(s.owned[1]);
    assert_string_equal(s.owner[1].container, "train");
    assert_false(s.owned[2]);
    assert_int_equal(s.nshares, 2);
    assert_string_equal(s.shares[1].owner.pod, "r");
    metrics_state_free(&s);
}

#define UID "0b4e3c2a-1f5d-4e6b-9a7c-2d3e4f5a6b7c"
#define UID_ "0b4e3c2a_1f5d_4e6b_9a7c_2d3e4f5a6b7c"
#define CID "4f9c1e2d3b4a5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d"

static void expect_cgroup(const char *text, const char *uid, const char *cid)
{
    struct metrics_cgroup cg;
    bool in_pod = metrics_cgroup_parse(text, strlen(text), &cg);
    if (!uid) {
        if (in_pod)
            fail_msg("placed in pod %s: %s", cg.pod_uid, text);
        return;
    }
    if (!in_pod)
        fail_msg("not placed in a pod: %s", text);
    assert_string_equal(cg.pod_uid, uid);
    assert_string_equal(cg.container_id, cid);
}

static void test_cgroup_parse(void **state)
{
    (void)state;
    /* v2, systemd driver, containerd, burstable and guaranteed */
    expect_cgroup("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_
                  ".slice/cri-containerd-" CID ".scope\n", UID, CID);
    expect_cgroup("0::/kubepods.slice/kubepods-pod" UID_ ".slice/crio-" CID ".scope\n", UID, CID);
    /* v2, cgroupfs driver */
    expect_cgroup("0::/kubepods/besteffort/pod" UID "/" CID "\n", UID, CID);
    expect_cgroup("0::/kubepods/pod" UID "/" CID, UID, CID);
    /* v1: one line per hierarchy; the first with a container wins */
    expect_cgroup("12:pids:/\n11:memory:/kubepods/burstable/pod" UID "/" CID "\n"
                  "1:name=systemd:/kubepods/burstable/pod" UID "/" CID "\n", UID, CID);
    expect_cgroup("5:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" UID_
                  ".slice/docker-" CID ".scope\n", UID, CID);
    /* nested (kind) and seen from inside a cgroup namespace */
    expect_cgroup("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
                  "kubelet-kubepods-besteffort-pod" UID_ ".slice/cri-containerd-" CID ".scope", UID, CID);
    expect_cgroup("0::/../../kubepods-besteffort-pod" UID_ ".slice/cri-containerd-" CID ".scope",
                  UID, CID);
    /* a static pod's UID is a 32-digit hash */
    expect_cgroup("0::/kubepods/burstable/pod6b2a9c0d1e2f3a4b5c6d7e8f9a0b1c2d/" CID,
                  "6b2a9c0d1e2f3a4b5c6d7e8f9a0b1c2d", CID);
    /* in the pod, not in one of its containers */
    expect_cgroup("0::/kubepods/besteffort/pod" UID "\n", UID, "");
    /* not in a pod */
    expect_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n", NULL, NULL);
    expect_cgroup("0::/system.slice/containerd.service\n", NULL, NULL);
    expect_cgroup("0::/kubepods.slice/kubepods-besteffort.slice\n", NULL, NULL);
    expect_cgroup("0::/kubepods/podnot-a-uid/" CID, NULL, NULL);
    expect_cgroup("", NULL, NULL);
    expect_cgroup("garbage without colons", NULL, NULL);
    expect_cgroup("::::\n\n:", NULL, NULL);
}

static void test_logname_parse(void **state)
{
    (void)state;
    struct metrics_owner o;
    char id[80];
    assert_true(metrics_logname_parse("web-7d4b9_prod_server-" CID ".log", &o, id, sizeof id));
    assert_string_equal(o.pod, "web-7d4b9");
    assert_string_equal(o.ns, "prod");
    assert_string_equal(o.container, "server");
    assert_string_equal(id, CID);
    const char *bad[] = {
        "web_prod_server-" CID,              /* no .log */
        "web_prod-" CID ".log",              /* no container */
        "web_prod_ser_ver-" CID ".log",      /* a fourth part */
        "_prod_server-" CID ".log",          /* empty pod */
        "web_prod_server-xyz.log",           /* not an ID */
        "web_prod_server-abc.log",           /* too short */
        ".log", "", "..",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (metrics_logname_parse(bad[i], &o, id, sizeof id))
            fail_msg("accepted: %s", bad[i]);
}

static void seen(struct metrics_procs *p, unsigned gpu, unsigned long long mib, double sm,
                 bool in_pod, const char *pod)
{
    struct procs_seen *s = &p->seen[p->nseen++];
    memset(s, 0, sizeof *s);
    s->gpu = gpu;
    s->memory = mib << 20;
    s->sm = sm;
    s->in_pod = in_pod;
    if (pod) {
        s->named = true;
        snprintf(s->owner.pod, sizeof s->owner.pod, "%s", pod);
        snprintf(s->owner.ns, sizeof s->owner.ns, "ns");
        snprintf(s->owner.container, sizeof s->owner.container, "main");
    }
}

static void test_procs_usage(void **state)
{
    (void)state;
    struct metrics_procs p;
    memset(&p, 0, sizeof p);
    p.on = true;
    p.seen = calloc(8, sizeof *p.seen);
    seen(&p, 0, 100, 30, true, "a");  /* named through its container ID */
    seen(&p, 0, 50, 20, true, "a");   /* a second process of the same container */
    seen(&p, 0, 10, 0, true, NULL);   /* in a pod, unnamed, GPU 0 shared by two: unattributed */
    seen(&p, 1, 70, 90, true, NULL);  /* unnamed, GPU 1 has one holder: PodResources names it */
    seen(&p, 1, 5, 0, false, NULL);   /* a host process */
    struct metrics_state st;
    metrics_state_alloc(&st, 2);
    st.shares = calloc(3, sizeof *st.shares);
    st.nshares = 3;
    const char *holders[] = {"a", "b", "c"};
    unsigned gpus[] = {0, 0, 1};
    for (int i = 0; i < 3; i++) {
        st.shares[i].gpu = gpus[i];
        snprintf(st.shares[i].owner.pod, sizeof st.shares[i].owner.pod, "%s", holders[i]);
        snprintf(st.shares[i].owner.ns, sizeof st.shares[i].owner.ns, "ns");
        snprintf(st.shares[i].owner.container, sizeof st.shares[i].owner.container, "main");
    }
    metrics_procs_usage(&p, &st);
    assert_int_equal(p.nusage, 4);
    assert_string_equal(p.usage[0].owner.pod, "a");
    assert_int_equal(p.usage[0].memory, 150ULL << 20);
    assert_int_equal(p.usage[0].processes, 2);
    assert_true(p.usage[0].sm == 50);
    assert_string_equal(p.usage[1].owner.pod, "");   /* GPU 0, unattributed */
    assert_int_equal(p.usage[1].gpu, 0);
    assert_string_equal(p.usage[2].owner.pod, "c");  /* GPU 1's one holder */
    assert_string_equal(p.usage[3].owner.pod, "");   /* the host process */
    assert_int_equal(p.usage[3].memory, 5ULL << 20);
    metrics_state_free(&st);
    metrics_procs_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_collectors),
        cmocka_unit_test(test_render_labels),
        cmocka_unit_test(test_pods_decode),
        cmocka_unit_test(test_cgroup_parse),
        cmocka_unit_test(test_logname_parse),
        cmocka_unit_test(test_procs_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
