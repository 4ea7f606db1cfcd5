/* Kubernetes quantities ("40Gi", "10G", "1.5Gi", "512Mi", "100m", "1e9"):
 * resource.Quantity's grammar and meaning, which claims, NVIDIA's config
 * and gpulet's own config all use. One parser for all of them (quantity.c). */
#ifndef GPULET_QUANTITY_H
#define GPULET_QUANTITY_H

#include <stdbool.h>

/* The value of a quantity in its base unit (bytes, for memory): a signed
 * number, then a binary suffix (Ki, Mi, Gi, Ti, Pi, Ei: powers of 1024), a
 * decimal one (m, k, M, G, T, P, E: powers of 1000), or an exponent (e3,
 * E-2). false when s is not a quantity. */
bool quantity_parse(const char *s, long double *value);

/* A quantity of bytes in MiB, rounded down: 0 when it is not a quantity, is
 * under 1 MiB or is over 2^50 MiB. */
unsigned long long quantity_mib(const char *s);

#endif
