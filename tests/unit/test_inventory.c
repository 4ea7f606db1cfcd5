/* The device inventory built from the simulator's presets: identity,
 * NUMA, and the pairwise interconnect each topology should produce. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu/inventory.h"
#include "gpu/procfs.h"
#include "gpu/render.h"
#include "sim/scenario.h"
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

/* --- the driver's procfs ---------------------------------------------------- */

static const char h200_info[] = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 41\n"
                                "GPU UUID: \t GPU-6dd9515a-9560-6f0c-5991-755d71b463ce\n"
                                "Video BIOS: \t 96.00.a5.00.1a\nBus Type: \t PCIe\n"
                                "Bus Location: \t 0000:00:06.0\nDevice Minor: \t 0\n"
                                "GPU Firmware: \t 580.159.04\nGPU Excluded:\t No\n";

static void test_procfs_parse(void **state)
{
    (void)state;
    struct gpu_info g;
    struct err e;
    bool excluded;
    /* As the H200's driver wrote it (docs/real-gpu.md). */
    assert_int_equal(gpu_procfs_parse("info", h200_info, strlen(h200_info), &g, &excluded, &e), 0);
    assert_string_equal(g.uuid, "GPU-6dd9515a-9560-6f0c-5991-755d71b463ce");
    assert_string_equal(g.pci_bus_id, "00000000:00:06.0");
    assert_string_equal(g.name, "NVIDIA H200");
    assert_int_equal(g.minor, 0);
    assert_false(excluded);
    const char ex[] = "GPU UUID: GPU-1\nBus Location: 0000:1b:00.0\nDevice Minor: 7\nGPU Excluded: Yes\n";
    assert_int_equal(gpu_procfs_parse("x", ex, strlen(ex), &g, &excluded, &e), 0);
    assert_true(excluded);
    assert_string_equal(g.pci_bus_id, "00000000:1B:00.0");
    const char *bad[][2] = {
        {"GPU UUID: nope\nBus Location: 0000:1b:00.0\nDevice Minor: 1\n", "info: GPU UUID 'nope'"},
        {"GPU UUID: GPU-1\nBus Location: 0000:1b:00.0\nDevice Minor: 300\n", "Device Minor '300'"},
        {"GPU UUID: GPU-1\nBus Location: somewhere\nDevice Minor: 1\n", "Bus Location 'somewhere'"},
        {"GPU UUID: GPU-1\nDevice Minor: 1\n", "info: no Bus Location"},
        {"", "info: no GPU UUID"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(gpu_procfs_parse("info", bad[i][0], strlen(bad[i][0]), &g, &excluded, &e), -1);
        assert_contains(e.msg, bad[i][1]);
    }
}

static void procfs_write(const char *root, const char *bus, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/driver/nvidia/gpus/%s", root, bus);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", path);
    assert_int_equal(system(cmd), 0);
    strcat(path, "/information");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_procfs_read(void **state)
{
    (void)state;
    char root[] = "/tmp/gpulet-procfs-XXXXXX";
    assert_non_null(mkdtemp(root));
    struct gpu_inventory inv;
    struct err e;
    assert_int_equal(gpu_procfs_read(root, &inv, &e), -1); /* no driver directory */
    assert_contains(e.msg, "driver/nvidia/gpus");
    /* Written out of bus order: read in NVML's (bus) order; excluded left out. */
    procfs_write(root, "0000:b0:00.0", "GPU UUID: GPU-b\nBus Location: 0000:b0:00.0\nDevice Minor: 1\n");
    procfs_write(root, "0000:1b:00.0", "GPU UUID: GPU-a\nBus Location: 0000:1b:00.0\nDevice Minor: 0\n");
    procfs_write(root, "0000:c0:00.0", "GPU UUID: GPU-c\nBus Location: 0000:c0:00.0\n"
                                       "Device Minor: 2\nGPU Excluded: Yes\n");
    assert_int_equal(gpu_procfs_read(root, &inv, &e), 0);
    assert_int_equal(inv.count, 2);
    assert_string_equal(inv.gpus[0].uuid, "GPU-a");
    assert_string_equal(inv.gpus[1].uuid, "GPU-b");
    assert_int_equal(inv.gpus[1].index, 1);
    assert_null(inv.gpus[0].handle);
    /* Merging NVML's view: matched by UUID, links remapped. */
    struct gpu_inventory nv = {.count = 2};
    nv.gpus = calloc(2, sizeof *nv.gpus);
    nv.links = calloc(4, sizeof *nv.links);
    strcpy(nv.gpus[0].uuid, "GPU-b");
    strcpy(nv.gpus[1].uuid, "GPU-z");
    nv.gpus[0].numa_node = 1;
    nv.links[0].nvlinks = 18;
    strcpy(nv.driver_version, "580.159.04");
    int map[2];
    gpu_inventory_merge(&inv, &nv, map);
    assert_int_equal(map[0], -1);
    assert_int_equal(map[1], 0);
    assert_int_equal(inv.gpus[1].numa_node, 1);
    assert_int_equal(inv.links[3].nvlinks, 18);
    assert_string_equal(inv.driver_version, "580.159.04");
    gpu_inventory_free(&nv);
    gpu_inventory_free(&inv);
    /* A broken entry fails the whole read, naming the file. */
    procfs_write(root, "0000:d0:00.0", "GPU UUID: GPU-d\n");
    assert_int_equal(gpu_procfs_read(root, &inv, &e), -1);
    assert_contains(e.msg, "0000:d0:00.0/information: no Device Minor");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

/* Every profile of every MIG-capable model: the name gpulet derives from
 * its attributes is the driver's (the H200's checked on the real card). */
static void test_mig_profile_names(void **state)
{
    (void)state;
    for (size_t i = 0; sim_products[i]; i++) {
        const struct sim_product *p = sim_products[i];
        for (const struct sim_mig_profile *m = p->mig; m && m->name; m++) {
            nvmlDeviceAttributes_t a = {.multiprocessorCount = m->sms, .sharedOfaCount = m->ofa,
                                        .gpuInstanceSliceCount = m->slices,
                                        .computeInstanceSliceCount = m->slices,
                                        .memorySizeMB = m->memory_mib};
            char name[32];
            gpu_mig_profile_name(p->memory_mib, &a, name, sizeof name);
            if (strcmp(name, m->name))
                fail_msg("%s: %s named %s", p->key, m->name, name);
        }
    }
    nvmlDeviceAttributes_t ci = {.gpuInstanceSliceCount = 3, .computeInstanceSliceCount = 1,
                                 .memorySizeMB = 40448};
    char name[32];
    gpu_mig_profile_name(81559, &ci, name, sizeof name);
    assert_string_equal(name, "1c.3g.40gb");
}

/* The MIG presets' devices, as NVML lists them and gpulet reads them. */
static void test_mig_presets(void **state)
{
    (void)state;
    struct nvml n;
    struct gpu_inventory inv;
    build("h200-mig-mixed", &n, &inv);
    assert_int_equal(inv.count, 4);
    assert_int_equal(inv.gpus[0].mig_mode, NVML_DEVICE_MIG_ENABLE);
    assert_int_equal(inv.gpus[0].nmig, 4);
    assert_string_equal(inv.gpus[0].mig[0].profile, "3g.71gb");
    assert_int_equal(inv.gpus[0].mig[0].gi, 1);
    assert_int_equal(inv.gpus[0].mig[0].attr.multiprocessorCount, 60);
    assert_true(!strncmp(inv.gpus[0].mig[0].uuid, "MIG-", 4));
    assert_int_equal(inv.gpus[2].nmig, 7);
    assert_int_equal(inv.gpus[3].mig_mode, NVML_DEVICE_MIG_DISABLE);
    assert_int_equal(inv.gpus[3].nmig, 0);
    /* MIG UUIDs are distinct and stable. */
    for (unsigned g = 0; g < 3; g++)
        for (unsigned k = 0; k < inv.gpus[g].nmig; k++)
            for (unsigned h = 0; h < 3; h++)
                for (unsigned j = 0; j < inv.gpus[h].nmig; j++)
                    if ((g != h || k != j) &&
                        !strcmp(inv.gpus[g].mig[k].uuid, inv.gpus[h].mig[j].uuid))
                        fail_msg("GPU %u:%u and %u:%u share a MIG UUID", g, k, h, j);
    gpu_inventory_free(&inv);
    nvml_close(&n);
}

/* Layouts: what fits (after backtracking), and what does not, with why. */
static void test_mig_layouts(void **state)
{
    (void)state;
    struct sim_gpu g = {.product = sim_product_find("a100-40gb")};
    char why[256];
    const char *balanced[] = {"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"};
    assert_int_equal(sim_mig_layout(&g, balanced, 4, why, sizeof why), 0);
    assert_int_equal(g.nmig, 4);
    assert_int_equal(g.mig[0].start, 4); /* 3g at 0 would strand the second 1g */
    const char *eight[] = {"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb",
                           "1g.5gb"};
    assert_int_equal(sim_mig_layout(&g, eight, 8, why, sizeof why), -1);
    assert_string_equal(why, "8 MIG devices asked for; a GPU holds at most 7");
    const char *slices[] = {"4g.20gb", "2g.10gb", "2g.10gb"};
    assert_int_equal(sim_mig_layout(&g, slices, 3, why, sizeof why), -1);
    assert_string_equal(why, "the profiles take 8 compute slices; a GPU has 7");
    const char *two7[] = {"7g.40gb", "1g.5gb"};
    assert_int_equal(sim_mig_layout(&g, two7, 2, why, sizeof why), -1);
    assert_string_equal(why, "the profiles take 8 compute slices; a GPU has 7");
    const char *overlap[] = {"3g.20gb", "3g.20gb", "1g.5gb"}; /* 7 slices, 9 memory units */
    assert_int_equal(sim_mig_layout(&g, overlap, 3, why, sizeof why), -1);
    assert_true(strstr(why, "do not fit together") != NULL);
    const char *me[] = {"1g.5gb+me", "1g.5gb+me"};
    assert_int_equal(sim_mig_layout(&g, me, 2, why, sizeof why), -1);
    assert_string_equal(why, "a100-40gb allows 1 instance(s) of 1g.5gb+me, not 2");
    const char *wrong[] = {"1g.10gb+me"};
    assert_int_equal(sim_mig_layout(&g, wrong, 1, why, sizeof why), -1);
    assert_true(strstr(why, "a100-40gb has no MIG profile '1g.10gb+me' (its profiles: 1g.5gb,") != NULL);
    assert_int_equal(g.nmig, 4); /* a refused layout changes nothing */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgx_h100), cmocka_unit_test(test_a100_islands),
        cmocka_unit_test(test_l4_pcie),  cmocka_unit_test(test_lost_gpu),
        cmocka_unit_test(test_h200x4_vm_matches_the_real_machine),
        cmocka_unit_test(test_procfs_parse), cmocka_unit_test(test_procfs_read),
        cmocka_unit_test(test_mig_profile_names), cmocka_unit_test(test_mig_presets),
        cmocka_unit_test(test_mig_layouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
