/* The device inventory built from the simulator's presets: identity,
 * NUMA, and the pairwise interconnect each topology should produce. */
#include <stdio.h>
#include <string.h>

#include "gpu/inventory.h"
#include "gpu/render.h"
#include "testutil.h"

static void build(const char *preset, struct nvml *n, struct gpu_inventory *inv)
{
    struct err e;
    testutil_sim_start(n, preset);
    if (gpu_inventory_build(n, inv, &e) < 0)
        fail_msg("%s", e.msg);
}

static void done(struct nvml *n, struct gpu_inventory *inv)
{
    gpu_inventory_free(inv);
    nvml_close(n);
}

static void test_dgx_h100(void **state)
{
    (void)state;
    struct nvml n;
    struct gpu_inventory inv;
    build("dgx-h100", &n, &inv);
    assert_int_equal(inv.count, 8);
    assert_string_equal(inv.driver_version, "580.159.04");
    assert_int_equal(inv.cuda_version, 13000);
    for (unsigned i = 0; i < 8; i++) {
        const struct gpu_info *g = &inv.gpus[i];
        assert_int_equal(g->minor, i);
        assert_int_equal(g->numa_node, i < 4 ? 0 : 1);
        assert_int_equal(g->memory_total, 81559ULL << 20);
        assert_int_equal(g->cc_major, 9);
        assert_string_equal(g->architecture, "hopper");
        assert_int_equal(g->mig_mode, 0);
        assert_string_equal(gpu_render_health(g, NULL), "Healthy");
        for (unsigned j = 0; j < 8; j++)
            if (i != j)
                assert_int_equal(gpu_inventory_link(&inv, i, j)->nvlinks, 18);
    }
    assert_int_equal(gpu_inventory_link(&inv, 0, 5)->pcie, NVML_TOPOLOGY_SYSTEM);
    done(&n, &inv);
}

static void test_a100_islands(void **state)
{
    (void)state;
    struct nvml n;
    struct gpu_inventory inv;
    build("a100-2x4", &n, &inv);
    assert_int_equal(gpu_inventory_link(&inv, 0, 3)->nvlinks, 4);
    assert_int_equal(gpu_inventory_link(&inv, 3, 4)->nvlinks, 0);
    assert_int_equal(gpu_inventory_link(&inv, 6, 7)->nvlinks, 4);
    assert_int_equal(gpu_inventory_link(&inv, 0, 1)->pcie, NVML_TOPOLOGY_SINGLE);
    assert_string_equal(inv.gpus[0].architecture, "ampere");
    done(&n, &inv);
}

static void test_l4_pcie(void **state)
{
    (void)state;
    struct nvml n;
    struct gpu_inventory inv;
    build("l4-pcie", &n, &inv);
    assert_int_equal(inv.count, 4);
    assert_int_equal(inv.gpus[0].mig_mode, -1); /* not MIG-capable */
    assert_int_equal(inv.gpus[0].problem[0], '\0'); /* NOT_SUPPORTED is no problem */
    assert_int_equal(gpu_inventory_link(&inv, 0, 1)->nvlinks, 0);
    assert_int_equal(gpu_inventory_link(&inv, 0, 1)->pcie, NVML_TOPOLOGY_SINGLE);
    assert_int_equal(gpu_inventory_link(&inv, 1, 2)->pcie, NVML_TOPOLOGY_SYSTEM);
    assert_int_equal(inv.gpus[3].numa_node, 1);
    struct strbuf out = {0};
    gpu_render_topology(&inv, &out);
    assert_contains(out.data, "GPU1  PIX    X      SYS    SYS    0");
    strbuf_free(&out);
    done(&n, &inv);
}

static void test_lost_gpu(void **state)
{
    (void)state;
    struct nvml n;
    struct gpu_inventory inv;
    build("hgx-h200", &n, &inv);
    gpu_inventory_free(&inv);
    assert_string_equal(testutil_sim_command("lose 6"), "ok\n");
    struct err e;
    assert_int_equal(gpu_inventory_build(&n, &inv, &e), 0);
    assert_true(inv.gpus[6].lost);
    assert_string_equal(gpu_render_health(&inv.gpus[6], NULL), "Lost");
    assert_contains(inv.gpus[6].problem, "GPU is lost");
    assert_false(inv.gpus[5].lost);
    assert_int_equal(gpu_inventory_link(&inv, 5, 6)->nvlinks, 0);
    struct strbuf out = {0};
    gpu_render_json(&inv, NULL, &out);
    assert_contains(out.data, "\"health\":\"Lost\"");
    strbuf_free(&out);
    assert_string_equal(testutil_sim_command("recover 6"), "ok\n");
    done(&n, &inv);
}

/* The preset of the 4x H200 VM measured on real hardware (docs/real-gpu.md). */
static void test_h200x4_vm_matches_the_real_machine(void **state)
{
    (void)state;
    struct nvml n;
    struct gpu_inventory inv;
    build("h200x4-vm", &n, &inv);
    assert_int_equal(inv.count, 4);
    for (unsigned i = 0; i < 4; i++) {
        char bus[32];
        snprintf(bus, sizeof bus, "00000000:00:%02u.0", 6 + i);
        assert_string_equal(inv.gpus[i].pci_bus_id, bus);
        assert_int_equal(inv.gpus[i].numa_node, 0);
        for (unsigned j = 0; j < 4; j++) {
            if (i == j)
                continue;
            assert_int_equal(gpu_inventory_link(&inv, i, j)->nvlinks, 18);
            assert_int_equal(gpu_inventory_link(&inv, i, j)->pcie, NVML_TOPOLOGY_HOSTBRIDGE);
        }
    }
    done(&n, &inv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgx_h100), cmocka_unit_test(test_a100_islands),
        cmocka_unit_test(test_l4_pcie),  cmocka_unit_test(test_lost_gpu),
        cmocka_unit_test(test_h200x4_vm_matches_the_real_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
