/* gpulet list: the node's GPUs as a table, JSON or a topology matrix: the
 * running agent's (its GPUs, MIG layout and health) where one answers on
 * the status socket, else from NVML, with the agent's health when one
 * answers. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gpu/inventory.h"
#include "gpu/render.h"
#include "sim/scenario.h"
#include "util/opts.h"
#include "util/xmalloc.h"

static const char list_usage[] =
    "usage: gpulet list [-o table|wide|json|topology] [--simulate PRESET|FILE] [--nvml PATH]\n"
    "                   [--status-socket PATH]\n"
    "  -o, --output FORMAT   table (default); wide (also the minor number, compute\n"
    "                        capability, architecture and MIG mode); json; or topology\n"
    "                        (like nvidia-smi topo -m)\n"
    "  --simulate SPEC       use simulated GPUs: a preset name or a scenario file\n"
    "  --nvml PATH           load NVML from PATH instead of the driver's usual places\n";

int cmd_list(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'},   {"simulate", required_argument, NULL, 's'},
        {"nvml", required_argument, NULL, 'n'},     {"status-socket", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    struct { const char *simulate, *nvml_path; } no = {NULL, NULL};
    const char *format = "table", *status = NULL;
    struct err e;
    if (opts_check_exact(argc, argv, "o:h", opts, &e) < 0)
        return cli_usage_error("list", "%s", e.msg);
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': format = optarg; break;
        case 's': no.simulate = optarg; break;
        case 'n': no.nvml_path = optarg; break;
        case 'S': status = optarg; break;
        case 'h':
            fputs(list_usage, stdout);
            cli_status_socket_help(stdout);
            return CLI_OK;
        default: return cli_usage_error("list", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("list", "unexpected argument '%s'", argv[optind]);
    if (strcmp(format, "table") && strcmp(format, "wide") && strcmp(format, "json") &&
        strcmp(format, "topology"))
        return cli_usage_error("list", "output format must be table, wide, json or topology, not '%s'",
                               format);
    if (no.simulate && no.nvml_path)
        return cli_usage_error("list", "--simulate and --nvml cannot be combined");
    if (no.simulate && scenario_check(no.simulate, &e) < 0)
        return cli_fail("list", &e, NULL);
    char user[256], request[32];
    snprintf(request, sizeof request, "list %s", format);
    int shown = no.simulate || no.nvml_path ? -1 : cli_agent_print("list", status, request);
    if (shown >= 0)
        return shown; /* the node gpulet serves, as it sees it */

    cli_simulator_quiet();
    struct nvml n;
    struct gpu_inventory inv;
    if (nvml_start(&n, no.simulate, no.nvml_path, &e) < 0 || gpu_inventory_build(&n, &inv, &e) < 0) {
        char hint[200];
        nvml_close(&n);
        return cli_fail("list", &e, cli_no_gpu_hint("list", !no.simulate && !no.nvml_path, hint,
                                                    sizeof hint));
    }
    struct gpu_device *devs = gpu_devices_new(&inv, 0);
    if (!cli_agent_health(cli_status_socket(status, no.simulate, user, sizeof user), &inv, devs,
                          "list")) {
        free(devs);
        devs = NULL;
    }
    struct strbuf out = {0};
    if (!strcmp(format, "json"))
        gpu_render_json(&inv, devs, &out);
    else if (!strcmp(format, "topology"))
        gpu_render_topology(&inv, &out);
    else
        gpu_render_table(&inv, devs, !strcmp(format, "wide"), &out);
    fputs(out.data, stdout);
    strbuf_free(&out);
    free(devs);
    gpu_inventory_free(&inv);
    nvml_close(&n);
    return CLI_OK;
}
