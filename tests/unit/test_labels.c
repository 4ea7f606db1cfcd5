/* Node labels: GFD's catalogue key for key on every simulator preset, the
 * all-GPUs-agree rule on mixed nodes, sanitising, accelerator names, the
 * Node merge patch and the feature file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "labels/labels.h"
#include "labels/publish.h"
#include "sim/scenario.h"
#include "testutil.h"

static void default_config(struct config *c)
{
    struct config_args a;
    struct err e;
    char *argv[] = {"labels", NULL};
    assert_int_equal(config_parse_args(&a, 1, argv, &e), 0);
    assert_int_equal(config_load(c, &a, NULL, &e), 0);
}

/* What GFD's rules give for a single-model node, plus gpulet's additions. */
struct expect {
    const char *preset, *product, *family, *accelerator;
    unsigned count, memory;
    int cc_major, cc_minor;
    const char *mig_capable;
};

static const struct expect expects[] = {
    {"dgx-h100", "NVIDIA-H100-80GB-HBM3", "hopper", "nvidia-h100-80gb", 8, 81559, 9, 0, "true"},
    {"hgx-h200", "NVIDIA-H200", "hopper", "nvidia-h200-141gb", 8, 143771, 9, 0, "true"},
    {"h200x4-vm", "NVIDIA-H200", "hopper", "nvidia-h200-141gb", 4, 143771, 9, 0, "true"},
    {"a100-2x4", "NVIDIA-A100-SXM4-80GB", "ampere", "nvidia-a100-80gb", 8, 81920, 8, 0, "true"},
    {"l4-pcie", "NVIDIA-L4", "ada-lovelace", "nvidia-l4", 4, 23034, 8, 9, "false"},
    {"t4", "Tesla-T4", "turing", "nvidia-tesla-t4", 1, 15360, 7, 5, "false"},
    {"scale-64", "NVIDIA-H100-80GB-HBM3", "hopper", "nvidia-h100-80gb", 64, 81559, 9, 0, "true"},
};

/* The labels every GPU node gets whatever its model (driver 580.159.04, CUDA 13.0). */
static void expect_common(struct label_set *s, const char *machine, unsigned count,
                          const char *mig_capable)
{
    label_set_put(s, "nvidia.com/cuda.driver.major", "580");
    label_set_put(s, "nvidia.com/cuda.driver.minor", "159");
    label_set_put(s, "nvidia.com/cuda.driver.rev", "04");
    label_set_put(s, "nvidia.com/cuda.driver-version.major", "580");
    label_set_put(s, "nvidia.com/cuda.driver-version.minor", "159");
    label_set_put(s, "nvidia.com/cuda.driver-version.revision", "04");
    label_set_put(s, "nvidia.com/cuda.driver-version.full", "580.159.04");
    label_set_put(s, "nvidia.com/cuda.runtime.major", "13");
    label_set_put(s, "nvidia.com/cuda.runtime.minor", "0");
    label_set_put(s, "nvidia.com/cuda.runtime-version.major", "13");
    label_set_put(s, "nvidia.com/cuda.runtime-version.minor", "0");
    label_set_put(s, "nvidia.com/cuda.runtime-version.full", "13.0");
    label_set_put(s, "nvidia.com/gpu.machine", "%s", machine);
    label_set_put(s, "nvidia.com/mig.capable", "%s", mig_capable);
    label_set_put(s, "nvidia.com/mps.capable", "false");
    label_set_put(s, "nvidia.com/gpu.count", "%u", count);
    label_set_put(s, "nvidia.com/gpu.replicas", "1");
    label_set_put(s, "nvidia.com/gpu.sharing-strategy", "none");
    label_set_put(s, "nvidia.com/gpu.mode", "compute");
    label_set_put(s, "nvidia.com/gpu.present", "true");
    label_set_put(s, "gpulet.io/gpu.healthy", "%u", count);
}

static void build_preset(const char *preset, const struct config *cfg, const char *machine,
                         struct label_set *out)
{
    struct nvml n;
    struct gpu_inventory inv;
    struct err e;
    testutil_sim_start(&n, preset);
    assert_int_equal(gpu_inventory_build(&n, &inv, &e), 0);
    const struct labels_input in = {&inv, NULL, cfg, machine, 1700000000, NULL};
    labels_build(&in, out);
    gpu_inventory_free(&inv);
    nvml_close(&n);
}

static void assert_same(const struct label_set *got, struct label_set *want, const char *what)
{
    label_set_sort(want);
    if (label_set_equal(got, want))
        return;
    struct strbuf a = {0}, b = {0};
    label_set_text(got, &a);
    label_set_text(want, &b);
    fail_msg("%s: labels differ\n--- got\n%s--- want\n%s", what, a.data ? a.data : "",
             b.data ? b.data : "");
}

static void test_every_preset_key_for_key(void **state)
{
    (void)state;
    struct config cfg;
    default_config(&cfg);
    for (size_t i = 0; i < sizeof expects / sizeof *expects; i++) {
        const struct expect *x = &expects[i];
        struct label_set got = {0}, want = {0};
        build_preset(x->preset, &cfg, "DGX H100 ", &got);
        expect_common(&want, "DGX-H100", x->count, x->mig_capable);
        label_set_put(&want, "nvidia.com/gpu.product", "%s", x->product);
        label_set_put(&want, "nvidia.com/gpu.memory", "%u", x->memory);
        label_set_put(&want, "nvidia.com/gpu.family", "%s", x->family);
        label_set_put(&want, "nvidia.com/gpu.compute.major", "%d", x->cc_major);
        label_set_put(&want, "nvidia.com/gpu.compute.minor", "%d", x->cc_minor);
        label_set_put(&want, "accelerator", "%s", x->accelerator);
        char key[128];
        snprintf(key, sizeof key, "gpulet.io/gpu.%s.count", x->accelerator);
        label_set_put(&want, key, "%u", x->count);
        snprintf(key, sizeof key, "gpulet.io/gpu.%s.memory", x->accelerator);
        label_set_put(&want, key, "%u", x->memory);
        assert_same(&got, &want, x->preset);
        label_set_free(&got);
        label_set_free(&want);
    }
}

/* Two models: nothing that is true of only some GPUs is published node-wide. */
static void test_mixed_models(void **state)
{
    (void)state;
    struct config cfg;
    default_config(&cfg);
    struct label_set got = {0}, want = {0};
    build_preset("mixed-pcie", &cfg, NULL, &got);
    expect_common(&want, "unknown", 6, "true");
    label_set_put(&want, "gpulet.io/gpu.nvidia-h100-80gb.count", "2");
    label_set_put(&want, "gpulet.io/gpu.nvidia-h100-80gb.memory", "81559");
    label_set_put(&want, "gpulet.io/gpu.nvidia-l4.count", "4");
    label_set_put(&want, "gpulet.io/gpu.nvidia-l4.memory", "23034");
    assert_same(&got, &want, "mixed-pcie");
    assert_null(label_set_get(&got, "nvidia.com/gpu.product"));
    assert_null(label_set_get(&got, "accelerator"));
    label_set_free(&got);
    label_set_free(&want);
}

/* GFD's MIG labels: single describes the MIG devices as nvidia.com/gpu;
 * mixed gives each profile its set, and nvidia.com/gpu the whole GPUs. */
static void test_mig_labels(void **state)
{
    (void)state;
    struct config cfg;
    default_config(&cfg);
    struct label_set got = {0};
    cfg.mig_strategy = CONFIG_MIG_SINGLE;
    build_preset("h100-mig-single", &cfg, NULL, &got);
    assert_string_equal(label_set_get(&got, "nvidia.com/mig.strategy"), "single");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.product"),
                        "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.count"), "56");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.memory"), "9984");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.multiprocessors"), "16");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.slices.gi"), "1");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.engines.ofa"), "0");
    cfg.mig_strategy = CONFIG_MIG_MIXED;
    build_preset("a100-mig-mixed", &cfg, NULL, &got);
    assert_string_equal(label_set_get(&got, "nvidia.com/mig.strategy"), "mixed");
    /* GFD: gpu.count counts every GPU of the model; the GPU not in MIG mode
     * gives the sharing labels. */
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.count"), "8");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.product"), "NVIDIA-A100-SXM4-40GB");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.replicas"), "1");
    assert_string_equal(label_set_get(&got, "nvidia.com/mig-1g.5gb.count"), "17");
    assert_string_equal(label_set_get(&got, "nvidia.com/mig-1g.5gb.product"),
                        "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb");
    assert_string_equal(label_set_get(&got, "nvidia.com/mig-1g.5gb.me.count"), "1");
    assert_string_equal(label_set_get(&got, "nvidia.com/mig-1g.5gb.me.engines.ofa"), "1");
    assert_string_equal(label_set_get(&got, "nvidia.com/mig-7g.40gb.multiprocessors"), "98");
    assert_string_equal(label_set_get(&got, "nvidia.com/mig-3g.20gb.memory"), "20096");
    assert_string_equal(label_set_get(&got, "nvidia.com/mig-3g.20gb.sharing-strategy"), "none");
    assert_string_equal(label_set_get(&got, "nvidia.com/mig-3g.20gb.replicas"), "1");
    /* Every GPU in MIG mode: the model, with replicas 0. */
    build_preset("h100-mig-single", &cfg, NULL, &got);
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.count"), "8");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.product"), "NVIDIA-H100-80GB-HBM3");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.replicas"), "0");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.sharing-strategy"), "none");
    assert_string_equal(label_set_get(&got, "nvidia.com/mig-1g.10gb.count"), "56");
    /* none: MIG GPUs whole, no MIG labels. */
    cfg.mig_strategy = CONFIG_MIG_NONE;
    build_preset("a100-mig-mixed", &cfg, NULL, &got);
    assert_null(label_set_get(&got, "nvidia.com/mig.strategy"));
    assert_null(label_set_get(&got, "nvidia.com/mig-1g.5gb.count"));
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.count"), "8");
    label_set_free(&got);
}

static void test_options(void **state)
{
    (void)state;
    struct config cfg;
    default_config(&cfg);
    cfg.no_timestamp = false;
    snprintf(cfg.accelerator_label, sizeof cfg.accelerator_label, "cloud.google.com/gke-accelerator");
    cfg.mig_strategy = CONFIG_MIG_MIXED;
    struct label_set got = {0};
    build_preset("t4", &cfg, "PowerEdge R7525\n", &got);
    assert_string_equal(label_set_get(&got, "nvidia.com/gfd.timestamp"), "1700000000");
    assert_string_equal(label_set_get(&got, "cloud.google.com/gke-accelerator"), "nvidia-tesla-t4");
    assert_null(label_set_get(&got, "accelerator"));
    assert_string_equal(label_set_get(&got, "nvidia.com/mig.strategy"), "mixed");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.machine"), "PowerEdge-R7525");
    cfg.accelerator_label[0] = '\0';
    build_preset("t4", &cfg, NULL, &got);
    for (unsigned i = 0; i < got.count; i++)
        assert_null(strstr(got.items[i].key, "accelerator"));
    label_set_free(&got);
}

/* Health moves gpulet.io/gpu.healthy and nothing else. */
static void test_health_count(void **state)
{
    (void)state;
    struct config cfg;
    default_config(&cfg);
    struct nvml n;
    struct gpu_inventory inv;
    struct err e;
    testutil_sim_start(&n, "l4-pcie");
    assert_int_equal(gpu_inventory_build(&n, &inv, &e), 0);
    struct gpu_device *devs = gpu_devices_new(&inv, 0);
    struct label_set before = {0}, after = {0};
    const struct labels_input in = {&inv, devs, &cfg, NULL, 0, NULL};
    labels_build(&in, &before);
    gpu_health_on_xid(&devs[2].health, 79, 1);
    labels_build(&in, &after);
    assert_string_equal(label_set_get(&after, "gpulet.io/gpu.healthy"), "3");
    assert_string_equal(label_set_get(&after, "nvidia.com/gpu.count"), "4");
    assert_int_equal(before.count, after.count);
    free(devs);
    label_set_free(&before);
    label_set_free(&after);
    gpu_inventory_free(&inv);
    nvml_close(&n);
}

/* Inventories made by hand: graphics mode, cliques, a GPU lost at start. */
static void test_mode_clique_lost(void **state)
{
    (void)state;
    struct config cfg;
    default_config(&cfg);
    struct gpu_info gpus[2] = {
        {.name = "NVIDIA RTX A6000", .memory_total = 48ULL << 30, .cc_major = 8, .cc_minor = 6,
         .pci_class = 0x0300, .mig_mode = -1, .clique = "7b968a6d-0000-0000-0000-e1e51be99c31.1"},
        {.name = "NVIDIA RTX A6000", .memory_total = 48ULL << 30, .cc_major = 8, .cc_minor = 6,
         .pci_class = 0x0300, .mig_mode = -1, .clique = "7b968a6d-0000-0000-0000-e1e51be99c31.1"},
    };
    struct gpu_inventory inv = {.driver_version = "550.54", .cuda_version = 12040, .count = 2,
                                .gpus = gpus};
    struct label_set got = {0};
    const struct labels_input in = {&inv, NULL, &cfg, NULL, 0, NULL};
    labels_build(&in, &got);
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.mode"), "graphics");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.clique"),
                        "7b968a6d-0000-0000-0000-e1e51be99c31.1");
    assert_string_equal(label_set_get(&got, "accelerator"), "nvidia-rtx-a6000");
    assert_string_equal(label_set_get(&got, "nvidia.com/cuda.driver.rev"), "");
    assert_string_equal(label_set_get(&got, "nvidia.com/cuda.runtime-version.full"), "12.4");
    /* Different cliques: no clique label; a compute GPU beside: mode unknown. */
    snprintf(gpus[1].clique, sizeof gpus[1].clique, "other.2");
    gpus[1].pci_class = 0x0302;
    labels_build(&in, &got);
    assert_null(label_set_get(&got, "nvidia.com/gpu.clique"));
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.mode"), "unknown");
    /* A GPU whose name NVML could not read does not veto the model labels. */
    gpus[1].name[0] = '\0';
    labels_build(&in, &got);
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.product"), "NVIDIA-RTX-A6000");
    assert_string_equal(label_set_get(&got, "nvidia.com/gpu.count"), "2");
    /* No GPUs: no labels at all, as GFD. */
    inv.count = 0;
    labels_build(&in, &got);
    assert_int_equal(got.count, 0);
    label_set_free(&got);
}

static void test_sanitise_and_accelerator(void **state)
{
    (void)state;
    char out[LABEL_VALUE_MAX];
    labels_sanitise("NVIDIA  H100 80GB HBM3", out, sizeof out);
    assert_string_equal(out, "NVIDIA-H100-80GB-HBM3");
    labels_sanitise("Standard PC (Q35 + ICH9, 2009)", out, sizeof out);
    assert_string_equal(out, "Standard-PC-Q35-ICH9-2009");
    labels_sanitise("To Be Filled By O.E.M.", out, sizeof out);
    assert_string_equal(out, "To-Be-Filled-By-O.E.M");
    labels_sanitise("  ", out, sizeof out);
    assert_string_equal(out, "");
    labels_sanitise("x0123456789012345678901234567890123456789012345678901234567890123456789",
                    out, sizeof out);
    assert_int_equal(strlen(out), 63);
    static const struct { const char *product; unsigned gib; const char *name; } rows[] = {
        {"Tesla T4", 15, "nvidia-tesla-t4"},       {"NVIDIA L4", 22, "nvidia-l4"},
        {"NVIDIA L40S", 45, "nvidia-l40s"},        {"NVIDIA A100-SXM4-40GB", 40, "nvidia-tesla-a100"},
        {"NVIDIA A100-SXM4-80GB", 80, "nvidia-a100-80gb"},
        {"NVIDIA A100 80GB PCIe", 80, "nvidia-a100-80gb"},
        {"NVIDIA H100 80GB HBM3", 80, "nvidia-h100-80gb"}, {"NVIDIA H100 PCIe", 80, "nvidia-h100-80gb"},
        {"NVIDIA H100 NVL", 94, "nvidia-h100-nvl"},  {"NVIDIA H200", 141, "nvidia-h200-141gb"},
        {"NVIDIA B200", 180, "nvidia-b200"},       {"NVIDIA GB200", 186, "nvidia-gb200"},
        {"Tesla V100-SXM2-16GB", 16, "nvidia-tesla-v100"}, {"Tesla P4", 8, "nvidia-tesla-p4"},
        {"Quadro RTX 8000", 48, "nvidia-quadro-rtx-8000"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        labels_accelerator(rows[i].product, (unsigned long long)rows[i].gib << 30, out, sizeof out);
        if (strcmp(out, rows[i].name))
            fail_msg("%s: %s, not %s", rows[i].product, out, rows[i].name);
    }
}

/* --- the Node patch ------------------------------------------------------------- */

static void want_two(struct label_set *w)
{
    label_set_clear(w);
    label_set_put(w, "nvidia.com/gpu.count", "8");
    label_set_put(w, "nvidia.com/gpu.present", "true");
    label_set_sort(w);
}

static void patch_of(const char *node, const struct label_set *want, char *out, size_t len,
                     unsigned *changes)
{
    struct strbuf p = {0};
    struct err e;
    json_t *obj = json_loads(node, 0, NULL); /* as the watch hands it */
    if (labels_node_patch(obj, want, &p, changes, &e) < 0)
        fail_msg("%s", e.msg);
    json_decref(obj);
    snprintf(out, len, "%s", p.data ? p.data : "");
    strbuf_free(&p);
}

static void test_node_patch(void **state)
{
    (void)state;
    struct label_set want = {0};
    want_two(&want);
    char patch[1024];
    unsigned changes;
    /* A fresh Node: both labels and the ownership record; others untouched. */
    patch_of("{\"metadata\":{\"name\":\"n\",\"labels\":{\"kubernetes.io/hostname\":\"n\"}}}", &want,
             patch, sizeof patch, &changes);
    assert_int_equal(changes, 2);
    assert_string_equal(patch, "{\"metadata\":{\"annotations\":{\"gpulet.io/labels\":"
                               "\"nvidia.com/gpu.count,nvidia.com/gpu.present\"},\"labels\":{"
                               "\"nvidia.com/gpu.count\":\"8\",\"nvidia.com/gpu.present\":\"true\"}}}");
    /* Already right: no request at all. */
    patch_of("{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\",\"nvidia.com/gpu.present\":"
             "\"true\"},\"annotations\":{\"gpulet.io/labels\":\"nvidia.com/gpu.count,nvidia.com/"
             "gpu.present\"}}}", &want, patch, sizeof patch, &changes);
    assert_int_equal(changes, 0);
    assert_string_equal(patch, "");
    /* A label we set before and want no more goes; one we never owned stays. */
    label_set_clear(&want);
    label_set_put(&want, "nvidia.com/gpu.present", "true");
    patch_of("{\"metadata\":{\"labels\":{\"nvidia.com/gpu.count\":\"8\",\"nvidia.com/gpu.present\":"
             "\"true\",\"nvidia.com/gpu.product\":\"theirs\"},\"annotations\":{\"gpulet.io/labels\":"
             "\"nvidia.com/gpu.count,nvidia.com/gpu.present\"}}}", &want, patch, sizeof patch,
             &changes);
    assert_int_equal(changes, 1);
    assert_string_equal(patch, "{\"metadata\":{\"annotations\":{\"gpulet.io/labels\":"
                               "\"nvidia.com/gpu.present\"},\"labels\":{\"nvidia.com/gpu.count\":null}}}");
    /* Nothing wanted (no GPUs): ours go, the record too. */
    label_set_clear(&want);
    patch_of("{\"metadata\":{\"labels\":{\"nvidia.com/gpu.present\":\"true\"},\"annotations\":{"
             "\"gpulet.io/labels\":\"nvidia.com/gpu.present\"}}}", &want, patch, sizeof patch,
             &changes);
    assert_string_equal(patch, "{\"metadata\":{\"annotations\":{\"gpulet.io/labels\":null},"
                               "\"labels\":{\"nvidia.com/gpu.present\":null}}}");
    label_set_free(&want);
}

static void test_node_patch_bad_answers(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "", "not json", "[]", "{}", "{\"metadata\":[]}", "{\"metadata\":{\"labels\":[]}}",
        "{\"metadata\":{\"annotations\":\"x\"}}", "{\"kind\":\"Status\",\"code\":404}",
    };
    struct label_set want = {0};
    want_two(&want);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct strbuf p = {0};
        struct err e;
        unsigned changes;
        json_t *obj = json_loads(bad[i], JSON_DECODE_ANY, NULL);
        if (labels_node_patch(obj, &want, &p, &changes, &e) == 0)
            fail_msg("accepted '%s'", bad[i]);
        json_decref(obj);
        assert_true(strlen(e.msg) > 0);
        strbuf_free(&p);
    }
    label_set_free(&want);
}

/* What a write came to: NULL on disk, else why not. */
static char written_why[512];
static bool written_done;

static void feature_written(void *ctx, const struct err *e, bool written)
{
    (void)ctx;
    (void)written;
    written_done = true;
    snprintf(written_why, sizeof written_why, "%s", e ? e->msg : "");
}

/* The feature file's writer puts want's text at path, waited for. */
static void feature_write(const char *path, const struct label_set *want)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct strbuf text = {0};
    label_set_text(want, &text);
    struct writer *w = labels_file_writer(&loop, path);
    written_done = false;
    writer_put(w, &text);
    writer_then(w, feature_written, NULL);
    writer_close(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
    assert_true(written_done);
}

static void test_feature_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/gpulet-labels-XXXXXX", path[128], text[256];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/features.d/gfd", dir);
    struct label_set want = {0};
    want_two(&want);
    feature_write(path, &want);
    assert_string_equal(written_why, "");
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    assert_string_equal(text, "nvidia.com/gpu.count=8\nnvidia.com/gpu.present=true\n");
    unlink(path);
    snprintf(path, sizeof path, "%s/features.d", dir);
    assert_int_equal(rmdir(path), 0); /* nothing else left behind */
    assert_int_equal(rmdir(dir), 0);
    feature_write("/proc/gpulet-nope/gfd", &want);
    assert_contains(written_why, "/proc/gpulet-nope");
    label_set_free(&want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_preset_key_for_key),
        cmocka_unit_test(test_mixed_models),
        cmocka_unit_test(test_mig_labels),
        cmocka_unit_test(test_options),
        cmocka_unit_test(test_health_count),
        cmocka_unit_test(test_mode_clique_lost),
        cmocka_unit_test(test_sanitise_and_accelerator),
        cmocka_unit_test(test_node_patch),
        cmocka_unit_test(test_node_patch_bad_answers),
        cmocka_unit_test(test_feature_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
