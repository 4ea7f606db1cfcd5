#include "cli/cli.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
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

int cli_unix_request(const char *path, const char *line, char *reply, size_t len,
                     struct err *e)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return err_set(e, "socket path too long: %s", path);
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        err_set(e, "cannot reach %s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    size_t n = strlen(line);
    if (send(fd, line, n, MSG_NOSIGNAL) != (ssize_t)n) {
        err_set(e, "writing to %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    size_t got = 0;
    ssize_t r;
    while (got + 1 < len && (r = read(fd, reply + got, len - 1 - got)) > 0)
        got += (size_t)r;
    close(fd);
    reply[got] = '\0';
    return 0;
}

const char *cli_status_socket(const char *flag)
{
    const char *env = getenv("GPULET_STATUS_SOCKET");
    return flag ? flag : env && *env ? env : "/run/gpulet/status.sock";
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
