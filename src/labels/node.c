/* The merge patch that brings a Node's labels to the wanted set: gpulet's
 * own labels only, recorded in an annotation so that the ones it set
 * before and no longer wants can be removed without touching anyone
 * else's. */
#include "labels/publish.h"

#include <stdlib.h>
#include <string.h>

#include "util/jsonx.h"
#include "util/xmalloc.h"

/* An object member that must be an object or absent (NULL). */
static int node_object(const json_t *parent, const char *key, json_t **out, struct err *e)
{
    *out = json_object_get(parent, key);
    if (*out && !json_is_object(*out))
        return err_set(e, "the Node's %s is not an object", key);
    return 0;
}

int labels_node_patch(const json_t *node, const struct label_set *want, struct strbuf *patch,
                      unsigned *changes, struct err *e)
{
    *changes = 0;
    json_t *meta = json_is_object(node) ? json_object_get(node, "metadata") : NULL, *have, *notes;
    if (!json_is_object(meta))
        return err_set(e, "the answer is not a Node object (no metadata)");
    if (node_object(meta, "labels", &have, e) < 0 || node_object(meta, "annotations", &notes, e) < 0)
        return -1;
    json_t *owned = notes ? json_object_get(notes, LABELS_OWNER_ANNOTATION) : NULL;
    const char *before = json_is_string(owned) ? json_string_value(owned) : "";
    json_t *labels = jsonx_ok(json_object());
    struct strbuf keys = {0};
    for (unsigned i = 0; i < want->count; i++) {
        const struct label *l = &want->items[i];
        json_t *v = have ? json_object_get(have, l->key) : NULL;
        if (!json_is_string(v) || strcmp(json_string_value(v), l->value)) {
            jsonx_set(labels, l->key, json_string(l->value));
            (*changes)++;
        }
        strbuf_printf(&keys, "%s%s", i ? "," : "", l->key);
    }
    /* Labels gpulet set before and no longer wants: removed (null). */
    char *list = xstrdup(before);
    char *save = NULL;
    for (char *k = strtok_r(list, ",", &save); k; k = strtok_r(NULL, ",", &save))
        if (!label_set_get(want, k) && have && json_object_get(have, k)) {
            jsonx_set(labels, k, json_null());
            (*changes)++;
        }
    free(list);
    const char *now = keys.data ? keys.data : "";
    bool note_changes = strcmp(before, now) != 0;
    if (*changes || note_changes) {
        json_t *m = jsonx_ok(json_object());
        if (json_object_size(labels))
            jsonx_set(m, "labels", json_incref(labels));
        json_t *a = jsonx_ok(json_object());
        jsonx_set(a, LABELS_OWNER_ANNOTATION, now[0] ? json_string(now) : json_null());
        jsonx_set(m, "annotations", a);
        json_t *root = jsonx_ok(json_object());
        jsonx_set(root, "metadata", m);
        jsonx_dump(root, JSON_COMPACT | JSON_SORT_KEYS, patch);
        json_decref(root);
        if (!*changes)
            *changes = 1; /* the annotation alone */
    }
    json_decref(labels);
    strbuf_free(&keys);
    return 0;
}
