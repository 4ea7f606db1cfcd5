/* A CUDA driver-API program for the toolkit-free proof: finds libcuda
 * only as a container would (dlopen "libcuda.so.1" through the dynamic
 * linker), then cuInit, the device count and name, cuMemAlloc, a kernel
 * loaded from PTX (JIT-compiled by the driver) and launched, and its result
 * checked. Needs only glibc. Exit 0 when everything worked.
 * build: gcc -std=c17 -D_GNU_SOURCE -O2 -o cuda_probe cuda_probe.c */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static const char ptx[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry fill(.param .u64 out, .param .u32 n)\n{\n"
    "  .reg .b32 %r<8>;\n  .reg .b64 %rd<5>;\n  .reg .pred %p1;\n"
    "  ld.param.u64 %rd1, [out];\n  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n  mov.u32 %r3, %ntid.x;\n  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r5, %r2, %r3, %r4;\n  setp.ge.u32 %p1, %r5, %r1;\n  @%p1 bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.u32 %rd3, %r5, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
    "  mad.lo.s32 %r6, %r5, 3, 1;\n  st.global.u32 [%rd4], %r6;\nDONE:\n  ret;\n}\n";

typedef int (*fn)();

static void *h;

static fn sym(const char *name)
{
    fn f = (fn)dlsym(h, name);
    if (!f) {
        printf("cuda_probe: libcuda has no %s\n", name);
        exit(3);
    }
    return f;
}

#define CHECK(call)                                                                    \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_) {                                                                     \
            printf("cuda_probe: %s failed: CUDA error %d\n", #call, rc_);              \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

int main(void)
{
    h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        printf("cuda_probe: no driver: %s\n", dlerror());
        return 2;
    }
    enum { N = 1 << 20 };
    int count = 0, dev = 0;
    char name[256];
    void *ctx, *mod, *func;
    unsigned long long buf;
    CHECK(sym("cuInit")(0));
    CHECK(sym("cuDeviceGetCount")(&count));
    CHECK(sym("cuDeviceGet")(&dev, 0));
    CHECK(sym("cuDeviceGetName")(name, (int)sizeof name, dev));
    CHECK(sym("cuDevicePrimaryCtxRetain")(&ctx, dev));
    CHECK(sym("cuCtxSetCurrent")(ctx));
    CHECK(sym("cuMemAlloc_v2")(&buf, (size_t)N * 4));
    CHECK(sym("cuModuleLoadData")(&mod, ptx));
    CHECK(sym("cuModuleGetFunction")(&func, mod, "fill"));
    unsigned n = N;
    void *args[] = {&buf, &n};
    CHECK(sym("cuLaunchKernel")(func, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(sym("cuCtxSynchronize")());
    unsigned *host = malloc((size_t)N * 4);
    CHECK(sym("cuMemcpyDtoH_v2")(host, buf, (size_t)N * 4));
    unsigned bad = 0;
    for (unsigned i = 0; i < N; i++)
        bad += host[i] != i * 3 + 1;
    printf("cuda_probe: %d device(s), device 0 %s; kernel from PTX over %u values: %s\n", count,
           name, N, bad ? "WRONG" : "all correct");
    free(host);
    return bad ? 1 : 0;
}
