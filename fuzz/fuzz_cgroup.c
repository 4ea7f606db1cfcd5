/* libFuzzer harness for what places a process in a pod's container: the
 * whole input as /proc/<pid>/cgroup text, and each line of it as a
 * /var/log/containers name. Any bytes give an answer, never a crash. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "metrics/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct metrics_cgroup cg;
    if (metrics_cgroup_parse((const char *)data, size, &cg) &&
        (!cg.pod_uid[0] || strlen(cg.pod_uid) >= sizeof cg.pod_uid))
        __builtin_trap();
    char name[512];
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && data[i] != '\n')
            continue;
        size_t n = i - start < sizeof name - 1 ? i - start : sizeof name - 1;
        memcpy(name, data + start, n);
        name[n] = '\0';
        struct metrics_owner o;
        char id[80];
        if (metrics_logname_parse(name, &o, id, sizeof id) && (!o.pod[0] || !id[0]))
            __builtin_trap();
        start = i + 1;
    }
    return 0;
}
