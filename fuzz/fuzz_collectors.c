/* libFuzzer harness for dcgm-exporter collectors CSV: any bytes give a
 * field list or one error message, never a crash. */
#include <stddef.h>
#include <stdint.h>

#include "metrics/collectors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct collectors c;
    struct err e;
    e.msg[0] = '\0';
    if (metrics_collectors_parse(&c, "fuzz.csv", (const char *)data, size, &e) < 0 && !e.msg[0])
        __builtin_trap();
    return 0;
}
