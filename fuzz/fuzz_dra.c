/* libFuzzer harness for a ResourceClaim from the API server (DRA's
 * prepare): any bytes give an allocation or one error message, never a
 * crash or leak, and never more results than there is room for. */
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
    } else if (a.count > DRA_MAX_RESULTS || !a.uid[0]) {
        __builtin_trap();
    }
    return 0;
}
