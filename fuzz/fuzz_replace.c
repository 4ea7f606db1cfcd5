/* libFuzzer harness for gpulet replace-nvidia's reader: any bytes give a
 * JSON patch that parses, or one error message, never a crash or leak. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "deploy/deploy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct strbuf out = {0};
    struct err e;
    int already;
    e.msg[0] = '\0';
    if (deploy_replace_patch((const char *)data, size, DEPLOY_LABEL_KEY, DEPLOY_LABEL_VALUE, &out,
                             &already, &e) < 0) {
        if (!e.msg[0] || out.data)
            __builtin_trap();
        return 0;
    }
    json_t *patch = json_loads(out.data, 0, NULL);
    if (!json_is_array(patch) || (already && json_array_size(patch)))
        __builtin_trap();
    json_decref(patch);
    strbuf_free(&out);
    return 0;
}
