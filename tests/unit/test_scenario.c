/* Scenario parsing: presets, layout, NVLink topology, and one clear error
 * (source:line:column) for each kind of bad input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/scenario.h"
#include "testutil.h"

static struct scenario sc;

static int parse(const char *yaml, struct err *e)
{
    return scenario_parse("test.yaml", yaml, strlen(yaml), &sc, e);
}

static void expect_error(const char *yaml, const char *where, const char *what)
{
    struct err e;
    if (parse(yaml, &e) == 0)
        fail_msg("accepted bad scenario:\n%s", yaml);
    assert_contains(e.msg, where);
    assert_contains(e.msg, what);
}

static void test_presets_parse(void **state)
{
    (void)state;
    static const unsigned counts[] = {8, 8, 4, 1, 8, 8, 8, 8, 4, 4, 1, 6, 64};
    struct err e;
    for (size_t i = 0; sim_preset_names[i]; i++) {
        if (scenario_load(sim_preset_names[i], &sc, &e) < 0)
            fail_msg("preset %s: %s", sim_preset_names[i], e.msg);
        assert_int_equal(sc.count, counts[i]);
        assert_string_equal(sc.name, sim_preset_names[i]);
    }
}

/* MIG in scenarios: layouts, the pending mode, and what cannot be. */
static void test_mig_scenarios(void **state)
{
    (void)state;
    struct err e;
    const char *ok = "gpus:\n  - {product: h200, mig: true, mig_pending: true,\n"
                     "     mig_devices: [3g.71gb, 2g.35gb, 1g.18gb, 1g.18gb]}\n";
    assert_int_equal(parse(ok, &e), 0);
    assert_true(sc.gpus[0].mig_enabled && sc.gpus[0].mig_pending);
    assert_int_equal(sc.gpus[0].nmig, 4);
    expect_error("gpus:\n  - {product: l4, mig_pending: true}\n", "test.yaml:2:",
                 "product l4 does not support MIG");
    expect_error("gpus:\n  - {product: h200, mig_devices: [1g.18gb]}\n", "test.yaml:2:",
                 "mig_devices needs mig: true");
    expect_error("gpus:\n  - {product: h200, mig: true, mig_devices: [1g.10gb]}\n", "test.yaml:2:",
                 "h200 has no MIG profile '1g.10gb'");
    expect_error("gpus:\n  - {product: h100-sxm, mig: true, mig_devices: [7g.80gb, 1g.10gb]}\n",
                 "test.yaml:2:", "take 8 compute slices");
    expect_error("gpus:\n  - {product: a100-40gb, mig: true, mig_devices: [3g.20gb, 3g.20gb, 1g.5gb]}\n",
                 "test.yaml:2:", "do not fit together");
    expect_error("gpus:\n  - {product: h200, mig: true, mig_devices: 3g.71gb}\n", "test.yaml:2:",
                 "mig_devices must be a list");
}

static void test_processes(void **state)
{
    (void)state;
    struct err e;
    const char *yaml = "gpus:\n  - product: l4\n    processes:\n"
                       "      - {pid: 4242, memory_mib: 2048, sm: 30}\n      - {pid: 4343}\n";
    assert_int_equal(parse(yaml, &e), 0);
    assert_int_equal(sc.gpus[0].nprocs, 2);
    assert_int_equal(sc.gpus[0].procs[0].pid, 4242);
    assert_true(sc.gpus[0].procs[0].memory_mib == 2048);
    assert_int_equal(sc.gpus[0].procs[1].sm, 0);
}

static void test_dgx_h100_layout(void **state)
{
    (void)state;
    struct err e;
    assert_int_equal(scenario_load("dgx-h100", &sc, &e), 0);
    assert_string_equal(sc.gpus[0].product->name, "NVIDIA H100 80GB HBM3");
    assert_string_equal(sc.driver_version, "580.159.04");
    assert_int_equal(sc.cuda_version, 13000);
    for (unsigned i = 0; i < 8; i++) {
        assert_int_equal(sc.gpus[i].numa_node, i < 4 ? 0 : 1);
        assert_int_equal(sc.gpus[i].nlinks, 18);
        assert_int_equal(sc.gpus[i].links[0].remote_type, NVML_NVLINK_DEVICE_TYPE_SWITCH);
        assert_int_equal(strlen(sc.gpus[i].uuid), 40);
        for (unsigned j = 0; j < i; j++) {
            assert_string_not_equal(sc.gpus[i].uuid, sc.gpus[j].uuid);
            assert_int_not_equal(sc.gpus[i].bus, sc.gpus[j].bus);
        }
    }
    /* Generated identities are stable from run to run. */
    struct scenario again;
    assert_int_equal(scenario_load("dgx-h100", &again, &e), 0);
    assert_string_equal(again.gpus[5].uuid, sc.gpus[5].uuid);
}

static void test_islands(void **state)
{
    (void)state;
    struct err e;
    assert_int_equal(scenario_load("a100-2x4", &sc, &e), 0);
    const struct sim_gpu *g = &sc.gpus[1];
    assert_int_equal(g->nlinks, 12);
    unsigned per_peer[8] = {0};
    for (unsigned k = 0; k < g->nlinks; k++)
        per_peer[g->links[k].remote_gpu]++;
    assert_int_equal(per_peer[0], 4);
    assert_int_equal(per_peer[2], 4);
    assert_int_equal(per_peer[3], 4);
    assert_int_equal(per_peer[4], 0);
    assert_int_equal(sc.gpus[0].pcie_switch, sc.gpus[1].pcie_switch);
    assert_int_not_equal(sc.gpus[1].pcie_switch, sc.gpus[2].pcie_switch);
}

static void test_explicit_gpu(void **state)
{
    (void)state;
    struct err e;
    const char *yaml = "name: mixed\n"
                       "driver_version: \"550.54.15\"\n"
                       "cuda_version: \"12.4\"\n"
                       "seed: 7\n"
                       "gpus:\n"
                       "  - product: h200\n"
                       "    uuid: GPU-1bdd772b-3995-67fb-90f1-f2bac40700af\n"
                       "    pci_bus_id: \"0000:00:06.0\"\n"
                       "    numa_node: 1\n"
                       "    mig: true\n"
                       "  - product: t4\n"
                       "    count: 2\n";
    if (parse(yaml, &e) < 0)
        fail_msg("%s", e.msg);
    assert_int_equal(sc.count, 3);
    assert_string_equal(sc.gpus[0].uuid, "GPU-1bdd772b-3995-67fb-90f1-f2bac40700af");
    assert_int_equal(sc.gpus[0].bus, 0);
    assert_int_equal(sc.gpus[0].device, 6);
    assert_int_equal(sc.gpus[0].numa_node, 1);
    assert_true(sc.gpus[0].mig_enabled);
    assert_int_equal(sc.gpus[1].numa_node, 0);
    assert_int_equal(sc.cuda_version, 12040);
    assert_string_equal(sc.driver_version, "550.54.15");
    assert_string_equal(sc.gpus[2].product->name, "Tesla T4");
}

static void test_bad_scenarios(void **state)
{
    (void)state;
    expect_error("gpus: [", "test.yaml:2:1", "");
    expect_error("", "test.yaml", "empty scenario");
    expect_error("name: x\n", "test.yaml", "missing 'gpus'");
    expect_error("gpus:\n  - product: h100-sxm\nfoo: 1\n", "test.yaml:3:1", "unknown key 'foo'");
    expect_error("gpus:\n  - product: v100\n", "test.yaml:2:14", "unknown product 'v100'");
    expect_error("gpus:\n  - count: 2\n", "test.yaml:2:5", "needs a product");
    expect_error("gpus:\n  - product: l4\n    count: 65\n", "test.yaml:3:12",
                 "count must be between 1 and 64");
    expect_error("gpus:\n  - product: l4\n    count: lots\n", "test.yaml:3:12",
                 "count must be an integer");
    expect_error("gpus:\n  - {product: l4, count: 40}\n  - {product: l4, count: 40}\n",
                 "test.yaml:3", "more than 64 GPUs");
    expect_error("gpus:\n  - product: l4\n    mig: true\n", "test.yaml:3:10",
                 "does not support MIG");
    expect_error("gpus:\n  - product: l4\n    uuid: GPU-123\n", "test.yaml:3:11",
                 "is not of the form");
    expect_error("gpus:\n  - product: l4\n    count: 2\n    uuid: GPU-1bdd772b-3995-67fb-90f1-f2bac40700af\n",
                 "test.yaml:4:11", "need count: 1");
    expect_error("gpus:\n  - {product: l4, pci_bus_id: '0:1a:00.0'}\n  - {product: l4, pci_bus_id: '0:1A:00.0'}\n",
                 "test.yaml:3", "same pci_bus_id");
    expect_error("gpus:\n  - {product: l4, pci_bus_id: 'zz'}\n", "test.yaml:2", "is not DOMAIN:BUS");
    expect_error("gpus:\n  - {product: l4, count: 2, processes: []}\n", "test.yaml:2",
                 "processes need count: 1");
    expect_error("gpus:\n  - product: l4\n    processes: [{pid: 7, memory_mib: 999999}]\n",
                 "test.yaml:3", "memory_mib");
    expect_error("gpus:\n  - product: l4\n    processes: [{pid: 7}, {pid: 7}]\n", "test.yaml:3",
                 "pid 7 is listed twice");
    expect_error("gpus:\n  - product: l4\n    processes: [{memory_mib: 7}]\n", "test.yaml:3",
                 "a process needs a pid");
    expect_error("nvlink: nvswitch\ngpus:\n  - product: l4\n", "test.yaml:1:9", "has no NVLink");
    expect_error("nvlink: mesh\ngpus:\n  - product: h100-sxm\n", "test.yaml:1:9",
                 "nvlink must be none, nvswitch or islands");
    expect_error("nvlink: islands\ngpus:\n  - {product: h100-sxm, count: 2}\n", "test.yaml:1:9",
                 "needs nvlink_islands");
    expect_error("nvlink: islands\nnvlink_islands: [[0, 1], [1]]\ngpus:\n  - {product: h100-sxm, count: 2}\n",
                 "test.yaml:2:27", "in two NVLink islands");
    expect_error("nvlink: islands\nnvlink_islands: [[0, 5]]\ngpus:\n  - {product: h100-sxm, count: 2}\n",
                 "test.yaml:2:22", "between 0 and 1");
    expect_error("nvlink_islands: [[0, 1]]\ngpus:\n  - {product: h100-sxm, count: 2}\n",
                 "test.yaml:1:17", "needs nvlink: islands");
    expect_error("cuda_version: thirteen\ngpus:\n  - product: t4\n", "test.yaml:1:15",
                 "is not like 13.0");
    expect_error("driver_version: abc\ngpus:\n  - product: t4\n", "test.yaml:1:17",
                 "is not like 580.159.04");
    expect_error("gpus:\n  - product: t4\ngpus: []\n", "test.yaml:3:1", "duplicate key 'gpus'");
    expect_error("- a\n- b\n", "test.yaml:1:1", "must be a mapping");
    expect_error("gpus: {product: t4}\n", "test.yaml:1:7", "must be a list");
    expect_error("gpus:\n  - product: [t4]\n", "test.yaml:2:14", "product must be a single value");
}

static void test_load_errors(void **state)
{
    (void)state;
    struct err e;
    assert_int_equal(scenario_load("dgx-h1000", &sc, &e), -1);
    assert_contains(e.msg, "unknown simulator preset 'dgx-h1000'");
    assert_contains(e.msg, "dgx-h100");
    assert_int_equal(scenario_load("/nonexistent/node.yaml", &sc, &e), -1);
    assert_contains(e.msg, "/nonexistent/node.yaml: No such file");
    char path[] = "/tmp/gpulet-scenario-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char bad[] = "gpus:\n  - product: h100-sxm\n    count: 0\n";
    assert_int_equal(write(fd, bad, sizeof bad - 1), (int)sizeof bad - 1);
    close(fd);
    assert_int_equal(scenario_load(path, &sc, &e), -1);
    char where[64];
    snprintf(where, sizeof where, "%s:3:12", path);
    assert_contains(e.msg, where);
    unlink(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_presets_parse),
        cmocka_unit_test(test_processes),
        cmocka_unit_test(test_mig_scenarios),  cmocka_unit_test(test_dgx_h100_layout),
        cmocka_unit_test(test_islands),        cmocka_unit_test(test_explicit_gpu),
        cmocka_unit_test(test_bad_scenarios),  cmocka_unit_test(test_load_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
