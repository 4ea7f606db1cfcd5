/* gpulet as a DRA driver (Kubernetes 1.32+: resource.k8s.io/v1, v1beta2 or
 * v1beta1, whichever is the newest the API server serves): the
 * node's GPUs published as a ResourceSlice under the driver name
 * gpu.nvidia.com, as NVIDIA's DRA driver names and describes them, and the
 * kubelet's DRA plugin API (NodePrepareResources, NodeUnprepareResources)
 * answered with CDI device IDs of gpulet's own spec (docs/dra.md). */
#ifndef GPULET_DRA_H
#define GPULET_DRA_H

#include <stdbool.h>
#include <jansson.h>
#include <uv.h>

#include "config/config.h"
#include "gpu/device.h"
#include "gpu/inventory.h"
#include "gpu/sharing.h"
#include "kube/kube.h"
#include "util/err.h"
#include "util/strbuf.h"

#define DRA_DRIVER "gpu.nvidia.com"
#define DRA_MAX_RESULTS 64          /* devices of one claim */
#define DRA_GROUP "resource.k8s.io"
#define DRA_STANDARD "resource.kubernetes.io/" /* Kubernetes' standard attributes */

/* The versions of resource.k8s.io gpulet speaks, newest first. v1 (1.34+)
 * and v1beta2 put a device's attributes at its top; v1beta1 (1.32) under
 * "basic". */
enum dra_api { DRA_API_NONE, DRA_API_V1, DRA_API_V1BETA2, DRA_API_V1BETA1 };

/* "v1", "v1beta2", "v1beta1"; "" for none. */
const char *dra_api_name(enum dra_api api);

/* Whether a discovery answer (an APIResourceList, GET
 * /apis/resource.k8s.io/<version>) lists resourceslices (api.c, pure). */
bool dra_api_serves_slices(const char *json, size_t len);

/* --- the ResourceSlice (slice.c, pure) ------------------------------------------ */

/* The device name of GPU g (mig 0) as NVIDIA's driver names it,
 * gpu-<minor>, or of its MIG device mig - 1:
 * gpu-<minor>-mig-<profile>-<GI profile ID>-<placement start>. */
void dra_device_name(const struct gpu_info *g, unsigned mig, char *out, size_t len);

/* How many MIG devices g is published as: 0 for a GPU not in MIG mode. */
unsigned dra_migs(const struct gpu_info *g);

/* --- device taints (taint.c, pure, fuzzed) -------------------------------------- */

#define DRA_TAINT_XID DRA_DRIVER "/xid"          /* NVIDIA's: the XID as value */
#define DRA_TAINT_LOST DRA_DRIVER "/gpu-lost"    /* NVIDIA's: NVML cannot reach it (or XID 79) */
#define DRA_TAINT_ECC "gpulet.io/ecc"            /* a double-bit ECC error */
#define DRA_TAINT_HUNG "gpulet.io/hung"          /* an NVML call on it does not return */
#define DRA_TAINT_HELD "gpulet.io/device-plugin" /* a pod of the device plugin still holds it */
#define DRA_MAX_TAINTS 4

struct dra_taint {
    const char *key;                /* one of DRA_TAINT_* */
    char value[16];                 /* a label value; "" for none */
    const char *effect;             /* "NoSchedule", or "NoExecute" for the faults of evict */
    long long since_ms;             /* timeAdded: when the fault began (wall clock), as the
                                     * Node's condition and the Event say */
};

/* The taints of a device whose health is h (healthy: none), at most
 * DRA_MAX_TAINTS; NoExecute for the faults evict lists (NULL: none). */
unsigned dra_taints(const struct gpu_health *h, const struct health_faults *evict,
                    struct dra_taint *out);

/* What a slice is made from. */
struct dra_slice_in {
    const struct config *cfg;
    const struct gpu_inventory *inv;
    const struct gpu_device *devs;
    const char *node, *node_uid;
    unsigned long long generation;  /* the pool's: counts changes */
    enum dra_api api;
    const char (*pcie_roots)[32];   /* per GPU, "pci0000:00" ("" unknown); NULL: none known */
    bool tainted;                   /* faulty devices stay, tainted (dra_publishes) */
    const struct health_faults *evict; /* the faults whose taints are NoExecute; NULL: none */
    const bool *held;               /* per device (DRA_AT): pods of the device plugin hold it
                                     * (a node moved to DRA); NULL: none */
    bool consumable;                /* the API has consumable capacity: --dra-shares GPUs are
                                     * published for shares (dra_share_*) */
    bool partitionable;             /* the API has counters in slices of their own (1.35+):
                                     * --dra-mig GPUs are published as placements */
    const char (*made)[96];         /* the UUIDs of the MIG devices claims made */
    unsigned nmade;
};

/* --- MIG devices made per claim (partition.c, pure, fuzzed) --------------------- */

#define DRA_COUNTER_SETS_PER_SLICE 8  /* a counters slice holds this many GPUs' sets */
#define DRA_MAX_COUNTERS (8 + GPU_MIG_SLICES)

/* One counter: of a GPU's counter set, or what a placement consumes of it. */
struct dra_counter {
    char name[24];                  /* "memory", "multiprocessors", "memory-slice-3"... */
    unsigned long long value;
    bool bytes;                     /* a quantity in bytes (memory) */
};

/* A MIG device that a claim may have made: profile at memory slice start on GPU gpu. */
struct dra_placement {
    unsigned gpu;                   /* its index in the inventory */
    const struct gpu_mig_profile *profile;
    unsigned start;
};

/* Whether GPU i is published as placements (--dra-mig, the API has
 * counters, and its MIG profiles are known); how many GPUs are. */
bool dra_partitions(const struct dra_slice_in *in, unsigned i);
unsigned dra_partitioned(const struct dra_slice_in *in);

/* GPU g's counters (p NULL: its counter set, each dimension's most and
 * every memory slice) or what profile p at start consumes of them (its
 * memory slices only); returns how many, at most DRA_MAX_COUNTERS. */
unsigned dra_counters(const struct gpu_info *g, const struct gpu_mig_profile *p, unsigned start,
                      struct dra_counter *out);

/* gpu-<minor>-counter-set. */
void dra_counter_set_name(const struct gpu_info *g, char *out, size_t len);

/* NVIDIA's MIG profile in a device name: "1g.10gb+me" is 1g10gb-me. */
void dra_profile_label(const char *profile, char *out, size_t len);

/* gpu-<minor>-mig-<profile>-<profile ID>-<start>. */
void dra_placement_name(const struct gpu_info *g, const struct gpu_mig_profile *p, unsigned start,
                        char *out, size_t len);

/* GPU g's n-th placement (its gpu left 0); false past the last. */
bool dra_placement_at(const struct gpu_info *g, unsigned n, struct dra_placement *out);

/* The placement a device name names on a GPU dra_partitions; false if none. */
bool dra_placement_find(const struct dra_slice_in *in, const char *name, struct dra_placement *out);

/* Whether MIG device uuid is one a claim made (in->made). */
bool dra_made(const struct dra_slice_in *in, const char *uuid);

/* Whether a placement can be had: no MIG device that no claim made
 * (in->made) overlaps it, save one exactly there, which a claim adopts
 * (*mig: its index, else -1). */
bool dra_placement_open(const struct dra_slice_in *in, const struct dra_placement *pl, int *mig);

/* --- shares of a GPU (slice.c, claim.c; pure) ------------------------------------ */

#define DRA_SHARE_STEP (1ULL << 30)   /* a share's memory: whole GiB */
#define DRA_SHARE_COMPUTE "compute"   /* the capacity of a share's SMs, in percent */

/* The memory a claim that names none consumes of a GPU of total bytes:
 * all of it, in whole steps (a plain claim keeps the GPU to itself). */
unsigned long long dra_share_default(unsigned long long total);

/* A device's place in held: GPU i, mig 0 whole or its MIG device mig - 1. */
#define DRA_AT(i, mig) ((size_t)(i) * (GPU_MIG_MAX + 1) + (mig))

/* Whether device mig of GPU i (0: the GPU whole) is in the slice: DRA
 * serves the GPU (--dra-gpus), it is a MIG device of a GPU in MIG mode or
 * a GPU that is not, and it is free to take or tainted: a device that is
 * faulty, or held by a pod of the device plugin, stays tainted where the
 * API server keeps taints (in->tainted), and is left out where not (1.32),
 * so that the scheduler cannot pick it. */
bool dra_publishes(const struct dra_slice_in *in, unsigned i, unsigned mig);

/* The devices in the pool's slices. */
unsigned dra_count(const struct dra_slice_in *in);

/* The pool's slices: the first holds the GPUs and MIG devices
 * dra_publishes; where GPUs are partitioned, then their counter sets
 * (DRA_COUNTER_SETS_PER_SLICE a slice) and a slice of each one's
 * placements (a slice holds counters or devices, not both, from 1.35). */
unsigned dra_slices(const struct dra_slice_in *in);

/* Slice s of the pool (server-side apply body) in in->api, with NVIDIA's
 * attributes and capacities; owned by the Node (node_uid) so that it goes
 * with it: as an object (the caller's; dra_slice_generation sets its
 * pool's generation) or as its text. */
json_t *dra_slice_object(const struct dra_slice_in *in, unsigned s);
void dra_slice_generation(json_t *slice, unsigned long long generation);
void dra_slice_json(const struct dra_slice_in *in, unsigned s, struct strbuf *out);

/* A PCI address as Kubernetes' pciBusID attribute writes it ("0000:1b:00.0"). */
void dra_pci_bus_id(const char *nvml, char *out, size_t len);

/* Slice s's object name: <node>-gpu.nvidia.com for the first (s 0; in
 * may be NULL), then -counters[-N] and -gpu-<minor>. */
void dra_slice_name(const struct dra_slice_in *in, const char *node, unsigned s, char *out,
                    size_t len);

/* --- the kubelet's health stream (health.c; the message is pure, fuzzed) ------- */

#define DRA_HEALTH_TIMEOUT_S 60      /* the kubelet is told to trust a device's health this long */

/* One device's health, as NodeWatchResources tells it. */
struct dra_device_health {
    const char *pool;               /* the node's name */
    char name[96];                  /* gpu-<minor>, or a MIG device's */
    bool healthy;
    char message[1024];             /* the cause ("" healthy); the kubelet keeps 1024 */
    long long updated;              /* Unix seconds */
};

/* A NodeWatchResourcesResponse of n devices, serialized (the caller frees it). */
uint8_t *dra_health_pack(const struct dra_device_health *devs, unsigned n, size_t *len);

/* --- a ResourceClaim's allocation (claim.c, pure, fuzzed) ----------------------- */

struct dra_result {
    char request[64];
    char pool[256];
    char device[64];
    int config;                     /* the entry of configs that applies; -1: none */
    /* a share of a device (consumable capacity): "" for a whole device */
    char share_id[64];
    unsigned long long share_bytes; /* consumedCapacity memory; 0: none named */
    unsigned share_compute;         /* consumedCapacity compute, percent; 0: none */
};

#define DRA_MAX_CONFIGS 16
#define DRA_MAX_LIMITS 16

struct dra_limit {
    char device[96];                /* an index among the claim's devices, or a UUID */
    unsigned long long mib;
};

struct dra_sharing {
    unsigned strategy;              /* enum gpu_sharing: how the claim's devices are shared
                                     * beyond the claim (its own containers always share) */
    bool mig;                       /* a MigDeviceConfig */
    unsigned timeslice;             /* TimeSlicing: 0 Default, 1 Short, 2 Medium, 3 Long */
    /* MPS: the daemon's defaults for its clients; 0: unset */
    unsigned thread_percentage;
    unsigned long long pinned_mib;
    struct dra_limit limits[DRA_MAX_LIMITS];
    unsigned nlimits;
};

struct dra_allocation {
    char uid[64];                   /* the claim's metadata.uid */
    struct dra_result results[DRA_MAX_RESULTS];
    unsigned count;                 /* results for DRA_DRIVER */
    struct dra_sharing configs[DRA_MAX_CONFIGS];
    unsigned nconfigs;
};

/* Reads a ResourceClaim (JSON from the API) into its allocation for this
 * driver, with the opaque configuration for this driver that applies to
 * each result: the class's, then the claim's, the last entry naming the
 * result's request (or none) winning, as NVIDIA's driver reads them.
 * Fails naming what is missing or wrong: not a claim, not allocated, a
 * configuration gpulet cannot apply. */
int dra_claim_parse(const char *json, size_t len, struct dra_allocation *a, struct err *e);

/* One opaque configuration's parameters (sharing.c). */
int dra_sharing_parse(json_t *params, struct dra_sharing *s, struct err *e);


/* --- the containers of a claim (consumers.c, pure, fuzzed) ----------------------- */

/* A container that uses a claim's devices: for metrics' pod labels. */
struct dra_consumer {
    char pod[128], ns[128], container[128];
};

/* The pods a claim is reserved for (status.reservedFor, resource pods):
 * their names, at most max; -1 when the JSON is not claim uid (a claim of
 * the same name made since is another claim). */
int dra_claim_pods(const char *json, size_t len, const char *uid, char (*pods)[128], unsigned max);

/* The containers (init containers too) of a pod (JSON from the API) that
 * use claim (its name), appended to out up to max; returns how many there
 * are now. */
unsigned dra_pod_consumers(const char *json, size_t len, const char *claim,
                           struct dra_consumer *out, unsigned n, unsigned max);

/* --- the driver on the agent's loop (dra.c) ------------------------------------- */

struct dra;

/* What the driver tells the agent, on the loop. */
/* The prepared claims a checkpoint holds, read and parsed by
 * dra_checkpoint_read on any thread (it touches only the file and *out),
 * for dra_start to take over: a restart reads its file off the loop,
 * beside NVML's start, and the DRA service serves once it is in. */
struct dra_prepared;
struct dra_loaded {
    struct dra_prepared *prepared;        /* n of them, room for cap */
    unsigned n, cap;
    int rc;                               /* 0 (no file: no claims), or -1 with err */
    struct err err;
};

/* Where cfg's DRA driver keeps its checkpoint. */
void dra_checkpoint_path(const struct config *cfg, char *out, size_t len);
void dra_checkpoint_read(const char *path, struct dra_loaded *out);
void dra_loaded_free(struct dra_loaded *l);

struct dra_hooks {
    void (*on_claims)(void *ctx);    /* prepared claims or their containers changed */
    /* GPU gpu's MIG devices changed (a claim's was made or destroyed): seen
     * holds them as read again on its lane; the agent's records follow.
     * Returns the writer of the CDI spec that names them now (NULL: none),
     * which a prepare's answer waits for */
    struct writer *(*on_mig)(void *ctx, unsigned gpu, const struct gpu_info *seen);
    /* Its sockets could not be served (bound on the worker pool after
     * dra_start returned): the driver serves nothing; e says why. */
    void (*on_failed)(void *ctx, const struct err *e);
    void *ctx;
};

/* The agent's NVML and its GPUs' lanes, through which MIG devices are
 * made per claim (--dra-mig); NULL lanes: none made. */
struct nvml;
struct gpu_lanes;
struct dra_gpus {
    struct nvml *nvml;
    struct gpu_lanes *lanes;
};

/* Calls fn for each device of a prepared claim (its UUID: a GPU's or a MIG
 * device's) and each container that uses it. */
void dra_holders(const struct dra *d,
                 void (*fn)(void *ctx, const char *uuid, const struct dra_consumer *c), void *ctx);

/* Starts publishing the slice and serving the kubelet's DRA plugin API for
 * the GPUs of inv, whose health is read in devs (the agent's records,
 * which outlive the driver), through the agent's API client kc and its
 * watch of the Node (the slice's owner), with the claims its checkpoint
 * held (loaded: taken over where it starts; its error fails the start).
 * loaded NULL: they are not read yet, and dra_claims_in brings them;
 * meanwhile the service is up, and prepares and unprepares wait. */
int dra_start(struct dra **out, uv_loop_t *loop, const struct config *cfg,
              const struct gpu_inventory *inv, const struct gpu_device *devs,
              const struct dra_gpus *gpus, struct kube_client *kc, struct kube_watch *node,
              const struct dra_hooks *hooks, struct dra_loaded *loaded, struct err *e);

/* The claims read after dra_start (loaded, taken over); -1 (e) where the
 * checkpoint could not be read. 0 with nothing to do where d has them. */
int dra_claims_in(struct dra *d, struct dra_loaded *loaded, struct err *e);

/* The status socket's "dra" line: the driver, its socket, registered or
 * unregistered (the kubelet's word), the devices in the slice, the claims
 * prepared, and the API it publishes through (resource.k8s.io/v1; unknown
 * until the API server answered). */
void dra_status(const struct dra *d, struct strbuf *out);

/* A GPU's health changed: the slice follows (one request). */
void dra_on_device(struct dra *d);

/* The kubelet's PodResources List answered (r; NULL: it failed), read by
 * the agent for all (agent/pods.c): the GPUs pods of a device plugin still
 * hold stay out of claims (held.c). d may be NULL. Whether d wants it read
 * more often (a GPU is held, or no answer came yet). */
struct V1__ListPodResourcesResponse;
void dra_on_pods(struct dra *d, const struct V1__ListPodResourcesResponse *r);
bool dra_waits_for_pods(const struct dra *d);

/* Why DRA stops: gpulet stops, or restarts DRA at a reload, and the slices
 * stay in the API server, the claims' MPS daemons run on (the next gpulet
 * takes them over; uninstalled, the kubelet wipes the slices 30 s after
 * the driver's socket went); or DRA leaves the config, and the slices are
 * deleted. */
enum dra_stop_mode { DRA_STOP_KEEP, DRA_STOP_WITHDRAW };

/* Removes the sockets, and with DRA_STOP_WITHDRAW the slices; frees d once
 * libuv is done with it. */
void dra_stop(struct dra *d, enum dra_stop_mode mode);

#endif
