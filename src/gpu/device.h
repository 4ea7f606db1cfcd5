/* The one model of each GPU while the agent runs: its identity (from the
 * inventory), the device handle in use, health with its reason, and the
 * XIDs seen. The agent owns the array and is its only writer, on its loop.
 * The plugin and the status socket read it on the loop; metrics, whose
 * sampler runs on a thread of its own, is handed a copy with each change.
 * Every change reaches all of them through one notification that says
 * what changed (enum gpu_change). */
#ifndef GPULET_DEVICE_H
#define GPULET_DEVICE_H

#include "gpu/health.h"
#include "gpu/sharing.h"
#include "gpu/inventory.h"

#define GPU_DEVICE_MAX_XIDS 16   /* distinct XIDs counted per GPU; the last slot is reused */

struct gpu_xid_count {
    unsigned xid;
    unsigned long long count;
};

/* How a device (a whole GPU, or one MIG device) is advertised: the agent
 * writes it from the plugin's resource assignment (plugin_resources_apply,
 * called on its loop, and by `gpulet labels` for its own records); labels,
 * metrics and the status socket read it here, and only here. */
struct gpu_share {
    char resource[80];             /* nvidia.com/gpu; empty: not advertised as such */
    unsigned replicas;             /* how many share it: 1 unshared */
    enum gpu_sharing sharing;
    bool renamed;                  /* shared under another name than its model's resource */
};

struct gpu_device {
    const struct gpu_info *info;   /* identity: never changes while running */
    nvmlDevice_t handle;           /* the handle in use; a reset may bring a new one */
    unsigned generation;           /* +1 whenever handle changes */
    struct gpu_health health;      /* the whole GPU's: a MIG device is healthy only if this is */
    struct gpu_health mig_health[GPU_MIG_MAX]; /* each MIG device's own (XIDs in its GPU instance) */
    unsigned last_xid;             /* 0: none seen */
    struct gpu_xid_count xids[GPU_DEVICE_MAX_XIDS];
    struct gpu_share share;        /* the GPU whole; empty resource when only its MIG devices are */
    struct gpu_share mig_share[GPU_MIG_MAX]; /* each MIG device, with a MIG strategy */
};

/* What a notification says changed (bits). */
enum gpu_change {
    GPU_CHANGED_HEALTH = 1,
    GPU_CHANGED_HANDLE = 2,
    GPU_CHANGED_XID = 4,
    GPU_CHANGED_FACTS = 8,       /* the inventory's slow half (NUMA, links...) is known */
};

/* A notification about every GPU at once. */
#define GPU_DEVICE_ALL 0xFFFFFFFFu

/* One record per GPU of the inventory, healthy unless the inventory found
 * it lost; the caller frees the array. inv must outlive it. */
struct gpu_device *gpu_devices_new(const struct gpu_inventory *inv, double now_ms);

/* The health that counts for the GPU's MIG device k (0-based), or the GPU
 * (k < 0): the GPU's own while it is unhealthy (a MIG device of a lost GPU
 * is lost with it), else the MIG device's. */
const struct gpu_health *gpu_device_health(const struct gpu_device *d, int k);
/* Why the GPU's MIG device k (0-based), or the GPU (k < 0), is unhealthy,
 * or NULL where it is healthy: the GPU's own fault first (a MIG device of a
 * lost GPU is lost with it), then the MIG device's. Every reader that gives
 * out or lists devices (ListAndWatch, Allocate, DRA's slice and prepare)
 * asks this one. */
const char *gpu_device_unhealthy(const struct gpu_device *d, int k);

/* Whether it is healthy: gpu_device_unhealthy says nothing. */
bool gpu_device_healthy(const struct gpu_device *d, int k);

/* Counts an XID. */
void gpu_device_count_xid(struct gpu_device *d, unsigned xid);

/* Takes a new handle; returns true if it differs from the one in use. */
bool gpu_device_set_handle(struct gpu_device *d, nvmlDevice_t handle);

#endif
