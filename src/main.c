/* gpulet: one daemon for NVIDIA GPUs in Kubernetes. Subcommand dispatch:
 * one row per command. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "mps/mps.h"

static int cmd_version(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs("usage: gpulet version\n  prints gpulet's version (also gpulet --version)\n", stdout);
        return CLI_OK;
    }
    if (argc > 1)
        return cli_usage_error("version", "takes no argument, not '%s'", argv[1]);
    return cli_version();
}

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;           /* NULL: internal, not listed */
} commands[] = {
    {"agent", cmd_agent, "run the node agent"},
    {"list", cmd_list, "show the node's GPUs"},
    {"health", cmd_health, "the running agent's GPU health; clear a GPU"},
    {"labels", cmd_labels, "print the node labels the agent publishes"},
    {"cdi", cmd_cdi, "generate the node's CDI spec"},
    {"doctor", cmd_doctor, "check the node: driver, GPUs, runtime, kubelet, gpulet, Node"},
    {"sim", cmd_sim, "inject faults into simulated GPUs; list simulator presets"},
    {"replace-nvidia", cmd_replace, "the patch that moves one of NVIDIA's DaemonSets off gpulet's nodes"},
    {"version", cmd_version, "print the version"},
    {"--version", cmd_version, NULL},
    {"mps-exec", mps_exec, NULL}, /* how the agent starts an MPS daemon */
};

static void main_usage(FILE *out)
{
    fputs("usage: gpulet COMMAND [OPTIONS]\n", out);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (commands[i].help)
            fprintf(out, "  %-15s %s\n", commands[i].name, commands[i].help);
    fputs("Run gpulet COMMAND --help for a command's options.\n"
          "Exit codes: 0 success, 1 failure, 2 a bad command line (doctor: its own, see its --help).\n",
          out);
}

int main(int argc, char **argv)
{
    /* Sockets are written with write(2): a peer that hangs up must give
     * EPIPE, not kill the daemon. */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        main_usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        main_usage(stdout);
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(cmd, commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "gpulet: unknown command '%s'\n", cmd);
    main_usage(stderr);
    return CLI_USAGE;
}
