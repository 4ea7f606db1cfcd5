/* libFuzzer harness for the status socket's per-GPU line, as `gpulet list`
 * and `gpulet health` read it: any bytes give a GPU's health or -1, never
 * a crash, and a line that reads back writes the same line. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gpu/health.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char line[1024];
    if (size >= sizeof line)
        return 0;
    memcpy(line, data, size);
    line[size] = '\0';
    unsigned index;
    int mig;
    char uuid[96];
    struct gpu_health h;
    if (gpu_health_line_read(line, &index, &mig, uuid, sizeof uuid, &h) < 0)
        return 0;
    struct strbuf out = {0};
    gpu_health_line_write(&out, index, mig, uuid, &h);
    unsigned index2;
    int mig2;
    char uuid2[96];
    struct gpu_health h2;
    if (gpu_health_line_read(out.data, &index2, &mig2, uuid2, sizeof uuid2, &h2) < 0 || index2 != index ||
        mig2 != mig || strcmp(uuid, uuid2) || h2.reason != h.reason)
        __builtin_trap();
    strbuf_free(&out);
    return 0;
}
