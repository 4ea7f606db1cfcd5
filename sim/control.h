/* The simulator's control socket, shared by the library (server) and
 * `gpulet sim` (client): one command line in, one answer line out. */
#ifndef GPULET_SIM_CONTROL_H
#define GPULET_SIM_CONTROL_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/dirs.h"

/* $GPULET_SIM_CONTROL ("off" disables the socket), or sim.sock in the
 * user's own directory, so that two users' simulators never meet. true
 * for the default. */
static inline bool sim_control_path(char *out, size_t len)
{
    const char *p = getenv("GPULET_SIM_CONTROL");
    if (p && *p) {
        snprintf(out, len, "%s", p);
        return false;
    }
    dirs_user_file("sim.sock", out, len);
    return true;
}

#endif
