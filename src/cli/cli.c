/* Shared pieces of the subcommands. */
#include "cli/cli.h"

#include "config/config.h"
#include "gpu/device.h"
#include "gpu/health.h"
#include "gpu/inventory.h"
#include "nvml/nvml.h"
#include "util/dirs.h"
#include "util/strbuf.h"
#include "util/unixsock.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLI_NODE_STATUS_SOCKET "/run/gpulet/status.sock"

const char *cli_status_socket(const char *flag, bool simulated, char *buf, size_t len)
{
    const char *env = getenv("GPULET_STATUS_SOCKET");
    if (flag)
        return flag;
    if (env && *env)
        return env;
    dirs_user_file("status.sock", buf, len);
    if (simulated)
        return buf;
    /* The node's agent where one runs, else this user's simulated one. */
    struct stat st;
    if (stat(CLI_NODE_STATUS_SOCKET, &st) < 0 && stat(buf, &st) == 0)
        return buf;
    return CLI_NODE_STATUS_SOCKET;
}

void cli_status_socket_help(FILE *out)
{
    char user[256];
    dirs_user_file("status.sock", user, sizeof user);
    fprintf(out, "  --status-socket PATH  the agent's status socket [$GPULET_STATUS_SOCKET, else\n"
                 "                        " CLI_NODE_STATUS_SOCKET " (the node's agent), else\n"
                 "                        %s (your simulated one)]\n", user);
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

void cli_simulator_quiet(void)
{
    setenv("GPULET_SIM_CONTROL", "off", 0);
}

int cli_fail(const char *cmd, const struct err *e, const char *hint)
{
    fprintf(stderr, "gpulet %s: %s%s", cmd, e->msg, hint ? hint : "");
    if (e->usage)
        fprintf(stderr, " (see gpulet %s --help)", cmd);
    fputc('\n', stderr);
    return e->usage ? CLI_USAGE : CLI_FAIL;
}

const char *cli_no_gpu_hint(const char *cmdline, bool real, char *buf, size_t len)
{
    /* A user trying gpulet on a machine without GPUs: say what works there. */
    if (!real)
        return "";
    snprintf(buf, len, "; without a GPU, try `gpulet %s --simulate dgx-h100` (simulated GPUs; "
                       "`gpulet sim presets` lists the presets)", cmdline);
    return buf;
}

int cli_open(const char *cmd, const char *cmdline, const struct config *cfg, struct nvml *n,
             struct gpu_inventory *inv)
{
    const char *sim = cfg->simulate[0] ? cfg->simulate : NULL;
    const char *lib = cfg->nvml_path[0] ? cfg->nvml_path : NULL;
    struct err e;
    cli_simulator_quiet();
    if (nvml_start(n, sim, lib, &e) == 0 && gpu_inventory_build(n, inv, &e) == 0)
        return CLI_OK;
    char hint[200];
    nvml_close(n);
    return cli_fail(cmd, &e, cli_no_gpu_hint(cmdline, !sim && !lib, hint, sizeof hint));
}

const char *cli_unreachable_hint(int errnum)
{
    switch (errnum) {
    case ENOENT:
    case ECONNREFUSED: return " (is the agent running?)";
    case EACCES:
    case EPERM: return " (the socket is another user's: run as that user, or as root)";
    default: return "";
    }
}

int cli_agent_ask(const char *cmd, const char *socket_flag, const char *request, struct strbuf *out)
{
    struct err e;
    char line[128], user[256];
    const char *socket = cli_status_socket(socket_flag, false, user, sizeof user);
    snprintf(line, sizeof line, "%s\n", request);
    if (unixsock_request_all(socket, line, out, &e) < 0 ||
        !strncmp(out->data, "error: unknown request", 22)) { /* an agent of an older gpulet */
        strbuf_free(out);
        return 0;
    }
    if (strncmp(out->data, "error: ", 7))
        return 1;
    fprintf(stderr, "gpulet %s: the agent at %s: %s", cmd, socket, out->data + 7);
    strbuf_free(out);
    return -1;
}

int cli_agent_print(const char *cmd, const char *socket_flag, const char *request)
{
    struct strbuf out = {0};
    int asked = cli_agent_ask(cmd, socket_flag, request, &out);
    if (asked > 0)
        fputs(out.data, stdout);
    strbuf_free(&out);
    return asked > 0 ? CLI_OK : asked < 0 ? CLI_FAIL : -1;
}

bool cli_agent_health(const char *socket, const struct gpu_inventory *inv,
                      struct gpu_device *devs, const char *cmd)
{
    char reply[65536];
    struct err e;
    if (unixsock_request(socket, "health\n", reply, sizeof reply, &e) < 0) {
        /* No agent is normal; one that is there and refuses us is worth a word. */
        if (errno == EACCES || errno == EPERM)
            fprintf(stderr, "gpulet %s: no agent health: %s%s\n", cmd, e.msg,
                    cli_unreachable_hint(errno));
        return false;
    }
    char *cursor = reply, uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    struct gpu_health h;
    unsigned index;
    int mig;
    while (cli_health_next(&cursor, &index, &mig, uuid, sizeof uuid, &h))
        for (unsigned i = 0; i < inv->count; i++) {
            if (mig < 0 && !strcmp(inv->gpus[i].uuid, uuid))
                devs[i].health = h;
            for (unsigned k = 0; mig >= 0 && k < inv->gpus[i].nmig && k < GPU_MIG_MAX; k++)
                if (!strcmp(inv->gpus[i].mig[k].uuid, uuid))
                    devs[i].mig_health[k] = h;
        }
    return true;
}

bool cli_health_next(char **cursor, unsigned *index, int *mig, char *uuid, size_t len,
                     struct gpu_health *h)
{
    while (**cursor) {
        char *line = *cursor, *nl = strchr(line, '\n');
        *cursor = nl ? nl + 1 : line + strlen(line);
        if (nl)
            *nl = '\0';
        if (gpu_health_line_read(line, index, mig, uuid, len, h) == 0)
            return true;
    }
    return false;
}

/* The value an argument gives option o: NULL when it is not o; *next when
 * it takes the next argument. */
static const char *cli_own_value(const struct cli_own_opt *o, const char *arg, bool *next)
{
    size_t n = strlen(o->long_name);
    *next = false;
    if (!strcmp(arg, o->long_name) || (o->short_name && !strcmp(arg, o->short_name))) {
        *next = true;
        return arg;
    }
    if (!strncmp(arg, o->long_name, n) && arg[n] == '=')
        return arg + n + 1;
    if (o->short_name && !strncmp(arg, o->short_name, 2))
        return arg + 2;
    return NULL;
}

int cli_take_own(const char *cmd, int *argc, char **argv, const struct cli_own_opt *opts,
                 size_t nopts)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *value = NULL;
        bool next = false;
        for (size_t k = 0; k < nopts && !value; k++) {
            value = cli_own_value(&opts[k], argv[i], &next);
            if (value && next && i + 1 >= *argc)
                return cli_usage_error(cmd, "%s needs a value", argv[i]);
            if (value)
                *opts[k].value = next ? argv[++i] : value;
        }
        if (!value)
            argv[out++] = argv[i];
    }
    *argc = out;
    return 0;
}

int cli_version(void)
{
    printf("gpulet %s\n", GPULET_VERSION);
    return CLI_OK;
}
