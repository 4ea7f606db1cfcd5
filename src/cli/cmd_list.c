/* gpulet list: the node's GPUs as a table, JSON or a topology matrix: the
 * running agent's (its GPUs, MIG layout and health) where one answers on
 * the status socket, else from NVML, with the agent's health when one
 * answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gpu/inventory.h"
#include "gpu/render.h"
#include "config/config.h"
#include "util/xmalloc.h"

static const char list_usage[] =
    "usage: gpulet list [-o table|wide|json|topology] [--simulate PRESET|FILE] [--nvml PATH]\n"
    "                   [--status-socket PATH]\n"
    "  -o, --output FORMAT   table (default; also text); wide (also the minor number, compute\n"
    "                        capability, architecture and MIG mode); json; or topology\n"
    "                        (like nvidia-smi topo -m)\n"
    "  --simulate SPEC       use simulated GPUs: a preset name or a scenario file\n"
    "  --nvml PATH           load NVML from PATH instead of the driver's usual places\n";

int cmd_list(int argc, char **argv)
{
    const char *format = "table";
    const struct cli_own_opt own[] = {{"-o", "--output", &format}};
    if (cli_take_own("list", &argc, argv, own, 1) != 0)
        return CLI_USAGE;
    struct config_args args;
    struct config cfg;
    struct err e;
    if (config_parse_args(&args, argc, argv, &e) < 0)
        return cli_usage_error("list", "%s", e.msg);
    if (args.version)
        return cli_version();
    if (args.help) {
        fputs(list_usage, stdout);
        cli_status_socket_help(stdout);
        return CLI_OK;
    }
    if (!strcmp(format, "text"))
        format = "table"; /* the human format's name in labels and doctor too */
    if (strcmp(format, "table") && strcmp(format, "wide") && strcmp(format, "json") &&
        strcmp(format, "topology"))
        return cli_usage_error("list", "output format must be table, wide, json or topology, not '%s'",
                               format);
    const char *sim = config_arg(&args, "simulate"), *lib = config_arg(&args, "nvml");
    if (sim && lib)
        return cli_usage_error("list", "--simulate and --nvml cannot be combined");
    const char *status = config_arg(&args, "status-socket");
    char user[256], request[32];
    snprintf(request, sizeof request, "list %s", format);
    int shown = sim || lib ? -1 : cli_agent_print("list", status, request);
    if (shown >= 0)
        return shown; /* the node gpulet serves, as it sees it */
    if (config_load(&cfg, &args, NULL, &e) < 0)
        return cli_fail("list", &e, NULL);
    struct nvml n;
    struct gpu_inventory inv;
    int rc = cli_open("list", "list", &cfg, &n, &inv);
    if (rc != CLI_OK)
        return rc;
    struct gpu_device *devs = gpu_devices_new(&inv, 0);
    if (!cli_agent_health(cli_status_socket(status, sim, user, sizeof user), &inv, devs, "list")) {
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
