#include "cli/cli.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "scenario.h"

#define SIM_LIB_NAME "libgpulet-nvml-sim.so"

/* The simulator ships next to the binary (build tree) or in ../lib/gpulet (installed). */
static int cli_find_sim(char *out, size_t len, struct err *e)
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

int cli_nvml_start(const struct cli_nvml_opts *o, struct nvml *n, struct err *e)
{
    char lib[PATH_MAX];
    const char *path = o->nvml_path;
    memset(n, 0, sizeof *n); /* so nvml_close is safe whatever fails below */
    if (o->simulate) {
        /* Check the scenario here so a bad one fails with its own message
         * rather than as an NVML initialization error. */
        struct scenario *sc = malloc(sizeof *sc);
        if (!sc)
            return err_set(e, "out of memory");
        int rc = scenario_load(o->simulate, sc, e);
        free(sc);
        if (rc < 0)
            return -1;
        if (cli_find_sim(lib, sizeof lib, e) < 0)
            return -1;
        setenv("GPULET_SIM_SCENARIO", o->simulate, 1);
        path = lib;
    }
    if (nvml_open(n, path, e) < 0)
        return -1;
    if (nvml_init(n, e) < 0) {
        nvml_close(n);
        return -1;
    }
    return 0;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "gpulet %s: %s (see gpulet %s --help)\n", cmd, msg, cmd);
    return CLI_USAGE;
}
