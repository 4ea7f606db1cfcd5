/* libFuzzer harness for the simulator's control commands (the text a
 * client sends over the control socket). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        setenv("GPULET_SIM_CONTROL", "off", 1);
        setenv("GPULET_SIM_SCENARIO", "h200-mig-mixed", 1); /* MIG commands too */
        if (nvmlInit_v2() != NVML_SUCCESS)
            abort();
        ready = 1;
    }
    char line[1100];
    size_t n = size < sizeof line - 1 ? size : sizeof line - 1;
    memcpy(line, data, n);
    line[n] = '\0';
    char reply[1024];
    reply[0] = '\0';
    sim_fault_command(line, reply, sizeof reply);
    if (strncmp(reply, "ok", 2) && strncmp(reply, "error: ", 7))
        __builtin_trap(); /* every answer is ok or an error with a reason */
    return 0;
}
