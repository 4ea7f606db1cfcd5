/* Label sets: a small sorted array, rendered as NFD's key=value lines or JSON. */
#include "labels/labels.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonx.h"
#include "util/xmalloc.h"

void label_set_put(struct label_set *s, const char *key, const char *fmt, ...)
{
    struct label *l = NULL;
    for (unsigned i = 0; i < s->count && !l; i++)
        if (!strcmp(s->items[i].key, key))
            l = &s->items[i];
    if (!l) {
        if (s->count == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 32;
            s->items = xrealloc(s->items, s->cap * sizeof *s->items);
        }
        l = &s->items[s->count++];
        snprintf(l->key, sizeof l->key, "%s", key);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->value, sizeof l->value, fmt, ap);
    va_end(ap);
}

const char *label_set_get(const struct label_set *s, const char *key)
{
    for (unsigned i = 0; i < s->count; i++)
        if (!strcmp(s->items[i].key, key))
            return s->items[i].value;
    return NULL;
}

static int label_cmp(const void *a, const void *b)
{
    return strcmp(((const struct label *)a)->key, ((const struct label *)b)->key);
}

void label_set_sort(struct label_set *s)
{
    if (s->count)
        qsort(s->items, s->count, sizeof *s->items, label_cmp);
}

bool label_set_equal(const struct label_set *a, const struct label_set *b)
{
    if (a->count != b->count)
        return false;
    for (unsigned i = 0; i < a->count; i++)
        if (strcmp(a->items[i].key, b->items[i].key) || strcmp(a->items[i].value, b->items[i].value))
            return false;
    return true;
}

void label_set_copy(struct label_set *dst, const struct label_set *src)
{
    label_set_clear(dst);
    for (unsigned i = 0; i < src->count; i++)
        label_set_put(dst, src->items[i].key, "%s", src->items[i].value);
}

void label_set_clear(struct label_set *s)
{
    s->count = 0;
}

void label_set_free(struct label_set *s)
{
    free(s->items);
    *s = (struct label_set){0};
}

void label_set_text(const struct label_set *s, struct strbuf *out)
{
    for (unsigned i = 0; i < s->count; i++)
        strbuf_printf(out, "%s=%s\n", s->items[i].key, s->items[i].value);
}

void label_set_json(const struct label_set *s, struct strbuf *out)
{
    json_t *obj = jsonx_ok(json_object());
    for (unsigned i = 0; i < s->count; i++)
        jsonx_set(obj, s->items[i].key, json_string(s->items[i].value));
    jsonx_dump(obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER, out);
    json_decref(obj);
    strbuf_puts(out, "\n");
}
