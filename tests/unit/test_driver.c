/* The driver's files without a driver: sonames read from ELF objects, the
 * stand-in driver tree found again by discovery (capabilities, sonames, a
 * second version beside it, none at all), and the CDI spec built from it. */
#include <dlfcn.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "driver/driver.h"
#include "testutil.h"
#include "util/arch.h"

#define VERSION "580.159.04"

static char *tree(const char *version)
{
    static char dir[64];
    snprintf(dir, sizeof dir, "/tmp/gpulet-driver-XXXXXX");
    assert_non_null(mkdtemp(dir));
    struct err e;
    if (driver_write_stub_tree(dir, version, NULL, &e) < 0)
        fail_msg("%s", e.msg);
    return dir;
}

static void rm_tree(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static bool has_mount(const struct driver *d, const char *container)
{
    for (unsigned i = 0; i < d->nmounts; i++)
        if (!strcmp(d->mounts[i].container, container))
            return true;
    return false;
}

/* Where the system layout puts files, beside /usr/local/nvidia. */
static const char *const system_names[] = {
    "/usr/lib/" ARCH_TRIPLET "/libcuda.so." VERSION, "/usr/lib/" ARCH_TRIPLET "/libcuda.so.1",
    "/usr/lib/" ARCH_TRIPLET "/libnvidia-ml.so.1", "/usr/lib64/libcuda.so.1",
    "/usr/lib64/libnvidia-ml.so.1", "/usr/lib64/libnvidia-nvvm.so.4", "/usr/bin/nvidia-smi",
};

static void test_soname(void **state)
{
    (void)state;
    char *dir = tree(VERSION), path[256], soname[128];
    snprintf(path, sizeof path, "%s/usr/lib/" ARCH_TRIPLET "/libnvidia-nvvm.so." VERSION, dir);
    assert_int_equal(driver_file_soname(path, soname, sizeof soname), 0);
    assert_string_equal(soname, "libnvidia-nvvm.so.4");
    /* a stand-in glibc loads, so tests can follow the loader's own search */
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(h);
    dlclose(h);
    /* its DT_NEEDED entries are the loader's to satisfy, as a real
     * driver's are: one that names an absent library does not load */
    char absent[300];
    snprintf(absent, sizeof absent, "%s/libneeds.so.1", dir);
    const char *const needed[] = {"libpthread.so.0", "libgpulet-absent.so.9", NULL};
    struct err e;
    assert_int_equal(driver_write_stub_elf(absent, "libneeds.so.1", needed, &e), 0);
    assert_null(dlopen(absent, RTLD_NOW | RTLD_LOCAL));
    assert_contains(dlerror(), "libgpulet-absent.so.9");
    unlink(absent);
    /* too small a buffer, a script, a missing file: no soname */
    assert_int_equal(driver_file_soname(path, soname, 8), -1);
    snprintf(path, sizeof path, "%s/usr/bin/nvidia-smi", dir);
    assert_int_equal(driver_file_soname(path, soname, sizeof soname), -1);
    assert_int_equal(driver_file_soname("/nonexistent/lib.so", soname, sizeof soname), -1);
    /* a real library, built by a real linker */
    if (access("/lib/" ARCH_TRIPLET "/libc.so.6", R_OK) == 0) {
        assert_int_equal(driver_file_soname("/lib/" ARCH_TRIPLET "/libc.so.6", soname, sizeof soname), 0);
        assert_string_equal(soname, "libc.so.6");
    }
    rm_tree(dir);
}

static void test_discover(void **state)
{
    (void)state;
    char *dir = tree(VERSION);
    struct driver d;
    struct err e;
    unsigned caps;
    assert_int_equal(driver_parse_caps("compute,utility", &caps, &e), 0);
    assert_int_equal(driver_discover(&d, dir, NULL, VERSION, caps, DRIVER_LAYOUT_SYSTEM, &e), 0);
    assert_int_equal(d.nlibs, 9);      /* the video libraries are left out */
    assert_int_equal(d.nbins, 5);
    assert_true(has_mount(&d, DRIVER_CONTAINER_LIB "/libcuda.so." VERSION));
    assert_true(has_mount(&d, DRIVER_CONTAINER_LIB "/libcuda.so.1"));
    assert_true(has_mount(&d, DRIVER_CONTAINER_LIB "/libcuda.so"));
    assert_true(has_mount(&d, DRIVER_CONTAINER_LIB "/libnvidia-nvvm.so.4"));
    assert_true(has_mount(&d, DRIVER_CONTAINER_BIN "/nvidia-smi"));
    assert_true(has_mount(&d, "/lib/firmware/nvidia/" VERSION "/gsp_ga10x.bin"));
    assert_false(has_mount(&d, DRIVER_CONTAINER_LIB "/libnvidia-encode.so.1"));
    for (unsigned i = 1; i < d.nmounts; i++) /* sorted: the same tree, the same spec */
        assert_true(strcmp(d.mounts[i - 1].container, d.mounts[i].container) < 0);
    /* the system layout: where glibc and PATH look in any image, too */
    for (unsigned i = 0; i < sizeof system_names / sizeof *system_names; i++)
        assert_true(has_mount(&d, system_names[i]));
    unsigned nsystem = d.nmounts;
    driver_free(&d);
    /* the nvidia layout: /usr/local/nvidia only, a third of the libraries' mounts */
    assert_int_equal(driver_discover(&d, dir, NULL, VERSION, caps, DRIVER_LAYOUT_NVIDIA, &e), 0);
    for (unsigned i = 0; i < sizeof system_names / sizeof *system_names; i++)
        assert_false(has_mount(&d, system_names[i]));
    assert_true(has_mount(&d, DRIVER_CONTAINER_LIB "/libcuda.so.1"));
    assert_true(has_mount(&d, DRIVER_CONTAINER_BIN "/nvidia-smi"));
    assert_int_equal(nsystem - d.nmounts, 2 * (d.nmounts - d.nbins - 2) + d.nbins);
    driver_free(&d);
    assert_int_equal(driver_discover(&d, dir, NULL, VERSION, DRIVER_CAP_ALL, DRIVER_LAYOUT_SYSTEM, &e), 0);
    assert_int_equal(d.nlibs, 11);
    assert_true(has_mount(&d, DRIVER_CONTAINER_LIB "/libnvidia-encode.so.1"));
    driver_free(&d);
    /* read in gpulet's container, named by the host's paths */
    assert_int_equal(driver_discover(&d, "/run/nvidia/driver", dir, VERSION, caps, DRIVER_LAYOUT_SYSTEM, &e), 0);
    assert_int_equal(d.nlibs, 9);
    for (unsigned i = 0; i < d.nmounts; i++)
        assert_true(!strncmp(d.mounts[i].host, "/run/nvidia/driver/", 19));
    driver_free(&d);
    /* NVML for an agent in a container: the host's, under the mount */
    char nvml[256];
    assert_int_equal(driver_find_library(dir, "libnvidia-ml.so.1", nvml, sizeof nvml), 0);
    assert_contains(nvml, "/usr/lib/" ARCH_TRIPLET "/libnvidia-ml.so.1");
    assert_int_equal(driver_find_library(dir, "libnope.so.1", nvml, sizeof nvml), -1);
    /* a second version beside it: only the asked one's files */
    struct err e2;
    assert_int_equal(driver_write_stub_tree(dir, "550.54.15", NULL, &e2), 0);
    assert_int_equal(driver_discover(&d, dir, NULL, VERSION, caps, DRIVER_LAYOUT_SYSTEM, &e), 0);
    assert_int_equal(d.nlibs, 9);
    assert_false(has_mount(&d, DRIVER_CONTAINER_LIB "/libcuda.so.550.54.15"));
    driver_free(&d);
    /* a version with no library: the error names the root and what was found */
    assert_int_equal(driver_discover(&d, dir, NULL, "999.1", caps, DRIVER_LAYOUT_SYSTEM, &e), -1);
    assert_contains(e.msg, dir);
    assert_contains(e.msg, "no NVIDIA driver 999.1 libraries");
    assert_contains(e.msg, "found version");
    assert_int_equal(driver_discover(&d, "/nonexistent-root", NULL, VERSION, caps, DRIVER_LAYOUT_SYSTEM, &e), -1);
    assert_contains(e.msg, "/nonexistent-root");
    assert_int_equal(driver_discover(&d, dir, NULL, "", caps, DRIVER_LAYOUT_SYSTEM, &e), -1);
    rm_tree(dir);
}

static void test_caps(void **state)
{
    (void)state;
    unsigned caps;
    struct err e;
    assert_int_equal(driver_parse_caps("all", &caps, &e), 0);
    assert_int_equal(caps, DRIVER_CAP_ALL);
    assert_int_equal(driver_parse_caps("video", &caps, &e), 0);
    assert_int_equal(caps, DRIVER_CAP_VIDEO);
    assert_int_equal(driver_parse_caps("compute,display", &caps, &e), -1);
    assert_contains(e.msg, "unknown driver capability 'display'");
    assert_int_equal(driver_parse_caps("", &caps, &e), -1);
}

/* What a spec write came to. */
struct spec_write {
    bool done, written, failed;
    char why[512];
};

static void spec_written(void *ctx, const struct err *e, bool written)
{
    struct spec_write *w = ctx;
    w->done = true;
    w->written = written;
    w->failed = e != NULL;
    snprintf(w->why, sizeof w->why, "%s", e ? e->msg : "");
}

/* cdi_spec_writer's write of a copy of text to dir, waited for. */
static void spec_write(const char *dir, const struct strbuf *text, struct spec_write *out)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct strbuf copy = {0};
    strbuf_append(&copy, text->data, text->len);
    *out = (struct spec_write){0};
    struct writer *w = cdi_spec_writer(&loop, dir, CDI_SPEC_FILE);
    writer_put(w, &copy);
    writer_then(w, spec_written, out);
    writer_close(w);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_cdi_spec(void **state)
{
    (void)state;
    char *dir = tree(VERSION);
    struct driver d;
    struct err e;
    assert_int_equal(driver_discover(&d, dir, NULL, VERSION, DRIVER_CAP_COMPUTE | DRIVER_CAP_UTILITY, DRIVER_LAYOUT_SYSTEM, &e), 0);
    struct gpu_info g[2] = {{0}};
    for (unsigned i = 0; i < 2; i++) {
        g[i].index = i;
        g[i].minor = i + 4;
        snprintf(g[i].uuid, sizeof g[i].uuid, "GPU-%u", i);
    }
    struct gpu_inventory inv = {.count = 2, .gpus = g};
    struct config cfg;
    memset(&cfg, 0, sizeof cfg);
    snprintf(cfg.driver_root, sizeof cfg.driver_root, "%s", dir);
    struct strbuf text = {0};
    assert_int_equal(cdi_spec_text(&inv, &d, &cfg, false, &text, &e), 0);
    json_error_t je;
    json_t *spec = json_loads(text.data, 0, &je);
    assert_non_null(spec);
    assert_string_equal(json_string_value(json_object_get(spec, "cdiVersion")), CDI_VERSION);
    assert_string_equal(json_string_value(json_object_get(spec, "kind")), "nvidia.com/gpu");
    json_t *devs = json_object_get(spec, "devices");
    assert_int_equal(json_array_size(devs), 5); /* index and UUID of each, and all */
    const char *names[] = {"0", "GPU-0", "1", "GPU-1", "all"};
    for (size_t i = 0; i < 5; i++)
        assert_string_equal(json_string_value(json_object_get(json_array_get(devs, i), "name")),
                            names[i]);
    json_t *node = json_array_get(
        json_object_get(json_object_get(json_array_get(devs, 2), "containerEdits"), "deviceNodes"), 0);
    assert_string_equal(json_string_value(json_object_get(node, "path")), "/dev/nvidia5");
    assert_contains(json_string_value(json_object_get(node, "hostPath")), dir);
    json_t *mounts = json_object_get(json_object_get(spec, "containerEdits"), "mounts");
    assert_int_equal(json_array_size(mounts), d.nmounts);
    assert_null(json_object_get(json_object_get(spec, "containerEdits"), "hooks"));
    json_decref(spec);
    /* YAML: the same spec; the index names quoted, so they stay strings */
    struct strbuf yaml = {0};
    assert_int_equal(cdi_spec_text(&inv, &d, &cfg, true, &yaml, &e), 0);
    assert_contains(yaml.data, "cdiVersion: 0.5.0");
    assert_contains(yaml.data, "- name: \"0\"");
    assert_contains(yaml.data, "- name: GPU-0");
    /* written once (on the worker pool); the same text again writes nothing */
    char cdidir[128];
    snprintf(cdidir, sizeof cdidir, "%s/cdi", dir);
    struct spec_write w = {0};
    spec_write(cdidir, &text, &w);
    assert_true(w.done && w.written && !w.failed);
    spec_write(cdidir, &text, &w);
    assert_true(w.done && !w.written && !w.failed);
    /* a directory that cannot be made: the error names it */
    snprintf(cdidir, sizeof cdidir, "%s/usr/bin/nvidia-smi/cdi", dir);
    spec_write(cdidir, &text, &w);
    assert_true(w.done && w.failed);
    assert_contains(w.why, cdidir);
    strbuf_free(&text);
    strbuf_free(&yaml);
    driver_free(&d);
    rm_tree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_soname),
        cmocka_unit_test(test_discover),
        cmocka_unit_test(test_caps),
        cmocka_unit_test(test_cdi_spec),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
