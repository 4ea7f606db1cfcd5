/* libFuzzer harness for the exporter-toolkit web config: any bytes give a
 * configuration or one error message, never a crash. */
#include <stddef.h>
#include <stdint.h>

#include "http/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct http_security s;
    struct err e;
    e.msg[0] = '\0';
    if (http_webconfig_parse(&s, "web.yml", "/etc/gpulet", (const char *)data, size, &e) < 0 &&
        !e.msg[0])
        __builtin_trap();
    return 0;
}
