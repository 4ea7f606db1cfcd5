/* Processes on a GPU: the running compute processes and their utilization
 * samples, from the list `gpulet sim proc` keeps per GPU. */
#include <string.h>

#include "sim.h"

SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc)
        return rc;
    if (!infoCount || (*infoCount && !infos))
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    unsigned room = *infoCount;
    *infoCount = device->nprocs;
    if (room < device->nprocs)
        return sim_leave(NVML_ERROR_INSUFFICIENT_SIZE);
    for (unsigned i = 0; i < device->nprocs; i++)
        infos[i] = (nvmlProcessInfo_t){.pid = device->procs[i].pid,
                                       .usedGpuMemory = device->procs[i].memory_mib << 20,
                                       .gpuInstanceId = 0xFFFFFFFFu,
                                       .computeInstanceId = 0xFFFFFFFFu};
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                             unsigned int *infoCount,
                                                             nvmlProcessInfo_t *infos)
{
    return nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, infos);
}

/* A sample per process, stamped now: newer than any lastSeenTimeStamp the
 * caller has, unless it is from the future. NOT_FOUND when none is newer. */
SIM_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                     nvmlProcessUtilizationSample_t *utilization,
                                                     unsigned int *processSamplesCount,
                                                     unsigned long long lastSeenTimeStamp)
{
    SIM_ENTER_DEVICE(device, processSamplesCount);
    unsigned long long now_us = (unsigned long long)(sim_now() * 1e6);
    if (!utilization) {
        *processSamplesCount = device->nprocs;
        return sim_leave(device->nprocs ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_ERROR_NOT_FOUND);
    }
    if (*processSamplesCount < device->nprocs) {
        *processSamplesCount = device->nprocs;
        return sim_leave(NVML_ERROR_INSUFFICIENT_SIZE);
    }
    unsigned n = 0;
    for (unsigned i = 0; i < device->nprocs && now_us > lastSeenTimeStamp; i++) {
        const struct sim_proc *p = &device->procs[i];
        unsigned long long total = device->desc.product->memory_mib;
        utilization[n++] = (nvmlProcessUtilizationSample_t){
            .pid = p->pid, .timeStamp = now_us, .smUtil = p->sm,
            .memUtil = (unsigned)(total ? p->memory_mib * 100 / total : 0)};
    }
    *processSamplesCount = n;
    return sim_leave(n ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND);
}
