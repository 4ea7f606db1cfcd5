/* gpulet agent: the node daemon. It owns one libuv loop; today it reads the
 * inventory and reports GPU health events as they arrive. The device
 * plugin and metrics endpoints attach to this loop. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "cli/cli.h"
#include "gpu/inventory.h"
#include "gpu/render.h"
#include "gpu/watch.h"
#include "util/log.h"

static const char agent_usage[] =
    "usage: gpulet agent [--simulate PRESET|FILE] [--nvml PATH] [--log-level LEVEL]\n"
    "  --simulate SPEC     run on simulated GPUs: a preset name or a scenario file\n"
    "  --nvml PATH         load NVML from PATH instead of the driver's usual places\n"
    "  --log-level LEVEL   debug, info (default), warn or error\n";

struct agent {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    struct nvml nvml;
    struct gpu_inventory inv;
    struct gpu_watch watch;
};

static void agent_on_event(void *ctx, const struct gpu_event *ev)
{
    struct agent *a = ctx;
    if (ev->rc != NVML_SUCCESS) {
        log_warn("NVML event wait: %s", nvml_strerror(&a->nvml, ev->rc));
        return;
    }
    const char *uuid = ev->gpu < a->inv.count ? a->inv.gpus[ev->gpu].uuid : "unknown";
    if (ev->type & nvmlEventTypeXidCriticalError)
        log_warn("GPU %d (%s): XID %llu", (int)ev->gpu, uuid, ev->data);
    else if (ev->type & nvmlEventTypeDoubleBitEccError)
        log_warn("GPU %d (%s): double-bit ECC error", (int)ev->gpu, uuid);
}

static void agent_on_signal(uv_signal_t *s, int signum)
{
    log_info("received %s, stopping", signum == SIGINT ? "SIGINT" : "SIGTERM");
    uv_stop(s->loop);
}

static int agent_parse(int argc, char **argv, struct cli_nvml_opts *no)
{
    static const struct option opts[] = {
        {"simulate", required_argument, NULL, 's'}, {"nvml", required_argument, NULL, 'n'},
        {"log-level", required_argument, NULL, 'l'}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static const char *const levels[] = {"debug", "info", "warn", "error"};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 's': no->simulate = optarg; break;
        case 'n': no->nvml_path = optarg; break;
        case 'l': {
            int found = -1;
            for (int i = 0; i < 4; i++)
                if (!strcmp(optarg, levels[i]))
                    found = i;
            if (found < 0)
                return cli_usage_error("agent", "log level must be debug, info, warn or error, "
                                                "not '%s'", optarg);
            log_set_level((enum log_level)found);
            break;
        }
        case 'h': fputs(agent_usage, stdout); return -1;
        default: return cli_usage_error("agent", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("agent", "unexpected argument '%s'", argv[optind]);
    if (no->simulate && no->nvml_path)
        return cli_usage_error("agent", "--simulate and --nvml cannot be combined");
    return CLI_OK;
}

static void agent_log_inventory(const struct agent *a)
{
    const struct gpu_inventory *inv = &a->inv;
    log_info("NVML %s (driver %s, CUDA %d.%d) from %s: %u GPU(s)", inv->nvml_version,
             inv->driver_version, inv->cuda_version / 1000, inv->cuda_version % 1000 / 10,
             inv->library, inv->count);
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        log_info("GPU %u: %s %s bus %s NUMA %d %s%s%s", g->index, g->uuid, g->name, g->pci_bus_id,
                 g->numa_node, gpu_render_health(g), g->problem[0] ? ": " : "", g->problem);
    }
}

int cmd_agent(int argc, char **argv)
{
    struct cli_nvml_opts no = {0};
    int rc = agent_parse(argc, argv, &no);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    static struct agent a; /* the agent's one struct: all of its state */
    memset(&a, 0, sizeof a);
    struct err e;
    double t0 = nvml_clock_ms();
    if (cli_nvml_start(&no, &a.nvml, &e) < 0) {
        log_error("%s", e.msg);
        return CLI_FAIL;
    }
    double t_nvml = nvml_clock_ms();
    if (gpu_inventory_build(&a.nvml, &a.inv, &e) < 0) {
        log_error("%s", e.msg);
        nvml_close(&a.nvml);
        return CLI_FAIL;
    }
    double t_inv = nvml_clock_ms();
    agent_log_inventory(&a);
    log_info("start-up: NVML load %.1f ms, nvmlInit %.1f ms, inventory %.1f ms, total %.1f ms",
             a.nvml.load_ms, a.nvml.init_ms, t_inv - t_nvml, t_inv - t0);
    uv_loop_init(&a.loop);
    if (gpu_watch_start(&a.watch, &a.loop, &a.nvml, &a.inv, agent_on_event, &a, &e) < 0)
        log_warn("%s", e.msg);
    uv_signal_init(&a.loop, &a.sigint);
    uv_signal_init(&a.loop, &a.sigterm);
    uv_signal_start(&a.sigint, agent_on_signal, SIGINT);
    uv_signal_start(&a.sigterm, agent_on_signal, SIGTERM);
    log_info("agent running; stop with SIGINT or SIGTERM");
    uv_run(&a.loop, UV_RUN_DEFAULT);

    gpu_watch_stop(&a.watch);
    uv_close((uv_handle_t *)&a.sigint, NULL);
    uv_close((uv_handle_t *)&a.sigterm, NULL);
    uv_run(&a.loop, UV_RUN_DEFAULT); /* let the close callbacks run */
    uv_loop_close(&a.loop);
    gpu_inventory_free(&a.inv);
    nvml_close(&a.nvml);
    log_info("agent stopped");
    return CLI_OK;
}
