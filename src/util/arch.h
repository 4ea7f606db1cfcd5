/* The machine this binary is built for, by the names each party gives it:
 * Debian's multiarch triplet (its library directories), the OCI and Go
 * name (images, the kubernetes.io/arch label). */
#ifndef GPULET_ARCH_H
#define GPULET_ARCH_H

#if defined(__x86_64__)
#define ARCH_TRIPLET "x86_64-linux-gnu"
#define ARCH_NAME "amd64"
#elif defined(__aarch64__)
#define ARCH_TRIPLET "aarch64-linux-gnu"
#define ARCH_NAME "arm64"
#else
#error "gpulet is built for x86_64 and aarch64 (arm64)"
#endif

#endif
