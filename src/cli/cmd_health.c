/* gpulet health: the running agent's view of GPU health, and the
 * operator's clear. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

static const char health_usage[] =
    "usage: gpulet health [--status-socket PATH] [clear GPU]\n"
    "  (no command)   each GPU's health as the agent sees it, with the reason\n"
    "  clear GPU      mark a GPU (index or UUID) healthy now, e.g. after fixing it by hand\n";

int cmd_health(int argc, char **argv)
{
    const char *socket = NULL;
    int i = 1;
    if (i < argc && (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))) {
        fputs(health_usage, stdout);
        return CLI_OK;
    }
    if (i + 1 < argc && !strcmp(argv[i], "--status-socket")) {
        socket = argv[i + 1];
        i += 2;
    }
    char line[256];
    if (i == argc) {
        snprintf(line, sizeof line, "health\n");
    } else if (!strcmp(argv[i], "clear") && i + 2 == argc) {
        snprintf(line, sizeof line, "clear %s\n", argv[i + 1]);
    } else {
        return cli_usage_error("health", "expected no command or 'clear GPU'");
    }
    char reply[16384];
    struct err e;
    if (cli_unix_request(cli_status_socket(socket), line, reply, sizeof reply, &e) < 0) {
        fprintf(stderr, "gpulet health: %s (is the agent running?)\n", e.msg);
        return CLI_FAIL;
    }
    if (!strncmp(reply, "error: ", 7)) {
        fprintf(stderr, "gpulet health: %s", reply + 7);
        return CLI_FAIL;
    }
    fputs(reply, stdout);
    return CLI_OK;
}
