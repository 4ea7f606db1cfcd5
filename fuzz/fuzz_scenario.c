/* libFuzzer harness for the scenario parser: any bytes must give either a
 * scenario or one error message, never a crash, leak or hang. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sim/scenario.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct scenario sc;
    struct err e;
    e.msg[0] = '\0';
    if (scenario_parse("fuzz.yaml", (const char *)data, size, &sc, &e) < 0 && !e.msg[0])
        __builtin_trap(); /* a failure must always say why */
    return 0;
}
