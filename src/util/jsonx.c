#include "util/jsonx.h"

#include <stdlib.h>

#include "util/xmalloc.h"

json_t *jsonx_ok(json_t *v)
{
    if (!v)
        xmalloc_fail(0);
    return v;
}

void jsonx_set(json_t *obj, const char *key, json_t *v)
{
    if (json_object_set_new(obj, key, jsonx_ok(v)) < 0)
        xmalloc_fail(0);
}

void jsonx_append(json_t *arr, json_t *v)
{
    if (json_array_append_new(arr, jsonx_ok(v)) < 0)
        xmalloc_fail(0);
}

void jsonx_dump(const json_t *v, size_t flags, struct strbuf *out)
{
    char *text = json_dumps(v, flags);
    if (!text)
        xmalloc_fail(0);
    strbuf_puts(out, text);
    free(text);
}
