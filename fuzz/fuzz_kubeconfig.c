/* libFuzzer harness for kubeconfig files: any bytes give credentials or one
 * error message, never a crash, leak or hang. */
#include <stddef.h>
#include <stdint.h>

#include "kube/kube.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kube_creds c;
    struct err e;
    e.msg[0] = '\0';
    if (kube_creds_parse(&c, "fuzz.kubeconfig", "/dir", (const char *)data, size, &e) < 0) {
        if (!e.msg[0])
            __builtin_trap();
        return 0;
    }
    kube_creds_free(&c);
    return 0;
}
