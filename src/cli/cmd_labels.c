/* gpulet labels: the node labels the agent publishes. Without options, the
 * running agent's own where one answers; else computed the same way from
 * the options given (the agent's flags, file and environment), with the
 * running agent's health when one answers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "config/config.h"
#include "labels/labels.h"
#include "labels/publish.h"
#include "plugin/plugin.h"
#include "util/xmalloc.h"

static const char labels_usage[] =
    "usage: gpulet labels [-o text|json] [AGENT OPTIONS]\n"
    "  -o, --output FORMAT   text (key=value lines, as NFD's feature file; default) or json\n"
    "  Without options: the labels of the running agent (the node's, else your\n"
    "  simulated one; --status-socket names another). Every `gpulet agent` option\n"
    "  applies (--simulate, --config-file, --mig-strategy, --machine-type-file,\n"
    "  --accelerator-label, ...; see gpulet agent --help): the labels they make.\n";

/* The node's labels as the agent would publish them from cfg, as text
 * (NFD's feature file) or JSON, into out: CLI_OK, or the failure said. */
static int labels_make(const char *cmd, struct config *cfg, bool json, struct strbuf *out)
{
    struct err e;
    struct nvml n;
    struct gpu_inventory inv;
    int rc = cli_open(cmd, "labels", cfg, &n, &inv);
    if (rc != CLI_OK)
        return rc;
    bool absent; /* none (a VM, a container): the label says 'unknown', no more */
    char *machine = labels_read_machine(cfg->machine_type_file, &absent, &e);
    if (!machine && !absent)
        fprintf(stderr, "gpulet %s: %s; nvidia.com/gpu.machine is 'unknown'\n", cmd, e.msg);
    struct gpu_device *devs = gpu_devices_new(&inv, 0);
    /* Sharing and per-model resources move labels: the agent's assignment. */
    struct plugin_resource *res;
    unsigned nres;
    if (plugin_resources(cfg, &inv, &res, &nres, &e) < 0) {
        fprintf(stderr, "gpulet %s: %s\n", cmd, e.msg);
        rc = CLI_FAIL;
    } else {
        plugin_resources_apply(res, nres, devs, inv.count);
        plugin_resources_free(res, nres);
        cli_agent_health(cfg->status_socket, &inv, devs, cmd);
        struct label_set set = {0};
        const struct labels_input in = {&inv, devs, cfg, machine, (long long)time(NULL), NULL};
        labels_build(&in, &set);
        if (json)
            label_set_json(&set, out);
        else
            label_set_text(&set, out);
        label_set_free(&set);
    }
    free(devs);
    free(machine);
    gpu_inventory_free(&inv);
    nvml_close(&n);
    return rc;
}

int cmd_labels(int argc, char **argv)
{
    const char *format = "text";
    const struct cli_own_opt own[] = {{"-o", "--output", &format}};
    if (cli_take_own("labels", &argc, argv, own, 1) != 0)
        return CLI_USAGE;
    if (strcmp(format, "text") && strcmp(format, "json"))
        return cli_usage_error("labels", "output format must be text or json, not '%s'", format);
    struct config_args args;
    struct config cfg;
    struct err e;
    if (config_parse_args(&args, argc, argv, &e) < 0)
        return cli_usage_error("labels", "%s", e.msg);
    if (args.version)
        return cli_version();
    if (args.help) {
        fputs(labels_usage, stdout);
        return CLI_OK;
    }
    char request[32];
    snprintf(request, sizeof request, "labels %s", format);
    int shown = config_args_only(&args, "status-socket")
                    ? cli_agent_print("labels", config_arg(&args, "status-socket"), request) : -1;
    if (shown >= 0)
        return shown; /* the running agent's own */
    if (config_load(&cfg, &args, NULL, &e) < 0)
        return cli_fail("labels", &e, NULL);
    config_user_paths(&cfg); /* a simulated agent's status socket */
    struct strbuf out = {0};
    int rc = labels_make("labels", &cfg, !strcmp(format, "json"), &out);
    if (rc == CLI_OK)
        fputs(out.data ? out.data : "", stdout);
    strbuf_free(&out);
    return rc;
}

int cli_labels_oneshot(struct config *cfg)
{
    struct strbuf out = {0};
    struct err e;
    config_user_paths(cfg);
    int rc = labels_make("agent", cfg, false, &out);
    if (rc == CLI_OK && labels_file_write_now(cfg->output_file, out.data ? out.data : "", out.len,
                                              &e) < 0)
        rc = cli_fail("agent", &e, NULL);
    else if (rc == CLI_OK)
        fprintf(stderr, "gpulet agent: --oneshot: the labels are in %s\n", cfg->output_file);
    strbuf_free(&out);
    return rc;
}
