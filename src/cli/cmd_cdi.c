/* gpulet cdi generate: the CDI spec the agent keeps in --cdi-spec-dir,
 * printed or written to a file: without options the running agent's own,
 * else made from the options given, as the agent makes it. */
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
    "  Without options: the running agent's spec (the node's agent, else your\n"
    "  simulated one; --status-socket names another). Every `gpulet agent` option\n"
    "  applies (--simulate, --nvidia-driver-root, --nvidia-dev-root,\n"
    "  --driver-capabilities, ...; see gpulet agent --help): the spec they make.\n";

static int cdi_fail(const struct err *e, const char *hint, struct nvml *n,
                    struct gpu_inventory *inv)
{
    if (inv)
        gpu_inventory_free(inv);
    nvml_close(n);
    return cli_fail("cdi", e, hint);
}

/* Writes the spec to file (NULL or "-": standard output) and frees it. */
static int cdi_output(const char *file, struct strbuf *text)
{
    int rc = CLI_OK;
    if (file && strcmp(file, "-")) {
        FILE *f = fopen(file, "w");
        bool ok = f && fwrite(text->data, 1, text->len, f) == text->len;
        if ((f && fclose(f) != 0) || !ok) {
            fprintf(stderr, "gpulet cdi: cannot write %s: %m\n", file);
            rc = CLI_FAIL;
        }
    } else {
        fwrite(text->data, 1, text->len, stdout);
    }
    strbuf_free(text);
    return rc;
}

int cmd_cdi(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error("cdi", "expected a command: generate");
    if (strcmp(argv[1], "generate") && strcmp(argv[1], "--help") && strcmp(argv[1], "-h"))
        return cli_usage_error("cdi", "unknown command '%s' (the one command is generate)", argv[1]);
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
    if (args.version)
        return cli_version();
    if (args.help) {
        fputs(cdi_usage, stdout);
        return CLI_OK;
    }
    struct strbuf text = {0};
    int rc = 0;
    if (config_args_only(&args, "status-socket")) { /* the running agent's own */
        char request[32];
        snprintf(request, sizeof request, "cdi %s", format);
        rc = cli_agent_ask("cdi", config_arg(&args, "status-socket"), request, &text);
        /* Mounts are the driver's files (a device node has no containerPath). */
        if (rc > 0 && !strstr(text.data ? text.data : "", "containerPath"))
            fprintf(stderr, "gpulet cdi: the agent's spec has no driver files (it found no driver: "
                            "its log says where it looked); containers get the GPUs' device "
                            "nodes only\n");
        if (rc != 0)
            return rc > 0 ? cdi_output(file, &text) : CLI_FAIL;
    }
    if (config_load(&cfg, &args, NULL, &e) < 0)
        return cli_fail("cdi", &e, NULL);
    struct nvml n;
    struct gpu_inventory inv;
    rc = cli_open("cdi", "cdi generate", &cfg, &n, &inv);
    if (rc != CLI_OK)
        return rc;
    const char *sim = cfg.simulate[0] ? cfg.simulate : NULL;
    struct driver drv;
    if (config_driver(&cfg, NULL, inv.driver_version, &drv, &e) < 0)
        return cdi_fail(&e, sim ? "; simulated GPUs have no driver here: write a stand-in tree with "
                                  "`gpulet sim driver-root DIR` and give --nvidia-driver-root DIR"
                                : NULL, &n, &inv);
    rc = cdi_spec_text(&inv, &drv, &cfg, !strcmp(format, "yaml"), &text, &e);
    driver_free(&drv);
    gpu_inventory_free(&inv);
    nvml_close(&n);
    if (rc < 0) {
        strbuf_free(&text);
        return cli_fail("cdi", &e, NULL);
    }
    return cdi_output(file, &text);
}
