/* Field definitions. Names, types and help follow dcgm-exporter's default
 * counters; the NVML source of each is the call DCGM itself makes for it. */
#include "metrics/fields.h"

#include <string.h>

/* NVML field ids (nvmlDeviceGetFieldValues). */
#define FI_VIOL_POWER 74
#define FI_MEMORY_TEMP 82
#define FI_RETIRED_SBE 29
#define FI_RETIRED_DBE 30
#define FI_RETIRED_PENDING 31
#define FI_REMAPPED_COR 142
#define FI_REMAPPED_UNC 143
#define FI_REMAPPED_FAILURE 145

static const struct field fields[] = {
    {"DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", SRC_CLOCK_SM, 0, 0, false},
    {"DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", SRC_CLOCK_MEM, 0, 0, false},
    {"DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", SRC_FIELD, FI_MEMORY_TEMP, 0, false},
    {"DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", SRC_TEMP, 0, 0, false},
    {"DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", SRC_POWER, 0, 0.001, true},
    {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ).", SRC_ENERGY, 0, 0, false},
    {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", SRC_PCIE_REPLAY, 0, 0, false},
    {"DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", SRC_UTIL_GPU, 0, 0, false},
    {"DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", SRC_UTIL_MEM, 0, 0, false},
    {"DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", SRC_ENC_UTIL, 0, 0, false},
    {"DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", SRC_DEC_UTIL, 0, 0, false},
    {"DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", SRC_XID, 0, 0, false},
    {"DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", SRC_FB_FREE, 0, 0, false},
    {"DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", SRC_FB_USED, 0, 0, false},
    {"DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", SRC_FB_RESERVED, 0, 0, false},
    {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter",
     "Total number of NVLink bandwidth counters for all lanes.", SRC_NVLINK_RATE, 0, 0, false},
    {"DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status", SRC_VGPU_LICENSE, 0, 0, false},
    {"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for uncorrectable errors", SRC_FIELD, FI_REMAPPED_UNC, 0, false},
    {"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for correctable errors", SRC_FIELD, FI_REMAPPED_COR, 0, false},
    {"DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", SRC_FIELD,
     FI_REMAPPED_FAILURE, 0, false},
    {"DCGM_FI_DRIVER_VERSION", "label", "Driver Version", SRC_LABEL, LABEL_DRIVER, 0, false},
    {"DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.",
     SRC_GPM, 1, 0.01, true},
    {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
     "Ratio of cycles the tensor (HMMA) pipe is active.", SRC_GPM, 5, 0.01, true},
    {"DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data.", SRC_GPM,
     10, 0.01, true},
    /* GPM reports MiB/s; DCGM documents bytes per second. */
    {"DCGM_FI_PROF_PCIE_TX_BYTES", "gauge", "The rate of data transmitted over the PCIe bus - "
     "including both protocol headers and data payloads - in bytes per second.", SRC_GPM, 20,
     1048576.0, true},
    {"DCGM_FI_PROF_PCIE_RX_BYTES", "gauge", "The rate of data received over the PCIe bus - "
     "including both protocol headers and data payloads - in bytes per second.", SRC_GPM, 21,
     1048576.0, true},
    /* Commented out in dcgm-exporter's defaults; a collectors file may enable them. */
    {"DCGM_FI_PROF_SM_ACTIVE", "gauge", "The ratio of cycles an SM has at least 1 warp assigned.",
     SRC_GPM, 2, 0.01, true},
    {"DCGM_FI_PROF_SM_OCCUPANCY", "gauge",
     "The ratio of number of warps resident on an SM.", SRC_GPM, 3, 0.01, true},
    {"DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active.",
     SRC_GPM, 11, 0.01, true},
    {"DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active.",
     SRC_GPM, 12, 0.01, true},
    {"DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active.",
     SRC_GPM, 13, 0.01, true},
    {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors.",
     SRC_ECC, 0 * 2 + 0, 0, false},
    {"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors.",
     SRC_ECC, 1 * 2 + 0, 0, false},
    {"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "counter",
     "Total number of single-bit persistent ECC errors.", SRC_ECC, 0 * 2 + 1, 0, false},
    {"DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "counter",
     "Total number of double-bit persistent ECC errors.", SRC_ECC, 1 * 2 + 1, 0, false},
    {"DCGM_FI_DEV_POWER_VIOLATION", "counter", "Throttling duration due to power constraints (in ns).",
     SRC_FIELD, FI_VIOL_POWER, 0, false},
    {"DCGM_FI_DEV_THERMAL_VIOLATION", "counter",
     "Throttling duration due to thermal constraints (in ns).", SRC_FIELD, FI_VIOL_POWER + 1, 0, false},
    {"DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "counter",
     "Throttling duration due to sync-boost constraints (in ns).", SRC_FIELD, FI_VIOL_POWER + 2, 0, false},
    {"DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "counter",
     "Throttling duration due to board limit constraints (in ns).", SRC_FIELD, FI_VIOL_POWER + 3, 0, false},
    {"DCGM_FI_DEV_LOW_UTIL_VIOLATION", "counter",
     "Throttling duration due to low utilization (in ns).", SRC_FIELD, FI_VIOL_POWER + 4, 0, false},
    {"DCGM_FI_DEV_RELIABILITY_VIOLATION", "counter",
     "Throttling duration due to reliability constraints (in ns).", SRC_FIELD, FI_VIOL_POWER + 5, 0, false},
    {"DCGM_FI_DEV_RETIRED_SBE", "counter", "Total number of retired pages due to single-bit errors.",
     SRC_FIELD, FI_RETIRED_SBE, 0, false},
    {"DCGM_FI_DEV_RETIRED_DBE", "counter", "Total number of retired pages due to double-bit errors.",
     SRC_FIELD, FI_RETIRED_DBE, 0, false},
    {"DCGM_FI_DEV_RETIRED_PENDING", "counter", "Total number of pages pending retirement.",
     SRC_FIELD, FI_RETIRED_PENDING, 0, false},
    {"DCGM_FI_NVML_VERSION", "label", "NVML Version", SRC_LABEL, LABEL_NVML_VERSION, 0, false},
    {"DCGM_FI_DEV_SERIAL", "label", "Device Serial Number", SRC_LABEL, LABEL_SERIAL, 0, false},
    {"DCGM_FI_DEV_VBIOS_VERSION", "label", "VBIOS version of the device", SRC_LABEL, LABEL_VBIOS, 0, false},
    {"DCGM_FI_DEV_BRAND", "label", "Device Brand", SRC_LABEL, LABEL_BRAND, 0, false},
};

const struct field *metrics_field_find(const char *name)
{
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        if (!strcmp(fields[i].name, name))
            return &fields[i];
    return NULL;
}

const struct field *metrics_field_all(unsigned *n)
{
    *n = sizeof fields / sizeof *fields;
    return fields;
}

bool metrics_field_exporter_only(const char *name)
{
    return !strncmp(name, "DCGM_EXP_", 9);
}

const char *metrics_field_xid_message(unsigned xid)
{
    /* gpulet's own one-line summaries of the XIDs operators meet most. */
    switch (xid) {
    case 0: return "No Error";
    case 13: return "Graphics engine exception";
    case 31: return "GPU memory page fault";
    case 43: return "GPU stopped processing";
    case 45: return "Preemptive cleanup, due to previous errors";
    case 48: return "Double-bit ECC error";
    case 61: case 62: return "Internal micro-controller error";
    case 63: return "Row remapping event";
    case 64: return "Row remapping failure";
    case 68: return "Video processor exception";
    case 74: return "NVLink error";
    case 79: return "GPU has fallen off the bus";
    case 92: return "High single-bit ECC error rate";
    case 94: return "Contained ECC error";
    case 95: return "Uncontained ECC error";
    case 109: return "Context switch timeout";
    case 119: case 120: return "GSP error";
    default: return "Unknown Error";
    }
}
