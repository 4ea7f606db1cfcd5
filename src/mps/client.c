/* What an MPS client container gets, wherever it comes from (the device
 * plugin's Allocate, a DRA claim's CDI device): one contract. */
#include "mps/internal.h"

#include <stdio.h>
#include <string.h>

void mps_client(const struct config *cfg, const char *name, const char *pipe_at,
                unsigned thread_percentage, const char *pinned, struct cdi_edits *out)
{
    memset(out, 0, sizeof *out);
    struct config_mps_dirs dirs;
    config_mps_dirs(cfg, name, &dirs);
    cdi_edits_env(out, "CUDA_MPS_PIPE_DIRECTORY", pipe_at);
    cdi_edits_mount(out, dirs.pipe, pipe_at);
    cdi_edits_mount(out, dirs.shm, "/dev/shm"); /* the daemon's and its clients' shared memory */
    char v[16];
    if (thread_percentage) {
        snprintf(v, sizeof v, "%u", thread_percentage > 100 ? 100 : thread_percentage);
        cdi_edits_env(out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", v);
    }
    if (pinned)
        cdi_edits_env(out, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", pinned);
}
