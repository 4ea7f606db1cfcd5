/* NVML loaded at run time with dlopen. One struct nvml holds the library
 * handle and a pointer per function gpulet calls, each resolved to the
 * newest versioned symbol the library has. */
#ifndef GPULET_NVML_H
#define GPULET_NVML_H

#include <stdatomic.h>
#include <stdbool.h>

#include "nvml/nvml_abi.h"
#include "util/err.h"

/* X(field, symbol names newest first..., NULL). A field whose every name is
 * missing stays NULL; required ones fail the load. The names of one entry
 * share a signature, so any of them can fill the field. */
#define NVML_REQUIRED_FUNCS(X)                                                        \
    X(Init, nvmlInit_v2, "nvmlInit_v2", "nvmlInit")                                  \
    X(Shutdown, nvmlShutdown, "nvmlShutdown")                                         \
    X(ErrorString, nvmlErrorString, "nvmlErrorString")                                \
    X(SystemGetDriverVersion, nvmlSystemGetDriverVersion, "nvmlSystemGetDriverVersion") \
    X(DeviceGetCount, nvmlDeviceGetCount_v2, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount") \
    X(DeviceGetHandleByIndex, nvmlDeviceGetHandleByIndex_v2, "nvmlDeviceGetHandleByIndex_v2", \
      "nvmlDeviceGetHandleByIndex")                                                   \
    X(DeviceGetUUID, nvmlDeviceGetUUID, "nvmlDeviceGetUUID")                          \
    X(DeviceGetName, nvmlDeviceGetName, "nvmlDeviceGetName")                          \
    X(DeviceGetPciInfo, nvmlDeviceGetPciInfo_v3, "nvmlDeviceGetPciInfo_v3",            \
      "nvmlDeviceGetPciInfo_v2")                                                      \
    X(DeviceGetMinorNumber, nvmlDeviceGetMinorNumber, "nvmlDeviceGetMinorNumber")

#define NVML_OPTIONAL_FUNCS(X)                                                        \
    X(SystemGetNVMLVersion, nvmlSystemGetNVMLVersion, "nvmlSystemGetNVMLVersion")    \
    X(SystemGetCudaDriverVersion, nvmlSystemGetCudaDriverVersion_v2,                  \
      "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion")          \
    X(DeviceGetHandleByUUID, nvmlDeviceGetHandleByUUID, "nvmlDeviceGetHandleByUUID")  \
    X(DeviceGetMemoryInfoV2, nvmlDeviceGetMemoryInfo_v2, "nvmlDeviceGetMemoryInfo_v2") \
    X(DeviceGetMemoryInfo, nvmlDeviceGetMemoryInfo, "nvmlDeviceGetMemoryInfo")        \
    X(DeviceGetPciInfoExt, nvmlDeviceGetPciInfoExt, "nvmlDeviceGetPciInfoExt")        \
    X(DeviceGetComputeMode, nvmlDeviceGetComputeMode, "nvmlDeviceGetComputeMode")     \
    X(DeviceGetComputeRunningProcesses, nvmlDeviceGetComputeRunningProcesses_v3,       \
      "nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2") \
    X(DeviceGetProcessUtilization, nvmlDeviceGetProcessUtilization,                   \
      "nvmlDeviceGetProcessUtilization")                                              \
    X(DeviceSetComputeMode, nvmlDeviceSetComputeMode, "nvmlDeviceSetComputeMode")     \
    X(DeviceGetGpuFabricInfo, nvmlDeviceGetGpuFabricInfo, "nvmlDeviceGetGpuFabricInfo") \
    X(DeviceGetMemoryAffinity, nvmlDeviceGetMemoryAffinity, "nvmlDeviceGetMemoryAffinity") \
    X(DeviceGetCudaComputeCapability, nvmlDeviceGetCudaComputeCapability,             \
      "nvmlDeviceGetCudaComputeCapability")                                           \
    X(DeviceGetArchitecture, nvmlDeviceGetArchitecture, "nvmlDeviceGetArchitecture")  \
    X(DeviceGetMigMode, nvmlDeviceGetMigMode, "nvmlDeviceGetMigMode")                 \
    X(DeviceGetMaxMigDeviceCount, nvmlDeviceGetMaxMigDeviceCount, "nvmlDeviceGetMaxMigDeviceCount") \
    X(DeviceGetMigDeviceHandleByIndex, nvmlDeviceGetMigDeviceHandleByIndex,           \
      "nvmlDeviceGetMigDeviceHandleByIndex")                                          \
    X(DeviceGetGpuInstanceId, nvmlDeviceGetGpuInstanceId, "nvmlDeviceGetGpuInstanceId") \
    X(DeviceGetComputeInstanceId, nvmlDeviceGetComputeInstanceId,                     \
      "nvmlDeviceGetComputeInstanceId")                                               \
    X(DeviceGetGpuInstanceById, nvmlDeviceGetGpuInstanceById, "nvmlDeviceGetGpuInstanceById") \
    X(GpuInstanceGetInfo, nvmlGpuInstanceGetInfo, "nvmlGpuInstanceGetInfo")           \
    X(DeviceGetGpuInstanceProfileInfo, nvmlDeviceGetGpuInstanceProfileInfo,           \
      "nvmlDeviceGetGpuInstanceProfileInfo")                                          \
    X(DeviceGetGpuInstancePossiblePlacements, nvmlDeviceGetGpuInstancePossiblePlacements_v2, \
      "nvmlDeviceGetGpuInstancePossiblePlacements_v2")                                \
    X(DeviceCreateGpuInstanceWithPlacement, nvmlDeviceCreateGpuInstanceWithPlacement, \
      "nvmlDeviceCreateGpuInstanceWithPlacement")                                     \
    X(DeviceCreateGpuInstance, nvmlDeviceCreateGpuInstance, "nvmlDeviceCreateGpuInstance") \
    X(DeviceGetGpuInstances, nvmlDeviceGetGpuInstances, "nvmlDeviceGetGpuInstances")  \
    X(GpuInstanceGetComputeInstances, nvmlGpuInstanceGetComputeInstances,             \
      "nvmlGpuInstanceGetComputeInstances")                                           \
    X(DeviceSetMigMode, nvmlDeviceSetMigMode, "nvmlDeviceSetMigMode")                 \
    X(GpuInstanceGetComputeInstanceProfileInfo, nvmlGpuInstanceGetComputeInstanceProfileInfo, \
      "nvmlGpuInstanceGetComputeInstanceProfileInfo")                                 \
    X(GpuInstanceCreateComputeInstance, nvmlGpuInstanceCreateComputeInstance,         \
      "nvmlGpuInstanceCreateComputeInstance")                                         \
    X(GpuInstanceGetComputeInstanceById, nvmlGpuInstanceGetComputeInstanceById,       \
      "nvmlGpuInstanceGetComputeInstanceById")                                        \
    X(ComputeInstanceDestroy, nvmlComputeInstanceDestroy, "nvmlComputeInstanceDestroy") \
    X(GpuInstanceDestroy, nvmlGpuInstanceDestroy, "nvmlGpuInstanceDestroy")           \
    X(DeviceGetAttributes, nvmlDeviceGetAttributes_v2, "nvmlDeviceGetAttributes_v2",  \
      "nvmlDeviceGetAttributes")                                                      \
    X(DeviceGetPersistenceMode, nvmlDeviceGetPersistenceMode, "nvmlDeviceGetPersistenceMode") \
    X(DeviceGetRetiredPagesPendingStatus, nvmlDeviceGetRetiredPagesPendingStatus,     \
      "nvmlDeviceGetRetiredPagesPendingStatus")                                       \
    X(DeviceGetRemappedRows, nvmlDeviceGetRemappedRows, "nvmlDeviceGetRemappedRows")  \
    X(DeviceGetNvLinkState, nvmlDeviceGetNvLinkState, "nvmlDeviceGetNvLinkState")     \
    X(DeviceGetNvLinkRemotePciInfo, nvmlDeviceGetNvLinkRemotePciInfo_v2,              \
      "nvmlDeviceGetNvLinkRemotePciInfo_v2")                                          \
    X(DeviceGetNvLinkRemoteDeviceType, nvmlDeviceGetNvLinkRemoteDeviceType,           \
      "nvmlDeviceGetNvLinkRemoteDeviceType")                                          \
    X(DeviceGetTopologyCommonAncestor, nvmlDeviceGetTopologyCommonAncestor,           \
      "nvmlDeviceGetTopologyCommonAncestor")                                          \
    X(EventSetCreate, nvmlEventSetCreate, "nvmlEventSetCreate")                       \
    X(EventSetFree, nvmlEventSetFree, "nvmlEventSetFree")                             \
    X(DeviceGetSupportedEventTypes, nvmlDeviceGetSupportedEventTypes,                 \
      "nvmlDeviceGetSupportedEventTypes")                                             \
    X(DeviceRegisterEvents, nvmlDeviceRegisterEvents, "nvmlDeviceRegisterEvents")     \
    X(EventSetWait, nvmlEventSetWait_v2, "nvmlEventSetWait_v2", "nvmlEventSetWait")     \
    X(DeviceGetTotalEccErrors, nvmlDeviceGetTotalEccErrors, "nvmlDeviceGetTotalEccErrors") \
    X(DeviceGetUtilizationRates, nvmlDeviceGetUtilizationRates, "nvmlDeviceGetUtilizationRates") \
    X(DeviceGetTemperature, nvmlDeviceGetTemperature, "nvmlDeviceGetTemperature")     \
    X(DeviceGetPowerUsage, nvmlDeviceGetPowerUsage, "nvmlDeviceGetPowerUsage")        \
    X(DeviceGetClockInfo, nvmlDeviceGetClockInfo, "nvmlDeviceGetClockInfo")           \
    X(DeviceGetTotalEnergyConsumption, nvmlDeviceGetTotalEnergyConsumption,           \
      "nvmlDeviceGetTotalEnergyConsumption")                                          \
    X(DeviceGetPcieReplayCounter, nvmlDeviceGetPcieReplayCounter,                     \
      "nvmlDeviceGetPcieReplayCounter")                                               \
    X(DeviceGetEncoderUtilization, nvmlDeviceGetEncoderUtilization,                   \
      "nvmlDeviceGetEncoderUtilization")                                              \
    X(DeviceGetDecoderUtilization, nvmlDeviceGetDecoderUtilization,                   \
      "nvmlDeviceGetDecoderUtilization")                                              \
    X(DeviceGetFieldValues, nvmlDeviceGetFieldValues, "nvmlDeviceGetFieldValues")     \
    X(DeviceGetVirtualizationMode, nvmlDeviceGetVirtualizationMode,                   \
      "nvmlDeviceGetVirtualizationMode")                                              \
    X(DeviceGetSerial, nvmlDeviceGetSerial, "nvmlDeviceGetSerial")                    \
    X(DeviceGetVbiosVersion, nvmlDeviceGetVbiosVersion, "nvmlDeviceGetVbiosVersion")  \
    X(DeviceGetBrand, nvmlDeviceGetBrand, "nvmlDeviceGetBrand")                       \
    X(GpmSampleAlloc, nvmlGpmSampleAlloc, "nvmlGpmSampleAlloc")                       \
    X(GpmSampleFree, nvmlGpmSampleFree, "nvmlGpmSampleFree")                          \
    X(GpmSampleGet, nvmlGpmSampleGet, "nvmlGpmSampleGet")                             \
    X(GpmMetricsGet, nvmlGpmMetricsGet, "nvmlGpmMetricsGet")

struct nvml {
    void *dl;            /* NULL when functions come from a test's lookup */
    char path[512];      /* the library that was loaded */
    bool initialized;    /* nvmlInit succeeded; nvml_close calls nvmlShutdown */
    double load_ms;      /* time dlopen and symbol resolution took */
    double init_ms;      /* time nvmlInit took */
#define NVML_FIELD(field, proto, ...) __typeof__(&proto) field;
    NVML_REQUIRED_FUNCS(NVML_FIELD)
    NVML_OPTIONAL_FUNCS(NVML_FIELD)
#undef NVML_FIELD
};

/* Every function, numbered, and its symbol: for naming the call a thread
 * is in (NVML_CALL). */
#define NVML_FN_ENUM(field, proto, ...) NVML_FN_##field,
enum nvml_fn { NVML_REQUIRED_FUNCS(NVML_FN_ENUM) NVML_OPTIONAL_FUNCS(NVML_FN_ENUM) NVML_FN_COUNT };
#undef NVML_FN_ENUM
extern const char *const nvml_fn_names[NVML_FN_COUNT];

/* Where the calling thread notes which NVML call it is in (an enum
 * nvml_fn), or NULL: a GPU's lane points it at its own slot, so that a
 * watchdog can say which call hangs. */
extern _Thread_local _Atomic int *nvml_call_slot;

static inline void nvml_calling(enum nvml_fn fn)
{
    if (nvml_call_slot)
        atomic_store_explicit(nvml_call_slot, (int)fn, memory_order_relaxed);
}

/* n->field(args...), noting the call first (nvml_call_slot). The calls
 * made on a GPU's lane go through this. */
#define NVML_CALL(n, field, ...) (nvml_calling(NVML_FN_##field), (n)->field(__VA_ARGS__))

/* Resolves a symbol by name; dlsym in production, a table in tests. */
typedef void *(*nvml_lookup_fn)(void *ctx, const char *name);

/* Fills every function pointer through lookup, newest name first. Fails,
 * naming the function, when a required one has none of its names. */
int nvml_resolve(struct nvml *n, nvml_lookup_fn lookup, void *ctx, struct err *e);

/* dlopens path, or when path is NULL the usual driver locations, and resolves
 * the functions. The error names every location that was tried. */
int nvml_open(struct nvml *n, const char *path, struct err *e);

/* nvmlInit; the error carries NVML's own error string. */
int nvml_init(struct nvml *n, struct err *e);

/* Shuts NVML down if it was initialized and closes the library. */
void nvml_close(struct nvml *n);

/* Opens NVML: the simulator on simulate (a preset name or scenario file)
 * when it is not NULL, else the library at path, else the driver's
 * (src/nvml/select.c). nvml_start also initializes it. */
int nvml_select(struct nvml *n, const char *simulate, const char *path, struct err *e);
/* The simulator library's path: $GPULET_SIM_LIB, else next to the binary
 * or in its ../lib/gpulet. */
int nvml_find_sim(char *out, size_t len, struct err *e);
int nvml_start(struct nvml *n, const char *simulate, const char *path, struct err *e);

/* NVML's message for rc: the library's own when loaded, else gpulet's copy. */
const char *nvml_strerror(const struct nvml *n, nvmlReturn_t rc);

/* gpulet's copy of NVML's error strings, for when no library is loaded. */
const char *nvml_errors_builtin(nvmlReturn_t rc);

/* Milliseconds on the monotonic clock, for timing start-up steps. */
double nvml_clock_ms(void);

/* The driver locations nvml_open tries, NULL-terminated. */
extern const char *const nvml_search_paths[];

#endif
