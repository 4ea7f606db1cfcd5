/* A simulated node as described by a YAML scenario or a built-in preset:
 * what the GPUs are and how they are connected. Shared by the simulator
 * library and by gpulet, which validates --simulate before loading it. */
#ifndef GPULET_SIM_SCENARIO_H
#define GPULET_SIM_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>

#include "nvml/nvml_abi.h"
#include "util/err.h"

#define SIM_MAX_GPUS 64

/* One GPU instance profile of a MIG-capable model, as
 * nvmlDeviceGetGpuInstanceProfileInfo and nvidia-smi mig -lgip give it. */
struct sim_mig_profile {
    const char *name;        /* "1g.10gb": the driver's name (the device plugin derives it) */
    unsigned index;          /* NVML_GPU_INSTANCE_PROFILE_*: what the API is asked with */
    unsigned id;             /* the profile ID (-lgip's ID; -cgi takes it) */
    unsigned slices, instances, sms, ce, dec, enc, jpeg, ofa;
    unsigned long long memory_mib;
    unsigned size;           /* memory units (of 8) a placement spans */
    unsigned starts;         /* bit k: a placement may start at unit k */
};

#define SIM_MIG_UNITS 8      /* memory units of a MIG GPU; 7 compute slices */
#define SIM_MIG_MAX 7        /* MIG devices on one GPU */

/* A GPU model: identity and the limits its live values move within. */
struct sim_product {
    const char *key;         /* scenario name: "h100-sxm" */
    const char *name;        /* what nvmlDeviceGetName returns */
    nvmlDeviceArchitecture_t arch;
    int cc_major, cc_minor;
    unsigned pci_device_id;  /* device << 16 | vendor, as NVML reports it */
    unsigned pci_subsystem_id;
    unsigned long long memory_mib, reserved_mib;
    unsigned nvlinks;        /* NVLinks per GPU; 0 for PCIe-only parts */
    unsigned power_idle_w, power_max_w;
    unsigned sm_clock_idle, sm_clock_max, mem_clock;
    bool mig_capable;
    const struct sim_mig_profile *mig; /* its profiles, ended by one without a name */
    bool c2c;                /* joined to a Grace CPU by NVLink-C2C */
};

/* A MIG device: one GPU instance with one compute instance spanning it;
 * bare between a GPU instance's creation and its compute instance's (no
 * MIG device yet: NVML lists it as a hole). */
struct sim_mig_device {
    const struct sim_mig_profile *profile;
    unsigned start;          /* its placement's first memory unit */
    unsigned gi, ci;         /* GPU and compute instance IDs */
    unsigned uuid_gen;       /* the layout or creation that made it: names its UUID */
    bool bare;               /* a GPU instance without its compute instance */
};

/* One NVLink of a GPU: to a peer GPU or to an NVSwitch. */
struct sim_link {
    nvmlIntNvLinkDeviceType_t remote_type;
    int remote_gpu;          /* index of the peer, -1 for an NVSwitch */
};

#define SIM_SCENARIO_PROCS 16   /* processes a scenario may start on one GPU */

/* A process with a context on a simulated GPU (scenario `processes:`,
 * `gpulet sim proc`). */
struct sim_proc {
    unsigned pid;
    unsigned long long memory_mib;
    unsigned sm;             /* % of the SMs it keeps busy */
};

/* The static description of one simulated GPU. */
struct sim_gpu {
    unsigned index, minor;
    const struct sim_product *product;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    unsigned domain, bus, device;
    int numa_node;
    int pcie_switch;         /* GPUs with the same value share a PCIe switch; -1: none,
                                the GPU sits on the host bridge */
    bool mig_enabled;
    bool mig_pending;          /* the other MIG mode waits for a reset */
    struct sim_mig_device mig[SIM_MIG_MAX];
    unsigned nmig;
    unsigned mig_generation;   /* layouts made so far: new MIG devices get new UUIDs */
    struct sim_proc procs[SIM_SCENARIO_PROCS];
    unsigned nprocs;
    unsigned nlinks;
    struct sim_link links[NVML_NVLINK_MAX_LINKS];
};

struct scenario {
    char name[64];
    char driver_version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    int cuda_version;        /* 1000 * major + 10 * minor, as NVML reports it */
    bool fabric;             /* on a multi-node NVLink fabric: every GPU registered in it */
    unsigned char cluster_uuid[NVML_GPU_FABRIC_UUID_LEN];
    unsigned clique_id;
    unsigned count;
    struct sim_gpu gpus[SIM_MAX_GPUS];
};

/* Parses scenario YAML text; errors name source, line and column. */
int scenario_parse(const char *source, const char *text, size_t len, struct scenario *sc,
                   struct err *e);

/* Loads a built-in preset by name, or else a scenario file by path. */
int scenario_load(const char *spec, struct scenario *sc, struct err *e);

/* Whether spec loads, before a process commits to it (--simulate): an
 * unknown preset is a usage error (exit 2), a bad file a failure. */
int scenario_check(const char *spec, struct err *e);

/* The product with this scenario key, or NULL. */
const struct sim_product *sim_product_find(const char *key);

/* The profile of product p called name ("3g.40gb"), or NULL. */
const struct sim_mig_profile *sim_mig_profile_find(const struct sim_product *p, const char *name);

/* Lays out MIG devices of the named profiles on g, replacing what it had,
 * larger placements first, each at the first placement that leaves room
 * for the rest; GPU instance IDs in that order from 1; MIG UUIDs from the
 * GPU's (sim_mig_uuid). -1 with why (a sentence) when a profile is unknown to the model,
 * more than its instances are asked for, or they do not fit. */
int sim_mig_layout(struct sim_gpu *g, const char *const *names, unsigned n, char *why, size_t len);

/* Whether GPU g can take one more GPU instance of profile m at start
 * (nvmlDeviceCreateGpuInstanceWithPlacement's rules: a start the profile
 * allows, free memory units, the profile's instance count, 7 compute
 * slices, SIM_MIG_MAX instances); NULL if so, else why. */
const char *sim_mig_room(const struct sim_gpu *g, const struct sim_mig_profile *m, unsigned start);

/* The UUID of the MIG device with GPU instance gi, made by layout number
 * generation on the GPU with this UUID: MIG-..., stable across runs. */
void sim_mig_uuid(const char *gpu_uuid, unsigned generation, unsigned gi, char *out, size_t len);

/* MIG profile tables (mig.c). */
extern const struct sim_mig_profile sim_mig_a100_40gb[], sim_mig_a100_80gb[], sim_mig_h100_80gb[],
    sim_mig_h200[], sim_mig_gh200[];

/* All products, NULL-terminated. */
extern const struct sim_product *const sim_products[];

/* The YAML text of a built-in preset, or NULL. */
const char *sim_preset_text(const char *name);

/* Built-in preset names, NULL-terminated. */
extern const char *const sim_preset_names[];

#endif
