/* libFuzzer harness for gpulet replace-nvidia's reader (JSON or YAML, one
 * workload or several): any bytes give a JSON patch that parses or kubectl
 * commands, or one error message, never a crash or leak. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "replace/replace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct strbuf out = {0}, notes = {0};
    struct err e;
    e.msg[0] = '\0';
    int rc = replace_nvidia((const char *)data, size, REPLACE_LABEL_KEY, REPLACE_LABEL_VALUE, &out,
                            &notes, &e);
    if (rc < 0 && (!e.msg[0] || out.data))
        __builtin_trap();
    /* One workload's answer is a JSON patch; several's, kubectl lines. */
    json_t *patch = rc == 0 && out.data && out.data[0] == '[' ? json_loads(out.data, 0, NULL) : NULL;
    if (rc == 0 && out.data && out.data[0] == '[' && !json_is_array(patch))
        __builtin_trap();
    if (rc == 0 && out.data && out.data[0] != '[' && strncmp(out.data, "kubectl ", 8))
        __builtin_trap();
    json_decref(patch);
    strbuf_free(&out);
    strbuf_free(&notes);
    return 0;
}
