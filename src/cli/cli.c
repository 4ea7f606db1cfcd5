/* Shared pieces of the subcommands. */
#include "cli/cli.h"

#include "gpu/health.h"
#include "gpu/inventory.h"
#include "util/unixsock.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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

/* Fills health[] from the agent's "health" answer; false when no agent answers. */
bool cli_agent_health(const char *socket, const struct gpu_inventory *inv,
                      struct gpu_health *health)
{
    char reply[16384];
    struct err e;
    if (unixsock_request(socket, "health\n", reply, sizeof reply, &e) < 0)
        return false;
    char *save = NULL;
    for (char *line = strtok_r(reply, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        struct gpu_health h;
        unsigned index;
        if (health_line_read(line, &index, uuid, sizeof uuid, &h) < 0)
            continue;
        for (unsigned i = 0; i < inv->count; i++)
            if (!strcmp(inv->gpus[i].uuid, uuid))
                health[i] = h;
    }
    return true;
}
