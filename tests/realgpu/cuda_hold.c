/* A small CUDA process for per-process checks: takes the primary context
 * of device 0, allocates MIB MiB, prints "ready <pid>", and with BUSY=1
 * keeps the GPU busy with memset kernels until stdin closes. libcuda is
 * loaded with dlopen, so the binary needs only glibc (and the driver).
 * usage: cuda_hold MIB [BUSY]
 * build: gcc -std=c17 -D_GNU_SOURCE -O2 -o cuda_hold cuda_hold.c */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*fn_init)(unsigned);
typedef int (*fn_dev)(int *, int);
typedef int (*fn_retain)(void **, int);
typedef int (*fn_set)(void *);
typedef int (*fn_alloc)(unsigned long long *, size_t);
typedef int (*fn_memset)(unsigned long long, unsigned char, size_t);
typedef int (*fn_sync)(void);

static void *sym(void *h, const char *name)
{
    void *f = dlsym(h, name);
    if (!f) {
        fprintf(stderr, "cuda_hold: no %s in libcuda\n", name);
        exit(2);
    }
    return f;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    size_t bytes = strtoull(argv[1], NULL, 10) << 20;
    int busy = argc > 2 && atoi(argv[2]);
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "cuda_hold: %s\n", dlerror());
        return 2;
    }
    int dev, rc;
    void *ctx;
    unsigned long long ptr = 0;
    if ((rc = ((fn_init)sym(h, "cuInit"))(0)) || (rc = ((fn_dev)sym(h, "cuDeviceGet"))(&dev, 0)) ||
        (rc = ((fn_retain)sym(h, "cuDevicePrimaryCtxRetain"))(&ctx, dev)) ||
        (rc = ((fn_set)sym(h, "cuCtxSetCurrent"))(ctx)) ||
        (bytes && (rc = ((fn_alloc)sym(h, "cuMemAlloc_v2"))(&ptr, bytes)))) {
        fprintf(stderr, "cuda_hold: CUDA error %d\n", rc);
        return 1;
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    fn_memset set = (fn_memset)sym(h, "cuMemsetD8_v2");
    fn_sync sync = (fn_sync)sym(h, "cuCtxSynchronize");
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
    char c;
    for (;;) {
        ssize_t r = read(0, &c, 1);
        if (r == 0 || (r > 0 && c == 'q'))
            return 0;
        if (busy && bytes) {
            set(ptr, 1, bytes);
            sync();
        } else {
            usleep(100000);
        }
    }
}
