/* gpulet replace-nvidia: what makes NVIDIA's DaemonSets leave the nodes
 * labelled for gpulet (docs/deploy.md, "Node by node"): for one DaemonSet
 * its JSON patch, for several (a namespace's, all) the kubectl commands
 * for NVIDIA's. Reads them as kubectl prints them, in JSON or YAML. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "replace/replace.h"
#include "util/opts.h"
#include "util/strbuf.h"

#define REPLACE_MAX_INPUT (4u << 20) /* a DaemonSet is a few KiB */

static const char replace_usage[] =
    "usage: gpulet replace-nvidia [-f FILE] [--label KEY=VALUE]\n"
    "  Reads DaemonSets as kubectl prints them (-o yaml or -o json) and prints what keeps\n"
    "  NVIDIA's off nodes labelled " REPLACE_LABEL_KEY "=" REPLACE_LABEL_VALUE ": the\n"
    "  requirement goes into each of a DaemonSet's node affinity terms (they are ORed),\n"
    "  or becomes its one term; each patch tests first that the terms are those read.\n"
    "  - Several (kubectl -n NS get ds -o yaml, or get ds -A): a kubectl patch command\n"
    "    for each of NVIDIA's (device plugin, GFD, MPS control daemon, dcgm-exporter,\n"
    "    found by image or chart label, whatever the release is called); pipe it to sh.\n"
    "    Which were patched or left alone goes to standard error.\n"
    "  - One (kubectl get ds NAME -o json): its JSON patch, for kubectl patch daemonset\n"
    "    NAME --type json -p \"$(...)\". \"[]\": nothing to do.\n"
    "  -f, --file FILE       the DaemonSets (default: standard input)\n"
    "  --label KEY=VALUE     the label of the nodes to leave [" REPLACE_LABEL_KEY "="
    REPLACE_LABEL_VALUE "]\n";

static int replace_read(FILE *f, const char *name, struct strbuf *in)
{
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        if (in->len + n > REPLACE_MAX_INPUT) {
            fprintf(stderr, "gpulet replace-nvidia: %s is over %u MiB: not a DaemonSet\n", name,
                    REPLACE_MAX_INPUT >> 20);
            return CLI_FAIL;
        }
        strbuf_append(in, buf, n);
    }
    if (ferror(f)) {
        fprintf(stderr, "gpulet replace-nvidia: reading %s: %s\n", name, strerror(errno));
        return CLI_FAIL;
    }
    return CLI_OK;
}

int cmd_replace(int argc, char **argv)
{
    static const struct option opts[] = {
        {"file", required_argument, NULL, 'f'},
        {"label", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *file = NULL, *label = REPLACE_LABEL_KEY "=" REPLACE_LABEL_VALUE;
    struct err e;
    if (opts_check_exact(argc, argv, "f:h", opts, &e) < 0)
        return cli_usage_error("replace-nvidia", "%s", e.msg);
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "f:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f': file = optarg; break;
        case 'l': label = optarg; break;
        case 'h': fputs(replace_usage, stdout); return CLI_OK;
        default:
            return cli_usage_error("replace-nvidia", "unknown or incomplete option '%s'",
                                   argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error("replace-nvidia", "unexpected argument '%s'", argv[optind]);
    const char *eq = strchr(label, '=');
    if (!eq || eq == label || strlen(label) > 320)
        return cli_usage_error("replace-nvidia", "--label must be KEY=VALUE, not '%.64s'", label);
    char key[320];
    snprintf(key, sizeof key, "%.*s", (int)(eq - label), label);

    FILE *f = file && strcmp(file, "-") ? fopen(file, "r") : stdin;
    if (!f) {
        fprintf(stderr, "gpulet replace-nvidia: cannot open %s: %s\n", file, strerror(errno));
        return CLI_FAIL;
    }
    struct strbuf in = {0}, out = {0}, notes = {0};
    int rc = replace_read(f, file ? file : "standard input", &in);
    if (f != stdin)
        fclose(f);
    if (rc == CLI_OK &&
        replace_nvidia(in.data ? in.data : "", in.len, key, eq + 1, &out, &notes, &e) < 0) {
        fprintf(stderr, "gpulet replace-nvidia: %s: %s\n", file ? file : "standard input", e.msg);
        rc = CLI_FAIL;
    }
    if (rc == CLI_OK) {
        fputs(out.data ? out.data : "", stdout);
        for (char *line = notes.data, *nl; line && *line; line = nl + 1) {
            nl = strchr(line, '\n');
            fprintf(stderr, "gpulet replace-nvidia: %.*s\n", (int)(nl - line), line);
        }
    }
    strbuf_free(&in);
    strbuf_free(&out);
    strbuf_free(&notes);
    return rc;
}
