/* Shared pieces of the subcommands. */
#include "cli/cli.h"

#include "gpu/health.h"
#include "gpu/inventory.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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

/* Fills health[] from the agent's "health" answer; false when no agent answers. */
bool cli_agent_health(const char *socket, const struct gpu_inventory *inv,
                      struct gpu_health *health)
{
    char reply[16384];
    struct err e;
    if (cli_unix_request(socket, "health\n", reply, sizeof reply, &e) < 0)
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
