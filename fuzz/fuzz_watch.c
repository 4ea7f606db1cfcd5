/* libFuzzer harness for a watch's stream from the API server: any bytes,
 * cut into lines as the client cuts them, give for each line an event with
 * its object, or "not an event", never a crash or a leak. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kube/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        json_t *obj;
        enum kube_event kind = kube_event_parse(p, len, &obj);
        if ((kind == KUBE_EVENT_BAD) != (obj == NULL) || (obj && !json_is_object(obj)))
            __builtin_trap();
        json_decref(obj);
        p += len + 1;
    }
    return 0;
}
