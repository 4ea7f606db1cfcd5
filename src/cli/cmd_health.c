/* gpulet health: the running agent's view of GPU health, and the
 * operator's clear. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "util/unixsock.h"
#include "gpu/health.h"
#include "nvml/nvml_abi.h"
#include "util/opts.h"

static const char health_usage[] =
    "usage: gpulet health [--status-socket PATH] [clear GPU]\n"
    "  (no command)          each GPU's health as the agent sees it, with the reason, and\n"
    "                        each MIG device's (GPU:MIG) of a GPU in MIG mode\n"
    "  clear GPU             mark a GPU (index or UUID) healthy now, e.g. after fixing it\n"
    "                        by hand\n";

int cmd_health(int argc, char **argv)
{
    static const struct option opts[] = {
        {"status-socket", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *socket = NULL;
    struct err e;
    if (opts_check_exact(argc, argv, "h", opts, &e) < 0)
        return cli_usage_error("health", "%s", e.msg);
    int c;
    opterr = 0;
    optind = 1;
    /* No "+": options may come after the command (`clear 3 --status-socket S`). */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'S': socket = optarg; break;
        case 'h':
            fputs(health_usage, stdout);
            cli_status_socket_help(stdout);
            return CLI_OK;
        default: return cli_usage_error("health", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    char line[256];
    int rest = argc - optind;
    if (rest == 0) {
        snprintf(line, sizeof line, "health\n");
    } else if (rest == 2 && !strcmp(argv[optind], "clear")) {
        if (strlen(argv[optind + 1]) > 128 || strpbrk(argv[optind + 1], " \t\r\n"))
            return cli_usage_error("health", "'%.64s' is not a GPU index or UUID", argv[optind + 1]);
        snprintf(line, sizeof line, "clear %s\n", argv[optind + 1]);
    } else {
        return cli_usage_error("health", "expected no command or 'clear GPU'");
    }
    char reply[16384], user[256];
    if (unixsock_request(cli_status_socket(socket, false, user, sizeof user), line, reply,
                         sizeof reply, &e) < 0) {
        fprintf(stderr, "gpulet health: %s%s\n", e.msg, cli_unreachable_hint(errno));
        return CLI_FAIL;
    }
    if (!strncmp(reply, "error: ", 7)) {
        fprintf(stderr, "gpulet health: %s", reply + 7);
        return CLI_FAIL;
    }
    if (rest) {
        fputs(reply, stdout);
        return CLI_OK;
    }
    /* One line per GPU for people: index, state, UUID, why and since when. */
    char *cursor = reply, uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    struct gpu_health h;
    unsigned index;
    int mig;
    while (cli_health_next(&cursor, &index, &mig, uuid, sizeof uuid, &h)) {
        char why[200], at[24];
        gpu_health_describe(&h, why, sizeof why);
        if (mig >= 0) /* a MIG device, as nvidia-smi -L and NVIDIA's index IDs: GPU:MIG */
            snprintf(at, sizeof at, "%u:%d", index, mig);
        else
            snprintf(at, sizeof at, "%u", index);
        printf("%s %s %s %s\n", at, gpu_health_name(&h), uuid, why[0] ? why : "-");
    }
    return CLI_OK;
}
