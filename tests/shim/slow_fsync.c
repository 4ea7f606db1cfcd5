/* LD_PRELOAD shim: fsync and fdatasync take GPULET_SLOW_FSYNC_MS (500 by
 * default) longer, as on a node whose disk is busy pulling an image; where
 * GPULET_FSYNC_GATE names a file, they wait until it exists (a disk that
 * hangs until the test says); while GPULET_FSYNC_FAIL names a file that
 * exists, they fail with ENOSPC (a full disk). The tests and bench/slow_disk.py load it into
 * gpulet, whose only dynamic library is glibc, so these calls reach the
 * shim first. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void slow_sleep(void)
{
    const char *gate = getenv("GPULET_FSYNC_GATE");
    struct timespec tick = {0, 10 * 1000000L};
    while (gate && access(gate, F_OK) != 0)
        nanosleep(&tick, NULL);
    const char *ms = getenv("GPULET_SLOW_FSYNC_MS");
    long n = ms ? atol(ms) : 500;
    struct timespec t = {n / 1000, n % 1000 * 1000000L};
    while (nanosleep(&t, &t) != 0)
        ;
}

/* A full disk, while the test says so. */
static int slow_full(void)
{
    const char *full = getenv("GPULET_FSYNC_FAIL");
    if (full && access(full, F_OK) == 0) {
        errno = ENOSPC;
        return -1;
    }
    return 0;
}

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow_sleep();
    return slow_full() < 0 ? -1 : real(fd);
}

int fdatasync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow_sleep();
    return slow_full() < 0 ? -1 : real(fd);
}
