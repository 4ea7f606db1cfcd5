/* Per-node configuration: named configs in a ConfigMap, one chosen by a
 * label on the Node, as NVIDIA's config-manager sidecar chooses them. Pure
 * functions over the API's JSON; the agent watches and applies. */
#include "config/config.h"

#include <stdlib.h>
#include <string.h>

#include "util/jsonx.h"
#include "util/strbuf.h"
#include "util/xmalloc.h"

void config_named_free(struct config_named_set *s)
{
    for (unsigned i = 0; i < s->count; i++) {
        free(s->items[i].name);
        free(s->items[i].text);
    }
    free(s->items);
    memset(s, 0, sizeof *s);
}

static int config_named_cmp(const void *a, const void *b)
{
    return strcmp(((const struct config_named *)a)->name, ((const struct config_named *)b)->name);
}

int config_named_parse(struct config_named_set *s, const json_t *cm, struct err *e)
{
    memset(s, 0, sizeof *s);
    if (!json_is_object(cm))
        return err_set(e, "the ConfigMap is not an object");
    json_t *data = json_object_get(cm, "data");
    int rc = 0;
    if (data && !json_is_object(data) && !json_is_null(data)) {
        rc = err_set(e, "the ConfigMap's data is not a map");
    } else if (json_is_object(data)) {
        s->items = xcalloc(json_object_size(data) + 1, sizeof *s->items);
        const char *key;
        json_t *v;
        json_object_foreach(data, key, v) {
            if (!json_is_string(v)) {
                rc = err_set(e, "the ConfigMap's data.%s is not text", key);
                break;
            }
            struct config_named *n = &s->items[s->count++];
            n->name = xstrdup(key);
            n->len = json_string_length(v);
            n->text = xmalloc(n->len + 1);
            memcpy(n->text, json_string_value(v), n->len + 1);
        }
        qsort(s->items, s->count, sizeof *s->items, config_named_cmp);
    }
    if (rc < 0)
        config_named_free(s);
    return rc;
}

int config_node_label(const json_t *node, const char *key, char *out, size_t outlen, struct err *e)
{
    out[0] = '\0';
    if (!json_is_object(node))
        return err_set(e, "the Node is not an object");
    json_t *labels = json_object_get(json_object_get(node, "metadata"), "labels");
    const char *v = json_string_value(json_object_get(labels, key));
    if (v && strlen(v) >= outlen)
        return err_set(e, "the Node's label %s is longer than %zu characters", key, outlen - 1);
    if (v)
        snprintf(out, outlen, "%s", v);
    return 0;
}

static const struct config_named *config_named_find(const struct config_named_set *s,
                                                    const char *name)
{
    for (unsigned i = 0; i < s->count; i++)
        if (!strcmp(s->items[i].name, name))
            return &s->items[i];
    return NULL;
}

/* "a, b, c", or "none". */
static void config_named_list(const struct config_named_set *s, struct strbuf *out)
{
    for (unsigned i = 0; i < s->count; i++)
        strbuf_printf(out, "%s%s", i ? ", " : "", s->items[i].name);
    if (!s->count)
        strbuf_puts(out, "none");
}

int config_named_choose(const struct config_named_set *s, const char *label,
                        const char *default_name, const struct config_named **out,
                        const char **why, struct err *e)
{
    *out = NULL;
    const char *want = NULL;
    if (label && *label) {
        want = label;
        *why = "the node label";
    } else if (default_name && *default_name) {
        want = default_name;
        *why = "--default-config";
    }
    if (want) {
        if ((*out = config_named_find(s, want)))
            return 0;
        struct strbuf have = {0};
        config_named_list(s, &have);
        err_set(e, "%s names config '%s', which the ConfigMap does not have (it has: %s)", *why,
                want, have.data);
        strbuf_free(&have);
        return -1;
    }
    if ((*out = config_named_find(s, "default"))) {
        *why = "the config named default";
        return 0;
    }
    if (s->count == 1) {
        *out = &s->items[0];
        *why = "the only config";
        return 0;
    }
    *why = s->count ? "several configs and none named default" : "no configs";
    return 0;
}
