/* The device inventory: what NVML (or, for the IDs, the driver's procfs)
 * says of the node's GPUs: identity, memory, NUMA, links. Whoever builds
 * it owns it. In the agent, only start-up writes it (the IDs, then NVML's
 * facts merged in on the loop); everyone else reads it, on the loop, as
 * const. What changes while running (handle, health, XIDs) is not here
 * but in the agent's device records (gpu/device.h). */
#ifndef GPULET_INVENTORY_H
#define GPULET_INVENTORY_H

#include <stdbool.h>

#include "nvml/nvml.h"

#define GPU_MIG_MAX 7

/* A MIG device of a GPU with MIG enabled: one GPU instance and one compute
 * instance, as NVML lists them (nvmlDeviceGetMigDeviceHandleByIndex). */
struct gpu_mig {
    nvmlDevice_t handle;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE]; /* MIG-... */
    unsigned gi, ci;                /* GPU and compute instance IDs */
    char profile[32];               /* "1g.10gb", "1g.10gb+me", "1c.3g.40gb": NVIDIA's names */
    unsigned gi_profile;            /* the GPU instance's profile ID (NVML_GPU_INSTANCE_PROFILE_*) */
    unsigned placement_start, placement_size; /* its memory slices; size 0: unknown */
    nvmlDeviceAttributes_t attr;    /* SMs, engines, slices, memory (MiB) */
};

/* A GPU instance profile of a MIG-capable GPU: what a MIG device of it
 * holds, and where one may be placed. */
#define GPU_MIG_PROFILES 8
#define GPU_MIG_SLICES 8            /* memory slices of a MIG GPU (placements count in them) */
struct gpu_mig_profile {
    char name[32];                  /* "1g.10gb+me" (gpu_mig_profile_name) */
    nvmlGpuInstanceProfileInfo_t info; /* its ID, slices, SMs, engines, memory (MiB) */
    unsigned starts;                /* bit k: a placement may start at memory slice k */
    unsigned size;                  /* the memory slices a placement spans */
};

struct gpu_info {
    nvmlDevice_t handle;            /* as found when built; a running agent uses its device model's */
    unsigned index;
    unsigned minor;                 /* /dev/nvidiaN */
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char pci_bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* as NVML writes it: 00000000:1B:00.0 */
    unsigned pci_device_id;         /* device and vendor: 0x233010DE (mig-parted's device-filter) */
    unsigned long long memory_total; /* bytes */
    int numa_node;                  /* -1: unknown or not a NUMA system */
    int cc_major, cc_minor;         /* -1: unknown */
    const char *architecture;       /* "hopper"; "unknown" when NVML cannot say */
    int mig_mode;                   /* -1: not supported, else NVML_DEVICE_MIG_* */
    struct gpu_mig mig[GPU_MIG_MAX]; /* with MIG enabled: its MIG devices */
    unsigned nmig;
    struct gpu_mig_profile mig_profiles[GPU_MIG_PROFILES]; /* with MIG enabled: what it can make */
    unsigned nmig_profiles;
    int pci_class;                  /* base << 8 | sub: 0x0302 compute, 0x0300 graphics; -1 unknown */
    int brand;                      /* nvmlBrandType_t; -1 unknown */
    char clique[64];                /* "<fabric cluster UUID>.<clique ID>"; empty: no fabric */
    bool lost;                      /* NVML answered GPU_IS_LOST */
    char problem[160];              /* the first NVML error met while reading it, if any */
};

/* How two GPUs are connected. */
struct gpu_link {
    unsigned nvlinks;               /* NVLinks between them, direct or through NVSwitch */
    int pcie;                       /* nvmlGpuTopologyLevel_t, -1 when NVML cannot say */
};

struct gpu_inventory {
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    char nvml_version[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    int cuda_version;               /* 13000 for 13.0; -1 unknown */
    char library[512];              /* the NVML file in use */
    unsigned count;
    struct gpu_info *gpus;
    struct gpu_link *links;         /* count x count, row-major */
};

/* Reads the whole inventory. A GPU that fails is kept, marked lost or with
 * its problem; only failures to enumerate at all are errors. */
int gpu_inventory_build(struct nvml *n, struct gpu_inventory *inv, struct err *e);

/* gpu_inventory_build in two halves, so that the agent can register with the
 * kubelet before the slow half is done. The first reads what the device
 * plugin needs (count, handles, UUIDs, minor numbers, MIG mode, product
 * names: about the cost of NVML's first handle). The second reads the rest (name, PCI,
 * memory, NUMA, compute capability, architecture, links: memory affinity
 * alone took 8.8 ms on an H200) into the inventory it is given, which may
 * be a copy (gpu_inventory_copy) read off the loop. */
int gpu_inventory_build_ids(struct nvml *n, struct gpu_inventory *inv, struct err *e);
void gpu_inventory_read_facts(struct nvml *n, struct gpu_inventory *inv);
void gpu_inventory_copy(struct gpu_inventory *dst, const struct gpu_inventory *src);

/* Takes what NVML found (from) into inv, GPU by GPU matched by UUID, in
 * place: others hold pointers into inv->gpus. map[i] gets from's position
 * of inv's GPU i, or -1 where NVML did not list it (inv's entry is kept). */
void gpu_inventory_merge(struct gpu_inventory *inv, const struct gpu_inventory *from, int *map);

/* Frees what the inventory owns. */
void gpu_inventory_free(struct gpu_inventory *inv);

/* The device an advertised device ID (len bytes, without a replica's
 * "::N") names: a GPU by UUID or index (*mig -1), or a MIG device by UUID
 * or "<GPU>:<MIG index>". False for none of ours. */
bool gpu_inventory_find_id(const struct gpu_inventory *inv, const char *id, size_t len,
                           unsigned *gpu, int *mig);

/* The link between GPUs a and b (by position in inv->gpus). */
const struct gpu_link *gpu_inventory_link(const struct gpu_inventory *inv, unsigned a, unsigned b);

/* Fills inv->links from NVML (NVLink counts, PCIe common ancestors). */
void gpu_topology_read(struct nvml *n, struct gpu_inventory *inv);

/* The MIG devices of g, where MIG is enabled (gpu/mig.c). */
void gpu_mig_read(struct nvml *n, struct gpu_info *g);

/* The GPU instance profiles of g and their placements, where MIG is
 * enabled (the facts' half: they never change). */
void gpu_mig_profiles_read(struct nvml *n, struct gpu_info *g);

/* Makes a MIG device on g (its handle the one in use): a GPU instance of
 * profile (its ID) at placement start, with one compute instance spanning
 * it; then reads g's MIG devices again, and *made is the new one's index
 * among them. The GPU instance goes again if its compute instance fails.
 * 0, or -1 with NVML's word. */
int gpu_mig_create(struct nvml *n, struct gpu_info *g, unsigned profile, unsigned start,
                   unsigned *made, struct err *e);

/* Destroys g's MIG device of GPU instance gi, compute instance ci, where
 * its UUID is still uuid (a restart may find another there, or none: then
 * nothing is done); then reads g's MIG devices again. 0, or -1 with
 * NVML's word (IN_USE: a process still runs in it). */
int gpu_mig_destroy(struct nvml *n, struct gpu_info *g, unsigned gi, unsigned ci, const char *uuid,
                    struct err *e);

/* A MIG device of a layout: a GPU instance of profile gi_profile (its ID)
 * with one compute instance of ci_slices compute slices. */
struct gpu_mig_item {
    unsigned gi_profile, ci_slices;
};
#define GPU_MIG_ORDERS 5040         /* 7!: every order of seven MIG devices */

/* Makes g's MIG devices exactly items, as NVIDIA's mig-parted does: every
 * compute and GPU instance g has is destroyed, then each GPU instance made
 * in the order given where the driver places it, with its compute
 * instance; where an order does not fit, the next distinct order (up to
 * GPU_MIG_ORDERS). On failure g is left with none, never half a layout.
 * Then reads g's MIG devices again. 0, or -1 with NVML's word (IN_USE: a
 * process still runs in one). On the GPU's lane. */
int gpu_mig_layout(struct nvml *n, struct gpu_info *g, const struct gpu_mig_item *items,
                   unsigned count, struct err *e);

/* Whether items fit on g at all: their compute slices, and some placement
 * of each in its memory slices (g's profiles as read). Pure. */
bool gpu_mig_fits(const struct gpu_info *g, const struct gpu_mig_item *items, unsigned count);

/* Turns g's MIG mode on or off; *reset where the driver applies it only at
 * a GPU reset (before Hopper), which gpulet never does: -1 saying so. Then
 * reads g's mode, profiles and MIG devices again. On the GPU's lane. */
int gpu_mig_set_mode(struct nvml *n, struct gpu_info *g, bool on, bool *reset, struct err *e);

/* A MIG device's profile name as NVIDIA's plugin and GFD spell it: slices
 * and memory in GB as a fraction of the GPU's (gpu_total_mib), "+me" for
 * a 1g-6g instance with the media engines (OFA), "Nc." before when the
 * compute instance is smaller than its GPU instance. */
void gpu_mig_profile_name(unsigned long long gpu_total_mib, const nvmlDeviceAttributes_t *a,
                          char *out, size_t len);

/* The minor of /dev/nvidia-caps/nvidia-cap<N> for a MIG device's GPU
 * instance (ci < 0) or compute instance access capability: the driver's
 * <proc_root>/driver/nvidia-caps/mig-minors, else its fixed numbering. */
unsigned gpu_mig_cap_minor(const char *proc_root, unsigned gpu_minor, unsigned gi, int ci);

/* The driver's fixed numbering of those minors. */
unsigned gpu_mig_cap_numbering(unsigned gpu_minor, unsigned gi, int ci);

/* nvidia-smi topo's short name for a PCIe level: PIX, PXB, PHB, NODE, SYS. */
const char *gpu_topology_level_name(int level);

#endif
