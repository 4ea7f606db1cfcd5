/* gpulet: one daemon for NVIDIA GPUs in Kubernetes. Subcommand dispatch. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "mps/mps.h"

static const char main_usage[] =
    "usage: gpulet COMMAND [OPTIONS]\n"
    "  agent     run the node agent\n"
    "  list      show the node's GPUs\n"
    "  health    the running agent's GPU health; clear a GPU\n"
    "  labels    print the node labels the agent publishes\n"
    "  cdi       generate the node's CDI spec\n"
    "  doctor    check the node: driver, GPUs, runtime, kubelet, gpulet, Node\n"
    "  sim       inject faults into simulated GPUs; list simulator presets\n"
    "  version   print the version\n"
    "Run gpulet COMMAND --help for a command's options.\n";

int main(int argc, char **argv)
{
    /* Sockets are written with write(2): a peer that hangs up must give
     * EPIPE, not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        fputs(main_usage, stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(main_usage, stdout);
        return CLI_OK;
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("gpulet %s\n", GPULET_VERSION);
        return CLI_OK;
    }
    if (!strcmp(cmd, "list"))
        return cmd_list(argc - 1, argv + 1);
    if (!strcmp(cmd, "agent"))
        return cmd_agent(argc - 1, argv + 1);
    if (!strcmp(cmd, "health"))
        return cmd_health(argc - 1, argv + 1);
    if (!strcmp(cmd, "mps-exec")) /* internal: how the agent starts an MPS daemon */
        return mps_exec(argc - 1, argv + 1);
    if (!strcmp(cmd, "labels"))
        return cmd_labels(argc - 1, argv + 1);
    if (!strcmp(cmd, "cdi"))
        return cmd_cdi(argc - 1, argv + 1);
    if (!strcmp(cmd, "doctor"))
        return cmd_doctor(argc - 1, argv + 1);
    if (!strcmp(cmd, "sim"))
        return cmd_sim(argc - 1, argv + 1);
    fprintf(stderr, "gpulet: unknown command '%s'\n%s", cmd, main_usage);
    return CLI_USAGE;
}
