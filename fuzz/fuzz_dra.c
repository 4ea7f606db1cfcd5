/* libFuzzer harness for what DRA's prepare reads from the API server: a
 * ResourceClaim (its allocation, its opaque GpuConfig, its reservedFor),
 * a Pod (the containers using a claim) and a discovery answer (does a
 * version of resource.k8s.io serve ResourceSlices). Any bytes give an answer or
 * one error message, never a crash or leak, and never more than there is
 * room for. */
#include <stddef.h>
#include <stdint.h>

#include "dra/dra.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dra_allocation a;
    struct err e;
    e.msg[0] = '\0';
    if (dra_claim_parse((const char *)data, size, &a, &e) < 0) {
        if (!e.msg[0])
            __builtin_trap();
    } else if (a.count > DRA_MAX_RESULTS || !a.uid[0] || a.nconfigs > DRA_MAX_CONFIGS) {
        __builtin_trap();
    } else {
        for (unsigned i = 0; i < a.count; i++)
            if (a.results[i].config >= (int)a.nconfigs)
                __builtin_trap();
        for (unsigned i = 0; i < a.nconfigs; i++)
            if (a.configs[i].nlimits > DRA_MAX_LIMITS || a.configs[i].thread_percentage > 100 ||
                a.configs[i].timeslice > 3)
                __builtin_trap();
    }
    (void)dra_api_serves_slices((const char *)data, size);
    char pods[4][128];
    if (dra_claim_pods((const char *)data, size, pods, 4) > 4)
        __builtin_trap();
    struct dra_consumer c[4];
    if (dra_pod_consumers((const char *)data, size, "claim", c, 1, 4) > 4)
        __builtin_trap();
    return 0;
}
