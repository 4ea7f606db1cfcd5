/* libFuzzer harness for the API server's ConfigMap and Node answers (per-
 * node configuration): any bytes give named configs or one error message,
 * and a choice among them, never a crash or leak. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "config/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct config_named_set s;
    struct err e;
    e.msg[0] = '\0';
    json_t *obj = json_loadb((const char *)data, size, 0, NULL); /* as the watch hands it */
    if (config_named_parse(&s, obj, &e) < 0) {
        if (!e.msg[0])
            __builtin_trap();
    } else {
        const struct config_named *n;
        const char *why;
        for (unsigned i = 0; i < s.count; i++)
            if (!s.items[i].name || !s.items[i].text || strlen(s.items[i].text) > s.items[i].len)
                __builtin_trap();
        config_named_choose(&s, "ts4", "", &n, &why, &e);
        config_named_choose(&s, "", "", &n, &why, &e);
        config_named_free(&s);
    }
    char label[64];
    config_node_label(obj, "nvidia.com/device-plugin.config", label, sizeof label, &e);
    json_decref(obj);
    return 0;
}
