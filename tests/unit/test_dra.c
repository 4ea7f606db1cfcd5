/* DRA's pure halves: the node's ResourceSlice from the simulated inventory
 * (NVIDIA's device names and attributes, unhealthy GPUs left out) and a
 * ResourceClaim's allocation for this driver (with the bad claims). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra/dra.h"
#include "drahealth.pb-c.h"
#include "util/quantity.h"
#include "nvml/nvml.h"
#include "testutil.h"

/* The slice with GPU unhealthy_gpu's health h (NULL: an XID), faulty
 * devices tainted or left out. */
static json_t *slice_with(const char *preset, unsigned unhealthy_gpu, const struct gpu_health *h,
                          enum dra_api api, bool tainted, const char *evict, const bool *held)
{
    struct nvml n;
    struct gpu_inventory inv;
    struct err e;
    testutil_sim_start(&n, preset);
    assert_int_equal(gpu_inventory_build(&n, &inv, &e), 0);
    struct gpu_device *devs = gpu_devices_new(&inv, 0);
    if (unhealthy_gpu < inv.count)
        devs[unhealthy_gpu].health = h ? *h : (struct gpu_health){.reason = HEALTH_XID};
    struct strbuf out = {0};
    struct config cfg = {.dra = CONFIG_DRA_ALL};
    snprintf(cfg.dra_gpus, sizeof cfg.dra_gpus, "*");
    char roots[8][32] = {"pci0000:00"};
    struct health_faults faults;
    assert_int_equal(gpu_health_faults_parse(&faults, "test", evict, &e), 0);
    struct dra_slice_in in = {.cfg = &cfg, .inv = &inv, .devs = devs, .node = "node-a",
                              .node_uid = "uid-1", .generation = 3, .api = api, .pcie_roots = roots,
                              .tainted = tainted, .evict = &faults, .held = held};
    dra_slice_json(&in, 0, &out);
    json_t *slice = json_loads(out.data, 0, NULL);
    assert_non_null(slice);
    assert_int_equal(dra_count(&in),
                     json_array_size(json_object_get(json_object_get(slice, "spec"), "devices")));
    strbuf_free(&out);
    free(devs);
    gpu_inventory_free(&inv);
    nvml_close(&n);
    return slice;
}

static json_t *slice_in(const char *preset, unsigned unhealthy_gpu, enum dra_api api)
{
    return slice_with(preset, unhealthy_gpu, NULL, api, false, "", NULL);
}

/* The slice in v1 (as Kubernetes 1.34 on serves it) */
static json_t *slice_of(const char *preset, unsigned unhealthy_gpu)
{
    return slice_in(preset, unhealthy_gpu, DRA_API_V1);
}

static const char *attr(json_t *dev, const char *name, const char *type)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(dev, "attributes"), name), type));
}

static long long attr_int(json_t *dev, const char *name)
{
    return json_integer_value(
        json_object_get(json_object_get(json_object_get(dev, "attributes"), name), "int"));
}

static const char *capacity(json_t *dev, const char *name)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(dev, "capacity"), name), "value"));
}

static void test_slice(void **state)
{
    (void)state;
    json_t *s = slice_of("dgx-h100", 2);
    assert_string_equal(json_string_value(json_object_get(s, "kind")), "ResourceSlice");
    assert_string_equal(json_string_value(json_object_get(s, "apiVersion")), "resource.k8s.io/v1");
    json_t *meta = json_object_get(s, "metadata"), *spec = json_object_get(s, "spec");
    assert_string_equal(json_string_value(json_object_get(meta, "name")), "node-a-gpu.nvidia.com");
    json_t *owner = json_array_get(json_object_get(meta, "ownerReferences"), 0);
    assert_string_equal(json_string_value(json_object_get(owner, "kind")), "Node");
    assert_string_equal(json_string_value(json_object_get(owner, "uid")), "uid-1");
    assert_string_equal(json_string_value(json_object_get(spec, "driver")), "gpu.nvidia.com");
    assert_string_equal(json_string_value(json_object_get(spec, "nodeName")), "node-a");
    json_t *pool = json_object_get(spec, "pool");
    assert_int_equal(json_integer_value(json_object_get(pool, "generation")), 3);
    json_t *devices = json_object_get(spec, "devices");
    assert_int_equal(json_array_size(devices), 7); /* GPU 2 is unhealthy */
    json_t *d0 = json_array_get(devices, 0);
    assert_string_equal(json_string_value(json_object_get(d0, "name")), "gpu-0");
    assert_string_equal(attr(d0, "type", "string"), "gpu");
    assert_string_equal(attr(d0, "productName", "string"), "NVIDIA H100 80GB HBM3");
    assert_string_equal(attr(d0, "architecture", "string"), "Hopper");
    assert_string_equal(attr(d0, "cudaComputeCapability", "version"), "9.0.0");
    assert_string_equal(attr(d0, "driverVersion", "version"), "580.159.4");
    assert_string_equal(attr(d0, "cudaDriverVersion", "version"), "13.0.0");
    assert_true(!strncmp(attr(d0, "uuid", "string"), "GPU-", 4));
    assert_string_equal(attr(d0, "brand", "string"), "Nvidia");
    assert_int_equal(attr_int(d0, "index"), 0);
    assert_int_equal(attr_int(d0, "minor"), 0);
    assert_int_equal(attr_int(d0, "numa"), 0);
    /* Kubernetes' standard names: NVML's 00000000:1B:00.0 as 0000:1b:00.0 */
    const char *bus = attr(d0, "resource.kubernetes.io/pciBusID", "string");
    assert_true(strlen(bus) == 12 && !strncmp(bus, "0000:", 5));
    for (const char *p = bus; *p; p++)
        assert_false(*p >= 'A' && *p <= 'Z');
    assert_string_equal(attr(d0, "resource.kubernetes.io/pcieRoot", "string"), "pci0000:00");
    assert_null(attr(json_array_get(devices, 1), "resource.kubernetes.io/pcieRoot", "string"));
    assert_string_equal(capacity(d0, "memory"), "81559Mi");
    for (size_t i = 0; i < json_array_size(devices); i++)
        assert_string_not_equal(json_string_value(json_object_get(json_array_get(devices, i), "name")),
                                "gpu-2");
    json_decref(s);
}

/* A GPU in MIG mode is its MIG devices, each with its own UUID, its
 * parent's, its profile and its memory; a GPU without MIG stays whole. */
static void test_slice_mig(void **state)
{
    (void)state;
    json_t *s = slice_of("h200-mig-mixed", 99);
    json_t *devices = json_object_get(json_object_get(s, "spec"), "devices");
    assert_int_equal(json_array_size(devices), 4 + 4 + 7 + 1);
    json_t *m = json_array_get(devices, 0), *whole = json_array_get(devices, 15);
    /* NVIDIA's name: gpu-<minor>-mig-<profile>-<GI profile ID (nvidia-smi mig -lgip's
     * ID)>-<placement start> */
    assert_string_equal(json_string_value(json_object_get(m, "name")), "gpu-0-mig-3g71gb-9-4");
    assert_string_equal(attr(m, "type", "string"), "mig");
    assert_string_equal(attr(m, "profile", "string"), "3g.71gb");
    assert_true(!strncmp(attr(m, "uuid", "string"), "MIG-", 4));
    assert_true(!strncmp(attr(m, "parentUUID", "string"), "GPU-", 4));
    assert_string_equal(attr(m, "productName", "string"), "NVIDIA H200");
    assert_string_equal(capacity(m, "memory"), "71424Mi");
    assert_string_equal(capacity(m, "multiprocessors"), "60");
    assert_string_equal(capacity(m, "memorySlice4"), "1");
    assert_string_equal(capacity(m, "memorySlice7"), "1");
    assert_null(capacity(m, "memorySlice3"));
    assert_string_equal(json_string_value(json_object_get(whole, "name")), "gpu-3");
    assert_string_equal(attr(whole, "type", "string"), "gpu");
    json_decref(s);
}

/* Where the API server keeps device taints, a faulty GPU stays in the
 * slice with NVIDIA's taints and the time its fault began; NoExecute for
 * the faults --dra-evict-on lists. */
static void test_slice_taints(void **state)
{
    (void)state;
    struct gpu_health lost = {.reason = HEALTH_LOST, .xid = 79, .since_ms = 1795770000000LL};
    json_t *s = slice_with("dgx-h100", 2, &lost, DRA_API_V1, true, "", NULL);
    json_t *devices = json_object_get(json_object_get(s, "spec"), "devices");
    assert_int_equal(json_array_size(devices), 8);
    assert_null(json_object_get(json_array_get(devices, 1), "taints"));
    json_t *t = json_object_get(json_array_get(devices, 2), "taints");
    assert_int_equal(json_array_size(t), 2);
    json_t *xid = json_array_get(t, 0), *gone = json_array_get(t, 1);
    assert_string_equal(json_string_value(json_object_get(xid, "key")), "gpu.nvidia.com/xid");
    assert_string_equal(json_string_value(json_object_get(xid, "value")), "79");
    assert_string_equal(json_string_value(json_object_get(xid, "effect")), "NoSchedule");
    assert_string_equal(json_string_value(json_object_get(xid, "timeAdded")), "2026-11-27T09:00:00Z");
    assert_string_equal(json_string_value(json_object_get(gone, "key")), "gpu.nvidia.com/gpu-lost");
    assert_null(json_object_get(gone, "value"));
    json_decref(s);
    s = slice_with("dgx-h100", 2, &lost, DRA_API_V1, true, "lost", NULL);
    t = json_object_get(json_array_get(json_object_get(json_object_get(s, "spec"), "devices"), 2),
                        "taints");
    assert_string_equal(json_string_value(json_object_get(json_array_get(t, 0), "effect")), "NoExecute");
    json_decref(s);
    /* A GPU a pod of the device plugin holds: tainted, no time, never NoExecute
     * (evict: lost); left out without taints. */
    bool held[8 * (GPU_MIG_MAX + 1)] = {0};
    held[DRA_AT(5, 0)] = true;
    s = slice_with("dgx-h100", 99, NULL, DRA_API_V1, true, "lost", held);
    devices = json_object_get(json_object_get(s, "spec"), "devices");
    assert_int_equal(json_array_size(devices), 8);
    t = json_array_get(json_object_get(json_array_get(devices, 5), "taints"), 0);
    assert_string_equal(json_string_value(json_object_get(t, "key")), "gpulet.io/device-plugin");
    assert_string_equal(json_string_value(json_object_get(t, "effect")), "NoSchedule");
    assert_null(json_object_get(t, "timeAdded"));
    json_decref(s);
    s = slice_with("dgx-h100", 99, NULL, DRA_API_V1BETA1, false, "", held);
    assert_int_equal(json_array_size(json_object_get(json_object_get(s, "spec"), "devices")), 7);
    json_decref(s);
}

/* Each fault's taints: NVIDIA's keys where NVIDIA has one, gpulet's for
 * what only gpulet knows; the effect from the eviction list. */
static void test_taint_rules(void **state)
{
    (void)state;
    struct dra_taint t[DRA_MAX_TAINTS];
    struct health_faults evict;
    struct err e;
    assert_int_equal(gpu_health_faults_parse(&evict, "test", "hung,48", &e), 0);
    struct gpu_health h = {.reason = HEALTH_OK};
    assert_int_equal(dra_taints(&h, &evict, t), 0);
    assert_int_equal(dra_taints(NULL, &evict, t), 0);
    h = (struct gpu_health){.reason = HEALTH_XID, .xid = 94};
    assert_int_equal(dra_taints(&h, &evict, t), 1);
    assert_string_equal(t[0].key, "gpu.nvidia.com/xid");
    assert_string_equal(t[0].value, "94");
    assert_string_equal(t[0].effect, "NoSchedule");
    h = (struct gpu_health){.reason = HEALTH_ECC, .xid = 48};
    assert_int_equal(dra_taints(&h, &evict, t), 2);
    assert_string_equal(t[0].effect, "NoExecute");
    assert_string_equal(t[1].key, "gpulet.io/ecc");
    assert_string_equal(t[1].value, "double-bit");
    h = (struct gpu_health){.reason = HEALTH_ECC};  /* from the counter: no XID */
    assert_int_equal(dra_taints(&h, NULL, t), 1);
    assert_string_equal(t[0].key, "gpulet.io/ecc");
    h = (struct gpu_health){.reason = HEALTH_HUNG};
    assert_int_equal(dra_taints(&h, &evict, t), 1);
    assert_string_equal(t[0].key, "gpulet.io/hung");
    assert_string_equal(t[0].effect, "NoExecute");
    h = (struct gpu_health){.reason = HEALTH_LOST};
    assert_int_equal(dra_taints(&h, &evict, t), 1);
    assert_string_equal(t[0].key, "gpu.nvidia.com/gpu-lost");
    char when[32];
    gpu_health_time(0, when, sizeof when);
    assert_string_equal(when, "");
}

/* The health stream's message: each device by pool and name, HEALTHY or
 * UNHEALTHY with the cause, the timeout the kubelet is told. */
static void test_health_pack(void **state)
{
    (void)state;
    struct dra_device_health devs[2] = {{.pool = "n1", .name = "gpu-0", .healthy = true, .updated = 7},
                                        {.pool = "n1", .name = "gpu-1", .updated = 7}};
    snprintf(devs[1].message, sizeof devs[1].message, "XID 79: fallen off the bus since now");
    size_t len;
    uint8_t *msg = dra_health_pack(devs, 2, &len);
    V1alpha1__NodeWatchResourcesResponse *r = v1alpha1__node_watch_resources_response__unpack(NULL, len, msg);
    assert_non_null(r);
    assert_int_equal(r->n_devices, 2);
    assert_string_equal(r->devices[0]->device->pool_name, "n1");
    assert_string_equal(r->devices[0]->device->device_name, "gpu-0");
    assert_int_equal(r->devices[0]->health, V1ALPHA1__HEALTH_STATUS__HEALTHY);
    assert_int_equal(r->devices[1]->health, V1ALPHA1__HEALTH_STATUS__UNHEALTHY);
    assert_string_equal(r->devices[1]->message, devs[1].message);
    assert_int_equal(r->devices[1]->last_updated_time, 7);
    assert_int_equal(r->devices[1]->health_check_timeout_seconds, DRA_HEALTH_TIMEOUT_S);
    v1alpha1__node_watch_resources_response__free_unpacked(r, NULL);
    free(msg);
}

/* v1beta1 (Kubernetes 1.32) holds a device's attributes under "basic". */
static void test_slice_v1beta1(void **state)
{
    (void)state;
    json_t *s = slice_in("dgx-h100", 99, DRA_API_V1BETA1);
    assert_string_equal(json_string_value(json_object_get(s, "apiVersion")),
                        "resource.k8s.io/v1beta1");
    json_t *d0 = json_array_get(json_object_get(json_object_get(s, "spec"), "devices"), 0);
    assert_null(json_object_get(d0, "attributes"));
    assert_string_equal(attr(json_object_get(d0, "basic"), "type", "string"), "gpu");
    assert_string_equal(capacity(json_object_get(d0, "basic"), "memory"), "81559Mi");
    json_decref(s);
}

/* Which version of resource.k8s.io serves slices, from a discovery answer. */
static void test_api_serves_slices(void **state)
{
    (void)state;
    static const char v1[] = "{\"kind\":\"APIResourceList\",\"groupVersion\":\"resource.k8s.io/v1\","
                             "\"resources\":[{\"name\":\"deviceclasses\"},{\"name\":\"resourceslices\"}]}";
    static const char taints[] = "{\"resources\":[{\"name\":\"devicetaintrules\"}]}";
    assert_true(dra_api_serves_slices(v1, strlen(v1)));
    assert_false(dra_api_serves_slices(taints, strlen(taints)));
    assert_false(dra_api_serves_slices("{", 1));
    assert_false(dra_api_serves_slices("", 0));
    assert_string_equal(dra_api_name(DRA_API_V1), "v1");
    assert_string_equal(dra_api_name(DRA_API_V1BETA2), "v1beta2");
    assert_string_equal(dra_api_name(DRA_API_V1BETA1), "v1beta1");
}

static void test_claim(void **state)
{
    (void)state;
    static const char claim[] =
        "{\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"c-1\",\"name\":\"x\"},"
        "\"status\":{\"allocation\":{\"devices\":{\"results\":["
        "{\"request\":\"gpu\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"node-a\",\"device\":\"gpu-3\"},"
        "{\"request\":\"nic\",\"driver\":\"net.example.com\",\"pool\":\"node-a\",\"device\":\"eth1\"},"
        "{\"request\":\"gpu\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"node-a\",\"device\":\"gpu-4\"}"
        "]}}}}";
    struct dra_allocation a;
    struct err e;
    assert_int_equal(dra_claim_parse(claim, strlen(claim), &a, &e), 0);
    assert_string_equal(a.uid, "c-1");
    assert_int_equal(a.count, 2); /* another driver's device is not ours */
    assert_string_equal(a.results[1].device, "gpu-4");
    assert_string_equal(a.results[0].pool, "node-a");
    static const struct {
        const char *json, *why;
    } bad[] = {
        {"{", "not JSON"},
        {"{\"kind\":\"Pod\"}", "not a ResourceClaim"},
        {"{\"kind\":\"ResourceClaim\",\"metadata\":{}}", "without metadata.uid"},
        {"{\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"u\"},\"status\":{}}", "is not allocated"},
        {"{\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"u\"},\"status\":{\"allocation\":{"
         "\"devices\":{\"results\":[{\"driver\":\"gpu.nvidia.com\",\"pool\":\"p\"}]}}}}",
         "lacks request, pool or device"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(dra_claim_parse(bad[i].json, strlen(bad[i].json), &a, &e), -1);
        assert_contains(e.msg, bad[i].why);
    }
}

/* A share of a device (consumable capacity): its shareID and what it
 * consumed; a consumed amount that is no quantity, or out of range, fails. */
static void test_claim_share(void **state)
{
    (void)state;
    static const char claim[] =
        "{\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"c-2\"},"
        "\"status\":{\"allocation\":{\"devices\":{\"results\":["
        "{\"request\":\"gpu\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"n\",\"device\":\"gpu-3\","
        "\"shareID\":\"8f1c\",\"consumedCapacity\":{\"memory\":\"20Gi\",\"compute\":\"25\"}},"
        "{\"request\":\"gpu\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"n\",\"device\":\"gpu-4\"}"
        "]}}}}";
    struct dra_allocation a;
    struct err e;
    assert_int_equal(dra_claim_parse(claim, strlen(claim), &a, &e), 0);
    assert_string_equal(a.results[0].share_id, "8f1c");
    assert_true(a.results[0].share_bytes == 20ULL << 30);
    assert_int_equal(a.results[0].share_compute, 25);
    assert_string_equal(a.results[1].share_id, "");
    assert_true(a.results[1].share_bytes == 0);
    static const char *const bad[] = {"\"memory\":\"lots\"", "\"compute\":\"101\"", "\"memory\":\"0\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char json[512];
        snprintf(json, sizeof json,
                 "{\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"u\"},\"status\":{\"allocation\":{"
                 "\"devices\":{\"results\":[{\"request\":\"r\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"p\","
                 "\"device\":\"gpu-0\",\"shareID\":\"s\",\"consumedCapacity\":{%s}}]}}}}", bad[i]);
        assert_int_equal(dra_claim_parse(json, strlen(json), &a, &e), -1);
        assert_contains(e.msg, "a share (shareID)");
    }
}

/* A GPU for shares: allowMultipleAllocations, its memory in whole GiB (a
 * claim that names none takes it all), its compute in percent; only where
 * the API has consumable capacity, and only the GPUs --dra-shares names. */
static void test_slice_shares(void **state)
{
    (void)state;
    struct nvml n;
    struct gpu_inventory inv;
    struct err e;
    testutil_sim_start(&n, "dgx-h100");
    assert_int_equal(gpu_inventory_build(&n, &inv, &e), 0);
    struct gpu_device *devs = gpu_devices_new(&inv, 0);
    struct config cfg = {.dra = CONFIG_DRA_ALL};
    snprintf(cfg.dra_gpus, sizeof cfg.dra_gpus, "*");
    snprintf(cfg.dra_shares, sizeof cfg.dra_shares, "1,*H200*");
    for (int consumable = 0; consumable < 2; consumable++) {
        struct dra_slice_in in = {.cfg = &cfg, .inv = &inv, .devs = devs, .node = "n", .node_uid = "u",
                                  .generation = 1, .api = DRA_API_V1, .consumable = consumable};
        struct strbuf out = {0};
        dra_slice_json(&in, 0, &out);
        json_t *s = json_loads(out.data, 0, NULL);
        json_t *devices = json_object_get(json_object_get(s, "spec"), "devices");
        json_t *d0 = json_array_get(devices, 0), *d1 = json_array_get(devices, 1);
        assert_null(json_object_get(d0, "allowMultipleAllocations"));
        assert_null(json_object_get(json_object_get(json_object_get(d0, "capacity"), "memory"), "requestPolicy"));
        if (!consumable) {
            assert_null(json_object_get(d1, "allowMultipleAllocations"));
        } else {
            assert_true(json_is_true(json_object_get(d1, "allowMultipleAllocations")));
            json_t *mem = json_object_get(json_object_get(d1, "capacity"), "memory");
            json_t *policy = json_object_get(mem, "requestPolicy");
            assert_string_equal(json_string_value(json_object_get(mem, "value")), "81559Mi");
            assert_string_equal(json_string_value(json_object_get(policy, "default")), "79Gi");
            json_t *range = json_object_get(policy, "validRange");
            assert_string_equal(json_string_value(json_object_get(range, "min")), "1Gi");
            assert_string_equal(json_string_value(json_object_get(range, "step")), "1Gi");
            json_t *compute = json_object_get(json_object_get(d1, "capacity"), "compute");
            assert_string_equal(json_string_value(json_object_get(compute, "value")), "100");
            assert_string_equal(
                json_string_value(json_object_get(json_object_get(compute, "requestPolicy"), "default")), "0");
        }
        json_decref(s);
        strbuf_free(&out);
    }
    assert_true(dra_share_default(81559ULL << 20) == 79ULL << 30);
    free(devs);
    gpu_inventory_free(&inv);
    nvml_close(&n);
}

/* NVIDIA's GpuConfig in a claim: the class's first, the last naming a
 * request winning; what gpulet cannot apply fails with the entry named. */
static void test_claim_config(void **state)
{
    (void)state;
    static const char claim[] =
        "{\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"c-2\"},"
        "\"status\":{\"allocation\":{\"devices\":{\"results\":["
        "{\"request\":\"a\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"n\",\"device\":\"gpu-0\"},"
        "{\"request\":\"b\",\"driver\":\"gpu.nvidia.com\",\"pool\":\"n\",\"device\":\"gpu-1\"}],"
        "\"config\":["
        "{\"source\":\"FromClaim\",\"requests\":[\"b\"],\"opaque\":{\"driver\":\"gpu.nvidia.com\","
        "\"parameters\":{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"GpuConfig\","
        "\"sharing\":{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":40,"
        "\"defaultPinnedDeviceMemoryLimit\":\"10Gi\",\"defaultPerDevicePinnedMemoryLimit\":{\"0\":\"5G\"}}}}}},"
        "{\"source\":\"FromClass\",\"opaque\":{\"driver\":\"gpu.nvidia.com\",\"parameters\":"
        "{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"GpuConfig\",\"sharing\":"
        "{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{\"interval\":\"Default\"}}}}},"
        "{\"source\":\"FromClaim\",\"opaque\":{\"driver\":\"other.example.com\",\"parameters\":{}}}"
        "]}}}}";
    struct dra_allocation a;
    struct err e;
    assert_int_equal(dra_claim_parse(claim, strlen(claim), &a, &e), 0);
    assert_int_equal(a.nconfigs, 2);
    assert_int_equal(a.results[0].config, 0); /* the class's: only the claim's names b */
    assert_int_equal(a.configs[0].strategy, GPU_SHARING_TIME_SLICING);
    assert_int_equal(a.results[1].config, 1);
    const struct dra_sharing *s = &a.configs[1];
    assert_int_equal(s->strategy, GPU_SHARING_MPS);
    assert_int_equal(s->thread_percentage, 40);
    assert_int_equal(s->pinned_mib, 10240);
    assert_int_equal(s->nlimits, 1);
    assert_int_equal(s->limits[0].mib, 4768); /* 5e9 bytes */
    /* NVIDIA's intervals, as nvidia-smi compute-policy --set-timeslice takes them */
    static const char *const intervals[] = {"Default", "Short", "Medium", "Long"};
    for (unsigned i = 0; i < 4; i++) {
        char params[256];
        snprintf(params, sizeof params, "{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":"
                 "\"GpuConfig\",\"sharing\":{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":"
                 "{\"interval\":\"%s\"}}}", intervals[i]);
        json_t *j = json_loads(params, 0, NULL);
        struct dra_sharing ts;
        assert_int_equal(dra_sharing_parse(j, &ts, &e), 0);
        assert_int_equal(ts.strategy, GPU_SHARING_TIME_SLICING);
        assert_int_equal(ts.timeslice, i);
        json_decref(j);
    }
    static const struct {
        const char *params, *why;
    } bad[] = {
        {"{\"apiVersion\":\"resource.nvidia.com/v1\",\"kind\":\"GpuConfig\"}", "apiVersion must be"},
        {"{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"ComputeDomainChannelConfig\"}",
         "is not one gpulet knows"},
        {"{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"GpuConfig\",\"sharing\":"
         "{\"strategy\":\"TimeSlicing\",\"timeSlicingConfig\":{\"interval\":\"Longest\"}}}",
         "must be Default, Short, Medium or Long"},
        {"{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"GpuConfig\",\"sharing\":"
         "{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultActiveThreadPercentage\":0}}}",
         "1 to 100"},
        {"{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"GpuConfig\",\"sharing\":"
         "{\"strategy\":\"MPS\",\"mpsConfig\":{\"defaultPinnedDeviceMemoryLimit\":\"10x\"}}}",
         "at least 1Mi"},
        {"{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"GpuConfig\",\"sharing\":"
         "{\"strategy\":\"MPS\",\"timeSlicingConfig\":{}}}", "does not go with strategy MPS"},
        {"{\"apiVersion\":\"resource.nvidia.com/v1beta1\",\"kind\":\"GpuConfig\",\"sharing\":"
         "{\"strategy\":\"Fabric\"}}", "must be TimeSlicing or MPS"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"kind\":\"ResourceClaim\",\"metadata\":{\"uid\":\"u\"},\"status\":{\"allocation\":"
                 "{\"devices\":{\"results\":[],\"config\":[{\"source\":\"FromClass\",\"opaque\":"
                 "{\"driver\":\"gpu.nvidia.com\",\"parameters\":%s}}]}}}}",
                 bad[i].params);
        assert_int_equal(dra_claim_parse(json, strlen(json), &a, &e), -1);
        assert_contains(e.msg, "config 0 (FromClass)");
        assert_contains(e.msg, bad[i].why);
    }
}

static void test_quantity(void **state)
{
    (void)state;
    static const struct {
        const char *q;
        unsigned long long mib;
    } cases[] = {
        {"40Gi", 40960}, {"512Mi", 512}, {"1G", 953},   {"8G", 7629},    {"1048576", 1},
        {"1.5Gi", 1536}, {"1e9", 953},   {"1E9", 953},  {"2E", 1907348632812}, {".5Gi", 512},
        {"+1Gi", 1024},  {"1Ki", 0},     {"Gi", 0},     {"-1Gi", 0},     {"inf", 0},
        {"10 Gi", 0},    {"0x10Gi", 0},  {"", 0},       {"1e", 0},       {"1.2.3Gi", 0},
        {"1e-3", 0},     {"2048Mi", 2048}, {"1073741824000m", 1024},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        assert_int_equal(quantity_mib(cases[i].q), cases[i].mib);
}

/* Which containers use a claim: reservedFor's pods, then each pod's
 * containers naming it directly or through a template's claim. */
static void test_consumers(void **state)
{
    (void)state;
    static const char claim[] = "{\"metadata\":{\"uid\":\"u1\"},\"status\":{\"reservedFor\":[{\"resource\":\"pods\",\"name\":\"p1\"},"
                                "{\"resource\":\"jobs\",\"name\":\"j\"},{\"resource\":\"pods\",\"name\":\"p2\"}]}}";
    char pods[4][128];
    assert_int_equal(dra_claim_pods(claim, strlen(claim), "u1", pods, 4), 2);
    assert_int_equal(dra_claim_pods(claim, strlen(claim), "u2", pods, 4), -1); /* another claim */
    assert_string_equal(pods[1], "p2");
    static const char pod[] =
        "{\"metadata\":{\"name\":\"p1\",\"namespace\":\"ml\"},\"spec\":{"
        "\"resourceClaims\":[{\"name\":\"gpu\",\"resourceClaimTemplateName\":\"t\"},"
        "{\"name\":\"shared\",\"resourceClaimName\":\"other\"}],"
        "\"initContainers\":[{\"name\":\"init\",\"resources\":{\"claims\":[{\"name\":\"gpu\"}]}}],"
        "\"containers\":[{\"name\":\"a\",\"resources\":{\"claims\":[{\"name\":\"gpu\"}]}},"
        "{\"name\":\"b\",\"resources\":{\"claims\":[{\"name\":\"shared\"}]}},{\"name\":\"c\"}]},"
        "\"status\":{\"resourceClaimStatuses\":[{\"name\":\"gpu\",\"resourceClaimName\":\"p1-gpu-x7\"}]}}";
    struct dra_consumer c[4];
    assert_int_equal(dra_pod_consumers(pod, strlen(pod), "p1-gpu-x7", c, 0, 4), 2);
    assert_string_equal(c[0].container, "init");
    assert_string_equal(c[1].container, "a");
    assert_string_equal(c[1].ns, "ml");
    assert_int_equal(dra_pod_consumers(pod, strlen(pod), "other", c, 2, 4), 3);
    assert_string_equal(c[2].container, "b");
    assert_int_equal(dra_pod_consumers(pod, strlen(pod), "other", c, 4, 4), 4); /* full */
    assert_int_equal(dra_pod_consumers("{", 1, "x", c, 0, 4), 0);
}

/* --dra-gpus: product globs, indexes, index ranges and UUIDs; nothing without --dra all. */
static void test_takes(void **state)
{
    (void)state;
    struct gpu_info h100 = {.index = 2, .uuid = "GPU-aaa", .name = "NVIDIA H100 80GB HBM3"};
    struct gpu_info l4 = {.index = 5, .uuid = "GPU-bbb", .name = "NVIDIA L4"};
    struct config cfg = {.dra = CONFIG_DRA_OFF};
    snprintf(cfg.dra_gpus, sizeof cfg.dra_gpus, "*");
    assert_false(config_dra_takes(&cfg, &h100));
    cfg.dra = CONFIG_DRA_ALL;
    assert_true(config_dra_takes(&cfg, &h100) && config_dra_takes(&cfg, &l4));
    snprintf(cfg.dra_gpus, sizeof cfg.dra_gpus, "*H100*");
    assert_true(config_dra_takes(&cfg, &h100));
    assert_false(config_dra_takes(&cfg, &l4));
    snprintf(cfg.dra_gpus, sizeof cfg.dra_gpus, "0,5");
    assert_false(config_dra_takes(&cfg, &h100));
    assert_true(config_dra_takes(&cfg, &l4));
    snprintf(cfg.dra_gpus, sizeof cfg.dra_gpus, "GPU-aaa");
    assert_true(config_dra_takes(&cfg, &h100));
    assert_false(config_dra_takes(&cfg, &l4));
    /* An index range, as an operator writes it; not a product glob. */
    snprintf(cfg.dra_gpus, sizeof cfg.dra_gpus, "0-3");
    assert_true(config_dra_takes(&cfg, &h100));
    assert_false(config_dra_takes(&cfg, &l4));
    snprintf(cfg.dra_gpus, sizeof cfg.dra_gpus, "4-7,GPU-aaa");
    assert_true(config_dra_takes(&cfg, &h100) && config_dra_takes(&cfg, &l4));
    snprintf(cfg.dra_gpus, sizeof cfg.dra_gpus, "3-1");
    assert_false(config_dra_takes(&cfg, &h100));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_takes),
        cmocka_unit_test(test_slice),
        cmocka_unit_test(test_slice_mig),
        cmocka_unit_test(test_slice_v1beta1),
        cmocka_unit_test(test_slice_taints),
        cmocka_unit_test(test_taint_rules),
        cmocka_unit_test(test_health_pack),
        cmocka_unit_test(test_claim_share),
        cmocka_unit_test(test_slice_shares),
        cmocka_unit_test(test_api_serves_slices),
        cmocka_unit_test(test_claim),
        cmocka_unit_test(test_claim_config),
        cmocka_unit_test(test_quantity),
        cmocka_unit_test(test_consumers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
