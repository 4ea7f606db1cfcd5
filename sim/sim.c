/* State, locking and small helpers shared by the simulated NVML functions. */
#include "sim.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <time.h>

struct sim sim_state = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .events = PTHREAD_COND_INITIALIZER,
    .control_fd = -1,
    .control_wake = {-1, -1},
};

/* The agent's rule, checked wherever tests run it: no NVML call on its
 * loop (docs/architecture.md, "Executors"). The agent exports
 * agent_loop_serving, 1 while its main thread runs the loop; a call from
 * that thread then is said on stderr, where the tests look for it. A real
 * NVML never looks. */
static void sim_loop_check(void)
{
    static _Atomic(_Atomic int *) serving;
    static atomic_bool looked;
    if (!atomic_load(&looked)) {
        atomic_store(&serving, (_Atomic int *)dlsym(RTLD_DEFAULT, "agent_loop_serving"));
        atomic_store(&looked, true);
    }
    _Atomic int *s = atomic_load(&serving);
    if (!s || !atomic_load(s) || syscall(SYS_gettid) != getpid())
        return;
    static const char msg[] = "gpulet-sim: an NVML call on the agent's loop thread; its frames:\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        return;
    void *frames[12];
    backtrace_symbols_fd(frames, backtrace(frames, 12), 2);
}

nvmlReturn_t sim_enter(void)
{
    sim_loop_check();
    pthread_mutex_lock(&sim_state.lock);
    if (sim_state.refcount == 0) {
        pthread_mutex_unlock(&sim_state.lock);
        return NVML_ERROR_UNINITIALIZED;
    }
    return NVML_SUCCESS;
}

bool sim_is_device(nvmlDevice_t dev)
{
    /* Integer arithmetic: comparing unrelated pointers is undefined in C. A
     * handle is valid only if it points exactly at one of our GPUs. */
    uintptr_t p = (uintptr_t)dev, base = (uintptr_t)sim_state.gpus;
    size_t size = sizeof sim_state.gpus[0];
    return p >= base && (p - base) % size == 0 && (p - base) / size < sim_state.sc.count;
}

void sim_wait_hung(const struct nvmlDevice_st *dev)
{
    while (dev->hung) {
        pthread_mutex_unlock(&sim_state.lock);
        usleep(10000);
        pthread_mutex_lock(&sim_state.lock);
    }
}

nvmlReturn_t sim_enter_device(nvmlDevice_t dev)
{
    nvmlReturn_t rc = sim_enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!sim_is_device(dev))
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    sim_wait_hung(dev);
    if (dev->lost)
        return sim_leave(NVML_ERROR_GPU_IS_LOST);
    return NVML_SUCCESS;
}

nvmlReturn_t sim_leave(nvmlReturn_t rc)
{
    if (sim_state.mig_changed) {
        sim_state.mig_changed = false;
        sim_state_save();
    }
    pthread_mutex_unlock(&sim_state.lock);
    return rc;
}

nvmlReturn_t sim_copy_string(char *buf, unsigned length, const char *s)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(s);
    if (length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, n + 1);
    return NVML_SUCCESS;
}

double sim_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 - sim_state.t0;
}

void sim_fill_pci(nvmlPciInfo_t *pci, unsigned domain, unsigned bus, unsigned device,
                  unsigned device_id, unsigned subsystem_id)
{
    memset(pci, 0, sizeof *pci);
    pci->domain = domain;
    pci->bus = bus;
    pci->device = device;
    pci->pciDeviceId = device_id;
    pci->pciSubSystemId = subsystem_id;
    /* NVML writes hex digits in upper case, with an 8-digit domain in busId. */
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", domain, bus, device);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", domain & 0xffff,
             bus, device);
}

struct nvmlDevice_st *sim_find_gpu(const char *id)
{
    char *end;
    unsigned long idx = strtoul(id, &end, 10);
    if (*id && *end == '\0')
        return idx < sim_state.sc.count ? &sim_state.gpus[idx] : NULL;
    for (unsigned i = 0; i < sim_state.sc.count; i++)
        if (!strcmp(sim_state.gpus[i].desc.uuid, id))
            return &sim_state.gpus[i];
    return NULL;
}
