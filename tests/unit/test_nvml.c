/* The NVML binding: symbol resolution with version fallbacks, load and init errors. */
#include <stdio.h>
#include <string.h>

#include "testutil.h"

/* A fake library: a table of names, each answering one fixed function. */
struct fake_lib {
    const char *const *names;
};

static nvmlReturn_t fake_ok(void) { return NVML_SUCCESS; }
static nvmlReturn_t fake_not_loaded(void) { return NVML_ERROR_DRIVER_NOT_LOADED; }
static const char *fake_string(nvmlReturn_t rc) { (void)rc; return "fake error string"; }

static void *fake_lookup(void *ctx, const char *name)
{
    const struct fake_lib *lib = ctx;
    for (const char *const *p = lib->names; *p; p++) {
        if (strcmp(*p, name))
            continue;
        if (!strcmp(name, "nvmlErrorString"))
            return (void *)fake_string;
        if (!strcmp(name, "nvmlInit"))
            return (void *)fake_not_loaded; /* tells the v1 entry apart from v2 */
        return (void *)fake_ok;
    }
    return NULL;
}

static const char *const old_names[] = {
    "nvmlInit", "nvmlShutdown", "nvmlErrorString", "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID",
    "nvmlDeviceGetName", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetMinorNumber",
    "nvmlEventSetWait", NULL};

static const char *const new_names[] = {
    "nvmlInit_v2", "nvmlInit", "nvmlShutdown", "nvmlErrorString", "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetUUID", "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetMinorNumber",
    "nvmlEventSetWait_v2", "nvmlEventSetWait", "nvmlDeviceGetMemoryInfo_v2", NULL};

static void test_resolve_prefers_newest(void **state)
{
    (void)state;
    struct fake_lib lib = {new_names};
    struct nvml n = {0};
    struct err e;
    assert_int_equal(nvml_resolve(&n, fake_lookup, &lib, &e), 0);
    assert_ptr_equal(n.Init, fake_ok); /* nvmlInit_v2, not the v1 fake */
    assert_non_null(n.EventSetWait);
    assert_non_null(n.DeviceGetMemoryInfoV2);
    assert_null(n.DeviceGetMemoryAffinity); /* optional and absent */
}

static void test_resolve_falls_back_to_older(void **state)
{
    (void)state;
    struct fake_lib lib = {old_names};
    struct nvml n = {0};
    struct err e;
    assert_int_equal(nvml_resolve(&n, fake_lookup, &lib, &e), 0);
    assert_ptr_equal(n.Init, fake_not_loaded); /* only nvmlInit exists */
    assert_non_null(n.DeviceGetPciInfo);      /* _v2 stands in for _v3 */
    assert_non_null(n.EventSetWait);          /* v1 wait */
    assert_null(n.DeviceGetMemoryInfoV2);
    /* init failure carries NVML's own string and code */
    assert_int_equal(nvml_init(&n, &e), -1);
    assert_contains(e.msg, "fake error string");
    assert_contains(e.msg, "NVML error 9");
    assert_false(n.initialized);
}

static void test_resolve_missing_required(void **state)
{
    (void)state;
    static const char *const names[] = {"nvmlInit_v2", "nvmlShutdown", NULL};
    struct fake_lib lib = {names};
    struct nvml n = {0};
    snprintf(n.path, sizeof n.path, "/fake/libnvidia-ml.so.1");
    struct err e;
    assert_int_equal(nvml_resolve(&n, fake_lookup, &lib, &e), -1);
    assert_contains(e.msg, "/fake/libnvidia-ml.so.1");
    assert_contains(e.msg, "nvmlErrorString");
}

static void test_open_missing_file(void **state)
{
    (void)state;
    struct nvml n;
    struct err e;
    assert_int_equal(nvml_open(&n, "/nonexistent/libnvidia-ml.so.1", &e), -1);
    assert_contains(e.msg, "/nonexistent/libnvidia-ml.so.1");
    assert_contains(e.msg, "No such file");
    nvml_close(&n); /* safe after a failed open */
}

static void test_open_default_lists_every_path(void **state)
{
    (void)state;
    struct nvml n;
    struct err e;
    if (nvml_open(&n, NULL, &e) == 0) {
        nvml_close(&n);
        skip(); /* a machine with the NVIDIA driver */
    }
    for (size_t i = 0; nvml_search_paths[i]; i++)
        assert_contains(e.msg, nvml_search_paths[i]);
}

static void test_open_not_nvml(void **state)
{
    (void)state;
    struct nvml n;
    struct err e;
    /* A real shared library that is not NVML: the error names what is missing. */
    assert_int_equal(nvml_open(&n, "libm.so.6", &e), -1);
    assert_contains(e.msg, "lacks nvmlInit_v2");
}

static void test_builtin_error_strings(void **state)
{
    (void)state;
    assert_string_equal(nvml_strerror(NULL, NVML_ERROR_GPU_IS_LOST), "GPU is lost");
    assert_string_equal(nvml_strerror(NULL, NVML_ERROR_UNINITIALIZED), "Uninitialized");
    assert_string_equal(nvml_strerror(NULL, (nvmlReturn_t)12345), "Unknown Error");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolve_prefers_newest),
        cmocka_unit_test(test_resolve_falls_back_to_older),
        cmocka_unit_test(test_resolve_missing_required),
        cmocka_unit_test(test_open_missing_file),
        cmocka_unit_test(test_open_default_lists_every_path),
        cmocka_unit_test(test_open_not_nvml),
        cmocka_unit_test(test_builtin_error_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
