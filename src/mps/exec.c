/* The MPS daemon's /dev/shm: a private mount namespace in which SHM (under
 * --mps-root, also mounted into every MPS container) is /dev/shm. Run by
 * the agent as `gpulet mps-exec`, between fork and exec, which libuv's
 * spawn cannot do itself. */
#include "mps/mps.h"

#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

static int mps_private_shm(const char *shm)
{
    if (unshare(CLONE_NEWNS) < 0)
        return -1;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return -1;
    return mount(shm, "/dev/shm", NULL, MS_BIND, NULL);
}

int mps_exec(int argc, char **argv)
{
    bool quiet = argc > 1 && !strcmp(argv[1], "--quiet");
    if (quiet)
        argc--, argv++;
    if (argc < 3) {
        fputs("usage: gpulet mps-exec [--quiet] SHM PROGRAM [ARGS...] (the agent runs it)\n", stderr);
        return 2;
    }
    if (mps_private_shm(argv[1]) < 0 && !quiet)
        fprintf(stderr, "gpulet mps-exec: cannot make %s the MPS daemon's /dev/shm (%s): MPS "
                        "clients in containers reach the daemon only if the agent has "
                        "CAP_SYS_ADMIN\n", argv[1], strerror(errno));
    execv(argv[2], argv + 2);
    fprintf(stderr, "gpulet mps-exec: cannot run %s: %s\n", argv[2], strerror(errno));
    return 127;
}
