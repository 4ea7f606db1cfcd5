/* libFuzzer harness for the fault report's reading of the Node (the API
 * server's answer): any bytes give a condition patch and a taint patch
 * that parse, or one error message, never a crash or leak. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "report/report.h"

static void check(const struct strbuf *p)
{
    if (!p->data)
        return;
    json_t *j = json_loads(p->data, 0, NULL);
    if (!json_is_object(j))
        __builtin_trap();
    json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct report_condition c = {.unhealthy = true, .reason = "XID79", .message = "GPU 1"};
    json_t *node = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL); /* as the watch hands it */
    for (int k = 0; k < 3; k++) {
        struct strbuf p = {0};
        struct err e;
        bool foreign;
        e.msg[0] = '\0';
        int rc = k == 0 ? report_condition_patch(node, &c, "2026-11-26T00:00:00Z", &p, &e)
                        : report_taint_patch(node, k == 1 ? "XID79" : NULL, &p, &foreign, &e);
        if (rc < 0 && (!e.msg[0] || p.data))
            __builtin_trap();
        check(&p);
        strbuf_free(&p);
    }
    json_decref(node);
    return 0;
}
