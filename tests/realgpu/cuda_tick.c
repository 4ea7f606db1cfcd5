/* A CUDA job for a pod (tests/realgpu/deploy_kit.py): for SECONDS it
 * works without pause, as a training step does: every 200 ms it allocates
 * 64 MiB, fills it on the GPU (cuMemsetD8), waits for the GPU and frees it,
 * printing a heartbeat every 5 s with the longest gap so far between two
 * ticks. The first CUDA error ends it (exit 1, "FAILED" with the error);
 * otherwise it ends "done: N ticks, longest gap G s, 0 errors". Under MPS
 * (CUDA_MPS_PIPE_DIRECTORY) its context is the MPS server's client.
 * libcuda is loaded with dlopen, as the CUDA runtime does: the binary needs
 * only glibc, and the driver that gpulet puts into the container.
 * usage: cuda_tick SECONDS
 * build: gcc -std=c17 -D_GNU_SOURCE -O2 -o cuda_tick cuda_tick.c */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

typedef int (*fn_init)(unsigned);
typedef int (*fn_dev)(int *, int);
typedef int (*fn_ctx)(void **, unsigned, int);
typedef int (*fn_alloc)(unsigned long long *, size_t);
typedef int (*fn_free)(unsigned long long);
typedef int (*fn_memset)(unsigned long long, unsigned char, size_t);
typedef int (*fn_sync)(void);

static void *sym(void *h, const char *name)
{
    void *f = dlsym(h, name);
    if (!f) {
        printf("FAILED: no %s in libcuda\n", name);
        exit(1);
    }
    return f;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 60;
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("FAILED: %s\n", dlerror());
        return 1;
    }
    int dev, rc;
    void *ctx;
    if ((rc = ((fn_init)sym(h, "cuInit"))(0)) || (rc = ((fn_dev)sym(h, "cuDeviceGet"))(&dev, 0)) ||
        (rc = ((fn_ctx)sym(h, "cuCtxCreate_v2"))(&ctx, 0, dev))) {
        printf("FAILED: CUDA error %d at start\n", rc);
        return 1;
    }
    fn_alloc alloc = (fn_alloc)sym(h, "cuMemAlloc_v2");
    fn_free release = (fn_free)sym(h, "cuMemFree_v2");
    fn_memset fill = (fn_memset)sym(h, "cuMemsetD8_v2");
    fn_sync sync = (fn_sync)sym(h, "cuCtxSynchronize");
    double start = now(), last = start, gap = 0, said = start;
    unsigned long ticks = 0;
    printf("started: pid %d, MPS pipe %s\n", (int)getpid(),
           getenv("CUDA_MPS_PIPE_DIRECTORY") ? getenv("CUDA_MPS_PIPE_DIRECTORY") : "none");
    while (now() - start < seconds) {
        unsigned long long p = 0;
        size_t n = 64u << 20;
        if ((rc = alloc(&p, n)) || (rc = fill(p, 1, n)) || (rc = sync()) || (rc = release(p))) {
            printf("FAILED: CUDA error %d after %lu ticks (%.1f s)\n", rc, ticks, now() - start);
            return 1;
        }
        ticks++;
        double t = now();
        if (t - last > gap)
            gap = t - last;
        last = t;
        if (t - said >= 5) {
            printf("tick %lu at %.1f s, longest gap %.3f s\n", ticks, t - start, gap);
            said = t;
        }
        usleep(200000);
    }
    printf("done: %lu ticks, longest gap %.3f s, 0 errors\n", ticks, gap);
    return 0;
}
