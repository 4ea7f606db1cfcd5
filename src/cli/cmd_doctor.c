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
    "  Agent options (gpulet agent --help) say where things are and which strategy\n"
    "  is used: --kubelet-root, --nvidia-driver-root, --device-list-strategy,\n"
    "  --status-socket, --kubeconfig, --node-name, --simulate, ...\n";

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

int cmd_doctor(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(doctor_usage, stdout);
            return CLI_OK;
        }
    }
    const char *root = "/", *format = "text", *timeout = "5000";
    if (doctor_take(&argc, argv, &root, &format, &timeout) != 0)
        return DOCTOR_EXIT_USAGE;
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
    if (config_parse_args(&args, argc, argv, &e) < 0 || config_load(&cfg, &args, NULL, &e) < 0)
        return doctor_usage_error("%s", e.msg);
    struct doctor_options o = {.cfg = &cfg, .timeout_ms = (unsigned)ms};
    if (strlen(root) >= sizeof o.root)
        return doctor_usage_error("--root is too long: %s", root);
    strcpy(o.root, root);
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
