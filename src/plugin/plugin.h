/* The kubelet device plugin for one resource (nvidia.com/gpu, or a
 * per-model one): a gRPC server on a socket in <kubelet-root>/device-plugins,
 * registered with the kubelet and kept registered across kubelet restarts
 * (docs/device-plugin.md). */
#ifndef GPULET_PLUGIN_H
#define GPULET_PLUGIN_H

#include <uv.h>

#include "config/config.h"
#include "gpu/device.h"
#include "gpu/inventory.h"

#define PLUGIN_RESOURCE "nvidia.com/gpu"
#define PLUGIN_API_VERSION "v1beta1"

struct plugin;
struct driver;

/* One resource the node advertises and the GPUs that serve it. */
struct plugin_resource {
    char name[80];                   /* nvidia.com/gpu, nvidia.com/h100, nvidia.com/gpu.shared */
    char socket[96];                 /* its socket's file name: gpulet-nvidia-gpu.sock */
    unsigned *gpus;                  /* inventory positions */
    unsigned *replicas;              /* per entry of gpus: 1 for a whole GPU */
    unsigned *migs;                  /* per entry of gpus: 0 the GPU, k + 1 its MIG device k */
    unsigned ngpus;
    enum gpu_sharing sharing;        /* how its replicas share a GPU */
    bool renamed;                    /* a shared resource under another name than its GPUs' */
    /* MPS: each client's limits, set as the daemon's defaults and in Allocate */
    unsigned thread_percentage;      /* active threads, % */
    unsigned long long *memory_mib;  /* per entry of gpus: pinned device memory; 0: the GPU's share */
};

/* The pinned device memory limit of an MPS client on the k-th GPU of r, in
 * MiB: configured, else the GPU's memory over its replicas (read from inv,
 * so only once the inventory's facts are in). */
unsigned long long plugin_mps_memory_mib(const struct plugin_resource *r, unsigned k,
                                         const struct gpu_inventory *inv);

/* The resources of the node: nvidia.com/gpu for every GPU, or with
 * resources.gpus each GPU under the one pattern its product name matches;
 * with MIG strategy single, every MIG device as nvidia.com/gpu; with
 * mixed, each MIG device under nvidia.com/mig-<profile> (plugin/mig.c);
 * then sharing (time-slicing, MPS) gives the GPUs its devices select
 * replicas, under <name>.shared where whole GPUs of the name remain (or
 * renameByDefault, or rename). Fails, naming the GPU or the config key,
 * when a GPU matches no resource or two, a sharing entry names a GPU or
 * resource the node lacks, two entries select one GPU, or MIG single
 * finds GPUs unlike each other (NVIDIA's rule). The caller frees
 * the array with plugin_resources_free. */
int plugin_resources(const struct config *cfg, const struct gpu_inventory *inv,
                     struct plugin_resource **out, unsigned *count, struct err *e);
void plugin_resources_free(struct plugin_resource *r, unsigned count);

/* Writes how each GPU, or each of its MIG devices, is advertised (resource,
 * replicas, sharing) into the ndevs device records, clearing the rest (read
 * by labels and metrics). */
void plugin_resources_apply(const struct plugin_resource *r, unsigned count,
                            struct gpu_device *devs, unsigned ndevs);

/* What the plugin tells its owner. */
struct plugin_hooks {
    void (*on_allocate)(void *ctx);   /* after each Allocate: a pod is starting */
    /* Its socket could not be served (bound on the worker pool after
     * plugin_start returned), and never was: e says why. The plugin tries
     * again with backoff; the owner may stop instead (an agent's start). */
    void (*on_unserved)(void *ctx, const struct err *e);
    void *ctx;
};

/* Builds the device list of one resource, starts its gRPC server and
 * registration. cfg, inv, devs, res and drv (the driver's files for the
 * driver-mounts strategy; NULL when not found) are the caller's and must
 * outlive the plugin; the plugin only reads them, on the loop. */
int plugin_start(struct plugin **out, uv_loop_t *loop, const struct config *cfg,
                 const struct gpu_inventory *inv, const struct gpu_device *devs,
                 const struct plugin_resource *res, const struct driver *drv,
                 const struct plugin_hooks *hooks, struct err *e);

/* A GPU changed (enum gpu_change bits; gpu may be GPU_DEVICE_ALL): health
 * and facts (NUMA nodes) go to every ListAndWatch stream at once. */
void plugin_on_device(struct plugin *p, unsigned gpu, unsigned what);

/* Whether the resource can be used now (an MPS resource while its daemon
 * runs): while not, every device is reported Unhealthy. */
void plugin_set_available(struct plugin *p, bool available);

/* Stops serving (the socket goes at once), stops watching, and frees the
 * plugin once libuv is done with its handles. Its ListAndWatch streams
 * end, and the kubelet's connections are left for the kubelet to close:
 * the kubelet marks a resource's devices unhealthy and drops its client
 * when it sees a stream end, acting on whichever plugin holds the name by
 * then, so a plugin that registers the name again must come after that
 * (see docs/device-plugin.md). Returns true when drained(ctx) will say
 * the last connection has closed (PLUGIN_DRAIN_MS at most); false when
 * the kubelet had none. */
#define PLUGIN_DRAIN_MS 3000
bool plugin_stop(struct plugin *p, void (*drained)(void *ctx), void *ctx);

/* Whether the kubelet took its registration (for the status socket). */
bool plugin_registered(const struct plugin *p);

#endif
