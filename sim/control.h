/* The simulator's control socket, shared by the library (server) and
 * `gpulet sim` (client): one command line in, one answer line out. */
#ifndef GPULET_SIM_CONTROL_H
#define GPULET_SIM_CONTROL_H

#include <stdlib.h>

#define SIM_CONTROL_DEFAULT_PATH "/tmp/gpulet-sim.sock"

/* $GPULET_SIM_CONTROL, or the default path; "off" disables the socket. */
static inline const char *sim_control_path(void)
{
    const char *p = getenv("GPULET_SIM_CONTROL");
    return p && *p ? p : SIM_CONTROL_DEFAULT_PATH;
}

#endif
