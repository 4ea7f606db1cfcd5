#include "config/config.h"
#include "driver/driver.h"
#include "gpu/health.h"
#include "config/internal.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/dirs.h"
#include "util/log.h"
#include "util/opts.h"
#include "util/strbuf.h"
#include "util/ydoc.h"

enum config_type { T_BOOL, T_STRING, T_ENUM, T_LIST, T_UINT };

struct config_opt {
    const char *flag;           /* without "--" */
    const char *env;            /* NULL: no variable */
    const char *key;            /* path in the v1 file; NULL: not in the file */
    enum config_type type;
    size_t offset;
    size_t size;                /* for T_STRING */
    const char *const *choices; /* T_ENUM values by index; T_LIST names by bit */
    const char *def;
    const char *help;
    const char *meta;           /* T_STRING: what the value is, for --help */
    const char *user_name;      /* with --simulate and not given: this name in the user's
                                 * own directory (dirs_user), never a node's path */
};

static const char *const mig_choices[] = {"none", "single", "mixed", NULL};
static const char *const id_choices[] = {"uuid", "index", NULL};
static const char *const list_choices[] = {"envvar", "volume-mounts", "cdi-annotations",
                                           "cdi-cri", "driver-mounts", NULL};
static const char *const cdi_write_choices[] = {"auto", "true", "false", NULL};
static const char *const compute_choices[] = {"keep", "exclusive-process", NULL};
static const char *const policy_choices[] = {"distributed", "packed", NULL};
static const char *const labels_choices[] = {"auto", "none", "file", "api", NULL};
static const char *const level_choices[] = {"debug", "info", "warn", "error", NULL};
static const char *const report_choices[] = {"auto", "none", NULL};

#define S(field) offsetof(struct config, field), sizeof(((struct config *)0)->field)
#define F(field) offsetof(struct config, field), 0

static const struct config_opt options[] = {
    {"mig-strategy", "MIG_STRATEGY", "flags.migStrategy", T_ENUM, F(mig_strategy), mig_choices,
     "none", "MIG strategy: none, single or mixed", NULL, NULL},
    {"fail-on-init-error", "FAIL_ON_INIT_ERROR", "flags.failOnInitError", T_BOOL,
     F(fail_on_init_error), NULL, "true", "exit when NVML cannot start (else idle)", NULL, NULL},
    {"nvidia-driver-root", "NVIDIA_DRIVER_ROOT", "flags.nvidiaDriverRoot", T_STRING,
     S(driver_root), NULL, "/", "root of the driver installation on the host", "PATH", NULL},
    {"container-driver-root", "CONTAINER_DRIVER_ROOT", "flags.plugin.containerDriverRoot", T_STRING,
     S(container_driver_root), NULL, "",
     "where gpulet's container mounts the driver root (default: the driver root itself)", "PATH", NULL},
    {"nvidia-dev-root", "NVIDIA_DEV_ROOT", "flags.nvidiaDevRoot", T_STRING, S(dev_root), NULL,
     "", "root of the /dev nodes on the host (default: the driver root)", "PATH", NULL},
    {"pass-device-specs", "PASS_DEVICE_SPECS", "flags.plugin.passDeviceSpecs", T_BOOL,
     F(pass_device_specs), NULL, "false", "also return /dev nodes in Allocate", NULL, NULL},
    {"device-list-strategy", "DEVICE_LIST_STRATEGY", "flags.plugin.deviceListStrategy", T_LIST,
     F(list_strategy), list_choices, "envvar",
     "comma list of envvar, volume-mounts, cdi-annotations, cdi-cri, driver-mounts", NULL, NULL},
    {"device-id-strategy", "DEVICE_ID_STRATEGY", "flags.plugin.deviceIDStrategy", T_ENUM,
     F(id_strategy), id_choices, "uuid", "device IDs: uuid or index", NULL, NULL},
    {"shared-devices-allocation-policy", "SHARED_DEVICES_ALLOCATION_POLICY",
     "flags.plugin.sharedDevicesAllocationPolicy", T_ENUM, F(shared_policy), policy_choices,
     "distributed", "replicas of shared GPUs: distributed (spread) or packed", NULL, NULL},
    {"mps-root", "MPS_ROOT", "flags.mpsRoot", T_STRING, S(mps_root), NULL, "/run/nvidia/mps",
     "MPS pipe, log and shm directories (sharing.mps)", "PATH", "mps"},
    {"mps-control", "GPULET_MPS_CONTROL", NULL, T_STRING, S(mps_control), NULL, "",
     "nvidia-cuda-mps-control to run (default: the driver's)", "PATH", NULL},
    {"mps-compute-mode", "GPULET_MPS_COMPUTE_MODE", NULL, T_ENUM, F(mps_compute_mode),
     compute_choices, "keep", "keep, or set exclusive-process on MPS GPUs (restored on exit)", NULL, NULL},
    {"cdi-annotation-prefix", "CDI_ANNOTATION_PREFIX", "flags.plugin.cdiAnnotationPrefix",
     T_STRING, S(cdi_prefix), NULL, "cdi.k8s.io/", "key prefix of CDI annotations", "PREFIX", NULL},
    {"gds-enabled", "GDS_ENABLED", "flags.gdsEnabled", T_BOOL, F(gds), NULL, "false",
     "set NVIDIA_GDS=enabled", NULL, NULL},
    {"mofed-enabled", "MOFED_ENABLED", "flags.mofedEnabled", T_BOOL, F(mofed), NULL, "false",
     "set NVIDIA_MOFED=enabled", NULL, NULL},
    {"gdrcopy-enabled", "GDRCOPY_ENABLED", "flags.gdrcopyEnabled", T_BOOL, F(gdrcopy), NULL,
     "false", "set NVIDIA_GDRCOPY=enabled", NULL, NULL},
    {"config-file", "CONFIG_FILE", NULL, T_STRING, S(config_file), NULL, "",
     "NVIDIA-format (version: v1) YAML config file", "PATH", NULL},
    {"driver-capabilities", "GPULET_DRIVER_CAPABILITIES", NULL, T_STRING, S(driver_caps), NULL,
     "compute,utility", "driver files containers get: compute, utility, video, graphics, all", "LIST", NULL},
    {"cdi-spec-dir", "GPULET_CDI_SPEC_DIR", NULL, T_STRING, S(cdi_spec_dir), NULL, "/var/run/cdi",
     "where the agent keeps its CDI spec (" "nvidia.com-gpu.json)", "PATH", "cdi"},
    {"write-cdi-spec", "GPULET_WRITE_CDI_SPEC", NULL, T_ENUM, F(write_cdi_spec), cdi_write_choices,
     "auto", "keep a CDI spec in --cdi-spec-dir; auto: with a cdi-* device list strategy", NULL, NULL},
    {"kubelet-root", "GPULET_KUBELET_ROOT", NULL, T_STRING, S(kubelet_root), NULL,
     "/var/lib/kubelet", "the kubelet's root directory", "PATH", "kubelet"},
    {"simulate", "GPULET_SIMULATE", NULL, T_STRING, S(simulate), NULL, "",
     "run on simulated GPUs: a preset name or a scenario file", "PRESET|FILE", NULL},
    {"nvml", "GPULET_NVML", NULL, T_STRING, S(nvml_path), NULL, "",
     "load NVML from this file instead of the driver's usual places", "PATH", NULL},
    {"status-socket", "GPULET_STATUS_SOCKET", NULL, T_STRING, S(status_socket), NULL,
     "/run/gpulet/status.sock", "where `gpulet list` and `gpulet health` reach the agent", "PATH",
     "status.sock"},
    {"log-level", "GPULET_LOG_LEVEL", NULL, T_ENUM, F(log_level), level_choices, "info",
     "debug, info, warn or error", NULL, NULL},
    {"xid-recovery-seconds", "GPULET_XID_RECOVERY_SECONDS", NULL, T_UINT, F(xid_recovery_s),
     NULL, "300", "quiet seconds after which a GPU failed by an XID is healthy again; 0 never", NULL, NULL},
    {"health-probe-ms", "GPULET_HEALTH_PROBE_MS", NULL, T_UINT, F(probe_ms), NULL, "5000",
     "how often unhealthy GPUs are probed for recovery", NULL, NULL},
    {"hang-seconds", "GPULET_HANG_SECONDS", NULL, T_UINT, F(hang_s), NULL, "10",
     "an NVML call on a GPU that has not returned after this long makes it unhealthy (hung)",
     NULL, NULL},
    {"no-metrics", "GPULET_NO_METRICS", NULL, T_BOOL, F(no_metrics), NULL, "false",
     "serve no /metrics endpoint (true/false)", NULL, NULL},
    {"metrics-listen", "DCGM_EXPORTER_LISTEN", NULL, T_STRING, S(metrics_listen), NULL, ":9400",
     "address of /metrics, /healthz, /readyz", "[HOST]:PORT", NULL},
    {"web-config-file", "DCGM_EXPORTER_WEB_CONFIG_FILE", NULL, T_STRING, S(web_config_file), NULL,
     "", "exporter-toolkit web config: TLS and basic auth for /metrics (docs/metrics.md)", "PATH", NULL},
    {"collectors", "DCGM_EXPORTER_COLLECTORS", NULL, T_STRING, S(collectors), NULL, "",
     "dcgm-exporter collectors CSV (default: its default counters)", "PATH", NULL},
    {"metrics-interval-ms", "DCGM_EXPORTER_INTERVAL", NULL, T_UINT, F(metrics_interval_ms), NULL,
     "1000", "how often every GPU is sampled", NULL, NULL},
    {"pod-resources-kubelet-socket", "DCGM_POD_RESOURCES_KUBELET_SOCKET", NULL, T_STRING,
     S(pod_resources_socket), NULL, "",
     "PodResources socket (default: <kubelet-root>/pod-resources/kubelet.sock)", "PATH", NULL},
    {"pod-resources-interval-ms", "GPULET_POD_RESOURCES_INTERVAL_MS", NULL, T_UINT,
     F(pod_resources_interval_ms), NULL, "5000", "how often pod labels are refreshed", NULL, NULL},
    {"hostname", "GPULET_HOSTNAME", NULL, T_STRING, S(hostname), NULL, "",
     "the Hostname label (default: $NODE_NAME, else the host name)", "NAME", NULL},
    {"process-metrics", "GPULET_PROCESS_METRICS", NULL, T_BOOL, F(process_metrics), NULL, "true",
     "per-container GPU memory and utilization from the GPUs' process lists", NULL, NULL},
    {"proc-root", "GPULET_PROC_ROOT", NULL, T_STRING, S(proc_root), NULL, "/proc",
     "the host's /proc, where processes are placed in pods (needs the host's PID namespace)", "PATH", NULL},
    {"container-log-dir", "GPULET_CONTAINER_LOG_DIR", NULL, T_STRING, S(container_log_dir), NULL,
     "/var/log/containers", "the kubelet's container log links, which name containers by ID", "PATH", NULL},
    {"labels", "GPULET_LABELS", NULL, T_ENUM, F(labels_output), labels_choices, "auto",
     "node labels to: api (the Node object), file (NFD), none; auto: api in a cluster", NULL, NULL},
    {"output-file", "GFD_OUTPUT_FILE", "flags.gfd.outputFile", T_STRING, S(output_file), NULL,
     "/etc/kubernetes/node-feature-discovery/features.d/gfd", "the NFD feature file (--labels file)",
     "PATH", "features.d/gfd"},
    {"keep-labels-file", "GPULET_KEEP_LABELS_FILE", NULL, T_BOOL, F(keep_labels_file), NULL,
     "false", "leave the feature file in place on exit", NULL, NULL},
    {"machine-type-file", "GFD_MACHINE_TYPE_FILE", "flags.gfd.machineTypeFile", T_STRING,
     S(machine_type_file), NULL, "/sys/class/dmi/id/product_name",
     "file with the machine's product name (nvidia.com/gpu.machine)", "PATH", NULL},
    {"no-timestamp", "GFD_NO_TIMESTAMP", "flags.gfd.noTimestamp", T_BOOL, F(no_timestamp), NULL,
     "true", "leave out nvidia.com/gfd.timestamp (false: add it, a write per change)", NULL, NULL},
    {"accelerator-label", "GPULET_ACCELERATOR_LABEL", NULL, T_STRING, S(accelerator_label), NULL,
     "accelerator", "key of the GKE-style accelerator label; none: leave it out", "KEY", NULL},
    {"kubeconfig", "KUBECONFIG", NULL, T_STRING, S(kubeconfig), NULL, "",
     "kubeconfig for the API server (default: the pod's service account)", "PATH", NULL},
    {"node-name", "NODE_NAME", NULL, T_STRING, S(node_name), NULL, "",
     "the Node whose labels gpulet keeps (--labels api)", "NAME", NULL},
    {"fault-report", "GPULET_FAULT_REPORT", NULL, T_ENUM, F(fault_report), report_choices, "auto",
     "the Node condition GPUUnhealthy and GPU events: auto (with API server credentials and the "
     "Node's name) or none", NULL, NULL},
    {"fault-taint", "GPULET_FAULT_TAINT", NULL, T_BOOL, F(fault_taint), NULL, "false",
     "taint the Node NoSchedule (" "gpulet.io/gpu-fault" ") while a GPU has a fault of --fault-taint-on",
     NULL, NULL},
    {"fault-taint-on", "GPULET_FAULT_TAINT_ON", NULL, T_STRING, S(fault_taint_on), NULL,
     "79,74,95,119,120,140,lost,hung",
     "the faults that taint: XIDs, lost, hung, ecc (double-bit) or xid (any critical XID)", "LIST",
     NULL},
    {"config-map", "GPULET_CONFIG_MAP", NULL, T_STRING, S(config_map), NULL, "",
     "[namespace/]name of a ConfigMap of named configs, one chosen per node by --config-label",
     "[NAMESPACE/]NAME", NULL},
    {"default-config", "DEFAULT_CONFIG", NULL, T_STRING, S(default_config), NULL, "",
     "the named config for nodes without the label (default: 'default', or the only one)", "NAME", NULL},
    {"config-label", "NODE_LABEL", NULL, T_STRING, S(config_label), NULL,
     "nvidia.com/device-plugin.config", "the Node label whose value names the node's config", "KEY", NULL},
};
#define NOPTS (sizeof options / sizeof *options)
_Static_assert(NOPTS <= sizeof(((struct config_args *)0)->values) / sizeof(char *),
               "config_args too small");
_Static_assert(NOPTS <= 64, "struct config's given mask too small");

/* Keys NVIDIA's file may hold that concern other parts (GPU feature
 * discovery) or need nothing from gpulet: accepted and not acted on. */
static const char *const ignored_keys[] = {
    "flags.useNodeFeatureAPI", "flags.deviceDiscoveryStrategy", "flags.plugin.nvidiaCTKPath",
    "flags.plugin.containerDriverRoot", "flags.gfd.oneshot", "flags.gfd.sleepInterval", NULL,
};

/* "X must be one of a, b, c, not 'v'": the choices from the table. */
static int config_bad_choice(const struct config_opt *o, const char *where, const char *value,
                             struct err *e)
{
    struct strbuf list = {0};
    for (int i = 0; o->choices[i]; i++)
        strbuf_printf(&list, "%s%s", i ? ", " : "", o->choices[i]);
    err_set(e, "%s%s must be one of %s, not '%s'", where, o->type == T_LIST ? ": each" : "",
            list.data, value);
    strbuf_free(&list);
    return -1;
}

static int config_set(struct config *c, const struct config_opt *o, const char *value,
                      const char *where, struct err *e)
{
    char *field = (char *)c + o->offset;
    c->given |= 1ull << (o - options);
    char *end;
    switch (o->type) {
    case T_BOOL:
        if (!strcasecmp(value, "true") || !strcmp(value, "1"))
            *(bool *)field = true;
        else if (!strcasecmp(value, "false") || !strcmp(value, "0"))
            *(bool *)field = false;
        else
            return err_set(e, "%s must be true or false, not '%s'", where, value);
        return 0;
    case T_STRING:
        if (strlen(value) >= o->size)
            return err_set(e, "%s is longer than %zu characters", where, o->size - 1);
        strcpy(field, value);
        return 0;
    case T_UINT: {
        errno = 0;
        unsigned long v = strtoul(value, &end, 10);
        if (errno || end == value || *end || v > 1000000000UL || value[0] == '-')
            return err_set(e, "%s must be a whole number, not '%s'", where, value);
        *(unsigned *)field = (unsigned)v;
        return 0;
    }
    case T_ENUM:
        for (int i = 0; o->choices[i]; i++) {
            if (!strcmp(value, o->choices[i])) {
                *(int *)field = i;
                return 0;
            }
        }
        break;
    case T_LIST: {
        unsigned bits = 0;
        char buf[256];
        snprintf(buf, sizeof buf, "%s", value);
        char *save = NULL;
        for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
            int i = 0;
            while (o->choices[i] && strcmp(t, o->choices[i]))
                i++;
            if (!o->choices[i])
                return config_bad_choice(o, where, t, e);
            bits |= 1u << i;
        }
        if (!bits)
            return err_set(e, "%s must name at least one strategy", where);
        *(unsigned *)field = bits;
        return 0;
    }
    }
    return config_bad_choice(o, where, value, e);
}

/* --- the command line ------------------------------------------------------ */

/* A boolean flag given bare means true, as NVIDIA's flags do; "--flag false"
 * (the word as the next argument) still works, so it is taken when it is one. */
static const char *config_bool_word(int argc, char **argv)
{
    const char *words[] = {"true", "false", "1", "0"};
    if (optind < argc)
        for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
            if (!strcasecmp(argv[optind], words[i]))
                return argv[optind++];
    return "true";
}

int config_parse_args(struct config_args *a, int argc, char **argv, struct err *e)
{
    memset(a, 0, sizeof *a);
    struct option longopts[NOPTS + 2];
    for (size_t i = 0; i < NOPTS; i++) {
        int has_arg = options[i].type == T_BOOL ? optional_argument : required_argument;
        longopts[i] = (struct option){options[i].flag, has_arg, NULL, (int)(i + 1000)};
    }
    longopts[NOPTS] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[NOPTS + 1] = (struct option){NULL, 0, NULL, 0};
    if (opts_check_exact(argc, argv, "h", longopts, e) < 0)
        return -1;
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        if (c == 'h') {
            a->help = true;
            return 0;
        }
        if (c < 1000)
            return err_set(e, "unknown or incomplete option '%s'", argv[optind - 1]);
        a->values[c - 1000] = optarg ? optarg : config_bool_word(argc, argv);
    }
    if (optind < argc)
        return err_set(e, "unexpected argument '%s'", argv[optind]);
    /* Check each flag's value now, so a typo fails before anything starts. */
    struct config scratch;
    memset(&scratch, 0, sizeof scratch);
    char where[64];
    for (size_t i = 0; i < NOPTS; i++) {
        snprintf(where, sizeof where, "--%s", options[i].flag);
        if (a->values[i] && config_set(&scratch, &options[i], a->values[i], where, e) < 0)
            return -1;
    }
    return 0;
}

/* "--flag VALUE": the value as --help shows it. */
static const char *config_meta(const struct config_opt *o, char *buf, size_t len)
{
    struct strbuf list = {0};
    switch (o->type) {
    case T_BOOL: return "[=BOOL]";
    case T_UINT: return " N";
    case T_STRING: snprintf(buf, len, " %s", o->meta ? o->meta : "VALUE"); return buf;
    case T_LIST: return " NAME[,NAME...]";
    case T_ENUM:
        for (int i = 0; o->choices[i]; i++)
            strbuf_printf(&list, "%s%s", i ? "|" : "", o->choices[i]);
        snprintf(buf, len, " %s", list.data);
        strbuf_free(&list);
        return buf;
    }
    return "";
}

void config_usage(FILE *out)
{
    char user[256];
    dirs_user(user, sizeof user);
    fputs("usage: gpulet agent [OPTIONS]\n", out);
    for (size_t i = 0; i < NOPTS; i++) {
        const struct config_opt *o = &options[i];
        char meta[160], flag[200];
        snprintf(flag, sizeof flag, "--%s%s", o->flag, config_meta(o, meta, sizeof meta));
        fprintf(out, "  %s\n      %s", flag, o->help);
        if (o->def[0])
            fprintf(out, " [%s]", o->def);
        if (o->user_name)
            fprintf(out, " [with --simulate: %s/%s]", user, o->user_name);
        if (o->env || o->key)
            fprintf(out, " (%s%s%s%s)", o->env ? "env " : "", o->env ? o->env : "",
                    o->env && o->key ? ", file " : o->key ? "file " : "", o->key ? o->key : "");
        fputc('\n', out);
    }
    fputs("A BOOL is true or false: --no-metrics, --no-metrics=true and --no-metrics true mean\n"
          "the same; --no-metrics=false turns it off. An option may also be set by the\n"
          "environment variable named with it, or under the key named with it in the\n"
          "--config-file (NVIDIA's version: v1 format); a flag wins over the variable, which\n"
          "wins over the file.\n"
          "Also read from the environment: DP_DISABLE_HEALTHCHECKS, DP_ENABLE_HEALTHCHECKS.\n",
          out);
}

/* --- the file ---------------------------------------------------------------- */

static const struct config_opt *config_by_key(const char *key)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (options[i].key && !strcmp(options[i].key, key))
            return &options[i];
    return NULL;
}

static bool config_ignored(const char *key)
{
    for (size_t i = 0; ignored_keys[i]; i++)
        if (!strcmp(ignored_keys[i], key))
            return true;
    return false;
}

/* A scalar, or for deviceListStrategy also a list, as one string. */
static int config_file_value(struct ydoc *d, yaml_node_t *v, const char *key, char *out,
                             size_t len, struct err *e)
{
    if (v->type == YAML_SEQUENCE_NODE) {
        size_t n = 0;
        out[0] = '\0';
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
             it++) {
            const char *s;
            if (ydoc_scalar(d, ydoc_node(d, *it), key, &s, e) < 0)
                return -1;
            n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%s", n ? "," : "", s);
        }
        return 0;
    }
    const char *s;
    if (ydoc_scalar(d, v, key, &s, e) < 0)
        return -1;
    snprintf(out, len, "%s", s);
    return 0;
}

static int config_file_map(struct config *c, struct ydoc *d, yaml_node_t *map,
                           const char *prefix, struct err *e)
{
    if (map->type != YAML_MAPPING_NODE)
        return ydoc_error(d, map, e, "%s must be a mapping", prefix);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *kn = ydoc_node(d, p->key), *vn = ydoc_node(d, p->value);
        const char *k;
        if (ydoc_scalar(d, kn, "a key", &k, e) < 0)
            return -1;
        char key[160];
        snprintf(key, sizeof key, "%s.%s", prefix, k);
        if (!strcmp(key, "flags.plugin") || !strcmp(key, "flags.gfd")) {
            if (config_file_map(c, d, vn, key, e) < 0)
                return -1;
            continue;
        }
        const struct config_opt *o = config_by_key(key);
        if (!o && config_ignored(key))
            continue;
        if (!o)
            return ydoc_error(d, kn, e, "unknown key '%s'", key);
        if (o->type != T_LIST && vn->type == YAML_SEQUENCE_NODE)
            return ydoc_error(d, vn, e, "%s must be a single value", key);
        char value[256], where[CONFIG_PATH_MAX + 300];
        if (config_file_value(d, vn, key, value, sizeof value, e) < 0)
            return -1;
        snprintf(where, sizeof where, "%s:%zu:%zu: %s", d->source, vn->start_mark.line + 1,
                 vn->start_mark.column + 1, key);
        if (config_set(c, o, value, where, e) < 0)
            return -1;
    }
    return 0;
}

/* An empty value (null, [] or {}): a section left out. */
bool config_empty(const yaml_node_t *n)
{
    return (n->type == YAML_SCALAR_NODE && (!n->data.scalar.length ||
                                            !strcmp((char *)n->data.scalar.value, "null"))) ||
           (n->type == YAML_SEQUENCE_NODE && n->data.sequence.items.top == n->data.sequence.items.start) ||
           (n->type == YAML_MAPPING_NODE && n->data.mapping.pairs.top == n->data.mapping.pairs.start);
}

/* Applies a loaded v1 document over c. */
static int config_document(struct config *c, struct ydoc *d, struct err *e)
{
    static const char *const keys[] = {"version", "flags", "resources", "sharing", "imex", NULL};
    static const char *const unsupported[][2] = {
        {"imex", "IMEX channels are not supported yet: remove the imex section"},
    };
    yaml_node_t *root = ydoc_root(d);
    if (!root)
        return 0; /* an empty file changes nothing */
    if (ydoc_check_keys(d, root, "the config file", keys, e) < 0)
        return -1;
    yaml_node_t *n = ydoc_get(d, root, "version");
    const char *version = "v1";
    if (n && ydoc_scalar(d, n, "version", &version, e) < 0)
        return -1;
    if (strcmp(version, "v1") && *version)
        return ydoc_error(d, n, e, "version must be v1, not '%s'", version);
    for (size_t i = 0; i < 1; i++)
        if ((n = ydoc_get(d, root, unsupported[i][0])) && !config_empty(n))
            return ydoc_error(d, n, e, "%s", unsupported[i][1]);
    if ((n = ydoc_get(d, root, "resources")) && config_resources_section(c, d, n, e) < 0)
        return -1;
    if ((n = ydoc_get(d, root, "sharing")) && config_sharing_section(c, d, n, e) < 0)
        return -1;
    if ((n = ydoc_get(d, root, "flags")) && !config_empty(n))
        return config_file_map(c, d, n, "flags", e);
    return 0;
}

int config_apply_yaml(struct config *c, const char *source, const char *text, size_t len,
                      struct err *e)
{
    struct ydoc d;
    if (ydoc_load(&d, source, text, len, e) < 0)
        return -1;
    int rc = config_document(c, &d, e);
    ydoc_free(&d);
    return rc;
}

static int config_file(struct config *c, const char *path, struct err *e)
{
    struct ydoc d;
    if (ydoc_load_file(&d, path, e) < 0)
        return -1;
    int rc = config_document(c, &d, e);
    ydoc_free(&d);
    return rc;
}

/* --- putting it together ------------------------------------------------------ */

/* A label key as Kubernetes takes it: [prefix/]name, the name at most 63
 * characters of [A-Za-z0-9-_.] with alphanumeric ends. */
static bool config_label_key_ok(const char *key)
{
    const char *slash = strrchr(key, '/');
    const char *name = slash ? slash + 1 : key;
    size_t n = strlen(name);
    if (n == 0 || n > 63 || (slash && (slash == key || slash - key > 253)))
        return false;
    if (!isalnum((unsigned char)name[0]) || !isalnum((unsigned char)name[n - 1]))
        return false;
    for (const char *p = key; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr(p < name ? "-./" : "-_.", *p))
            return false;
    return true;
}

static int config_check(const struct config *c, struct err *e)
{
    if (c->sharing == CONFIG_SHARING_MPS && c->mig_strategy == CONFIG_MIG_MIXED)
        return err_set(e, "sharing.mps cannot be combined with MIG strategy mixed (MPS does not "
                          "run on MIG devices)");
    if (c->accelerator_label[0] && !config_label_key_ok(c->accelerator_label))
        return err_usage(e, "--accelerator-label '%s' is not a valid label key", c->accelerator_label);
    if (c->labels_output == CONFIG_LABELS_FILE && !c->output_file[0])
        return err_usage(e, "--labels file needs --output-file");
    if (c->config_map[0] && !c->node_name[0])
        return err_usage(e, "--config-map needs the Node's name: set NODE_NAME (from the downward "
                          "API, spec.nodeName) or --node-name");
    if (c->config_map[0] && !config_label_key_ok(c->config_label))
        return err_usage(e, "--config-label '%s' is not a valid label key", c->config_label);
    struct health_faults faults;
    if (health_faults_parse(&faults, "--fault-taint-on", c->fault_taint_on, e) < 0)
        return -1;
    if (c->labels_output == CONFIG_LABELS_API && !c->node_name[0])
        return err_usage(e, "--labels api needs the Node's name: set NODE_NAME (from the downward "
                          "API, spec.nodeName) or --node-name");
    return 0;
}

void config_user_paths(struct config *c)
{
    /* In a pod, a simulated node is a cluster's (a DaemonSet trying gpulet
     * without GPUs): it serves the kubelet at the node's paths. */
    const char *pod = getenv("KUBERNETES_SERVICE_HOST");
    if (!c->simulate[0] || (pod && *pod))
        return;
    for (size_t i = 0; i < NOPTS; i++) {
        const struct config_opt *o = &options[i];
        if (o->user_name && !(c->given & (1ull << i)))
            dirs_user_file(o->user_name, (char *)c + o->offset, o->size);
    }
}

/* A value set by a flag or an option's variable was wrong: the command
 * line's fault (exit 2), where a file's would be a failure (exit 1). */
static int config_usage_error(struct err *e)
{
    e->usage = true;
    return -1;
}

static size_t config_index(const char *flag)
{
    size_t i = 0;
    while (i < NOPTS && strcmp(options[i].flag, flag))
        i++;
    return i;
}

int config_load(struct config *c, const struct config_args *a, const struct config_text *named,
                struct err *e)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NOPTS; i++)
        if (config_set(c, &options[i], options[i].def, options[i].flag, e) < 0)
            return -1;
    c->given = 0;
    const char *file = a->values[config_index("config-file")];
    if (!file)
        file = getenv("CONFIG_FILE");
    if (named) {
        if (config_apply_yaml(c, named->source, named->text, named->len, e) < 0)
            return -1;
    } else if (file && *file) {
        if (config_file(c, file, e) < 0)
            return -1;
        snprintf(c->config_file, sizeof c->config_file, "%s", file);
    }
    char where[96];
    for (size_t i = 0; i < NOPTS; i++) {
        const char *v = options[i].env ? getenv(options[i].env) : NULL;
        snprintf(where, sizeof where, "environment variable %s", options[i].env ? options[i].env : "");
        if (v && *v && config_set(c, &options[i], v, where, e) < 0)
            return config_usage_error(e);
    }
    for (size_t i = 0; i < NOPTS; i++) {
        snprintf(where, sizeof where, "--%s", options[i].flag);
        if (a->values[i] && config_set(c, &options[i], a->values[i], where, e) < 0)
            return config_usage_error(e);
    }
    if (!c->dev_root[0])
        strcpy(c->dev_root, c->driver_root);
    /* In a container, NVML is the host's, under the mounted driver root. */
    if (!c->nvml_path[0] && !c->simulate[0] && c->container_driver_root[0] &&
        driver_find_library(c->container_driver_root, "libnvidia-ml.so.1", c->nvml_path,
                            sizeof c->nvml_path) < 0)
        c->nvml_path[0] = '\0';
    if (!strcmp(c->accelerator_label, "none"))
        c->accelerator_label[0] = '\0';
    if (config_check(c, e) < 0)
        return -1;
    if (c->probe_ms == 0)
        return err_usage(e, "--health-probe-ms must be at least 1");
    if (c->hang_s < 1 || c->hang_s > 3600)
        return err_usage(e, "--hang-seconds must be from 1 to 3600, not %u", c->hang_s);
    if (c->metrics_interval_ms < 100 || c->metrics_interval_ms > 3600000)
        return err_usage(e, "--metrics-interval-ms must be from 100 to 3600000, not %u",
                       c->metrics_interval_ms);
    if (c->pod_resources_interval_ms < 1000)
        return err_usage(e, "--pod-resources-interval-ms must be at least 1000 (the kubelet "
                          "rate-limits PodResources), not %u", c->pod_resources_interval_ms);
    unsigned caps;
    struct err ce;
    if (driver_parse_caps(c->driver_caps, &caps, &ce) < 0)
        return err_usage(e, "--driver-capabilities: %s", ce.msg);
    return 0;
}

bool config_cdi_wanted(const struct config *c)
{
    return c->write_cdi_spec == CONFIG_CDI_WRITE_TRUE ||
           (c->write_cdi_spec == CONFIG_CDI_WRITE_AUTO &&
            c->list_strategy & (CONFIG_LIST_CDI_ANNOTATIONS | CONFIG_LIST_CDI_CRI));
}

const char *config_read_root(const struct config *c, const char *host_root)
{
    return c->container_driver_root[0] && !strcmp(host_root, c->driver_root)
               ? c->container_driver_root : host_root;
}

void config_log(const struct config *c)
{
    struct strbuf lists = {0};
    for (int i = 0; list_choices[i]; i++)
        if (c->list_strategy & (1u << i))
            strbuf_printf(&lists, "%s%s", lists.len ? "," : "", list_choices[i]);
    log_info("config: migStrategy=%s failOnInitError=%s deviceListStrategy=%s "
             "deviceIDStrategy=%s passDeviceSpecs=%s nvidiaDriverRoot=%s nvidiaDevRoot=%s "
             "kubeletRoot=%s xidRecovery=%us labels=%s resourceRules=%u%s%s",
             mig_choices[c->mig_strategy], c->fail_on_init_error ? "true" : "false", lists.data,
             id_choices[c->id_strategy], c->pass_device_specs ? "true" : "false",
             c->driver_root, c->dev_root, c->kubelet_root, c->xid_recovery_s,
             labels_choices[c->labels_output], c->nresources,
             c->config_file[0] ? " file=" : "", c->config_file);
    strbuf_free(&lists);
}
