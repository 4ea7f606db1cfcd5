/* libFuzzer harness for the simulator's state file (GPULET_SIM_STATE,
 * sim/state.c): any text is read, or refused naming its line, and leaves
 * every GPU with at most its slots of GPU instances. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char path[] = "/tmp/gpulet-fuzz-simstate-XXXXXX";
    static int ready;
    if (!ready) {
        int fd = mkstemp(path);
        if (fd < 0)
            abort();
        close(fd);
        unlink(path); /* absent at the first load: the scenario as it is */
        setenv("GPULET_SIM_CONTROL", "off", 1);
        setenv("GPULET_SIM_SCENARIO", "h200-mig-mixed", 1);
        setenv("GPULET_SIM_STATE", path, 1);
        if (nvmlInit_v2() != NVML_SUCCESS)
            abort();
        ready = 1;
    }
    FILE *f = fopen(path, "w");
    if (!f)
        abort();
    fwrite(data, 1, size, f);
    fclose(f);
    pthread_mutex_lock(&sim_state.lock);
    sim_state_restore();
    for (unsigned i = 0; i < sim_state.sc.count; i++)
        if (sim_state.gpus[i].desc.nmig > SIM_MIG_MAX)
            __builtin_trap();
    pthread_mutex_unlock(&sim_state.lock);
    unlink(path);
    return 0;
}
