/* gpulet list: the node's GPUs as a table, JSON or a topology matrix. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "gpu/inventory.h"
#include "gpu/render.h"

static const char list_usage[] =
    "usage: gpulet list [-o table|json|topology] [--simulate PRESET|FILE] [--nvml PATH]\n"
    "  -o, --output FORMAT   table (default), json, or topology (like nvidia-smi topo -m)\n"
    "  --simulate SPEC       use simulated GPUs: a preset name or a scenario file\n"
    "  --nvml PATH           load NVML from PATH instead of the driver's usual places\n";

int cmd_list(int argc, char **argv)
{
    static const struct option opts[] = {
        {"output", required_argument, NULL, 'o'}, {"simulate", required_argument, NULL, 's'},
        {"nvml", required_argument, NULL, 'n'},   {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct cli_nvml_opts no = {0};
    const char *format = "table";
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': format = optarg; break;
        case 's': no.simulate = optarg; break;
        case 'n': no.nvml_path = optarg; break;
        case 'h': fputs(list_usage, stdout); return CLI_OK;
        default: return cli_usage_error("list", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("list", "unexpected argument '%s'", argv[optind]);
    if (strcmp(format, "table") && strcmp(format, "json") && strcmp(format, "topology"))
        return cli_usage_error("list", "output format must be table, json or topology, not '%s'",
                               format);
    if (no.simulate && no.nvml_path)
        return cli_usage_error("list", "--simulate and --nvml cannot be combined");

    struct nvml n;
    struct err e;
    struct gpu_inventory inv;
    if (cli_nvml_start(&no, &n, &e) < 0 || gpu_inventory_build(&n, &inv, &e) < 0) {
        fprintf(stderr, "gpulet list: %s\n", e.msg);
        nvml_close(&n);
        return CLI_FAIL;
    }
    struct strbuf out = {0};
    if (!strcmp(format, "json"))
        gpu_render_json(&inv, &out);
    else if (!strcmp(format, "topology"))
        gpu_render_topology(&inv, &out);
    else
        gpu_render_table(&inv, &out);
    fputs(out.data, stdout);
    strbuf_free(&out);
    gpu_inventory_free(&inv);
    nvml_close(&n);
    return CLI_OK;
}
