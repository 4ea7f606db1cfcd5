/* Live readings: memory, utilization, temperature, power, clocks, energy,
 * ECC and PCIe counters, from the live model in live.c. */
#include "sim.h"

#define MIB (1024ULL * 1024ULL)

/* A MIG device's memory: its GPU instance's, used in proportion to the
 * GPU's load model. */
static nvmlReturn_t metrics_mig_memory(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    SIM_ENTER_MIG(device, memory);
    const struct sim_product *p = g->desc.product;
    double share = sim_live_value(g, SIM_MEM_USED) / (double)(p->memory_mib - p->reserved_mib);
    unsigned long long total = m->profile->memory_mib * MIB;
    memory->total = total;
    memory->reserved = 0;
    memory->used = (unsigned long long)(share * (double)total) & ~(MIB - 1);
    memory->free = total - memory->used;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    bool mig = sim_is_mig_handle(device);
    sim_leave(NVML_SUCCESS);
    if (mig)
        return metrics_mig_memory(device, memory);
    rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!memory)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (memory->version != nvmlMemory_v2)
        return sim_leave(NVML_ERROR_FUNCTION_NOT_FOUND); /* what driver 580 answers */
    const struct sim_product *p = device->desc.product;
    unsigned long long used = (unsigned long long)sim_live_value(device, SIM_MEM_USED);
    if (used > p->memory_mib - p->reserved_mib)
        used = p->memory_mib - p->reserved_mib;
    memory->total = p->memory_mib * MIB;
    memory->reserved = p->reserved_mib * MIB;
    memory->used = used * MIB;
    memory->free = memory->total - memory->reserved - memory->used;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    /* v1 counts reserved memory as used, which is why nvidia-smi disagrees with it. */
    if (!memory)
        return nvmlDeviceGetMemoryInfo_v2(device, NULL);
    nvmlMemory_v2_t v2 = {.version = nvmlMemory_v2};
    nvmlReturn_t rc = nvmlDeviceGetMemoryInfo_v2(device, &v2);
    if (rc == NVML_SUCCESS) {
        memory->total = v2.total;
        memory->free = v2.free;
        memory->used = v2.used + v2.reserved;
    }
    return rc;
}

SIM_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                   nvmlUtilization_t *utilization)
{
    SIM_ENTER_DEVICE(device, utilization);
    utilization->gpu = (unsigned)sim_live_value(device, SIM_UTIL_GPU);
    utilization->memory = (unsigned)sim_live_value(device, SIM_UTIL_MEM);
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device,
                                              nvmlTemperatureSensors_t sensorType,
                                              unsigned int *temp)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!temp || sensorType != NVML_TEMPERATURE_GPU)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *temp = (unsigned)sim_live_value(device, SIM_TEMP);
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    SIM_ENTER_DEVICE(device, power);
    *power = (unsigned)(sim_live_value(device, SIM_POWER) * 1000.0); /* milliwatts */
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    SIM_ENTER_DEVICE(device, limit);
    *limit = device->desc.product->power_max_w * 1000;
    return sim_leave(NVML_SUCCESS);
}

static nvmlReturn_t metrics_clock(nvmlDevice_t device, nvmlClockType_t type, unsigned *clock,
                                  bool max)
{
    SIM_ENTER_DEVICE(device, clock);
    const struct sim_product *p = device->desc.product;
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *clock = max ? p->sm_clock_max : (unsigned)sim_live_value(device, SIM_CLOCK_SM);
        break;
    case NVML_CLOCK_MEM:
        *clock = max ? p->mem_clock : (unsigned)sim_live_value(device, SIM_CLOCK_MEM);
        break;
    case NVML_CLOCK_VIDEO:
        *clock = p->sm_clock_max * 9 / 10;
        break;
    default:
        return sim_leave(NVML_ERROR_NOT_SUPPORTED); /* as driver 580 does for an unknown type */
    }
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                            unsigned int *clock)
{
    return metrics_clock(device, type, clock, false);
}

SIM_API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                               unsigned int *clock)
{
    return metrics_clock(device, type, clock, true);
}

SIM_API nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                         unsigned long long *energy)
{
    SIM_ENTER_DEVICE(device, energy);
    *energy = sim_live_energy(device);
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device,
                                                 nvmlMemoryErrorType_t errorType,
                                                 nvmlEccCounterType_t counterType,
                                                 unsigned long long *eccCounts)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!eccCounts || (unsigned)errorType > NVML_MEMORY_ERROR_TYPE_UNCORRECTED ||
        (unsigned)counterType > NVML_AGGREGATE_ECC)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *eccCounts = counterType == NVML_VOLATILE_ECC ? device->ecc_volatile[errorType]
                                                  : device->ecc_aggregate[errorType];
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    SIM_ENTER_DEVICE(device, value);
    *value = device->pcie_replays;
    return sim_leave(NVML_SUCCESS);
}

static nvmlReturn_t metrics_codec(nvmlDevice_t device, unsigned int *utilization,
                                  unsigned int *samplingPeriodUs)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!utilization || !samplingPeriodUs)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *utilization = 0; /* nobody encodes video on these nodes */
    *samplingPeriodUs = 167000;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                     unsigned int *samplingPeriodUs)
{
    return metrics_codec(device, utilization, samplingPeriodUs);
}

SIM_API nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                     unsigned int *samplingPeriodUs)
{
    return metrics_codec(device, utilization, samplingPeriodUs);
}

/* One field of nvmlDeviceGetFieldValues; NOT_SUPPORTED where the part lacks it. */
static nvmlReturn_t metrics_field(struct nvmlDevice_st *g, unsigned id, nvmlFieldValue_t *v)
{
    const struct sim_product *p = g->desc.product;
    bool hbm = p->nvlinks > 0, ampere = p->arch >= NVML_DEVICE_ARCH_AMPERE;
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    switch (id) {
    case NVML_FI_DEV_MEMORY_TEMP:
        v->value.ullVal = hbm ? (unsigned long long)sim_live_value(g, SIM_TEMP) + 6 : 0;
        return NVML_SUCCESS;
    case 29: case 30: case 31: /* retired pages: before Ampere only */
        if (ampere)
            return NVML_ERROR_NOT_SUPPORTED;
        v->value.ullVal = 0;
        return NVML_SUCCESS;
    case 74: case 75: case 76: case 77: case 78: case 79: /* throttle time, ns */
        v->value.ullVal = 0;
        return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
        if (!p->nvlinks)
            return NVML_ERROR_NOT_SUPPORTED;
        v->value.ullVal = sim_live_nvlink(g);
        return NVML_SUCCESS;
    case 142: case 143: case 144: case 145: /* row remapping: Ampere and newer */
        if (!ampere)
            return NVML_ERROR_NOT_SUPPORTED;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
        v->value.uiVal = 0;
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

SIM_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                              nvmlFieldValue_t *values)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (valuesCount < 0 || (valuesCount && !values))
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    long long now_us = (long long)(sim_now() * 1e6); /* model time stands in for the wall clock */
    for (int i = 0; i < valuesCount; i++) {
        values[i].timestamp = now_us;
        values[i].latencyUsec = 0;
        values[i].nvmlReturn = metrics_field(device, values[i].fieldId, &values[i]);
    }
    return sim_leave(NVML_SUCCESS);
}
