/* gpulet health: the running agent's view of GPU health, and the
 * operator's clear. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/cli.h"
#include "util/unixsock.h"
#include "gpu/health.h"
#include "migparted/migparted.h"
#include "nvml/nvml_abi.h"
#include "util/jsonx.h"
#include "util/opts.h"
#include "util/xmalloc.h"

static const char health_usage[] =
    "usage: gpulet health [-o table|wide|json] [--status-socket PATH] [clear GPU]\n"
    "  (no command)          each GPU's health as the agent sees it, with the reason, and\n"
    "                        each MIG device's (GPU:MIG) of a GPU in MIG mode\n"
    "  -o, --output FORMAT   table (default; also text); wide (also the last XID and since when, UTC);\n"
    "                        json\n"
    "  clear GPU             mark a GPU (index or UUID) healthy now, e.g. after fixing it\n"
    "                        by hand\n";

/* One GPU's or MIG device's health, as the agent said it. */
struct health_row {
    char at[24]; /* "3", or a MIG device's "GPU:MIG" as nvidia-smi -L numbers them */
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    struct gpu_health h;
};

static void health_since(const struct health_row *r, char *out, size_t len)
{
    gpu_health_time(r->h.reason == HEALTH_OK ? 0 : r->h.since_ms, out, len);
    if (!out[0])
        snprintf(out, len, "-");
}

static void health_table(const struct health_row *rows, unsigned n, bool wide)
{
    if (wide)
        printf("%-6s %-9s %-40s %-4s %-20s %s\n", "GPU", "HEALTH", "UUID", "XID", "SINCE", "REASON");
    else
        printf("%-6s %-9s %-40s %s\n", "GPU", "HEALTH", "UUID", "REASON");
    for (unsigned i = 0; i < n; i++) {
        char why[200], since[32], xid[16];
        gpu_health_describe(&rows[i].h, why, sizeof why);
        health_since(&rows[i], since, sizeof since);
        snprintf(xid, sizeof xid, "%u", rows[i].h.xid);
        if (wide)
            printf("%-6s %-9s %-40s %-4s %-20s %s\n", rows[i].at, gpu_health_name(&rows[i].h),
                   rows[i].uuid, rows[i].h.xid ? xid : "-", since, why[0] ? why : "-");
        else
            printf("%-6s %-9s %-40s %s\n", rows[i].at, gpu_health_name(&rows[i].h), rows[i].uuid,
                   why[0] ? why : "-");
    }
}

static void health_plain(const struct health_row *rows, unsigned n)
{
    health_table(rows, n, false);
}

static void health_wide(const struct health_row *rows, unsigned n)
{
    health_table(rows, n, true);
}

static void health_json(const struct health_row *rows, unsigned n)
{
    json_t *all = jsonx_ok(json_array());
    for (unsigned i = 0; i < n; i++) {
        char why[200], since[32];
        gpu_health_describe(&rows[i].h, why, sizeof why);
        health_since(&rows[i], since, sizeof since);
        json_t *o = jsonx_ok(json_object());
        jsonx_set(o, "gpu", jsonx_ok(json_string(rows[i].at)));
        jsonx_set(o, "uuid", jsonx_ok(json_string(rows[i].uuid)));
        jsonx_set(o, "health", jsonx_ok(json_string(gpu_health_name(&rows[i].h))));
        jsonx_set(o, "reason", jsonx_ok(json_string(gpu_health_reason_name(rows[i].h.reason))));
        jsonx_set(o, "detail", jsonx_ok(json_string(why)));
        if (rows[i].h.xid)
            jsonx_set(o, "xid", jsonx_ok(json_integer(rows[i].h.xid)));
        if (since[0] != '-')
            jsonx_set(o, "since", jsonx_ok(json_string(since)));
        jsonx_append(all, o);
    }
    struct strbuf text = {0};
    jsonx_dump(all, JSON_INDENT(2) | JSON_PRESERVE_ORDER, &text);
    json_decref(all);
    printf("%s\n", text.data);
    strbuf_free(&text);
}

/* Under the table: the MIG manager's layout where it waits or failed
 * (the status socket's "mig-config"), so that a GPU kept from its new
 * layout says why where its health is read. Nothing where it is off, has
 * no label, or applied the layout. */
static void health_mig_config(const char *socket)
{
    char reply[1024];
    struct err e;
    if (unixsock_request(socket, "mig-config\n", reply, sizeof reply, &e) < 0)
        return;
    char *state, *config, *why;
    migparted_state_split(reply, &state, &config, &why);
    if (strcmp(state, "pending") && strcmp(state, "failed"))
        return;
    printf("\nMIG config '%s' (the Node's nvidia.com/mig.config): %s%s%s\n", config, state,
           why[0] ? ": " : "", why);
}

static const struct {
    const char *name;
    void (*print)(const struct health_row *rows, unsigned n);
} health_formats[] = {{"table", health_plain}, {"text", health_plain}, /* as labels and doctor say */
                     {"wide", health_wide},   {"json", health_json}};

int cmd_health(int argc, char **argv)
{
    static const struct option opts[] = {
        {"status-socket", required_argument, NULL, 'S'},
        {"output", required_argument, NULL, 'o'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *socket = NULL, *format = "table";
    struct err e;
    if (opts_check_exact(argc, argv, "ho:", opts, &e) < 0)
        return cli_usage_error("health", "%s", e.msg);
    int c;
    opterr = 0;
    optind = 1;
    /* No "+": options may come after the command (`clear 3 --status-socket S`). */
    while ((c = getopt_long(argc, argv, "ho:", opts, NULL)) != -1) {
        switch (c) {
        case 'S': socket = optarg; break;
        case 'o': format = optarg; break;
        case 'h':
            fputs(health_usage, stdout);
            cli_status_socket_help(stdout);
            return CLI_OK;
        default: return cli_usage_error("health", "unknown or incomplete option '%s'", argv[optind - 1]);
        }
    }
    size_t f = 0;
    while (f < sizeof health_formats / sizeof *health_formats && strcmp(format, health_formats[f].name))
        f++;
    if (f == sizeof health_formats / sizeof *health_formats)
        return cli_usage_error("health", "output format must be table, wide or json, not '%s'", format);
    char line[256];
    int rest = argc - optind;
    if (rest == 0) {
        snprintf(line, sizeof line, "health\n");
    } else if (rest == 2 && !strcmp(argv[optind], "clear")) {
        if (strlen(argv[optind + 1]) > 128 || strpbrk(argv[optind + 1], " \t\r\n"))
            return cli_usage_error("health", "'%.64s' is not a GPU index or UUID", argv[optind + 1]);
        snprintf(line, sizeof line, "clear %s\n", argv[optind + 1]);
    } else {
        return cli_usage_error("health", "expected no command or 'clear GPU'");
    }
    char reply[16384], user[256];
    if (unixsock_request(cli_status_socket(socket, false, user, sizeof user), line, reply,
                         sizeof reply, &e) < 0) {
        fprintf(stderr, "gpulet health: %s%s\n", e.msg, cli_unreachable_hint(errno));
        return CLI_FAIL;
    }
    if (!strncmp(reply, "error: ", 7)) {
        fprintf(stderr, "gpulet health: %s", reply + 7);
        return CLI_FAIL;
    }
    if (rest) {
        fputs(reply, stdout);
        return CLI_OK;
    }
    /* A node without GPUs (failOnInitError=false): the agent says why. */
    if (!strncmp(reply, "no-gpu ", 7) && strcmp(format, "json")) {
        reply[strcspn(reply, "\n")] = '\0';
        printf("no GPU on this node: %s (fail-on-init-error is false)\n", reply + 7);
        return CLI_OK;
    }
    struct health_row *rows = NULL;
    unsigned n = 0, index;
    char *cursor = reply;
    int mig;
    struct health_row r;
    while (cli_health_next(&cursor, &index, &mig, r.uuid, sizeof r.uuid, &r.h)) {
        if (mig >= 0)
            snprintf(r.at, sizeof r.at, "%u:%d", index, mig);
        else
            snprintf(r.at, sizeof r.at, "%u", index);
        rows = xrealloc(rows, (n + 1) * sizeof *rows);
        rows[n++] = r;
    }
    health_formats[f].print(rows, n);
    free(rows);
    if (strcmp(format, "json"))
        health_mig_config(cli_status_socket(socket, false, user, sizeof user));
    return CLI_OK;
}
