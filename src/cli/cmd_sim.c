/* gpulet sim: fault injection into a process running the simulated NVML,
 * plus the built-in presets. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "util/unixsock.h"
#include "driver/driver.h"
#include "nvml/nvml.h"
#include "sim/control.h"
#include "sim/scenario.h"
#include "util/strbuf.h"
#include "util/xmalloc.h"

static const char sim_usage[] =
    "usage: gpulet sim COMMAND [ARGS]\n"
    "Fault injection into a process that has the simulator loaded (gpulet agent\n"
    "--simulate, or any NVML program with GPULET_SIM_SCENARIO). GPU is an index or a UUID.\n"
    "  xid GPU XID [GI]        deliver an XID event through the NVML event API, in GPU\n"
    "                          instance GI where given (XID 79 also loses the GPU)\n"
    "  ecc GPU                 a double-bit ECC error (counter, event, XID 48)\n"
    "  lose GPU                the GPU falls off the bus (XID 79, calls fail GPU_IS_LOST)\n"
    "  hang GPU                calls on the GPU and its MIG instances block until it is\n"
    "                          recovered (a hung GPU)\n"
    "  mig GPU PROFILE,...|none  a new MIG layout on a GPU with MIG on, as mig-parted makes\n"
    "  mig GPU                 its GPU instances: profile@start, ID, MIG UUID\n"
    "  recover GPU             GPU reset: answers again, volatile counters zeroed,\n"
    "                          pending retirements, remaps and MIG mode applied\n"
    "  set GPU FIELD=VALUE...  pin a live value (or FIELD=auto), or set a counter, or a\n"
    "                          node-check fault (persistence.off, pages.pending,\n"
    "                          rows.pending, rows.failure, mig.pending, fabric.down: 0 or 1)\n"
    "  proc GPU add PID MEM_MIB [SM%]  a process on the GPU, as NVML lists them\n"
    "  proc GPU del PID | proc GPU clear\n"
    "  ping                    check the simulator answers\n"
    "Presets and scenarios:\n"
    "  presets                 list the built-in presets\n"
    "  show PRESET             print a preset's YAML (a starting point for a scenario)\n"
    "  check FILE              validate a scenario file\n"
    "A stand-in driver for containers without the toolkit:\n"
    "  driver-root DIR [VERSION]  write a driver tree of that shape under DIR (default\n"
    "                          version 580.159.04, the presets' driver); its NVML is\n"
    "                          the simulator (GPULET_SIM_SCENARIO picks the GPUs)\n";

static int sim_send(int argc, char **argv)
{
    struct strbuf line = {0};
    for (int i = 0; i < argc; i++)
        strbuf_printf(&line, "%s%s", i ? " " : "", argv[i]);
    strbuf_puts(&line, "\n");
    char reply[1024], path[512];
    struct err e;
    sim_control_path(path, sizeof path);
    int rc = unixsock_request(path, line.data, reply, sizeof reply, &e);
    strbuf_free(&line);
    if (rc < 0) {
        fprintf(stderr, "gpulet sim: %s (is a process running with --simulate?)\n", e.msg);
        return CLI_FAIL;
    }
    if (strncmp(reply, "ok", 2) != 0) {
        fprintf(stderr, "gpulet sim: %s", reply[0] ? reply : "no answer from the simulator\n");
        return CLI_FAIL;
    }
    fputs(reply, stdout);
    return CLI_OK;
}

/* The commands the simulator answers, with what they take: checked here,
 * so that a bad line is a usage error (exit 2) before the socket is
 * dialled; what the arguments mean, the simulator checks. */
static const struct sim_command {
    const char *name;
    int min, max;         /* arguments after the command; max -1: any */
    unsigned numbers;     /* bit k: argument k is a number */
    const char *args;
} sim_remote[] = {
    {"xid", 2, 3, 0x6, "GPU XID [GI]"},
    {"ecc", 1, 1, 0, "GPU"},
    {"lose", 1, 1, 0, "GPU"},
    {"hang", 1, 1, 0, "GPU"},
    {"mig", 1, 2, 0, "GPU [PROFILE,...|none]"},
    {"recover", 1, 1, 0, "GPU"},
    {"set", 2, -1, 0, "GPU FIELD=VALUE..."},
    {"proc", 2, 5, 0, "GPU add PID MEM_MIB [SM%] | GPU del PID | GPU clear"},
    {"ping", 0, 0, 0, ""},
};

/* True (and said) when args do not fit c. */
static bool sim_check(const struct sim_command *c, int n, char **args)
{
    if (n < c->min || (c->max >= 0 && n > c->max)) {
        cli_usage_error("sim", "%s takes %s", c->name, c->args[0] ? c->args : "no arguments");
        return true;
    }
    for (int k = 0; k < n; k++) {
        char *end;
        if (c->numbers >> k & 1 && (strtoul(args[k], &end, 10), end == args[k] || *end)) {
            cli_usage_error("sim", "%s: '%s' is not a number: %s takes %s", c->name, args[k], c->name,
                            c->args);
            return true;
        }
    }
    return false;
}

static bool sim_wants_help(const char *arg)
{
    return !strcmp(arg, "--help") || !strcmp(arg, "-h") || !strcmp(arg, "help");
}

static void sim_help(FILE *out)
{
    char path[512];
    fputs(sim_usage, out);
    sim_control_path(path, sizeof path);
    fprintf(out, "The control socket: %s (GPULET_SIM_CONTROL names another; off: none).\n", path);
}

static int sim_unknown_preset(const char *name)
{
    fprintf(stderr, "gpulet sim: unknown preset '%s'; the presets are:\n", name);
    for (size_t i = 0; sim_preset_names[i]; i++)
        fprintf(stderr, "  %s\n", sim_preset_names[i]);
    return CLI_USAGE;
}

int cmd_sim(int argc, char **argv)
{
    /* Help anywhere in the line: `gpulet sim xid --help` must not dial the socket. */
    for (int i = 1; i < argc; i++) {
        if (sim_wants_help(argv[i]) && (i == 1 || argv[i][0] == '-')) {
            sim_help(stdout);
            return CLI_OK;
        }
    }
    if (argc < 2) {
        sim_help(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "presets")) {
        for (size_t i = 0; sim_preset_names[i]; i++)
            puts(sim_preset_names[i]);
        return CLI_OK;
    }
    if (!strcmp(cmd, "show") || !strcmp(cmd, "check")) {
        if (argc != 3)
            return cli_usage_error("sim", "%s needs exactly one argument", cmd);
        if (!strcmp(cmd, "show")) {
            const char *text = sim_preset_text(argv[2]);
            if (!text)
                return sim_unknown_preset(argv[2]);
            fputs(text, stdout);
            return CLI_OK;
        }
        struct scenario *sc = xmalloc(sizeof *sc);
        struct err e;
        int rc = CLI_OK;
        if (scenario_load(argv[2], sc, &e) < 0) {
            fprintf(stderr, "gpulet sim: %s\n", e.msg);
            rc = CLI_FAIL;
        } else {
            printf("%s: %u GPUs, driver %s\n", sc->name, sc->count, sc->driver_version);
        }
        free(sc);
        return rc;
    }
    if (!strcmp(cmd, "driver-root")) {
        if (argc < 3 || argc > 4)
            return cli_usage_error("sim", "driver-root needs DIR [VERSION]");
        struct err e;
        char sim[PATH_MAX];
        if (nvml_find_sim(sim, sizeof sim, &e) < 0 ||
            driver_write_stub_tree(argv[2], argc == 4 ? argv[3] : "580.159.04", sim, &e) < 0)
            return fprintf(stderr, "gpulet sim: %s\n", e.msg), CLI_FAIL;
        return CLI_OK;
    }
    for (size_t i = 0; i < sizeof sim_remote / sizeof *sim_remote; i++)
        if (!strcmp(cmd, sim_remote[i].name))
            return sim_check(&sim_remote[i], argc - 2, argv + 2) ? CLI_USAGE
                                                                 : sim_send(argc - 1, argv + 1);
    return cli_usage_error("sim", "unknown command '%s'", cmd);
}
