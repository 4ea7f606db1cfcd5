/* The device plugin's decisions without sockets: preferred allocation on
 * the simulator's topologies, and Allocate's output for each strategy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deviceplugin.pb-c.h"
#include "grpc/grpc.h"
#include "plugin/internal.h"
#include "testutil.h"

static struct nvml nv;
static struct gpu_inventory inv;
static struct gpu_device *records;   /* the agent's record of each GPU, all healthy */

static void inventory(const char *preset)
{
    struct err e;
    testutil_sim_start(&nv, preset);
    if (gpu_inventory_build(&nv, &inv, &e) < 0)
        fail_msg("%s", e.msg);
    records = gpu_devices_new(&inv, 0);
}

static void done(void)
{
    free(records);
    records = NULL;
    gpu_inventory_free(&inv);
    nvml_close(&nv);
}

/* prefer() over all GPUs of the inventory, as a string like "0,1,2,3". */
static const char *prefer(size_t size, const unsigned *must, size_t nmust)
{
    static char out[256];
    unsigned avail[64], chosen[64];
    for (unsigned i = 0; i < inv.count; i++)
        avail[i] = i;
    if (plugin_prefer(&inv, avail, inv.count, must, nmust, size, chosen) < 0)
        return "error";
    size_t n = 0;
    for (size_t i = 0; i < size; i++)
        n += (size_t)snprintf(out + n, sizeof out - n, "%s%u", i ? "," : "", chosen[i]);
    return out;
}

static void test_prefer_a100_islands(void **state)
{
    (void)state;
    inventory("a100-2x4");
    assert_string_equal(prefer(2, NULL, 0), "0,1");       /* NVLink and one PCIe switch */
    assert_string_equal(prefer(4, NULL, 0), "0,1,2,3");   /* a whole island */
    unsigned six = 6;
    assert_string_equal(prefer(2, &six, 1), "6,7");
    assert_string_equal(prefer(4, &six, 1), "4,5,6,7");
    unsigned cross[] = {3, 4};
    /* Three NVLink pairs (0-1, 0-3, 1-3: 1320) beat two (2-3, 4-5: 930). */
    assert_string_equal(prefer(4, cross, 2), "0,1,3,4");
    assert_string_equal(prefer(8, NULL, 0), "0,1,2,3,4,5,6,7");
    assert_string_equal(prefer(9, NULL, 0), "error");
    done();
}

static void test_prefer_dgx_and_l4(void **state)
{
    (void)state;
    inventory("dgx-h100");
    /* Every pair has NV18: NUMA locality decides. */
    assert_string_equal(prefer(4, NULL, 0), "0,1,2,3");
    unsigned five = 5;
    assert_string_equal(prefer(2, &five, 1), "4,5");
    done();
    inventory("l4-pcie");
    assert_string_equal(prefer(2, NULL, 0), "0,1");
    unsigned three = 3;
    assert_string_equal(prefer(2, &three, 1), "2,3");
    /* {0,1,3} and {0,2,3} both score 70: the lower indexes win the tie. */
    assert_string_equal(prefer(3, &three, 1), "0,1,3");
    done();
}

static void test_prefer_greedy_is_deterministic(void **state)
{
    (void)state;
    inventory("scale-64");
    char first[256];
    snprintf(first, sizeof first, "%s", prefer(32, NULL, 0));
    assert_string_equal(prefer(32, NULL, 0), first);
    assert_string_equal(prefer(8, NULL, 0), "0,1,2,3,4,5,6,7"); /* one NUMA node of eight */
    done();
}

/* --- Allocate ------------------------------------------------------------ */

/* A plugin on the inventory's first resource under cfg. */
static struct plugin_resource *make_plugin(struct plugin *p, const struct config *cfg,
                                             unsigned *nres)
{
    struct plugin_resource *res;
    struct err e;
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    p->inv = &inv;
    p->records = records;
    assert_int_equal(plugin_resources(cfg, &inv, &res, nres, &e), 0);
    p->res = &res[0];
    plugin_build_devices(p);
    return res;
}

static V1beta1__AllocateResponse *allocate(const struct config *cfg, const char *const *ids,
                                           size_t n, int *status, char *why)
{
    struct plugin p;
    unsigned nres;
    struct plugin_resource *res = make_plugin(&p, cfg, &nres);
    V1beta1__ContainerAllocateRequest cr = V1BETA1__CONTAINER_ALLOCATE_REQUEST__INIT;
    cr.n_devices_ids = n;
    cr.devices_ids = (char **)ids;
    V1beta1__ContainerAllocateRequest *crs[] = {&cr, &cr};
    V1beta1__AllocateRequest req = V1BETA1__ALLOCATE_REQUEST__INIT;
    req.n_container_requests = n ? 1 : 2; /* n == 0: the same container twice */
    req.container_requests = crs;
    if (!n)
        cr.n_devices_ids = 1, cr.devices_ids = (char **)ids + 1;
    uint8_t buf[4096], *out = NULL;
    size_t len = v1beta1__allocate_request__pack(&req, buf), out_len = 0;
    struct err e = {.msg = ""};
    *status = plugin_allocate(&p, buf, len, &out, &out_len, &e);
    snprintf(why, 256, "%.255s", e.msg);
    V1beta1__AllocateResponse *r = out ? v1beta1__allocate_response__unpack(NULL, out_len, out) : NULL;
    free(out);
    free(p.devs);
    plugin_resources_free(res, nres);
    return r;
}

static const char *env(V1beta1__ContainerAllocateResponse *c, const char *key)
{
    for (size_t i = 0; i < c->n_envs; i++)
        if (!strcmp(c->envs[i]->key, key))
            return c->envs[i]->value;
    return NULL;
}

static struct config base_config(void)
{
    struct config c;
    memset(&c, 0, sizeof c);
    c.list_strategy = CONFIG_LIST_ENVVAR;
    strcpy(c.dev_root, "/");
    strcpy(c.cdi_prefix, "cdi.k8s.io/");
    return c;
}

static void test_allocate_refuses_unhealthy(void **state)
{
    (void)state;
    inventory("l4-pcie");
    const char *ids[] = {inv.gpus[2].uuid};
    char why[256];
    int st;
    struct config c = base_config();
    gpu_health_on_xid(&records[2].health, 79, 0);
    assert_null(allocate(&c, ids, 1, &st, why));
    assert_int_equal(st, GRPC_FAILED_PRECONDITION);
    assert_contains(why, "is unhealthy (XID 79: fallen off the bus)");
    gpu_health_clear(&records[2].health);
    V1beta1__AllocateResponse *r = allocate(&c, ids, 1, &st, why);
    assert_int_equal(st, GRPC_OK);
    v1beta1__allocate_response__free_unpacked(r, NULL);
    done();
}

static void test_allocate_strategies(void **state)
{
    (void)state;
    inventory("l4-pcie");
    const char *ids[] = {inv.gpus[1].uuid, inv.gpus[3].uuid};
    char joined[200], why[256];
    snprintf(joined, sizeof joined, "%s,%s", ids[0], ids[1]);
    int st;
    struct config c = base_config();
    V1beta1__AllocateResponse *r = allocate(&c, ids, 2, &st, why);
    assert_int_equal(st, GRPC_OK);
    assert_int_equal(r->n_container_responses, 1);
    assert_string_equal(env(r->container_responses[0], "NVIDIA_VISIBLE_DEVICES"), joined);
    assert_int_equal(r->container_responses[0]->n_devices, 0);
    v1beta1__allocate_response__free_unpacked(r, NULL);

    c.list_strategy = CONFIG_LIST_VOLUME_MOUNTS | CONFIG_LIST_ENVVAR;
    r = allocate(&c, ids, 2, &st, why);
    V1beta1__ContainerAllocateResponse *cr = r->container_responses[0];
    assert_int_equal(cr->n_envs, 1); /* one NVIDIA_VISIBLE_DEVICES: the mount list wins */
    assert_string_equal(env(cr, "NVIDIA_VISIBLE_DEVICES"), "/var/run/nvidia-container-devices");
    assert_int_equal(cr->n_mounts, 2);
    assert_string_equal(cr->mounts[1]->host_path, "/dev/null");
    assert_true(strstr(cr->mounts[1]->container_path, ids[1]) != NULL);
    v1beta1__allocate_response__free_unpacked(r, NULL);

    c.list_strategy = CONFIG_LIST_CDI_ANNOTATIONS | CONFIG_LIST_CDI_CRI;
    c.pass_device_specs = true;
    c.id_strategy = CONFIG_ID_INDEX;
    const char *idx[] = {"2"};
    r = allocate(&c, idx, 1, &st, why);
    cr = r->container_responses[0];
    assert_int_equal(cr->n_envs, 0);
    assert_int_equal(cr->n_devices, 0); /* CDI only: the spec brings the nodes */
    assert_int_equal(cr->n_cdi_devices, 1);
    assert_string_equal(cr->cdi_devices[0]->name, "nvidia.com/gpu=2");
    assert_string_equal(cr->annotations[0]->key, "cdi.k8s.io/gpulet_2");
    assert_string_equal(cr->annotations[0]->value, "nvidia.com/gpu=2");
    v1beta1__allocate_response__free_unpacked(r, NULL);
    done();
}

static void test_allocate_device_specs(void **state)
{
    (void)state;
    inventory("dgx-h100");
    char root[] = "/tmp/gpulet-devroot-XXXXXX";
    assert_non_null(mkdtemp(root));
    char dev[128], node[160];
    snprintf(dev, sizeof dev, "%s/dev", root);
    mkdir(dev, 0755);
    snprintf(node, sizeof node, "%s/nvidiactl", dev);
    fclose(fopen(node, "w")); /* nvidiactl exists; the uvm nodes do not */
    struct config c = base_config();
    c.pass_device_specs = true;
    snprintf(c.dev_root, sizeof c.dev_root, "%s", root);
    const char *ids[] = {inv.gpus[5].uuid};
    int st;
    char why[256];
    V1beta1__AllocateResponse *r = allocate(&c, ids, 1, &st, why);
    V1beta1__ContainerAllocateResponse *cr = r->container_responses[0];
    assert_int_equal(cr->n_devices, 2);
    assert_string_equal(cr->devices[0]->container_path, "/dev/nvidiactl");
    snprintf(node, sizeof node, "%s/dev/nvidiactl", root);
    assert_string_equal(cr->devices[0]->host_path, node);
    assert_string_equal(cr->devices[1]->container_path, "/dev/nvidia5");
    assert_string_equal(cr->devices[1]->permissions, "rw");
    v1beta1__allocate_response__free_unpacked(r, NULL);
    snprintf(node, sizeof node, "%s/dev/nvidiactl", root);
    unlink(node);
    rmdir(dev);
    rmdir(root);
    done();
}

static void test_allocate_errors(void **state)
{
    (void)state;
    inventory("t4");
    struct config c = base_config();
    int st;
    char why[256];
    const char *unknown[] = {"GPU-nope"};
    assert_null(allocate(&c, unknown, 1, &st, why));
    assert_int_equal(st, GRPC_INVALID_ARGUMENT);
    assert_string_equal(why, "unknown device ID 'GPU-nope'");
    const char *twice[] = {inv.gpus[0].uuid, inv.gpus[0].uuid};
    assert_null(allocate(&c, twice, 2, &st, why));
    assert_contains(why, "requested twice");
    const char *two_containers[] = {NULL, inv.gpus[0].uuid};
    assert_null(allocate(&c, two_containers, 0, &st, why)); /* one GPU, two containers */
    assert_contains(why, "requested twice");
    done();
}

/* --- per-model resources ---------------------------------------------------------- */

static void add_rule(struct config *c, const char *pattern, const char *name)
{
    struct config_resource *r = &c->resources[c->nresources++];
    snprintf(r->pattern, sizeof r->pattern, "%s", pattern);
    snprintf(r->name, sizeof r->name, "%s", name);
}

static void test_resources(void **state)
{
    (void)state;
    inventory("mixed-pcie");
    struct config cfg;
    memset(&cfg, 0, sizeof cfg);
    struct plugin_resource *r;
    unsigned n;
    struct err e;
    /* No rules: one nvidia.com/gpu for everything, on NVIDIA-like socket names. */
    assert_int_equal(plugin_resources(&cfg, &inv, &r, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].name, "nvidia.com/gpu");
    assert_string_equal(r[0].socket, "gpulet-nvidia-gpu.sock");
    assert_int_equal(r[0].ngpus, 6);
    plugin_resources_free(r, n);
    /* One resource per model; a model with no GPU here is still advertised. */
    add_rule(&cfg, "*H100*", "h100");
    add_rule(&cfg, "NVIDIA L4", "l4");
    add_rule(&cfg, "*A100*", "a100");
    assert_int_equal(plugin_resources(&cfg, &inv, &r, &n, &e), 0);
    assert_int_equal(n, 3);
    assert_string_equal(r[0].name, "nvidia.com/h100");
    assert_string_equal(r[0].socket, "gpulet-nvidia-h100.sock");
    assert_int_equal(r[0].ngpus, 2);
    assert_int_equal(r[1].ngpus, 4);
    assert_int_equal(r[1].gpus[0], 2);
    assert_int_equal(r[2].ngpus, 0);
    plugin_resources_free(r, n);
    /* Two patterns of one resource are fine; two resources for one GPU are not. */
    add_rule(&cfg, "NVIDIA H100*", "h100");
    assert_int_equal(plugin_resources(&cfg, &inv, &r, &n, &e), 0);
    plugin_resources_free(r, n);
    add_rule(&cfg, "*L4", "inference");
    assert_int_equal(plugin_resources(&cfg, &inv, &r, &n, &e), -1);
    assert_contains(e.msg, "GPU 2 (NVIDIA L4");
    assert_contains(e.msg, "matches two resources, nvidia.com/l4 and nvidia.com/inference");
    memset(&cfg, 0, sizeof cfg);
    add_rule(&cfg, "*H100*", "h100");
    assert_int_equal(plugin_resources(&cfg, &inv, &r, &n, &e), -1);
    assert_contains(e.msg, "GPU 2 (NVIDIA L4");
    assert_contains(e.msg, "matches no resources.gpus pattern");
    done();
}

/* --- sharing ------------------------------------------------------------------------ */

static void add_shared(struct config *c, const char *name, unsigned replicas, const char *devices,
                       bool listed)
{
    c->sharing = GPU_SHARING_TIME_SLICING;
    struct config_shared *s = &c->shared[c->nshared++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->replicas = replicas;
    snprintf(s->devices, sizeof s->devices, "%s", devices);
    s->devices_listed = listed;
}

static void expect_resources_error(const struct config *c, const char *what)
{
    struct plugin_resource *r;
    unsigned n;
    struct err e;
    if (plugin_resources(c, &inv, &r, &n, &e) == 0)
        fail_msg("accepted a config that should fail with: %s", what);
    assert_contains(e.msg, what);
}

static void test_sharing_resources(void **state)
{
    (void)state;
    inventory("l4-pcie");
    struct config c = base_config();
    struct plugin_resource *r;
    unsigned n;
    struct err e;
    /* Every GPU shared, not renamed: nvidia.com/gpu with 4 replicas each. */
    add_shared(&c, "nvidia.com/gpu", 4, "all", false);
    assert_int_equal(plugin_resources(&c, &inv, &r, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].name, "nvidia.com/gpu");
    assert_int_equal(r[0].ngpus, 4);
    assert_int_equal(r[0].replicas[3], 4);
    assert_false(r[0].renamed);
    plugin_resources_free(r, n);
    /* renameByDefault: only nvidia.com/gpu.shared. */
    c.rename_by_default = true;
    assert_int_equal(plugin_resources(&c, &inv, &r, &n, &e), 0);
    assert_int_equal(n, 1);
    assert_string_equal(r[0].name, "nvidia.com/gpu.shared");
    assert_string_equal(r[0].socket, "gpulet-nvidia-gpu.shared.sock");
    plugin_resources_free(r, n);
    /* Per-GPU counts; a GPU left whole keeps nvidia.com/gpu, so the shared
     * ones move to nvidia.com/gpu.shared even without renameByDefault. */
    c = base_config();
    add_shared(&c, "nvidia.com/gpu", 4, "0,1", true);
    add_shared(&c, "nvidia.com/gpu", 2, inv.gpus[2].uuid, true);
    assert_int_equal(plugin_resources(&c, &inv, &r, &n, &e), 0);
    assert_int_equal(n, 2);
    assert_string_equal(r[0].name, "nvidia.com/gpu");
    assert_int_equal(r[0].ngpus, 1);
    assert_int_equal(r[0].gpus[0], 3);
    assert_string_equal(r[1].name, "nvidia.com/gpu.shared");
    assert_int_equal(r[1].ngpus, 3);
    assert_int_equal(r[1].replicas[0], 4);
    assert_int_equal(r[1].replicas[2], 2);
    struct gpu_device devs[4];
    memset(devs, 0, sizeof devs);
    plugin_resources_apply(r, n, devs, 4);
    assert_int_equal(devs[2].share.replicas, 2);
    assert_int_equal(devs[3].share.replicas, 1);
    assert_int_equal(devs[3].share.sharing, GPU_SHARING_NONE);
    assert_true(devs[0].share.renamed);
    plugin_resources_free(r, n);
    /* A count takes the resource's first GPUs. */
    c = base_config();
    add_shared(&c, "nvidia.com/gpu", 3, "2", false);
    assert_int_equal(plugin_resources(&c, &inv, &r, &n, &e), 0);
    assert_int_equal(r[1].ngpus, 2);
    assert_int_equal(r[1].gpus[1], 1);
    plugin_resources_free(r, n);
    /* Errors, each naming the key or the GPU. */
    c = base_config();
    add_shared(&c, "nvidia.com/gpu", 2, "0,9", true);
    expect_resources_error(&c, "sharing.timeSlicing.resources[0].devices names GPU '9', which is "
                               "not a GPU of nvidia.com/gpu on this node");
    c = base_config();
    add_shared(&c, "nvidia.com/gpu", 2, "5", false);
    expect_resources_error(&c, "sharing.timeSlicing.resources[0].devices asks for 5 GPUs");
    c = base_config();
    add_shared(&c, "nvidia.com/gpu", 2, "all", false);
    add_shared(&c, "nvidia.com/gpu", 3, "1", true);
    expect_resources_error(&c, "GPU 1 is selected by both sharing.timeSlicing.resources[0] and [1]");
    c = base_config();
    add_shared(&c, "nvidia.com/h100", 2, "all", false);
    expect_resources_error(&c, "sharing.timeSlicing.resources[0].name: nvidia.com/h100 is not a "
                               "resource of this node");
    c = base_config();
    add_shared(&c, "nvidia.com/gpu", 2, "0", true);
    snprintf(c.shared[0].rename, sizeof c.shared[0].rename, "nvidia.com/gpu");
    expect_resources_error(&c, "nvidia.com/gpu would hold both whole GPUs and replicas");
    c = base_config();
    add_shared(&c, "nvidia.com/gpu", 2, "all", false);
    c.sharing = GPU_SHARING_MPS;
    inv.gpus[1].mig_mode = NVML_DEVICE_MIG_ENABLE;
    expect_resources_error(&c, "sharing.mps.resources[0]: GPU 1 has MIG enabled");
    done();
}

static void test_replica_allocate(void **state)
{
    (void)state;
    inventory("l4-pcie");
    struct config c = base_config();
    add_shared(&c, "nvidia.com/gpu", 4, "all", false);
    struct plugin p;
    unsigned nres;
    struct plugin_resource *res = make_plugin(&p, &c, &nres);
    assert_int_equal(p.ndevs, 16);
    char want[128];
    snprintf(want, sizeof want, "%s::3", inv.gpus[0].uuid);
    assert_string_equal(p.devs[3].id, want);
    assert_true(plugin_shared(&p));
    free(p.devs);
    plugin_resources_free(res, nres);
    /* Two replicas of one GPU: the GPU once, and a note. */
    char a0[128], a1[128], b0[128];
    snprintf(a0, sizeof a0, "%s::0", inv.gpus[0].uuid);
    snprintf(a1, sizeof a1, "%s::1", inv.gpus[0].uuid);
    snprintf(b0, sizeof b0, "%s::0", inv.gpus[1].uuid);
    const char *same[] = {a0, a1}, *two[] = {a0, b0};
    int st;
    char why[256];
    V1beta1__AllocateResponse *r = allocate(&c, same, 2, &st, why);
    assert_int_equal(st, GRPC_OK);
    assert_string_equal(env(r->container_responses[0], "NVIDIA_VISIBLE_DEVICES"), inv.gpus[0].uuid);
    assert_contains(env(r->container_responses[0], "GPULET_SHARED_NOTE"),
                    "2 replicas of nvidia.com/gpu on 1 GPU(s)");
    v1beta1__allocate_response__free_unpacked(r, NULL);
    r = allocate(&c, two, 2, &st, why);
    char both[200];
    snprintf(both, sizeof both, "%s,%s", inv.gpus[0].uuid, inv.gpus[1].uuid);
    assert_string_equal(env(r->container_responses[0], "NVIDIA_VISIBLE_DEVICES"), both);
    assert_null(env(r->container_responses[0], "GPULET_SHARED_NOTE"));
    v1beta1__allocate_response__free_unpacked(r, NULL);
    /* failRequestsGreaterThanOne: NVIDIA's message. */
    c.fail_requests_gt_one = true;
    assert_null(allocate(&c, two, 2, &st, why));
    assert_int_equal(st, GRPC_INVALID_ARGUMENT);
    assert_string_equal(why, "request for 'nvidia.com/gpu: 2' too large: maximum request size "
                             "for shared resources is 1");
    r = allocate(&c, two, 1, &st, why);
    assert_int_equal(st, GRPC_OK);
    v1beta1__allocate_response__free_unpacked(r, NULL);
    done();
}

static const char *prefer_replicas(const struct plugin *p, const unsigned *avail, size_t navail,
                                   const unsigned *must, size_t nmust, size_t size)
{
    static char out[512];
    char *a[64], *m[64];
    unsigned chosen[64];
    for (size_t i = 0; i < navail; i++)
        a[i] = (char *)p->devs[avail[i]].id;
    for (size_t i = 0; i < nmust; i++)
        m[i] = (char *)p->devs[must[i]].id;
    struct err e;
    if (plugin_prefer_replicas(p, a, navail, m, nmust, size, chosen, &e) < 0)
        return "error";
    size_t n = 0;
    for (size_t i = 0; i < size; i++)
        n += (size_t)snprintf(out + n, sizeof out - n, "%s%u.%u", i ? "," : "",
                              p->devs[chosen[i]].gpu, p->devs[chosen[i]].replica);
    return out;
}

static void test_replica_prefer(void **state)
{
    (void)state;
    inventory("l4-pcie");
    struct config c = base_config();
    add_shared(&c, "nvidia.com/gpu", 4, "all", false);
    struct plugin p;
    unsigned nres;
    struct plugin_resource *res = make_plugin(&p, &c, &nres);
    unsigned all[16];
    for (unsigned i = 0; i < 16; i++)
        all[i] = i;
    /* Distinct GPUs first: 2 replicas on 2 GPUs, 6 on all 4 then doubled up. */
    assert_string_equal(prefer_replicas(&p, all, 16, NULL, 0, 2), "0.0,1.0");
    assert_string_equal(prefer_replicas(&p, all, 16, NULL, 0, 6), "0.0,1.0,2.0,3.0,0.1,1.1");
    /* GPU 0 has 3 replicas taken, GPU 1 one: distributed prefers 2 and 3. */
    unsigned loaded[] = {3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    assert_string_equal(prefer_replicas(&p, loaded, 12, NULL, 0, 2), "2.0,3.0");
    c.shared_policy = CONFIG_POLICY_PACKED;
    assert_string_equal(prefer_replicas(&p, loaded, 12, NULL, 0, 2), "0.3,1.1");
    c.shared_policy = CONFIG_POLICY_DISTRIBUTED;
    /* A must-include comes first and its GPU is avoided for the rest. */
    unsigned must[] = {8};
    assert_string_equal(prefer_replicas(&p, loaded, 12, must, 1, 3), "2.0,3.0,1.1");
    /* Only one GPU has free replicas: they double up. */
    unsigned one[] = {4, 5, 6};
    assert_string_equal(prefer_replicas(&p, one, 3, NULL, 0, 2), "1.0,1.1");
    assert_string_equal(prefer_replicas(&p, one, 3, NULL, 0, 4), "error");
    free(p.devs);
    plugin_resources_free(res, nres);
    done();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefer_a100_islands),
        cmocka_unit_test(test_prefer_dgx_and_l4),
        cmocka_unit_test(test_prefer_greedy_is_deterministic),
        cmocka_unit_test(test_allocate_strategies),
        cmocka_unit_test(test_allocate_refuses_unhealthy),
        cmocka_unit_test(test_allocate_device_specs),
        cmocka_unit_test(test_allocate_errors),
        cmocka_unit_test(test_resources),
        cmocka_unit_test(test_sharing_resources),
        cmocka_unit_test(test_replica_allocate),
        cmocka_unit_test(test_replica_prefer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
