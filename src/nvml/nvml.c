#include "nvml/nvml.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util/arch.h"
#include "util/strbuf.h"

const char *const nvml_search_paths[] = {
    "libnvidia-ml.so.1", /* the dynamic loader's own search: ld.so.cache, LD_LIBRARY_PATH */
    "/usr/lib/" ARCH_TRIPLET "/libnvidia-ml.so.1",
    "/usr/lib64/libnvidia-ml.so.1",
    "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
    "/run/nvidia/driver/usr/lib/" ARCH_TRIPLET "/libnvidia-ml.so.1",
    "/run/nvidia/driver/usr/lib64/libnvidia-ml.so.1",
    NULL,
};

/* Takes the first name the library has; all names of one entry share a signature. */
static void *nvml_first(nvml_lookup_fn lookup, void *ctx, const char *const *names,
                        size_t count)
{
    for (size_t i = 0; i < count; i++) {
        void *f = lookup(ctx, names[i]);
        if (f)
            return f;
    }
    return NULL;
}

int nvml_resolve(struct nvml *n, nvml_lookup_fn lookup, void *ctx, struct err *e)
{
#define NVML_REQ(field, proto, ...)                                                      \
    do {                                                                                 \
        static const char *const names[] = {__VA_ARGS__};                               \
        n->field = (__typeof__(n->field))nvml_first(lookup, ctx, names,                 \
                                                     sizeof names / sizeof *names);       \
        if (!n->field)                                                                   \
            return err_set(e, "%s: the library lacks %s, which gpulet needs", n->path,  \
                           names[0]);                                                    \
    } while (0);
#define NVML_OPT(field, proto, ...)                                                      \
    do {                                                                                 \
        static const char *const names[] = {__VA_ARGS__};                               \
        n->field = (__typeof__(n->field))nvml_first(lookup, ctx, names,                 \
                                                     sizeof names / sizeof *names);       \
    } while (0);
    NVML_REQUIRED_FUNCS(NVML_REQ)
    NVML_OPTIONAL_FUNCS(NVML_OPT)
#undef NVML_REQ
#undef NVML_OPT
    return 0;
}

static void *nvml_dlsym(void *ctx, const char *name)
{
    return dlsym(ctx, name);
}

#define NVML_FN_NAME(field, proto, ...) #proto,
const char *const nvml_fn_names[NVML_FN_COUNT] = {
    NVML_REQUIRED_FUNCS(NVML_FN_NAME) NVML_OPTIONAL_FUNCS(NVML_FN_NAME)};
#undef NVML_FN_NAME

_Thread_local _Atomic int *nvml_call_slot;

double nvml_clock_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int nvml_open(struct nvml *n, const char *path, struct err *e)
{
    memset(n, 0, sizeof *n);
    double t0 = nvml_clock_ms();
    const char *const one[] = {path, NULL};
    const char *const *paths = path ? one : nvml_search_paths;
    struct strbuf tried = {0};
    const char *why = "";
    for (size_t i = 0; paths[i]; i++) {
        /* RTLD_LOCAL: NVML's symbols must not resolve anyone else's. */
        n->dl = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
        if (n->dl) {
            snprintf(n->path, sizeof n->path, "%s", paths[i]);
            break;
        }
        why = dlerror();
        strbuf_printf(&tried, "%s%s", i ? ", " : "", paths[i]);
    }
    if (!n->dl) {
        err_set(e, "cannot load NVML (is the NVIDIA driver installed?); tried %s%s%s",
                tried.data, path ? ": " : "", path ? why : "");
        strbuf_free(&tried);
        return -1;
    }
    strbuf_free(&tried);
    /* Report the file the loader actually chose, which may differ from the name asked for. */
    Dl_info info;
    void *sym = dlsym(n->dl, "nvmlInit_v2");
    if (sym && dladdr(sym, &info) && info.dli_fname)
        snprintf(n->path, sizeof n->path, "%s", info.dli_fname);
    if (nvml_resolve(n, nvml_dlsym, n->dl, e) < 0) {
        dlclose(n->dl);
        n->dl = NULL;
        return -1;
    }
    n->load_ms = nvml_clock_ms() - t0;
    return 0;
}

int nvml_init(struct nvml *n, struct err *e)
{
    double t0 = nvml_clock_ms();
    nvmlReturn_t rc = n->Init();
    n->init_ms = nvml_clock_ms() - t0;
    if (rc != NVML_SUCCESS)
        return err_set(e, "NVML initialization failed: %s (NVML error %d, library %s)",
                       nvml_strerror(n, rc), (int)rc, n->path);
    n->initialized = true;
    return 0;
}

void nvml_close(struct nvml *n)
{
    if (n->initialized && n->Shutdown)
        n->Shutdown();
    n->initialized = false;
    if (n->dl)
        dlclose(n->dl);
    n->dl = NULL;
}

const char *nvml_strerror(const struct nvml *n, nvmlReturn_t rc)
{
    const char *s = n && n->ErrorString ? n->ErrorString(rc) : NULL;
    return s ? s : nvml_errors_builtin(rc);
}
