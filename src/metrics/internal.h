/* Shared between the files of src/metrics; not a public interface. */
#ifndef GPULET_METRICS_INTERNAL_H
#define GPULET_METRICS_INTERNAL_H

#include "config/config.h"
#include "gpu/device.h"
#include "gpu/lane.h"
#include "kube/kube.h"
#include "metrics/collectors.h"
#include "metrics/metrics.h"
#include "util/strbuf.h"

#define METRICS_POD_FIELD 128

/* A pod's container holding a GPU, from PodResources. */
struct metrics_owner {
    char pod[METRICS_POD_FIELD], ns[METRICS_POD_FIELD], container[METRICS_POD_FIELD];
};

/* Where a process sits, from its /proc/<pid>/cgroup. */
struct metrics_cgroup {
    char pod_uid[40];                /* empty: not in a pod */
    char container_id[80];           /* empty: in the pod's cgroup, not a container's */
};

/* Parses /proc/<pid>/cgroup text (v1 or v2; cgroupfs or systemd driver):
 * true with the pod UID (and the container ID where there is one) when the
 * process is in a pod. */
bool metrics_cgroup_parse(const char *text, size_t len, struct metrics_cgroup *out);

/* Parses a /var/log/containers name, <pod>_<namespace>_<container>-<ID>.log:
 * true with the names in o and the container ID in cid. */
bool metrics_logname_parse(const char *name, struct metrics_owner *o, char *cid, size_t cidlen);

/* One sharer of a shared GPU (device IDs like UUID::N). */
struct metrics_share {
    unsigned gpu;
    struct metrics_owner owner;
};

/* What metrics keeps of the agent's record of a GPU (struct gpu_device),
 * copied at each notification: the sampler thread cannot read the agent's. */
struct metrics_device {
    nvmlDevice_t handle;             /* the handle to sample with */
    unsigned generation;
    enum health_reason health;
    unsigned last_xid;
    struct gpu_xid_count xids[GPU_DEVICE_MAX_XIDS];
    char resource[80];               /* the resource it is advertised under whole; or empty */
    struct gpu_mig mig[GPU_MIG_MAX]; /* its MIG devices (the inventory's, at the notification) */
    char mig_resource[GPU_MIG_MAX][80]; /* the resource each MIG device is advertised under */
    enum health_reason mig_health[GPU_MIG_MAX]; /* each MIG device's own */
    unsigned nmig;
};

/* What the loop knows and the sampler renders: copied under the lock. */
struct metrics_state {
    unsigned count;                  /* GPUs */
    struct metrics_device *dev;      /* per GPU */
    bool *owned;                     /* per GPU: exactly one, unshared owner */
    struct metrics_owner *owner;     /* per GPU, where owned */
    bool *mig_owned;                 /* per GPU per MIG device (GPU_MIG_MAX each): one owner */
    struct metrics_owner *mig_owner;
    struct metrics_share *shares;
    unsigned nshares;
    unsigned long long scrapes;      /* /metrics answered; rendered at the next sample */
    unsigned long long podres_errors;
    double podres_last_ok;           /* wall seconds of the last good List; 0 never */
    struct metrics_config config;
    double loop_lag;                 /* seconds: the agent's loop, the worst of its window */
    struct kube_request_row *api;    /* the API client's requests (metrics_on_api) */
    unsigned napi;
};

/* One GPU's reading: value per collector, and whether it has one. */
struct metrics_gpu {
    bool up;                         /* a fresh sample to render: answered within two
                                      * intervals, neither lost nor hung */
    double sampled_at;               /* wall seconds of the last sample done; 0 never */
    double value[COLLECTORS_MAX];
    bool have[COLLECTORS_MAX];
    /* per MIG device: its GPU instance's framebuffer (MiB), where read */
    double mig_used[GPU_MIG_MAX], mig_free[GPU_MIG_MAX];
    bool mig_have[GPU_MIG_MAX];
};

/* The NVML calls whose failures gpulet_nvml_errors_total counts: one row
 * each, X(enum name, function name). */
#define METRICS_NVML_CALLS(X)                                                   \
    X(FN_CLOCK, "nvmlDeviceGetClockInfo")                                      \
    X(FN_TEMP, "nvmlDeviceGetTemperature")                                     \
    X(FN_POWER, "nvmlDeviceGetPowerUsage")                                     \
    X(FN_UTIL, "nvmlDeviceGetUtilizationRates")                                \
    X(FN_ENC, "nvmlDeviceGetEncoderUtilization")                               \
    X(FN_DEC, "nvmlDeviceGetDecoderUtilization")                               \
    X(FN_MEM, "nvmlDeviceGetMemoryInfo_v2")                                    \
    X(FN_ECC, "nvmlDeviceGetTotalEccErrors")                                   \
    X(FN_REPLAY, "nvmlDeviceGetPcieReplayCounter")                             \
    X(FN_FIELDS, "nvmlDeviceGetFieldValues")                                   \
    X(FN_ENERGY, "nvmlDeviceGetTotalEnergyConsumption")                        \
    X(FN_GPM_SAMPLE, "nvmlGpmSampleGet")                                       \
    X(FN_GPM_METRICS, "nvmlGpmMetricsGet")                                     \
    X(FN_PROCS, "nvmlDeviceGetComputeRunningProcesses")                        \
    X(FN_PROC_UTIL, "nvmlDeviceGetProcessUtilization")

#define METRICS_FN_ENUM(e, name) e,
enum metrics_nvml_call { METRICS_NVML_CALLS(METRICS_FN_ENUM) FN_COUNT };
#undef METRICS_FN_ENUM

/* Names of the counted NVML calls, by enum metrics_nvml_call. */
extern const char *const metrics_nvml_names[FN_COUNT];

/* Everything one rendering needs. */
struct metrics_frame {
    const struct collectors *collectors;
    const struct gpu_inventory *inv;
    const char *hostname;
    const char *const *label_values; /* per GPU per collector: label text or NULL */
    const struct metrics_gpu *gpus;
    const struct metrics_state *state;
    double sample_seconds;
    const unsigned long long *nvml_errors; /* per enum metrics_nvml_call */
    const struct metrics_procs *procs;     /* usage per container; NULL or off: none */
    struct strbuf *identity;         /* per GPU, 2 each (with label fields, without): the
                                      * identity labels rendered once; empty: not yet */
};

/* Expensive NVML calls, each read for as many GPUs per tick as its budget
 * allows at its measured cost, round robin; cheap calls run every tick. */
enum metrics_class { CLASS_REPLAY, CLASS_FIELDS, CLASS_ENERGY, CLASS_GPM, CLASS_COUNT };

struct metrics_class_state {
    double cost_us;                  /* moving average of one call (per GPU) */
    unsigned cursor;                 /* next GPU in the round */
};

/* One GPU's process lists, read on its lane at each sample. */
struct procs_gpu {
    nvmlProcessInfo_t *info;
    unsigned info_cap;
    int ninfo;                       /* -1: NVML failed */
    nvmlProcessUtilizationSample_t *util;
    unsigned util_cap, nutil;
    unsigned long long last_ts;      /* newest utilization sample seen */
};

struct metrics_sampler;

/* What the sampler keeps of one GPU between samples, and its sample: the
 * GPU's lane's while a sample is out (posted), the sampler thread's
 * otherwise. */
struct sampler_gpu {
    struct gpu_lane_job job;         /* first: the lane hands it back */
    struct metrics_sampler *s;       /* read only on the lane: nvml, col, inv, procs.on */
    unsigned gpu;
    bool posted;                     /* sampler thread: out, not yet taken back */
    /* set before posting */
    struct metrics_device dev;       /* the agent's record as copied: handle, MIG handles */
    unsigned classes;                /* bit per enum metrics_class: read this time */
    /* the sample's */
    bool ready;                      /* labels, mode and GPM buffers read (first sample) */
    bool labeled;                    /* sampler thread: its labels are in shown_labels */
    bool lost;                       /* GPU_IS_LOST at the last sample */
    int virt_mode;                   /* -1 unknown */
    double nvl_kib, nvl_t;           /* last NVLink counter, and when */
    nvmlGpmSample_t gpm[2];          /* two sample buffers */
    int gpm_state;                   /* -1 unsupported, 0 no sample yet, 1 have one */
    int gpm_cur;
    double spent_us[CLASS_COUNT];    /* each expensive class's time, where read */
    unsigned long long errors[FN_COUNT]; /* failed calls since taken back */
    double done;                     /* monotonic seconds the last sample ended; 0 never */
    struct procs_gpu procs;
};

/* One process on one GPU at the last sample. */
struct procs_seen {
    unsigned gpu, pid;
    unsigned long long memory;       /* bytes */
    double sm;                       /* percent, the mean of its samples since the last */
    bool in_pod;
    bool named;                      /* owner found through its container ID */
    struct metrics_owner owner;
};

/* A container's use of one GPU: the gpulet_container_gpu_* series. An
 * empty owner gathers what runs outside any pod gpulet can name. */
struct metrics_usage {
    unsigned gpu;
    struct metrics_owner owner;
    unsigned long long memory;       /* bytes */
    double sm;                       /* percent, summed over its processes */
    unsigned processes;
};

struct procs_pid;
struct procs_name;

/* Per-process sampling (procs.c), on the sampler thread. */
struct metrics_procs {
    bool on;
    char proc_root[CONFIG_PATH_MAX];     /* the host's /proc */
    char log_dir[CONFIG_PATH_MAX];       /* the kubelet's /var/log/containers */
    struct procs_pid *pids;          /* cgroups of the processes of the last sample, by pid */
    unsigned npids;
    struct procs_seen *seen;
    unsigned nseen, seen_cap;
    struct procs_name *names;        /* containers in log_dir, by ID */
    unsigned nnames;
    double names_read;               /* monotonic seconds of the last read; 0 never */
    bool names_failing;              /* log_dir unreadable, said once */
    struct metrics_usage *usage;     /* built for each rendering */
    unsigned nusage;
    double seconds;                  /* how long the last process sample took */
};

void metrics_procs_init(struct metrics_procs *p, const struct config *cfg);

/* On a GPU's lane: its compute processes and their utilization samples
 * (errors counted per enum metrics_nvml_call). */
void metrics_procs_read(struct procs_gpu *pg, struct nvml *n, nvmlDevice_t h,
                        unsigned long long *errors);

/* On the sampler thread: where each process of the GPUs sampled afresh
 * (fresh[i]) runs and (through log_dir) which pod's container it is;
 * forgets what ended. */
void metrics_procs_sample(struct metrics_sampler *s, const bool *fresh);

/* Frees one GPU's process lists. */
void metrics_procs_gpu_free(struct procs_gpu *pg);

/* Builds p->usage from the last sample: processes in a pod whose container
 * could not be named go to the one container PodResources says holds the
 * GPU, where exactly one does. */
void metrics_procs_usage(struct metrics_procs *p, const struct metrics_state *pods);

void metrics_procs_free(struct metrics_procs *p);

/* The sampler thread's own state: nothing here is touched by the loop.
 * Each GPU is read on its own lane (gpu/lane.h), so that one GPU whose
 * calls block leaves the others' series fresh. */
struct metrics_sampler {
    struct nvml *nvml;
    const struct gpu_inventory *inv;
    const struct collectors *col;
    struct gpu_lanes *lanes;
    unsigned interval_ms;
    struct sampler_gpu *g;           /* per GPU; each the lane's while posted */
    struct metrics_gpu *gpus;        /* per GPU: the reading (likewise) */
    char **labels;                   /* per GPU per collector: label value or NULL (likewise) */
    /* what is rendered: the readings and labels as last taken back, the
     * sampler thread's alone, so that a late lane never writes under a render */
    struct metrics_gpu *shown;
    const char **shown_labels;
    struct metrics_class_state classes[CLASS_COUNT];
    unsigned long long nvml_errors[FN_COUNT];
    struct metrics_procs procs;
    struct strbuf *identity;         /* per GPU, 2 each: metrics_frame's cache */
};

/* Prepares the sampler; nothing is read yet (each GPU's first sample reads
 * its labels, on its lane). */
void metrics_sampler_init(struct metrics_sampler *s, struct nvml *n, struct gpu_lanes *lanes,
                          const struct gpu_inventory *inv, const struct collectors *col,
                          unsigned interval_ms);

/* One round: each GPU whose last sample is back gets a new one on its lane,
 * with the handle in devs (the agent's, as copied); the round waits for
 * them until deadline (uv_hrtime), and a GPU still out is left to its lane
 * and rendered without its series. Returns how long the round took, in
 * seconds. Afterwards g[i].lost says which GPUs NVML called lost. */
double metrics_sample(struct metrics_sampler *s, const struct metrics_device *devs,
                      uint64_t deadline);

/* Frees the sampler's memory and GPM buffers; false, freeing nothing, where
 * a sample is still out on a stuck lane (the lanes stopped first): it may
 * write into any of it when its call returns. */
bool metrics_sampler_free(struct metrics_sampler *s);

/* Renders the whole /metrics text but gpulet_scrapes_total. */
void metrics_render(struct strbuf *out, const struct metrics_frame *f);

/* Appends a label value escaped for the text format. */
void metrics_escape(struct strbuf *out, const char *s);

/* Allocates the per-GPU arrays of a state; frees them. */
void metrics_state_alloc(struct metrics_state *s, unsigned count);
void metrics_state_free(struct metrics_state *s);

/* Copies src into dst (both allocated for the same count). */
void metrics_state_copy(struct metrics_state *dst, const struct metrics_state *src);

/* Reads a PodResources List answer (r NULL: none) into
 * owners and shares of the inventory's GPUs (by UUID, or by index where IDs
 * are indexes), with the nh holders of DRA claims beside it. */
void metrics_pods_decode(struct metrics_state *s, const struct gpu_inventory *inv,
                         const struct V1__ListPodResourcesResponse *r,
                         const struct metrics_holder *h, unsigned nh);

#endif
