/* libFuzzer harness for the API server's Node answer: any bytes give a
 * merge patch (valid JSON) or one error message, never a crash or leak. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "labels/publish.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct label_set want;
    if (!want.count) {
        label_set_put(&want, "nvidia.com/gpu.count", "8");
        label_set_put(&want, "nvidia.com/gpu.present", "true");
        label_set_sort(&want);
    }
    struct strbuf patch = {0};
    struct err e;
    e.msg[0] = '\0';
    unsigned changes;
    json_t *node = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL); /* as the watch hands it */
    int rc = labels_node_patch(node, &want, &patch, &changes, &e);
    json_decref(node);
    if (rc < 0) {
        if (!e.msg[0])
            __builtin_trap();
    } else if (patch.len) {
        json_t *j = json_loads(patch.data, 0, NULL);
        if (!j)
            __builtin_trap(); /* the patch must be JSON */
        json_decref(j);
    }
    strbuf_free(&patch);
    return 0;
}
