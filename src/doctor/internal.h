/* Shared between the files of src/doctor; not a public interface. The
 * checks run one after another, each on its own thread; a check reads what
 * earlier checks left in struct doctor and writes only its own fields. */
#ifndef GPULET_DOCTOR_INTERNAL_H
#define GPULET_DOCTOR_INTERNAL_H

#include <pthread.h>

#include "doctor/doctor.h"
#include "gpu/health.h"
#include "gpu/inventory.h"
#include "gpu/lane.h"
#include "nvml/nvml.h"

#define DOCTOR_MAX_RESOURCES 64      /* resources a registration check keeps */

struct gpus_job;

/* One line of the agent's health answer (agent.c). */
struct doctor_agent_gpu {
    unsigned index;
    int mig;                         /* -1: the GPU itself */
    char uuid[96];
    struct gpu_health health;
};

struct doctor {
    const struct doctor_options *o;
    /* --simulate without --root: a demo node, whose GPUs live in the agent's
     * simulator and which no host driver, runtime or kubelet serves. With
     * --root (even /), the host tree there is checked (the tests' stand-in
     * node, or a simulated node's real kubelet and runtime). */
    bool simulated;
    /* kernel-module */
    char kernel_version[64];         /* empty: the module is not loaded */
    /* device-nodes and nvidia-uvm: majors from /proc/devices, 0 unknown */
    unsigned nvidia_major, uvm_major;
    /* nvml: usable by later checks only where nvml_ok and not nvml_stuck */
    struct nvml nvml;
    bool nvml_ok;
    bool nvml_stuck;                 /* an NVML call did not return in time */
    struct gpu_inventory inv;        /* IDs, names, bus ids, minors, handles */
    struct gpu_lanes *lanes;         /* the nvml check's: one thread per GPU */
    struct gpus_job *gpu_jobs;       /* per GPU, on its lane */
    /* registration: what the agent serves, for PodResources and the Node */
    struct doctor_served {
        char name[96];               /* nvidia.com/gpu */
        unsigned devices;            /* replicas counted */
    } served[DOCTOR_MAX_RESOURCES];
    unsigned nserved;
    bool agent_up;
    /* kubelet: no kubelet on a simulated node (a demo): its checks skip */
    bool no_kubelet;
    /* the running agent's status socket under the root: every check asks
     * the agent there; its view of the GPUs (agent.c) asked once */
    char agent_socket[CONFIG_PATH_MAX * 2];
    bool agent_asked;
    struct doctor_agent_gpu *agent_gpus;
    unsigned agent_n, agent_ngpus;   /* lines; GPUs among them */
    /* what a check is doing now, for the message when it runs out of time */
    pthread_mutex_t lock;
    char step[160];
};

/* Notes what the running check is doing (thread-safe). */
void doctor_step(struct doctor *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Sets r's status and message (and fix, unless NULL). */
void doctor_set(struct doctor_result *r, enum doctor_status s, const char *fix, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));

/* path under the root: root + host_path (the root "/" adds nothing). */
void doctor_path(const struct doctor *d, char *out, size_t len, const char *host_path,
                 const char *rest);

/* Reads a whole small file; NULL (errno set) when it cannot. */
char *doctor_read(const char *path, size_t max, size_t *len);

/* Asks the agent at the status socket (once) for its GPUs' health: whether
 * one answered with at least one GPU. */
bool doctor_agent_view(struct doctor *d);

/* "GPU 3: XID 79 ...; ..." for each GPU or MIG device the agent has
 * unhealthy, appended to out. */
void doctor_agent_unhealthy(struct doctor *d, struct strbuf *out);

/* The checks, in the order they run: host.c, gpus.c, runtime.c, kubelet.c,
 * api.c. */
void doctor_kernel_module(struct doctor *d, struct doctor_result *r);
void doctor_library(struct doctor *d, struct doctor_result *r);
void doctor_device_nodes(struct doctor *d, struct doctor_result *r);
void doctor_uvm(struct doctor *d, struct doctor_result *r);
void doctor_nvml(struct doctor *d, struct doctor_result *r);
void doctor_gpu_health(struct doctor *d, struct doctor_result *r);
void doctor_kernel_log(struct doctor *d, struct doctor_result *r);
void doctor_persistence(struct doctor *d, struct doctor_result *r);
void doctor_fabric(struct doctor *d, struct doctor_result *r);
void doctor_mig(struct doctor *d, struct doctor_result *r);
void doctor_runtime(struct doctor *d, struct doctor_result *r);
void doctor_cdi(struct doctor *d, struct doctor_result *r);
void doctor_metrics(struct doctor *d, struct doctor_result *r);
void doctor_kubelet(struct doctor *d, struct doctor_result *r);
void doctor_registration(struct doctor *d, struct doctor_result *r);
void doctor_dra(struct doctor *d, struct doctor_result *r);
void doctor_mig_config(struct doctor *d, struct doctor_result *r);
void doctor_pod_resources(struct doctor *d, struct doctor_result *r);
void doctor_node(struct doctor *d, struct doctor_result *r);
void doctor_api_rights(struct doctor *d, struct doctor_result *r);

#endif
