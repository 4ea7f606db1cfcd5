/* The merge patch that brings a Node's labels to the wanted set: gpulet's
 * own labels only, recorded in an annotation so that the ones it set
 * before and no longer wants can be removed without touching anyone
 * else's. */
#include "labels/publish.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

static json_t *node_ok(json_t *v)
{
    if (!v)
        xmalloc_fail(0);
    return v;
}

static void node_set(json_t *obj, const char *key, json_t *v)
{
    if (json_object_set_new(obj, key, node_ok(v)) < 0)
        xmalloc_fail(0);
}

/* An object member that must be an object or absent (NULL). */
static int node_object(json_t *parent, const char *key, json_t **out, struct err *e)
{
    *out = json_object_get(parent, key);
    if (*out && !json_is_object(*out))
        return err_set(e, "the Node's %s is not an object", key);
    return 0;
}

int labels_node_patch(const char *node_json, size_t len, const struct label_set *want,
                      struct strbuf *patch, unsigned *changes, struct err *e)
{
    *changes = 0;
    json_error_t jerr;
    json_t *node = json_loadb(node_json, len, 0, &jerr);
    if (!node)
        return err_set(e, "the Node's JSON, line %d column %d: %s", jerr.line, jerr.column,
                       jerr.text);
    json_t *meta = json_is_object(node) ? json_object_get(node, "metadata") : NULL, *have, *notes;
    if (!json_is_object(meta)) {
        json_decref(node);
        return err_set(e, "the answer is not a Node object (no metadata)");
    }
    if (node_object(meta, "labels", &have, e) < 0 || node_object(meta, "annotations", &notes, e) < 0) {
        json_decref(node);
        return -1;
    }
    json_t *owned = notes ? json_object_get(notes, LABELS_OWNER_ANNOTATION) : NULL;
    const char *before = json_is_string(owned) ? json_string_value(owned) : "";
    json_t *labels = node_ok(json_object());
    struct strbuf keys = {0};
    for (unsigned i = 0; i < want->count; i++) {
        const struct label *l = &want->items[i];
        json_t *v = have ? json_object_get(have, l->key) : NULL;
        if (!json_is_string(v) || strcmp(json_string_value(v), l->value)) {
            node_set(labels, l->key, json_string(l->value));
            (*changes)++;
        }
        strbuf_printf(&keys, "%s%s", i ? "," : "", l->key);
    }
    /* Labels gpulet set before and no longer wants: removed (null). */
    char *list = xstrdup(before);
    char *save = NULL;
    for (char *k = strtok_r(list, ",", &save); k; k = strtok_r(NULL, ",", &save))
        if (!label_set_get(want, k) && have && json_object_get(have, k)) {
            node_set(labels, k, json_null());
            (*changes)++;
        }
    free(list);
    const char *now = keys.data ? keys.data : "";
    bool note_changes = strcmp(before, now) != 0;
    if (*changes || note_changes) {
        json_t *m = node_ok(json_object());
        if (json_object_size(labels))
            node_set(m, "labels", json_incref(labels));
        json_t *a = node_ok(json_object());
        node_set(a, LABELS_OWNER_ANNOTATION, now[0] ? json_string(now) : json_null());
        node_set(m, "annotations", a);
        json_t *root = node_ok(json_object());
        node_set(root, "metadata", m);
        char *text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(root);
        if (!text)
            xmalloc_fail(0);
        strbuf_puts(patch, text);
        free(text);
        if (!*changes)
            *changes = 1; /* the annotation alone */
    }
    json_decref(labels);
    strbuf_free(&keys);
    json_decref(node);
    return 0;
}
