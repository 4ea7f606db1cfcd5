/* libFuzzer harness for the one quantity parser (claims' and the config's
 * memory limits): any bytes are a quantity or not, never a crash, and a
 * quantity in MiB is within its bounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/quantity.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    long double v;
    bool ok = quantity_parse(s, &v);
    unsigned long long mib = quantity_mib(s);
    if (mib && (!ok || mib > 1125899906842624ULL))
        __builtin_trap();
    free(s);
    return 0;
}
