/* NVIDIA's `version: v1` config file: its flags map onto the option table
 * (options.c) by their keys, its resources and sharing sections are
 * resources.c's. Errors name source:line:column. */
#include "config/internal.h"

#include <stdio.h>
#include <string.h>

static const struct config_opt *config_by_key(const char *key)
{
    for (size_t i = 0; i < config_noptions; i++)
        if (config_options[i].key && !strcmp(config_options[i].key, key))
            return &config_options[i];
    return NULL;
}

/* A scalar, or for deviceListStrategy also a list, as one string. */
static int config_file_value(struct ydoc *d, yaml_node_t *v, const char *key, char *out,
                             size_t len, struct err *e)
{
    if (v->type == YAML_SEQUENCE_NODE) {
        size_t n = 0;
        out[0] = '\0';
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top;
             it++) {
            const char *s;
            if (ydoc_scalar(d, ydoc_node(d, *it), key, &s, e) < 0)
                return -1;
            n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%s", n ? "," : "", s);
        }
        return 0;
    }
    const char *s;
    if (ydoc_scalar(d, v, key, &s, e) < 0)
        return -1;
    snprintf(out, len, "%s", s);
    return 0;
}

static int config_file_map(struct config *c, struct ydoc *d, yaml_node_t *map,
                           const char *prefix, struct err *e)
{
    if (map->type != YAML_MAPPING_NODE)
        return ydoc_error(d, map, e, "%s must be a mapping", prefix);
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *kn = ydoc_node(d, p->key), *vn = ydoc_node(d, p->value);
        const char *k;
        if (ydoc_scalar(d, kn, "a key", &k, e) < 0)
            return -1;
        char key[160];
        snprintf(key, sizeof key, "%s.%s", prefix, k);
        if (!strcmp(key, "flags.plugin") || !strcmp(key, "flags.gfd")) {
            if (config_file_map(c, d, vn, key, e) < 0)
                return -1;
            continue;
        }
        const struct config_opt *o = config_by_key(key);
        if (!o)
            return ydoc_error(d, kn, e, "unknown key '%s'", key);
        if (o->type != T_LIST && vn->type == YAML_SEQUENCE_NODE)
            return ydoc_error(d, vn, e, "%s must be a single value", key);
        char value[256], where[CONFIG_PATH_MAX + 300];
        bool b;
        if (o->type == T_BOOL) {
            if (ydoc_bool(d, vn, key, &b, e) < 0)
                return -1;
            snprintf(value, sizeof value, "%s", b ? "true" : "false");
        } else if (config_file_value(d, vn, key, value, sizeof value, e) < 0) {
            return -1;
        }
        snprintf(where, sizeof where, "%s:%zu:%zu: %s", d->source, vn->start_mark.line + 1,
                 vn->start_mark.column + 1, key);
        if (config_set(c, o, value, where, e) < 0)
            return -1;
    }
    return 0;
}

static int config_flags_section(void *ctx, struct ydoc *d, yaml_node_t *n, struct err *e)
{
    return ydoc_empty(n) ? 0 : config_file_map(ctx, d, n, "flags", e);
}

static int config_imex_section(void *ctx, struct ydoc *d, yaml_node_t *n, struct err *e)
{
    (void)ctx;
    return ydoc_empty(n) ? 0 : ydoc_error(d, n, e, "IMEX channels are not supported yet: remove "
                                          "the imex section");
}

/* The file's sections, each applied where it stands in the file, so that of
 * several errors the first in the file is the one reported; an empty one
 * changes nothing. */
static const struct ydoc_key config_sections[] = {
    {"version", NULL}, /* read first (config_document): it says what the rest means */
    {"flags", config_flags_section},
    {"resources", config_resources_section},
    {"sharing", config_sharing_section},
    {"imex", config_imex_section},
    {NULL, NULL},
};

/* Applies a loaded v1 document over c: its keys checked, the version read,
 * then the sections in the file's order. */
static int config_document(struct config *c, struct ydoc *d, struct err *e)
{
    static const char *const keys[] = {"version", "flags", "resources", "sharing", "imex", NULL};
    yaml_node_t *root = ydoc_root(d);
    if (!root || ydoc_empty(root))
        return 0; /* an empty file changes nothing */
    if (ydoc_check_keys(d, root, "the config file", keys, e) < 0)
        return -1;
    yaml_node_t *n = ydoc_get(d, root, "version");
    const char *version = "v1";
    if (n && ydoc_scalar(d, n, "version", &version, e) < 0)
        return -1;
    if (strcmp(version, "v1") && *version)
        return ydoc_error(d, n, e, "version must be v1, not '%s'", version);
    return ydoc_each(d, root, "the config file", config_sections, c, e);
}

int config_apply_yaml(struct config *c, const char *source, const char *text, size_t len,
                      struct err *e)
{
    struct ydoc d;
    if (ydoc_load(&d, source, text, len, e) < 0)
        return -1;
    int rc = config_document(c, &d, e);
    ydoc_free(&d);
    return rc;
}

int config_file(struct config *c, const char *path, struct err *e)
{
    struct ydoc d;
    if (ydoc_load_file(&d, path, e) < 0)
        return -1;
    int rc = config_document(c, &d, e);
    ydoc_free(&d);
    return rc;
}
