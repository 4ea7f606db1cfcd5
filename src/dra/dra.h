/* gpulet as a DRA driver (Kubernetes 1.32+, resource.k8s.io/v1beta1): the
 * node's GPUs published as a ResourceSlice under the driver name
 * gpu.nvidia.com, as NVIDIA's DRA driver names and describes them, and the
 * kubelet's DRA plugin API (NodePrepareResources, NodeUnprepareResources)
 * answered with CDI device IDs of gpulet's own spec (docs/dra.md). */
#ifndef GPULET_DRA_H
#define GPULET_DRA_H

#include <stdbool.h>
#include <uv.h>

#include "config/config.h"
#include "gpu/device.h"
#include "gpu/inventory.h"
#include "util/err.h"
#include "util/strbuf.h"

#define DRA_DRIVER "gpu.nvidia.com"
#define DRA_MAX_RESULTS 64          /* devices of one claim */

/* --- the ResourceSlice (slice.c, pure) ------------------------------------------ */

/* The device name of GPU g (mig 0) as NVIDIA's driver names it,
 * gpu-<minor>, or of its MIG device mig - 1: gpu-<minor>-mig-<GI>-<CI>. */
void dra_device_name(const struct gpu_info *g, unsigned mig, char *out, size_t len);

/* How many MIG devices g is published as: 0 for a GPU not in MIG mode. */
unsigned dra_migs(const struct gpu_info *g);

/* Whether device mig of GPU i (0: the GPU whole) is in the slice: DRA
 * serves the GPU (--dra-gpus), it is healthy, and it is a MIG device of a
 * GPU in MIG mode or a GPU that is not. An unhealthy device is left out:
 * 1.32 has no device taints, and the scheduler must not pick it. */
bool dra_publishes(const struct config *cfg, const struct gpu_inventory *inv,
                   const struct gpu_device *devs, unsigned i, unsigned mig);

/* The devices in the slice. */
unsigned dra_count(const struct config *cfg, const struct gpu_inventory *inv,
                   const struct gpu_device *devs);

/* The node's ResourceSlice (server-side apply body): the GPUs
 * dra_publishes, with NVIDIA's attributes and their memory; owned by the
 * Node (node_uid) so that it goes with it. generation counts changes. */
void dra_slice_json(const struct config *cfg, const struct gpu_inventory *inv,
                    const struct gpu_device *devs, const char *node, const char *node_uid,
                    unsigned long long generation, struct strbuf *out);

/* The slice's object name: <node>-gpu.nvidia.com. */
void dra_slice_name(const char *node, char *out, size_t len);

/* --- a ResourceClaim's allocation (claim.c, pure, fuzzed) ----------------------- */

struct dra_result {
    char request[64];
    char pool[256];
    char device[64];
};

struct dra_allocation {
    char uid[64];                   /* the claim's metadata.uid */
    struct dra_result results[DRA_MAX_RESULTS];
    unsigned count;                 /* results for DRA_DRIVER */
};

/* Reads a ResourceClaim (JSON from the API) into its allocation for this
 * driver. Fails naming what is missing: not a claim, not allocated. */
int dra_claim_parse(const char *json, size_t len, struct dra_allocation *a, struct err *e);

/* --- the driver on the agent's loop (dra.c) ------------------------------------- */

struct dra;

/* Starts publishing the slice and serving the kubelet's DRA plugin API for
 * the GPUs of inv, whose health is read in devs (the agent's records,
 * which outlive the driver). cdi: where the CDI spec's devices are named by
 * UUID, "nvidia.com/gpu". */
int dra_start(struct dra **out, uv_loop_t *loop, const struct config *cfg,
              const struct gpu_inventory *inv, const struct gpu_device *devs, struct err *e);

/* The status socket's "dra" line: the driver, its socket, registered or
 * unregistered (the kubelet's word), the devices in the slice, the claims
 * prepared. */
void dra_status(const struct dra *d, struct strbuf *out);

/* A GPU's health changed: the slice follows (one request). */
void dra_on_device(struct dra *d);

/* Removes the slice and the sockets; frees d once libuv is done with it. */
void dra_stop(struct dra *d);

#endif
