/* gpulet doctor: checks the node, on the host or in the gpulet pod (with
 * --root the host's filesystem), and exits with the worst result. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "config/config.h"
#include "doctor/doctor.h"

/* Exit codes: the worst result (0 all passed, 1 a warning, 2 a failure),
 * and 3 when the command line or the root is wrong. */
#define DOCTOR_EXIT_USAGE 3

static const char doctor_usage[] =
    "usage: gpulet doctor [--root PATH] [-o text|json] [--timeout-ms N] [AGENT OPTIONS]\n"
    "  Checks the node in order: the kernel module and library versions, device\n"
    "  nodes, nvidia-uvm, NVML and every GPU, retired pages and remapped rows, XIDs\n"
    "  in the kernel log, persistence, the NVSwitch fabric, MIG, the container\n"
    "  runtime and CDI spec for the strategy, the kubelet's sockets, gpulet's\n"
    "  registration, and the Node's labels and allocatable. Each gets PASS, WARN,\n"
    "  FAIL (with a fix) or SKIP. Exit: 0 all passed, 1 a warning, 2 a failure,\n"
    "  3 a bad command line.\n"
    "  --root PATH       the host's filesystem (in the gpulet pod: /driver-root) [/]\n"
    "  -o, --output FMT  text (default) or json\n"
    "  --timeout-ms N    time limit of each check [5000]\n"
    "  Without agent options it checks what the running agent runs with (its flags,\n"
    "  variables, file and the named config it applied), asked over its status\n"
    "  socket (the node's agent, else your simulated one; --status-socket names\n"
    "  another). Agent options (gpulet agent --help) say instead where things are\n"
    "  and which strategy is used: --kubelet-root, --nvidia-driver-root,\n"
    "  --device-list-strategy, --kubeconfig, --node-name, --simulate, ...\n";

static int doctor_usage_error(const char *fmt, const char *arg)
{
    fputs("gpulet doctor: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs(" (see gpulet doctor --help)\n", stderr);
    return DOCTOR_EXIT_USAGE;
}

/* Takes doctor's own options out of argv; the rest are the agent's. */
static int doctor_take(int *argc, char **argv, const char **root, const char **format,
                       const char **timeout)
{
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--root")                            ? root
                            : !strcmp(a, "-o") || !strcmp(a, "--output")     ? format
                            : !strcmp(a, "--timeout-ms")                     ? timeout
                                                                             : NULL;
        if (slot) {
            if (i + 1 >= *argc)
                return doctor_usage_error("%s needs a value", a);
            *slot = argv[++i];
        } else {
            argv[out++] = argv[i];
        }
    }
    *argc = out;
    return 0;
}

/* The running agent's configuration (its "config" answer: one flag a line,
 * then "named NAME" and that config's text): 1 with cfg loaded from it, 0
 * where no agent answers (cfg untouched), -1 with why in e. */
static int doctor_agent_config(const char *root, const char *socket_flag, struct config *cfg,
                               struct err *e)
{
    /* Under --root where it is the host's: where the checks look for it. */
    char user[256], socket[CONFIG_PATH_MAX * 2];
    const char *path = cli_status_socket(socket_flag, false, user, sizeof user);
    snprintf(socket, sizeof socket, "%s%s", strcmp(root, "/") && path[0] == '/' ? root : "", path);
    struct strbuf answer = {0};
    int asked = cli_agent_ask("doctor", socket, "config", &answer);
    if (asked <= 0)
        return asked;
    char *argv[CONFIG_OPTIONS_MAX + 2] = {"doctor"}, *line = answer.data, *named = NULL;
    int argc = 1;
    while (*line && !named) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        if (!strncmp(line, "named ", 6))
            named = line + 6;
        else if (argc < CONFIG_OPTIONS_MAX + 1)
            argv[argc++] = line;
        line = nl ? nl + 1 : line + strlen(line);
    }
    struct config_args args;
    struct config_text text = {named, "the agent's named config", line, strlen(line)};
    int rc = config_parse_args(&args, argc, argv, e) < 0 ||
             config_load(cfg, &args, named ? &text : NULL, e) < 0 ? -1 : 1;
    strbuf_free(&answer);
    return rc;
}

int cmd_doctor(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(doctor_usage, stdout);
            return CLI_OK;
        }
    }
    const char *root = NULL, *format = "text", *timeout = "5000";
    if (doctor_take(&argc, argv, &root, &format, &timeout) != 0)
        return DOCTOR_EXIT_USAGE;
    bool root_given = root != NULL;
    if (!root)
        root = "/";
    if (strcmp(format, "text") && strcmp(format, "json"))
        return doctor_usage_error("-o must be text or json, not '%s'", format);
    char *end;
    unsigned long ms = strtoul(timeout, &end, 10);
    if (!*timeout || *end || ms < 10 || ms > 600000)
        return doctor_usage_error("--timeout-ms must be from 10 to 600000, not '%s'", timeout);
    struct stat st;
    if (stat(root, &st) < 0 || !S_ISDIR(st.st_mode) || access(root, R_OK | X_OK) < 0)
        return doctor_usage_error("--root %s is not a readable directory", root);
    struct config_args args;
    struct config cfg;
    struct err e;
    if (config_parse_args(&args, argc, argv, &e) < 0)
        return doctor_usage_error("%s", e.msg);
    int agent = config_args_only(&args, "status-socket")
                    ? doctor_agent_config(root, config_arg(&args, "status-socket"), &cfg, &e) : 0;
    if (agent < 0) {
        fprintf(stderr, "gpulet doctor: the running agent's configuration: %s\n", e.msg);
        return DOCTOR_EXIT_USAGE;
    }
    if (!agent && config_load(&cfg, &args, NULL, &e) < 0)
        return doctor_usage_error("%s", e.msg);
    /* The same flags find the same agent: a simulated node (no --root) is
     * the user's, its paths in the user's directory, as the agent's are. */
    if (!agent && !root_given)
        config_user_paths(&cfg);
    struct doctor_options o = {.cfg = &cfg, .timeout_ms = (unsigned)ms, .root_given = root_given};
    if (strlen(root) >= sizeof o.root)
        return doctor_usage_error("--root is too long: %s", root);
    strcpy(o.root, root);
    /* Its simulator, where it opens one, is its own: the control socket
     * (gpulet sim) stays the agent's. */
    cli_simulator_quiet();
    struct doctor_report rep;
    doctor_run(&o, &rep);
    if (!strcmp(format, "json")) {
        struct strbuf text = {0};
        doctor_report_json(&rep, root, &text);
        fwrite(text.data, 1, text.len, stdout);
        strbuf_free(&text);
    } else {
        doctor_report_text(&rep, root, stdout);
    }
    int code = rep.worst == DOCTOR_FAIL ? 2 : rep.worst == DOCTOR_WARN ? 1 : 0;
    bool abandoned = rep.abandoned;
    doctor_report_free(&rep);
    if (abandoned) {
        /* A check is still blocked in the driver: leave without waiting. */
        fflush(stdout);
        _exit(code);
    }
    return code;
}
