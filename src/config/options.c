/* The options: one row each (flag, variable, file key, type, default,
 * help), and config_set, which every source (flags, environment, the v1
 * file) goes through. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config/internal.h"
#include "util/log.h"
#include "util/strbuf.h"

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
static const char *const layout_choices[] = {"system", "nvidia", NULL}; /* enum driver_layout */
static const char *const dra_choices[] = {"off", "all", NULL};           /* enum config_dra */
static const char *const discovery_choices[] = {"auto", "nvml", NULL};  /* NVIDIA's, less tegra */
static const char *const in_use_choices[] = {"wait", "fail", NULL};     /* enum config_mig_in_use */

#define S(field) offsetof(struct config, field), sizeof(((struct config *)0)->field)
#define F(field) offsetof(struct config, field), 0

const struct config_opt config_options[] = {
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
    {"take-over", "GPULET_TAKE_OVER", NULL, T_BOOL, F(take_over), NULL, "false",
     "where another gpulet agent serves this node (a DaemonSet's rolling update with maxSurge), "
     "ask it to hand over and serve in its place; else refuse to start", NULL, NULL},
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
    {"driver-layout", "GPULET_DRIVER_LAYOUT", NULL, T_ENUM, F(driver_layout), layout_choices,
     "system", "where containers get the driver's files: system (also the image's own library "
     "directories and /usr/bin: any image) or nvidia (/usr/local/nvidia only)", NULL, NULL},
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
    {"mig-parted-config", "GPULET_MIG_PARTED_CONFIG", NULL, T_STRING, S(mig_parted_config), NULL, "",
     "the GPU Operator's MIG manager, built in: a mig-parted config file (its ConfigMap, mounted); "
     "the Node's label nvidia.com/mig.config names the layout to apply", "FILE", NULL},
    {"mig-config-in-use", "GPULET_MIG_CONFIG_IN_USE", NULL, T_ENUM, F(mig_config_in_use), in_use_choices,
     "wait", "a GPU a pod or a process uses when its layout should change: wait (pending) until it is "
     "free, or fail the layout at once", NULL, NULL},
    {"proc-root", "GPULET_PROC_ROOT", NULL, T_STRING, S(proc_root), NULL, "/proc",
     "the host's /proc, where processes are placed in pods (needs the host's PID namespace)", "PATH", NULL},
    {"container-log-dir", "GPULET_CONTAINER_LOG_DIR", NULL, T_STRING, S(container_log_dir), NULL,
     "/var/log/containers", "the kubelet's container log links, which name containers by ID", "PATH", NULL},
    {"labels", "GPULET_LABELS", NULL, T_ENUM, F(labels_output), labels_choices, "auto",
     "node labels to: api (the Node object), file (NFD), none; auto: api in a cluster", NULL, NULL},
    {"output-file", "GFD_OUTPUT_FILE", "flags.gfd.outputFile", T_STRING, S(output_file), NULL,
     "/etc/kubernetes/node-feature-discovery/features.d/gfd", "the NFD feature file (--labels file, --oneshot); also -o",
     "PATH", "features.d/gfd"},
    {"keep-labels-file", "GPULET_KEEP_LABELS_FILE", NULL, T_BOOL, F(keep_labels_file), NULL,
     "false", "leave the feature file in place on exit", NULL, NULL},
    {"machine-type-file", "GFD_MACHINE_TYPE_FILE", "flags.gfd.machineTypeFile", T_STRING,
     S(machine_type_file), NULL, "/sys/class/dmi/id/product_name",
     "file with the machine's product name (nvidia.com/gpu.machine)", "PATH", NULL},
    {"use-node-feature-api", "GFD_USE_NODE_FEATURE_API", "flags.useNodeFeatureAPI", T_BOOL,
     F(use_node_feature_api), NULL, "false",
     "GFD's: true puts the labels on the Node (--labels api; gpulet writes them itself, no NFD "
     "NodeFeature needed), false in the NFD feature file (--labels file); --labels wins", NULL, NULL},
    {"no-timestamp", "GFD_NO_TIMESTAMP", "flags.gfd.noTimestamp", T_BOOL, F(no_timestamp), NULL,
     "true", "leave out nvidia.com/gfd.timestamp (false: add it, a write per change)", NULL, NULL},
    {"accelerator-label", "GPULET_ACCELERATOR_LABEL", NULL, T_STRING, S(accelerator_label), NULL,
     "accelerator", "key of the GKE-style accelerator label; none: leave it out", "KEY", NULL},
    {"kubeconfig", "KUBECONFIG", NULL, T_STRING, S(kubeconfig), NULL, "",
     "kubeconfig for the API server (default: the pod's service account)", "PATH", NULL},
    {"node-name", "NODE_NAME", NULL, T_STRING, S(node_name), NULL, "",
     "the Node whose labels gpulet keeps (--labels api)", "NAME", NULL},
    {"dra", "GPULET_DRA", "flags.dra", T_ENUM, F(dra), dra_choices, "off",
     "serve the GPUs through Dynamic Resource Allocation (driver " "gpu.nvidia.com" ", Kubernetes "
     "1.32+): off, or all (then no device plugin serves them)", NULL, NULL},
    {"dra-gpus", "GPULET_DRA_GPUS", "flags.draGpus", T_STRING, S(dra_gpus), NULL, "*",
     "with --dra all, the GPUs DRA serves: a comma list of product-name globs, indexes, index "
     "ranges (0-3) and UUIDs; the device plugin serves the rest", "LIST", NULL},
    {"dra-shares", "GPULET_DRA_SHARES", "flags.draShares", T_STRING, S(dra_shares), NULL, "",
     "with --dra all, the GPUs published for shares (Kubernetes 1.34+: consumable capacity, "
     "memory and compute, each claim's share enforced by MPS), as --dra-gpus lists GPUs; "
     "default: none", "LIST", NULL},
    {"dra-mig", "GPULET_DRA_MIG", "flags.draMig", T_STRING, S(dra_mig), NULL, "",
     "with --dra all, the GPUs in MIG mode whose MIG devices are made per claim (Kubernetes "
     "1.35+: partitionable devices; every placement of every profile published, the instance "
     "made at prepare and destroyed at unprepare), as --dra-gpus lists GPUs; default: none",
     "LIST", NULL},
    {"dra-evict-on", "GPULET_DRA_EVICT_ON", "flags.draEvictOn", T_STRING, S(dra_evict_on), NULL, "",
     "the faults whose device taints are NoExecute (the pods using the device are evicted), as "
     "--fault-taint-on lists them; the rest are NoSchedule. Default: none", "LIST", NULL},
    {"kubelet-registry-dir", "GPULET_KUBELET_REGISTRY_DIR", NULL, T_STRING, S(kubelet_registry_dir),
     NULL, "", "the kubelet's plugin registration directory (default: <kubelet-root>/plugins_registry)",
     "PATH", NULL},
    {"dra-plugin-dir", "GPULET_DRA_PLUGIN_DIR", NULL, T_STRING, S(dra_plugin_dir), NULL, "",
     "the DRA plugin's socket and checkpoint (default: <kubelet-root>/plugins/gpu.nvidia.com)",
     "PATH", NULL},
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
    /* NVIDIA's device plugin's and GFD's, taken so that their DaemonSets'
     * arguments run unchanged (docs/device-plugin.md, "Flags"). */
    {"kubelet-socket", "KUBELET_SOCKET", NULL, T_STRING, S(kubelet_socket), NULL, "",
     "the kubelet's device plugin socket, as NVIDIA's plugin takes it: sets --kubelet-root to "
     "the directory above device-plugins/", "PATH", NULL},
    {"nvidia-cdi-hook-path", "NVIDIA_CDI_HOOK_PATH", "flags.plugin.nvidiaCTKPath", T_STRING,
     S(cdi_hook_path), NULL, "/usr/bin/nvidia-ctk",
     "NVIDIA's CDI hook; taken, not needed: gpulet's CDI specs run no hook", "PATH", NULL},
    {"device-discovery-strategy", "DEVICE_DISCOVERY_STRATEGY", "flags.deviceDiscoveryStrategy",
     T_ENUM, F(discovery), discovery_choices, "auto",
     "how GPUs are found: auto or nvml, both NVML (Tegra is not supported)", NULL, NULL},
    {"imex-channel-ids", "IMEX_CHANNEL_IDS", NULL, T_STRING, S(imex_channel_ids), NULL, "",
     "IMEX channels to inject: not supported yet, only none", "ID[,ID...]", NULL},
    {"imex-required", "IMEX_REQUIRED", NULL, T_BOOL, F(imex_required), NULL, "false",
     "fail when the IMEX channels are missing (none are injected)", NULL, NULL},
    {"oneshot", "GFD_ONESHOT", "flags.gfd.oneshot", T_BOOL, F(oneshot), NULL, "false",
     "label once and exit, as GFD's: the labels written to --output-file, no daemon", NULL, NULL},
    {"sleep-interval", "GFD_SLEEP_INTERVAL", "flags.gfd.sleepInterval", T_STRING,
     S(sleep_interval), NULL, "60s",
     "GFD's relabel period; taken, not needed: the agent relabels when anything changes",
     "DURATION", NULL},
};
#define NOPTS (sizeof config_options / sizeof *config_options)
const size_t config_noptions = NOPTS;
_Static_assert(NOPTS <= CONFIG_OPTIONS_MAX, "more options than config_args and the given mask hold");

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

/* NVIDIA's other names of an option's flag. */
const struct config_alias config_aliases[] = {
    {"driver-root", "nvidia-driver-root"},
    {"dev-root", "nvidia-dev-root"},
    {"nvidia-ctk-path", "nvidia-cdi-hook-path"},
    {"driver-root-ctr-path", "container-driver-root"},
    {"output", "output-file"},
};
const size_t config_naliases = sizeof config_aliases / sizeof *config_aliases;

/* Options NVIDIA reads from more than one variable: the first set wins, in
 * NVIDIA's order (GFD's own variables before the device plugin's). */
const struct config_env_list config_env_lists[] = {
    {"mig-strategy", {"GFD_MIG_STRATEGY", "MIG_STRATEGY"}},
    {"fail-on-init-error", {"GFD_FAIL_ON_INIT_ERROR", "FAIL_ON_INIT_ERROR"}},
    {"config-file", {"GFD_CONFIG_FILE", "CONFIG_FILE"}},
    {"use-node-feature-api", {"GFD_USE_NODE_FEATURE_API", "USE_NODE_FEATURE_API"}},
    {"nvidia-cdi-hook-path", {"NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"}},
    {"container-driver-root", {"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"}},
};
const size_t config_nenv_lists = sizeof config_env_lists / sizeof *config_env_lists;

/* Options gpulet takes from NVIDIA's DaemonSets but needs no value of: why,
 * logged once when one is given (config_log_unneeded). */
static const struct {
    const char *flag;
    const char *why;
} config_unneeded[] = {
    {"nvidia-cdi-hook-path", "gpulet's CDI specs run no hook"},
    {"imex-required", "gpulet injects no IMEX channels"},
    {"sleep-interval", "the agent relabels when anything changes"},
};

void config_log_unneeded(const struct config *c)
{
    for (size_t i = 0; i < sizeof config_unneeded / sizeof *config_unneeded; i++)
        for (size_t j = 0; j < config_noptions; j++)
            if (c->given[j] && !strcmp(config_options[j].flag, config_unneeded[i].flag))
                log_info("--%s taken, not needed: %s", config_unneeded[i].flag,
                         config_unneeded[i].why);
}

const char *const config_bool_words[12] = {"1", "t", "T", "TRUE", "true", "True",
                                           "0", "f", "F", "FALSE", "false", "False"};

/* The whole numbers with bounds, checked where they are set, so that an
 * error names the flag, variable or file key that gave the value. */
static const struct {
    const char *flag;
    unsigned long min, max;
    const char *why;
} config_ranges[] = {
    {"health-probe-ms", 1, 1000000000UL, NULL},
    {"hang-seconds", 1, 3600, NULL},
    {"metrics-interval-ms", 100, 3600000, NULL},
    {"pod-resources-interval-ms", 1000, 1000000000UL, " (the kubelet rate-limits PodResources)"},
};

static int config_uint(const struct config_opt *o, const char *value, const char *where,
                       unsigned *out, struct err *e)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(value, &end, 10);
    if (end == value || *end || value[0] == '-' || value[0] == '+')
        return err_set(e, "%s must be a whole number, not '%s'", where, value);
    unsigned long min = 0, max = 1000000000UL;
    const char *why = "";
    for (size_t i = 0; i < sizeof config_ranges / sizeof *config_ranges; i++)
        if (!strcmp(config_ranges[i].flag, o->flag)) {
            min = config_ranges[i].min;
            max = config_ranges[i].max;
            why = config_ranges[i].why ? config_ranges[i].why : "";
        }
    if (errno || v < min || v > max)
        return err_set(e, "%s is out of range: from %lu to %lu%s, not '%s'", where, min, max, why,
                       value);
    *out = (unsigned)v;
    return 0;
}

int config_set(struct config *c, const struct config_opt *o, const char *value,
               const char *where, struct err *e)
{
    char *field = (char *)c + o->offset;
    c->given[o - config_options] = true;
    switch (o->type) {
    case T_BOOL:
        /* Go's strconv.ParseBool, which NVIDIA's flags and variables go
         * through; the file's YAML booleans arrive as true or false. */
        for (size_t i = 0; i < sizeof config_bool_words / sizeof *config_bool_words; i++) {
            if (!strcmp(value, config_bool_words[i])) {
                *(bool *)field = i < sizeof config_bool_words / sizeof *config_bool_words / 2;
                return 0;
            }
        }
        return err_set(e, "%s must be true or false, not '%s'", where, value);
    case T_STRING:
        if (strlen(value) >= o->size)
            return err_set(e, "%s is longer than %zu characters", where, o->size - 1);
        strcpy(field, value);
        return 0;
    case T_UINT:
        return config_uint(o, value, where, (unsigned *)field, e);
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

/* One option's value as its flag takes it: the inverse of config_set. */
static void config_value_text(const struct config *c, const struct config_opt *o, struct strbuf *out)
{
    const char *field = (const char *)c + o->offset;
    switch (o->type) {
    case T_BOOL: strbuf_puts(out, *(const bool *)field ? "true" : "false"); return;
    case T_STRING: strbuf_puts(out, field); return;
    case T_UINT: strbuf_printf(out, "%u", *(const unsigned *)field); return;
    case T_ENUM: strbuf_puts(out, o->choices[*(const int *)field]); return;
    case T_LIST: {
        const char *sep = "";
        for (int i = 0; o->choices[i]; i++)
            if (*(const unsigned *)field & (1u << i)) {
                strbuf_printf(out, "%s%s", sep, o->choices[i]);
                sep = ",";
            }
        return;
    }
    }
}

void config_args_text(const struct config *c, struct strbuf *out)
{
    for (size_t i = 0; i < config_noptions; i++) {
        const struct config_opt *o = &config_options[i];
        /* An empty string whose default is empty is the default: said
         * nothing, as --kubelet-socket= would mean "never register". */
        if (o->type == T_STRING && !o->def[0] && !((const char *)c + o->offset)[0])
            continue;
        strbuf_printf(out, "--%s=", config_options[i].flag);
        config_value_text(c, &config_options[i], out);
        strbuf_puts(out, "\n");
    }
}
