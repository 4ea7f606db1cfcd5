/* Prints the size and field offsets of every NVML struct gpulet declares.
 * Built twice, once against our src/nvml/nvml_abi.h and once against
 * NVIDIA's nvml.h (-DUSE_NVIDIA_HEADER, on a machine that has it); the two
 * outputs must be identical. See docs/real-gpu.md. */
#include <stddef.h>
#include <stdio.h>
#ifdef USE_NVIDIA_HEADER
#include <nvml.h>
#else
#include "nvml/nvml_abi.h"
#endif

#define SIZE(t) printf("sizeof(%s) = %zu\n", #t, sizeof(t))
#define OFF(t, f) printf("offsetof(%s, %s) = %zu\n", #t, #f, offsetof(t, f))

int main(void)
{
    SIZE(nvmlPciInfo_t);
    OFF(nvmlPciInfo_t, busIdLegacy);
    OFF(nvmlPciInfo_t, domain);
    OFF(nvmlPciInfo_t, bus);
    OFF(nvmlPciInfo_t, device);
    OFF(nvmlPciInfo_t, pciDeviceId);
    OFF(nvmlPciInfo_t, pciSubSystemId);
    OFF(nvmlPciInfo_t, busId);
    SIZE(nvmlPciInfoExt_t);
    OFF(nvmlPciInfoExt_t, version);
    OFF(nvmlPciInfoExt_t, pciSubSystemId);
    OFF(nvmlPciInfoExt_t, baseClass);
    OFF(nvmlPciInfoExt_t, subClass);
    OFF(nvmlPciInfoExt_t, busId);
    printf("nvmlPciInfoExt_v1 = 0x%x\n", (unsigned)nvmlPciInfoExt_v1);
    SIZE(nvmlProcessInfo_t);
    OFF(nvmlProcessInfo_t, usedGpuMemory);
    OFF(nvmlProcessInfo_t, gpuInstanceId);
    OFF(nvmlProcessInfo_t, computeInstanceId);
    SIZE(nvmlProcessUtilizationSample_t);
    OFF(nvmlProcessUtilizationSample_t, timeStamp);
    OFF(nvmlProcessUtilizationSample_t, smUtil);
    OFF(nvmlProcessUtilizationSample_t, decUtil);
    SIZE(nvmlGpuFabricInfo_t);
    OFF(nvmlGpuFabricInfo_t, clusterUuid);
    OFF(nvmlGpuFabricInfo_t, status);
    OFF(nvmlGpuFabricInfo_t, cliqueId);
    OFF(nvmlGpuFabricInfo_t, state);
    SIZE(nvmlMemory_t);
    OFF(nvmlMemory_t, total);
    OFF(nvmlMemory_t, free);
    OFF(nvmlMemory_t, used);
    SIZE(nvmlMemory_v2_t);
    OFF(nvmlMemory_v2_t, version);
    OFF(nvmlMemory_v2_t, total);
    OFF(nvmlMemory_v2_t, reserved);
    OFF(nvmlMemory_v2_t, free);
    OFF(nvmlMemory_v2_t, used);
    printf("nvmlMemory_v2 = 0x%x\n", (unsigned)nvmlMemory_v2);
    SIZE(nvmlUtilization_t);
    OFF(nvmlUtilization_t, memory);
    SIZE(nvmlEventData_t);
    OFF(nvmlEventData_t, device);
    OFF(nvmlEventData_t, eventType);
    OFF(nvmlEventData_t, eventData);
    OFF(nvmlEventData_t, gpuInstanceId);
    OFF(nvmlEventData_t, computeInstanceId);
    SIZE(nvmlFieldValue_t);
    OFF(nvmlFieldValue_t, scopeId);
    OFF(nvmlFieldValue_t, timestamp);
    OFF(nvmlFieldValue_t, latencyUsec);
    OFF(nvmlFieldValue_t, valueType);
    OFF(nvmlFieldValue_t, nvmlReturn);
    OFF(nvmlFieldValue_t, value);
    SIZE(nvmlValue_t);
    SIZE(nvmlGpmMetric_t);
    OFF(nvmlGpmMetric_t, nvmlReturn);
    OFF(nvmlGpmMetric_t, value);
    OFF(nvmlGpmMetric_t, metricInfo);
    SIZE(nvmlGpmMetricsGet_t);
    OFF(nvmlGpmMetricsGet_t, numMetrics);
    OFF(nvmlGpmMetricsGet_t, sample1);
    OFF(nvmlGpmMetricsGet_t, sample2);
    OFF(nvmlGpmMetricsGet_t, metrics);
    printf("fields memtemp=%d nvl_tx=%d nvl_rx=%d gpm_max=%d gpm_ver=%d vbios=%d brand=%d\n",
           NVML_FI_DEV_MEMORY_TEMP, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
           NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, NVML_GPM_METRIC_MAX,
           NVML_GPM_METRICS_GET_VERSION, NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE, NVML_BRAND_NVIDIA);
    printf("virt none=%d passthrough=%d vgpu=%d; value types dbl=%d ull=%d\n",
           NVML_GPU_VIRTUALIZATION_MODE_NONE, NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH,
           NVML_GPU_VIRTUALIZATION_MODE_VGPU, NVML_VALUE_TYPE_DOUBLE,
           NVML_VALUE_TYPE_UNSIGNED_LONG_LONG);
    printf("enum sizes %zu %zu %zu %zu\n", sizeof(nvmlReturn_t), sizeof(nvmlGpuTopologyLevel_t),
           sizeof(nvmlEnableState_t), sizeof(nvmlIntNvLinkDeviceType_t));
    printf("events %llx %llx %llx\n", (unsigned long long)nvmlEventTypeXidCriticalError,
           (unsigned long long)nvmlEventTypeDoubleBitEccError,
           (unsigned long long)nvmlEventTypeSingleBitEccError);
    printf("topology %d %d %d %d %d %d\n", NVML_TOPOLOGY_INTERNAL, NVML_TOPOLOGY_SINGLE,
           NVML_TOPOLOGY_MULTIPLE, NVML_TOPOLOGY_HOSTBRIDGE, NVML_TOPOLOGY_NODE,
           NVML_TOPOLOGY_SYSTEM);
    printf("arch hopper=%d ampere=%d ada=%d turing=%d\n", NVML_DEVICE_ARCH_HOPPER,
           NVML_DEVICE_ARCH_AMPERE, NVML_DEVICE_ARCH_ADA, NVML_DEVICE_ARCH_TURING);
    printf("clock sm=%d mem=%d; ecc volatile=%d aggregate=%d uncorrected=%d\n", NVML_CLOCK_SM,
           NVML_CLOCK_MEM, NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC,
           NVML_MEMORY_ERROR_TYPE_UNCORRECTED);
    printf("errors lost=%d timeout=%d vmismatch=%d unknown=%d\n", NVML_ERROR_GPU_IS_LOST,
           NVML_ERROR_TIMEOUT, NVML_ERROR_ARGUMENT_VERSION_MISMATCH, NVML_ERROR_UNKNOWN);
    printf("nvswitch=%d\n", NVML_NVLINK_DEVICE_TYPE_SWITCH);
    SIZE(nvmlGpuInstanceProfileInfo_t);
    OFF(nvmlGpuInstanceProfileInfo_t, sliceCount);
    OFF(nvmlGpuInstanceProfileInfo_t, multiprocessorCount);
    OFF(nvmlGpuInstanceProfileInfo_t, ofaCount);
    OFF(nvmlGpuInstanceProfileInfo_t, memorySizeMB);
    SIZE(nvmlGpuInstancePlacement_t);
    OFF(nvmlGpuInstancePlacement_t, size);
    SIZE(nvmlDeviceAttributes_t);
    OFF(nvmlDeviceAttributes_t, sharedOfaCount);
    OFF(nvmlDeviceAttributes_t, gpuInstanceSliceCount);
    OFF(nvmlDeviceAttributes_t, computeInstanceSliceCount);
    OFF(nvmlDeviceAttributes_t, memorySizeMB);
    SIZE(nvmlGpuInstanceInfo_t);
    OFF(nvmlGpuInstanceInfo_t, id);
    OFF(nvmlGpuInstanceInfo_t, profileId);
    OFF(nvmlGpuInstanceInfo_t, placement);
    SIZE(nvmlComputeInstanceInfo_t);
    OFF(nvmlComputeInstanceInfo_t, gpuInstance);
    OFF(nvmlComputeInstanceInfo_t, id);
    OFF(nvmlComputeInstanceInfo_t, profileId);
    OFF(nvmlComputeInstanceInfo_t, placement);
    SIZE(nvmlComputeInstanceProfileInfo_t);
    OFF(nvmlComputeInstanceProfileInfo_t, multiprocessorCount);
    OFF(nvmlComputeInstanceProfileInfo_t, sharedOfaCount);
    printf("profiles %d %d %d %d %d %d %d\n", NVML_GPU_INSTANCE_PROFILE_1_SLICE,
           NVML_GPU_INSTANCE_PROFILE_2_SLICE, NVML_GPU_INSTANCE_PROFILE_3_SLICE,
           NVML_GPU_INSTANCE_PROFILE_4_SLICE, NVML_GPU_INSTANCE_PROFILE_7_SLICE,
           NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2);
    return 0;
}
