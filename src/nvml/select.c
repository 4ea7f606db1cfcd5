/* Which NVML a command uses: the driver's, a given file, or the simulator
 * (a scenario or preset, checked here so that a bad one fails with its own
 * message rather than as an NVML initialization error). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvml/nvml.h"

#define SIM_LIB_NAME "libgpulet-nvml-sim.so"

/* The simulator ships next to the binary (build tree) or in ../lib/gpulet (installed). */
int nvml_find_sim(char *out, size_t len, struct err *e)
{
    const char *env = getenv("GPULET_SIM_LIB");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return 0;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n < 0)
        return err_set(e, "cannot find the simulator library: /proc/self/exe unreadable");
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    const char *const rel[] = {"/" SIM_LIB_NAME, "/../lib/gpulet/" SIM_LIB_NAME};
    for (size_t i = 0; i < 2; i++) {
        int w = snprintf(out, len, "%s%s", exe, rel[i]);
        if (w > 0 && (size_t)w < len && access(out, R_OK) == 0)
            return 0;
    }
    return err_set(e, "cannot find the simulator library %s next to %s or in %s/../lib/gpulet "
                      "(set GPULET_SIM_LIB)", SIM_LIB_NAME, exe, exe);
}

int nvml_select(struct nvml *n, const char *simulate, const char *path, struct err *e)
{
    char lib[PATH_MAX];
    memset(n, 0, sizeof *n); /* so nvml_close is safe whatever fails below */
    if (simulate) {
        /* The scenario itself was checked by the caller (scenario_check),
         * as the simulator's side owns it; here it is only handed on. */
        if (nvml_find_sim(lib, sizeof lib, e) < 0)
            return -1;
        setenv("GPULET_SIM_SCENARIO", simulate, 1);
        path = lib;
    }
    return nvml_open(n, path, e);
}

int nvml_start(struct nvml *n, const char *simulate, const char *path, struct err *e)
{
    if (nvml_select(n, simulate, path, e) < 0)
        return -1;
    if (nvml_init(n, e) < 0) {
        nvml_close(n);
        return -1;
    }
    return 0;
}
