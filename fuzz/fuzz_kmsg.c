/* libFuzzer harness for the kernel log reader of gpulet doctor: any bytes
 * give some XIDs, each with a bounded bus name, never a crash. */
#include <stdint.h>
#include <string.h>

#include "doctor/doctor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct doctor_xid x[8];
    unsigned n = doctor_kmsg_xids((const char *)data, size, x, 8);
    for (unsigned i = 0; i < n && i < 8; i++)
        if (strlen(x[i].pci) >= sizeof x[i].pci)
            __builtin_trap();
    return 0;
}
