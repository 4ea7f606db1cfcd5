/* The agent's configuration, compatible with NVIDIA's device plugin: the
 * same flag names, environment variables and `version: v1` file. Sources
 * apply in NVIDIA's order: defaults, file, environment, flags. */
#ifndef GPULET_CONFIG_H
#define GPULET_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "gpu/sharing.h"
#include "util/err.h"
#include "util/strbuf.h"

#define CONFIG_PATH_MAX 256

enum config_mig { CONFIG_MIG_NONE, CONFIG_MIG_SINGLE, CONFIG_MIG_MIXED };
enum config_id { CONFIG_ID_UUID, CONFIG_ID_INDEX };
enum config_policy { CONFIG_POLICY_DISTRIBUTED, CONFIG_POLICY_PACKED };
enum config_compute_mode { CONFIG_COMPUTE_KEEP, CONFIG_COMPUTE_EXCLUSIVE };
/* Where node labels go: auto is api inside a cluster (or with a
 * kubeconfig), else none. */
enum config_labels { CONFIG_LABELS_AUTO, CONFIG_LABELS_NONE, CONFIG_LABELS_FILE, CONFIG_LABELS_API };
/* --dra: which GPUs Dynamic Resource Allocation serves (docs/dra.md). */
enum config_dra { CONFIG_DRA_OFF, CONFIG_DRA_ALL };
/* The Node condition and events of GPU faults: auto is on where labels
 * could go to the API server. */
enum config_report { CONFIG_REPORT_AUTO, CONFIG_REPORT_NONE };
enum config_mig_in_use { CONFIG_MIG_IN_USE_WAIT, CONFIG_MIG_IN_USE_FAIL };

#define CONFIG_MAX_RESOURCES 16

/* resources.gpus: GPUs whose product name matches pattern (a glob) are
 * advertised as nvidia.com/<name>. */
struct config_resource {
    char pattern[128];
    char name[64];                      /* without nvidia.com/ */
};

/* sharing: time-slicing or MPS (NVIDIA's sharing.timeSlicing / sharing.mps),
 * by enum gpu_sharing; its key in the config file's sharing section ("" for
 * none). */
extern const char *const config_sharing_keys[];
#define CONFIG_MAX_SHARED 16

/* One sharing.*.resources entry: the GPUs of resource name selected by
 * devices get replicas each, advertised as rename (or name.shared). */
struct config_shared {
    char name[80];                      /* full name: nvidia.com/gpu */
    char rename[80];                    /* full name; empty: the default */
    unsigned replicas;                  /* >= 2 */
    char devices[512];                  /* "all", a count ("2"), or a comma list of indexes/UUIDs */
    bool devices_listed;                /* devices is a list (a one-element list looks like a count) */
    /* MPS only (gpulet's keys): per-replica limits; 0: the GPU's share */
    unsigned long long memory_limit_mib;
    unsigned thread_percentage;
};

/* deviceListStrategy bits */
#define CONFIG_LIST_ENVVAR 1u
#define CONFIG_LIST_VOLUME_MOUNTS 2u
#define CONFIG_LIST_CDI_ANNOTATIONS 4u
#define CONFIG_LIST_CDI_CRI 8u
#define CONFIG_LIST_DRIVER_MOUNTS 16u   /* gpulet's direct injection */

enum config_cdi_write { CONFIG_CDI_WRITE_AUTO, CONFIG_CDI_WRITE_TRUE, CONFIG_CDI_WRITE_FALSE };

/* At most this many options (config_args, struct config's given). */
#define CONFIG_OPTIONS_MAX 96

struct config {
    /* NVIDIA-compatible */
    int mig_strategy;                   /* enum config_mig */
    bool fail_on_init_error;
    char driver_root[CONFIG_PATH_MAX];
    char dev_root[CONFIG_PATH_MAX];     /* empty: same as driver_root */
    char container_driver_root[CONFIG_PATH_MAX]; /* where gpulet reads driver_root; empty: there */
    bool pass_device_specs;
    unsigned list_strategy;             /* CONFIG_LIST_* bits */
    int id_strategy;                    /* enum config_id */
    char cdi_prefix[128];
    bool gds, mofed, gdrcopy;
    char config_file[CONFIG_PATH_MAX];
    struct config_resource resources[CONFIG_MAX_RESOURCES]; /* none: nvidia.com/gpu for all */
    unsigned nresources;
    enum gpu_sharing sharing;
    bool rename_by_default;             /* shared resources as <name>.shared */
    bool fail_requests_gt_one;          /* refuse >1 replica per container */
    struct config_shared shared[CONFIG_MAX_SHARED];
    unsigned nshared;
    int shared_policy;                  /* enum config_policy: replicas in a preferred allocation */
    char mps_root[CONFIG_PATH_MAX];     /* pipe, log and shm directories */
    char mps_control[CONFIG_PATH_MAX];  /* nvidia-cuda-mps-control; empty: searched for */
    int mps_compute_mode;               /* enum config_compute_mode */
    /* gpulet's own */
    char driver_caps[64];               /* driver capabilities containers get */
    unsigned driver_layout;             /* enum driver_layout: where they get them */
    char cdi_spec_dir[CONFIG_PATH_MAX]; /* where the agent keeps its CDI spec */
    int write_cdi_spec;                 /* enum config_cdi_write */
    char kubelet_root[CONFIG_PATH_MAX];
    char simulate[CONFIG_PATH_MAX];
    char nvml_path[CONFIG_PATH_MAX];
    char status_socket[CONFIG_PATH_MAX];
    int log_level;                      /* enum log_level */
    unsigned xid_recovery_s;            /* quiet period before an XID clears; 0 never */
    unsigned probe_ms;                  /* how often unhealthy GPUs are probed */
    unsigned hang_s;                    /* an NVML call this old makes its GPU hung */
    /* metrics (dcgm-exporter's variables where it has one) */
    bool no_metrics;
    bool take_over;                     /* --take-over: the running agent hands over */
    char metrics_listen[128];
    char web_config_file[CONFIG_PATH_MAX]; /* TLS and basic auth for /metrics */
    char collectors[CONFIG_PATH_MAX];
    unsigned metrics_interval_ms;
    char pod_resources_socket[CONFIG_PATH_MAX];
    unsigned pod_resources_interval_ms;
    char hostname[128];
    bool process_metrics;               /* per-container usage from NVML's process lists */
    char proc_root[CONFIG_PATH_MAX];    /* the host's /proc */
    char container_log_dir[CONFIG_PATH_MAX]; /* the kubelet's /var/log/containers */
    /* node labels (GPU feature discovery's flags where it has one) */
    int labels_output;                  /* enum config_labels */
    unsigned dra;                       /* enum config_dra */
    char dra_gpus[256];                 /* which GPUs, with CONFIG_DRA_ALL (config_dra_takes) */
    char dra_evict_on[256];             /* faults whose device taints are NoExecute */
    char dra_shares[256];               /* GPUs DRA publishes for shares (config_dra_shares) */
    char dra_mig[256];                  /* GPUs whose MIG devices DRA makes per claim */
    char kubelet_registry_dir[CONFIG_PATH_MAX];
    char dra_plugin_dir[CONFIG_PATH_MAX];
    char output_file[CONFIG_PATH_MAX];  /* the NFD local feature file */
    bool keep_labels_file;              /* leave the file behind on exit */
    char machine_type_file[CONFIG_PATH_MAX];
    char mig_parted_config[CONFIG_PATH_MAX]; /* the MIG manager's layouts; empty: off */
    int mig_config_in_use;              /* enum config_mig_in_use */
    bool no_timestamp;                  /* no nvidia.com/gfd.timestamp (the default) */
    bool use_node_feature_api;          /* GFD's: chooses --labels where --labels is not given */
    char accelerator_label[64];         /* the key; empty: no accelerator label */
    char kubeconfig[CONFIG_PATH_MAX];   /* empty: in-cluster credentials */
    char node_name[128];                /* the Node to label */
    /* GPU faults to the control plane (src/report) */
    int fault_report;                   /* enum config_report */
    bool fault_taint;                   /* taint the Node on the faults below */
    char fault_taint_on[256];           /* XIDs and lost, hung, ecc, xid */
    /* per-node configuration (NVIDIA's config-manager, built in) */
    char config_map[256];               /* [namespace/]name of the named configs; empty: off */
    char default_config[64];            /* the config for nodes without the label */
    char config_label[128];             /* the Node label that names a config */
    /* NVIDIA's flags that gpulet takes and needs no value of
     * (config_log_unneeded says so once), or whose value it checks */
    char kubelet_socket[CONFIG_PATH_MAX]; /* sets kubelet_root (config_load) */
    char cdi_hook_path[CONFIG_PATH_MAX];  /* gpulet's CDI specs run no hook */
    int discovery;                      /* auto or nvml: NVML either way */
    char imex_channel_ids[64];          /* none: IMEX is not supported */
    bool imex_required;
    bool oneshot;                       /* GFD's: label once and exit (cli_labels_oneshot) */
    char sleep_interval[32];            /* GFD's: the agent relabels on change */
    /* given[i]: option i was set by the file, environment or a flag, not by
     * its default */
    bool given[CONFIG_OPTIONS_MAX];
};

/* A config file's text that replaces --config-file: the named config the
 * node's label chose. source names it in errors. */
struct config_text {
    const char *name;                   /* the config's name */
    const char *source;
    const char *text;
    size_t len;
};

/* The command line as given, kept so SIGHUP can re-apply it over a new file. */
struct config_args {
    const char *values[CONFIG_OPTIONS_MAX]; /* per option; NULL when not given */
    bool help;
    bool version;                       /* --version, -v: as NVIDIA's binaries take it */
};

/* Parses `gpulet agent` flags (argv[0] is "agent"). */
int config_parse_args(struct config_args *a, int argc, char **argv, struct err *e);

/* Whether the command line gives no option but flag (NULL: none at all):
 * a command then shows the running agent's node rather than its own. */
bool config_args_only(const struct config_args *a, const char *flag);

/* The value the command line gives the option flag, or NULL. */
const char *config_arg(const struct config_args *a, const char *flag);

/* Builds the configuration: defaults, then the file (named, where not
 * NULL, else the flag's or CONFIG_FILE's), then the environment, then the
 * flags. */
int config_load(struct config *c, const struct config_args *a, const struct config_text *named,
                struct err *e);

/* With --simulate outside a pod, the paths the agent makes that no file,
 * variable or flag gave (kubelet root, status socket, CDI and MPS
 * directories, NFD file) become names in the user's own directory
 * (util/dirs.h): a demo never touches the node's kubelet or /run, and two
 * users' demos never meet. In a pod (KUBERNETES_SERVICE_HOST), the node's
 * paths stay: a simulated DaemonSet serves its kubelet. So does the CDI
 * directory of an agent pointed at a kubelet (--kubelet-root or
 * --kubelet-registry-dir given): that kubelet's runtime reads the specs.
 * For the agent and the commands that talk to it. */
void config_user_paths(struct config *c);

/* Applies a `version: v1` config file's text over c (errors name source:line:col). */
int config_apply_yaml(struct config *c, const char *source, const char *text, size_t len,
                      struct err *e);

/* c as flags, one "--flag=value" line per option: what a command given
 * them (config_parse_args, config_load) runs with, the running agent's
 * configuration for `gpulet doctor`. Not the v1 file's resources and
 * sharing sections, which --config-file or a named config carries. */
void config_args_text(const struct config *c, struct strbuf *out);

/* The MPS directories of a daemon called name (a resource, or a DRA
 * claim's "claim-<uid>") under --mps-root: its own directory, the pipe
 * directory clients connect through, its log directory, and the /dev/shm
 * every daemon and client shares. The one owner of that layout: the
 * daemon makes them, Allocate and a claim's CDI spec mount them. */
struct config_mps_dirs {
    char dir[CONFIG_PATH_MAX + 96], pipe[CONFIG_PATH_MAX + 128], log[CONFIG_PATH_MAX + 128];
    char shm[CONFIG_PATH_MAX + 16];
};
void config_mps_dirs(const struct config *c, const char *name, struct config_mps_dirs *out);

/* Writes the agent's usage, generated from the option table. */
void config_usage(FILE *out);

/* Where gpulet reads what the host has under host_root (the driver or the
 * dev root): inside its container, the container driver root, for the
 * driver root and a dev root that is the driver root. */
const char *config_read_root(const struct config *c, const char *host_root);

/* The driver's program `name` (nvidia-smi, nvidia-cuda-mps-control) where
 * gpulet sees it: in the driver's directories under the driver root, read
 * through config_read_root. -1 naming where it looked. */
int config_find_tool(const struct config *c, const char *name, char *out, size_t len,
                     struct err *e);

/* How gpulet runs a program it sees at path. In its container, one under
 * the container driver root runs on the driver root's own files (pivoted
 * into it: its loader, libraries and shell, none of gpulet's image): root
 * is that root as gpulet sees it and inside the program's path there.
 * Elsewhere root is "" and inside is path. */
void config_tool_place(const struct config *c, const char *path, char *root, size_t root_len,
                       char *inside, size_t inside_len);

/* The driver files containers get as c asks (its driver root, capabilities
 * and layout), for driver `version`, read under read_root (NULL: the
 * container driver root where one is set). */
struct driver;
int config_driver(const struct config *c, const char *read_root, const char *version,
                  struct driver *d, struct err *e);

/* --- per-node configuration (named.c) ---------------------------------------- */

/* One named config: a key of the ConfigMap and its text. */
struct config_named {
    char *name;
    char *text;
    size_t len;
};

/* A ConfigMap's configs, sorted by name; owns its strings. */
struct config_named_set {
    struct config_named *items;
    unsigned count;
};

/* The data of a ConfigMap object (parsed, from the API). */
int config_named_parse(struct config_named_set *s, const json_t *cm, struct err *e);
void config_named_free(struct config_named_set *s);

/* The value of the Node's label key (parsed, from the API); "" without it. */
int config_node_label(const json_t *node, const char *key, char *out, size_t outlen, struct err *e);

/* Which config applies, as NVIDIA's config-manager chooses: the one the
 * label names, else default_name, else one named "default", else the only
 * one. *out NULL with 0: none applies (no configs, or several without a
 * default). -1 when the label or default_name names a missing config.
 * *why says what chose. */
int config_named_choose(const struct config_named_set *s, const char *label,
                        const char *default_name, const struct config_named **out,
                        const char **why, struct err *e);

/* Whether DRA serves GPU g (--dra all and a --dra-gpus item matches its
 * product name, index, index range ("0-3") or UUID); the device plugin
 * serves every other. */
struct gpu_info;
bool config_dra_takes(const struct config *c, const struct gpu_info *g);

/* Whether DRA publishes GPU g for shares: it takes it, and a --dra-shares
 * item matches it. */
bool config_dra_shares(const struct config *c, const struct gpu_info *g);

/* Whether DRA makes GPU g's MIG devices per claim: it takes it, a --dra-mig
 * item matches it, and it is in MIG mode (gpulet never changes the mode). */
bool config_dra_mig(const struct config *c, const struct gpu_info *g);

/* The kubelet's PodResources socket: --pod-resources-kubelet-socket, or
 * <kubelet-root>/pod-resources/kubelet.sock. */
void config_pod_resources_socket(const struct config *c, char *out, size_t len);

/* Whether a CDI spec is kept in cdi_spec_dir: --write-cdi-spec true, or
 * auto with a cdi-* device list strategy. */
bool config_cdi_wanted(const struct config *c);

/* Logs the effective configuration, one line. */
void config_log(const struct config *c);

/* Warns, once each, of options given that take no effect without another
 * setting (--dra-mig without --dra all; --fault-taint without the fault
 * report, which needs the API server: api says whether there is one). */
void config_log_idle(const struct config *c, bool api);

#endif
