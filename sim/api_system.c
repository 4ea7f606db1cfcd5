/* Library lifetime, system queries and device handles. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "nvml/nvml.h"
#include "sim.h"

#define SIM_DEFAULT_SCENARIO "dgx-h100"

/* Faults present from the start, for a process that cannot be reached in
 * time over the control socket (`gpulet doctor` runs its own NVML):
 * GPULET_SIM_FAULTS holds `gpulet sim` commands separated by ';'. A bad
 * one fails the init, naming it. */
static nvmlReturn_t system_faults(void)
{
    const char *all = getenv("GPULET_SIM_FAULTS");
    if (!all || !*all)
        return NVML_SUCCESS;
    char buf[2048], reply[512];
    snprintf(buf, sizeof buf, "%s", all);
    char *save = NULL;
    for (char *cmd = strtok_r(buf, ";", &save); cmd; cmd = strtok_r(NULL, ";", &save)) {
        if (sim_fault_command_locked(cmd, reply, sizeof reply) < 0) {
            fprintf(stderr, "gpulet simulator: GPULET_SIM_FAULTS '%s': %s\n", cmd, reply);
            sim_state.loaded = false;
            return NVML_ERROR_INVALID_ARGUMENT;
        }
    }
    return NVML_SUCCESS;
}

/* Loads the scenario named by GPULET_SIM_SCENARIO on the first init. Later
 * inits keep the GPUs' state, as the real driver outlives an NVML session. */
static nvmlReturn_t system_load(void)
{
    const char *spec = getenv("GPULET_SIM_SCENARIO");
    if (!spec || !*spec)
        spec = SIM_DEFAULT_SCENARIO;
    if (sim_state.loaded && !strcmp(spec, sim_state.spec))
        return NVML_SUCCESS;
    struct err e;
    struct scenario *sc = malloc(sizeof *sc); /* large: kept off the caller's stack */
    if (!sc)
        return NVML_ERROR_MEMORY;
    if (scenario_load(spec, sc, &e) < 0) {
        fprintf(stderr, "gpulet-nvml-sim: %s\n", e.msg);
        free(sc);
        return NVML_ERROR_UNKNOWN;
    }
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    sim_state.t0 = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    sim_state.sc = *sc;
    free(sc);
    snprintf(sim_state.spec, sizeof sim_state.spec, "%s", spec);
    memset(sim_state.gpus, 0, sizeof sim_state.gpus);
    for (unsigned i = 0; i < sim_state.sc.count; i++) {
        struct nvmlDevice_st *g = &sim_state.gpus[i];
        g->desc = sim_state.sc.gpus[i];
        sim_live_reset(g, true);
        g->mig_pending = g->desc.mig_pending; /* the scenario's; a reset applies it */
        memcpy(g->procs, g->desc.procs, g->desc.nprocs * sizeof *g->procs);
        g->nprocs = g->desc.nprocs;
    }
    sim_state.loaded = true;
    if (sim_state_restore() < 0) {
        sim_state.loaded = false;
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return system_faults();
}

SIM_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    /* A broken driver, for the callers' error paths: GPULET_SIM_INIT_ERROR
     * is the nvmlReturn_t every init answers (9: driver not loaded). */
    const char *fail = getenv("GPULET_SIM_INIT_ERROR");
    if (fail && atoi(fail) > 0)
        return (nvmlReturn_t)atoi(fail);
    pthread_mutex_lock(&sim_state.lock);
    nvmlReturn_t rc = sim_state.refcount ? NVML_SUCCESS : system_load();
    bool first = rc == NVML_SUCCESS && sim_state.refcount++ == 0;
    pthread_mutex_unlock(&sim_state.lock);
    if (first)
        sim_control_start();
    return rc;
}

SIM_API nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

SIM_API nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

SIM_API nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&sim_state.lock);
    if (sim_state.refcount == 0) {
        pthread_mutex_unlock(&sim_state.lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    bool last = --sim_state.refcount == 0;
    if (last) {
        sim_events_clear();
        sim_state_save();
    }
    pthread_mutex_unlock(&sim_state.lock);
    if (last)
        sim_control_stop();
    return NVML_SUCCESS;
}

SIM_API const char *nvmlErrorString(nvmlReturn_t result)
{
    return nvml_errors_builtin(result);
}

SIM_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = sim_enter();
    return rc ? rc : sim_leave(sim_copy_string(version, length, sim_state.sc.driver_version));
}

SIM_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    /* The API answers "<CUDA major>.<driver version>": 13.580.159.04 on driver
     * 580 (nvidia-smi prints a shorter form, 580.159). */
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    char v[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE + 16];
    snprintf(v, sizeof v, "%d.%s", sim_state.sc.cuda_version / 1000, sim_state.sc.driver_version);
    return sim_leave(sim_copy_string(version, length, v));
}

SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    /* Works without nvmlInit on the real library too. */
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&sim_state.lock);
    nvmlReturn_t rc = sim_state.loaded ? NVML_SUCCESS : system_load();
    if (rc == NVML_SUCCESS)
        *cudaDriverVersion = sim_state.sc.cuda_version;
    return sim_leave(rc);
}

SIM_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion);
}

SIM_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    if (!deviceCount)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *deviceCount = sim_state.sc.count;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    if (!device || index >= sim_state.sc.count)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (sim_state.gpus[index].lost)
        return sim_leave(NVML_ERROR_GPU_IS_LOST);
    *device = &sim_state.gpus[index];
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    if (!uuid || !device)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < sim_state.sc.count; i++) {
        if (!strcmp(sim_state.gpus[i].desc.uuid, uuid)) {
            if (sim_state.gpus[i].lost)
                return sim_leave(NVML_ERROR_GPU_IS_LOST);
            *device = &sim_state.gpus[i];
            return sim_leave(NVML_SUCCESS);
        }
    }
    return sim_leave(NVML_ERROR_NOT_FOUND);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    unsigned dom, bus, dev, fn;
    if (!pciBusId || !device || sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned i = 0; i < sim_state.sc.count; i++) {
        const struct sim_gpu *g = &sim_state.gpus[i].desc;
        if (g->domain == dom && g->bus == bus && g->device == dev && fn == 0) {
            if (sim_state.gpus[i].lost)
                return sim_leave(NVML_ERROR_GPU_IS_LOST);
            *device = &sim_state.gpus[i];
            return sim_leave(NVML_SUCCESS);
        }
    }
    return sim_leave(NVML_ERROR_NOT_FOUND);
}

SIM_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}
