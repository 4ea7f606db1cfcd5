/* libFuzzer harness for the driver's procfs information files: any bytes
 * give a GPU or one error message, never a crash. */
#include <stddef.h>
#include <stdint.h>

#include "gpu/procfs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gpu_info g;
    struct err e;
    bool excluded;
    e.msg[0] = '\0';
    if (gpu_procfs_parse("information", (const char *)data, size, &g, &excluded, &e) < 0 && !e.msg[0])
        __builtin_trap();
    return 0;
}
