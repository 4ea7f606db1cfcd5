/* libFuzzer harness for the NVIDIA-format config file: any bytes give a
 * config or one error message, never a crash, leak or hang. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct config c;
    memset(&c, 0, sizeof c);
    struct err e;
    e.msg[0] = '\0';
    if (config_apply_yaml(&c, "fuzz.yaml", (const char *)data, size, &e) < 0 && !e.msg[0])
        __builtin_trap();
    return 0;
}
