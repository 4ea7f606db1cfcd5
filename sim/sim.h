/* The simulated NVML's runtime state. NVML's C API has no context argument,
 * so the library keeps its state in one struct (struct sim, `sim_state`),
 * guarded by one mutex: gpulet calls NVML from its loop and from its event
 * thread, and the control socket thread injects faults. */
#ifndef GPULET_SIM_H
#define GPULET_SIM_H

#include <pthread.h>
#include <stdbool.h>

#include "scenario.h"
#include "util/dirs.h"

#define SIM_API __attribute__((visibility("default")))
#define SIM_EVENT_QUEUE 256
#define SIM_SUPPORTED_EVENTS                                                           \
    (nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError |                  \
     nvmlEventTypePState | nvmlEventTypeXidCriticalError | nvmlEventTypeClock)

/* Values an operator can pin with `gpulet sim set`; unpinned ones follow the live model. */
enum sim_field {
    SIM_UTIL_GPU,      /* utilization.gpu, percent */
    SIM_UTIL_MEM,      /* utilization.memory, percent */
    SIM_MEM_USED,      /* memory.used, MiB */
    SIM_TEMP,          /* temperature.gpu, C */
    SIM_POWER,         /* power.draw, W */
    SIM_CLOCK_SM,      /* clocks.sm, MHz */
    SIM_CLOCK_MEM,     /* clocks.mem, MHz */
    SIM_FIELD_COUNT
};

/* A simulated GPU; its address is the nvmlDevice_t handle. */
#define SIM_MAX_PROCS 128

struct nvmlDevice_st {
    struct sim_gpu desc;
    bool lost;                          /* calls answer NVML_ERROR_GPU_IS_LOST */
    bool pinned[SIM_FIELD_COUNT];
    double pin[SIM_FIELD_COUNT];
    double energy_mj;                   /* running total since "driver load" */
    double energy_t;                    /* model time of the last energy update */
    double nvlink_kib;                  /* NVLink data moved, TX and RX each, since load */
    double nvlink_t;
    unsigned long long ecc_volatile[2]; /* [corrected, uncorrected], zeroed by a reset */
    unsigned long long ecc_aggregate[2];
    unsigned pcie_replays;
    double phase, period;               /* the utilization wave of this GPU */
    nvmlComputeMode_t compute_mode;     /* DEFAULT until set */
    /* node-check faults (`gpulet sim set`): what `gpulet doctor` looks for */
    bool persistence_off;               /* persistence mode disabled */
    bool pages_pending;                 /* a page retirement waits for a reset (pre-Ampere) */
    bool rows_pending, rows_failure;    /* a row remap waits for a reset; one failed */
    bool mig_pending;                   /* the MIG mode flips at the next reset */
    bool fabric_down;                   /* the fabric manager has not registered it */
    bool hung;                          /* calls on it block until a reset */
    struct sim_proc procs[SIM_MAX_PROCS];
    unsigned nprocs;
};

struct nvmlEventSet_st {
    struct nvmlEventSet_st *next;
    unsigned long long mask[SIM_MAX_GPUS]; /* event types registered per GPU */
    unsigned long long lost_pending;       /* GPUs lost since the last wait saw it */
    nvmlEventData_t queue[SIM_EVENT_QUEUE];
    unsigned head, len;
};

/* A MIG device's handle: what nvmlDeviceGetMigDeviceHandleByIndex gives.
 * NVML uses one handle type for GPUs and MIG devices; ours point here. */
struct sim_mig_handle {
    unsigned gpu, k;                    /* the GPU, and its k-th MIG device (a MIG device's handle) */
    unsigned gi;                        /* a GPU or compute instance's handle: its GPU instance's
                                         * ID, which stays while others come and go (the slot k
                                         * moves when an instance before it is destroyed) */
};

/* Where the handle of GPU (or compute) instance gi of a GPU lives: by ID. */
#define SIM_GI_SLOT(gi) (((gi) + SIM_MIG_MAX - 1) % SIM_MIG_MAX)

struct sim {
    pthread_mutex_t lock;
    pthread_cond_t events;              /* signalled when an event is queued */
    unsigned refcount;                  /* nvmlInit minus nvmlShutdown calls */
    bool loaded;                        /* scenario loaded; kept across re-inits */
    char spec[512];                     /* the scenario it was loaded from */
    struct scenario sc;
    struct nvmlDevice_st gpus[SIM_MAX_GPUS];
    struct sim_mig_handle mig_handles[SIM_MAX_GPUS][SIM_MIG_MAX];
    struct sim_mig_handle gi_handles[SIM_MAX_GPUS][SIM_MIG_MAX]; /* nvmlGpuInstance_t */
    struct sim_mig_handle ci_handles[SIM_MAX_GPUS][SIM_MIG_MAX]; /* nvmlComputeInstance_t */
    struct nvmlEventSet_st *sets;
    double t0;                          /* CLOCK_MONOTONIC seconds at first init */
    bool mig_changed;                   /* MIG state changed: GPULET_SIM_STATE is written at the unlock */
    /* control socket */
    pthread_t control_thread;
    bool control_running;
    int control_fd, control_wake[2];
    char control_path[108];
    struct dirs control_dirs;           /* the user's directory, where the socket made it */
};

extern struct sim sim_state;

/* Locks the state and checks NVML is initialized; unlocks again on failure. */
nvmlReturn_t sim_enter(void);

/* True if dev is one of the scenario's GPUs. Caller holds the lock. */
bool sim_is_device(nvmlDevice_t dev);

/* A hung GPU (`gpulet sim hang`): the call blocks, without the lock,
 * until a reset. Caller holds the lock. */
void sim_wait_hung(const struct nvmlDevice_st *dev);

/* sim_enter plus a valid, present device handle. */
nvmlReturn_t sim_enter_device(nvmlDevice_t dev);

/* sim_enter plus a handle of a present MIG device: its GPU and record. */
nvmlReturn_t sim_enter_mig(nvmlDevice_t dev, struct nvmlDevice_st **gpu,
                           const struct sim_mig_device **mig);

/* sim_enter plus a handle from table (MIG devices, GPU or compute
 * instances): the GPU and MIG device it stands for. */
nvmlReturn_t sim_enter_handle(const void *h, struct sim_mig_handle (*table)[SIM_MIG_MAX],
                              struct nvmlDevice_st **gpu, const struct sim_mig_device **mig);

/* True if dev is a MIG device handle (present or not). Caller holds the lock. */
bool sim_is_mig_handle(nvmlDevice_t dev);

/* Unlocks the state and passes rc through. */
nvmlReturn_t sim_leave(nvmlReturn_t rc);

/* The opening of most device entry points: sim_enter_device, then out
 * (the caller's pointer) checked, as NVML checks it after the handle.
 * Declares rc, which the entry point may use after it. */
#define SIM_ENTER_DEVICE(dev, out)                                                       \
    nvmlReturn_t rc = sim_enter_device(dev);                                             \
    if (rc)                                                                              \
        return rc;                                                                       \
    if (!(out))                                                                          \
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT)

/* The same for a MIG device handle (sim_enter_mig) and for a GPU or
 * compute instance handle from table (sim_enter_handle): declares rc, g
 * (the GPU) and m (its MIG device). */
#define SIM_ENTER_MIG(dev, out)                                                          \
    struct nvmlDevice_st *g = NULL;                                                      \
    const struct sim_mig_device *m = NULL;                                               \
    nvmlReturn_t rc = sim_enter_mig(dev, &g, &m);                                        \
    (void)g, (void)m;                                                                    \
    if (rc)                                                                              \
        return rc;                                                                       \
    if (!(out))                                                                          \
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT)
#define SIM_ENTER_HANDLE(h, table, out)                                                  \
    struct nvmlDevice_st *g = NULL;                                                      \
    const struct sim_mig_device *m = NULL;                                               \
    nvmlReturn_t rc = sim_enter_handle(h, table, &g, &m);                                \
    (void)g, (void)m;                                                                    \
    if (rc)                                                                              \
        return rc;                                                                       \
    if (!(out))                                                                          \
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT)

/* Copies s into buf as NVML does: INSUFFICIENT_SIZE when it does not fit. */
nvmlReturn_t sim_copy_string(char *buf, unsigned length, const char *s);

/* Seconds since the simulator started: the live model's clock. */
double sim_now(void);

/* Fills an nvmlPciInfo_t for a bus on domain 0 or the GPU's own. */
void sim_fill_pci(nvmlPciInfo_t *pci, unsigned domain, unsigned bus, unsigned device,
                  unsigned device_id, unsigned subsystem_id);

/* The GPU with this index or UUID, or NULL. Caller holds the lock. */
struct nvmlDevice_st *sim_find_gpu(const char *index_or_uuid);

/* Current value of a live field, pinned or modelled. Caller holds the lock. */
double sim_live_value(struct nvmlDevice_st *g, enum sim_field f);

/* Energy in mJ up to now, advancing the running total. Caller holds the lock. */
unsigned long long sim_live_energy(struct nvmlDevice_st *g);

/* NVLink data moved (KiB, each direction) up to now. Caller holds the lock. */
unsigned long long sim_live_nvlink(struct nvmlDevice_st *g);

/* Resets a GPU's live state to power-on values. */
void sim_live_reset(struct nvmlDevice_st *g, bool first_boot);

/* Queues an event for every set registered for it. Caller holds the lock. */
void sim_event_post(struct nvmlDevice_st *g, unsigned long long type, unsigned long long data);

/* The same, naming the GPU and compute instance it happened in (MIG). */
void sim_event_post_instance(struct nvmlDevice_st *g, unsigned long long type,
                             unsigned long long data, unsigned gi, unsigned ci);

/* Marks a GPU lost in every event set. Caller holds the lock. */
void sim_event_lost(struct nvmlDevice_st *g);

/* Drops every event set (final shutdown). Caller holds the lock. */
void sim_events_clear(void);

/* GPULET_SIM_STATE (state.c): the MIG state read at the first load (-1
 * on a file that does not fit, said on stderr), and written at each last
 * shutdown and at the unlock after each change (sim_state.mig_changed),
 * as the kernel keeps it whatever becomes of the process. Caller holds
 * the lock. */
int sim_state_restore(void);
void sim_state_save(void);

/* Applies one control command line; writes the one-line answer to reply. */
int sim_fault_command(const char *line, char *reply, size_t reply_len);

/* The same, with the simulator's lock held (at load: GPULET_SIM_FAULTS). */
int sim_fault_command_locked(const char *line, char *reply, size_t reply_len);

/* Starts the control socket thread (best effort: a warning on failure). */
void sim_control_start(void);

/* Stops the control socket thread. Must be called without the lock held. */
void sim_control_stop(void);

#endif
