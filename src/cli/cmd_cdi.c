/* gpulet cdi generate: the CDI spec the agent keeps in --cdi-spec-dir,
 * printed or written to a file, from the same configuration. */
#include <stdio.h>
#include <string.h>

#include "cdi/cdi.h"
#include "cli/cli.h"
#include "config/config.h"
#include "nvml/nvml.h"

static const char cdi_usage[] =
    "usage: gpulet cdi generate [-o FILE] [--format yaml|json] [AGENT OPTIONS]\n"
    "  The node's CDI spec (kind nvidia.com/gpu; devices by index, UUID and all; the\n"
    "  driver's files under --nvidia-driver-root as mounts, no hooks).\n"
    "  -o, --output FILE   write it there (default: standard output)\n"
    "  --format FORMAT     yaml (default) or json; a FILE ending .json means json\n"
    "  Every `gpulet agent` option applies (--simulate, --nvidia-driver-root,\n"
    "  --nvidia-dev-root, --driver-capabilities, ...): see gpulet agent --help.\n";

static int cdi_fail(const struct err *e, const char *hint, struct nvml *n,
                    struct gpu_inventory *inv)
{
    if (inv)
        gpu_inventory_free(inv);
    nvml_close(n);
    return cli_fail("cdi", e, hint);
}

int cmd_cdi(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "generate") && strcmp(argv[1], "--help") &&
                     strcmp(argv[1], "-h"))) {
        fputs(cdi_usage, stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "generate")) {
        fputs(cdi_usage, stdout);
        return CLI_OK;
    }
    argc--, argv++;
    const char *file = NULL, *format = NULL;
    const struct cli_own_opt own[] = {{"-o", "--output", &file}, {NULL, "--format", &format}};
    if (cli_take_own("cdi", &argc, argv, own, 2) != 0)
        return CLI_USAGE;
    if (!format)
        format = file && strlen(file) > 5 && !strcmp(file + strlen(file) - 5, ".json") ? "json" : "yaml";
    if (strcmp(format, "yaml") && strcmp(format, "json"))
        return cli_usage_error("cdi", "--format must be yaml or json, not '%s'", format);
    struct config_args args;
    struct config cfg;
    struct err e;
    if (config_parse_args(&args, argc, argv, &e) < 0)
        return cli_usage_error("cdi", "%s", e.msg);
    if (args.help) {
        fputs(cdi_usage, stdout);
        return CLI_OK;
    }
    if (config_load(&cfg, &args, NULL, &e) < 0)
        return cli_fail("cdi", &e, NULL);
    cli_simulator_quiet();
    struct nvml n;
    struct gpu_inventory inv;
    const char *sim = cfg.simulate[0] ? cfg.simulate : NULL;
    const char *lib = cfg.nvml_path[0] ? cfg.nvml_path : NULL;
    char hint[200];
    if (nvml_start(&n, sim, lib, &e) < 0 || gpu_inventory_build(&n, &inv, &e) < 0)
        return cdi_fail(&e, cli_no_gpu_hint("cdi generate", !sim && !lib, hint, sizeof hint), &n,
                        NULL);
    struct driver drv;
    if (config_driver(&cfg, NULL, inv.driver_version, &drv, &e) < 0)
        return cdi_fail(&e, NULL, &n, &inv);
    struct strbuf text = {0};
    int rc = cdi_spec_text(&inv, &drv, &cfg, !strcmp(format, "yaml"), &text, &e);
    driver_free(&drv);
    if (rc == 0 && file && strcmp(file, "-")) {
        FILE *f = fopen(file, "w");
        if (!f || fwrite(text.data, 1, text.len, f) != text.len || fclose(f) != 0) {
            snprintf(e.msg, sizeof e.msg, "cannot write %s: %m", file);
            rc = -1;
        }
    } else if (rc == 0) {
        fwrite(text.data, 1, text.len, stdout);
    }
    strbuf_free(&text);
    if (rc < 0)
        return cdi_fail(&e, NULL, &n, &inv);
    gpu_inventory_free(&inv);
    nvml_close(&n);
    return CLI_OK;
}
