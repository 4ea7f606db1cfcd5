#include "util/ydoc.h"
#include "util/xmalloc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define YDOC_MAX_FILE (1 << 20)
#define YDOC_MAX_KEYS 64 /* of one mapping, for ydoc_check_keys */

/* The first key, by place in the text, that repeats an earlier key of its
 * mapping: YAML says keys are unique, and a parser that keeps the last one
 * (libyaml keeps both) would take a config's second value silently. */
static int ydoc_check_unique(struct ydoc *d, struct err *e)
{
    const yaml_node_t *dup = NULL, *first = NULL;
    for (yaml_node_t *n = d->doc.nodes.start; n < d->doc.nodes.top; n++) {
        if (n->type != YAML_MAPPING_NODE)
            continue;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
            yaml_node_t *k = ydoc_node(d, p->key);
            if (k->type != YAML_SCALAR_NODE || (dup && k->start_mark.index > dup->start_mark.index))
                continue;
            for (yaml_node_pair_t *q = n->data.mapping.pairs.start; q < p; q++) {
                yaml_node_t *k2 = ydoc_node(d, q->key);
                if (k2->type == YAML_SCALAR_NODE && !strcmp((char *)k2->data.scalar.value,
                                                            (char *)k->data.scalar.value)) {
                    dup = k;
                    first = k2;
                    break;
                }
            }
        }
    }
    if (!dup)
        return 0;
    return ydoc_error(d, dup, e, "duplicate key '%s' (first at line %zu)",
                      (char *)dup->data.scalar.value, first->start_mark.line + 1);
}

int ydoc_load(struct ydoc *d, const char *source, const char *text, size_t len, struct err *e)
{
    memset(d, 0, sizeof *d);
    snprintf(d->source, sizeof d->source, "%s", source);
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return err_set(e, "%s: out of memory", source);
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int ok = yaml_parser_load(&p, &d->doc);
    if (!ok) {
        /* libyaml marks are zero-based; editors count from one. */
        err_set(e, "%s:%zu:%zu: %s%s%s", source, p.problem_mark.line + 1,
                p.problem_mark.column + 1, p.problem ? p.problem : "invalid YAML",
                p.context ? " " : "", p.context ? p.context : "");
    } else {
        d->loaded = true;
    }
    yaml_parser_delete(&p);
    if (ok && ydoc_check_unique(d, e) < 0) {
        ydoc_free(d);
        return -1;
    }
    return ok ? 0 : -1;
}

int ydoc_load_file(struct ydoc *d, const char *path, struct err *e)
{
    memset(d, 0, sizeof *d);
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(e, "%s: %s", path, strerror(errno));
    char *buf = xmalloc(YDOC_MAX_FILE + 1);
    size_t n = fread(buf, 1, YDOC_MAX_FILE + 1, f);
    int rerr = ferror(f);
    fclose(f);
    int rc;
    if (rerr)
        rc = err_set(e, "%s: read error", path);
    else if (n > YDOC_MAX_FILE)
        rc = err_set(e, "%s: larger than %d bytes", path, YDOC_MAX_FILE);
    else
        rc = ydoc_load(d, path, buf, n, e);
    free(buf);
    return rc;
}

void ydoc_free(struct ydoc *d)
{
    if (d->loaded)
        yaml_document_delete(&d->doc);
    d->loaded = false;
}

yaml_node_t *ydoc_root(struct ydoc *d)
{
    return d->loaded ? yaml_document_get_root_node(&d->doc) : NULL;
}

yaml_node_t *ydoc_node(struct ydoc *d, int id)
{
    return yaml_document_get_node(&d->doc, id);
}

int ydoc_error(struct ydoc *d, const yaml_node_t *n, struct err *e, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!n)
        return err_set(e, "%s: %s", d->source, msg);
    return err_set(e, "%s:%zu:%zu: %s", d->source, n->start_mark.line + 1,
                   n->start_mark.column + 1, msg);
}

int ydoc_scalar(struct ydoc *d, const yaml_node_t *n, const char *what, const char **out,
                struct err *e)
{
    if (!n || n->type != YAML_SCALAR_NODE)
        return ydoc_error(d, n, e, "%s must be a single value", what);
    *out = (const char *)n->data.scalar.value;
    return 0;
}

int ydoc_int(struct ydoc *d, const yaml_node_t *n, const char *what, long min, long max,
             long *out, struct err *e)
{
    const char *s = NULL;
    if (ydoc_scalar(d, n, what, &s, e) < 0)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0')
        return ydoc_error(d, n, e, "%s must be an integer, not '%s'", what, s);
    if (v < min || v > max)
        return ydoc_error(d, n, e, "%s must be between %ld and %ld, not %ld", what, min, max, v);
    *out = v;
    return 0;
}

int ydoc_bool(struct ydoc *d, const yaml_node_t *n, const char *what, bool *out, struct err *e)
{
    /* YAML 1.1's booleans, as the Go YAML parser under NVIDIA's config reads
     * them; quoted, each is a string there, and refused. */
    static const char *const words[] = {
        "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON",
        "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF",
    };
    const size_t nwords = sizeof words / sizeof *words;
    const char *s = NULL;
    if (ydoc_scalar(d, n, what, &s, e) < 0)
        return -1;
    for (size_t i = 0; i < nwords && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE; i++)
        if (!strcmp(s, words[i]))
            return *out = i < nwords / 2, 0;
    return ydoc_error(d, n, e, "%s must be true or false, not %s'%s'", what,
                      n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? "" : "the string ", s);
}

int ydoc_each(struct ydoc *d, const yaml_node_t *n, const char *what, const struct ydoc_key *keys,
              void *ctx, struct err *e)
{
    if (!n || n->type != YAML_MAPPING_NODE)
        return ydoc_error(d, n, e, "%s must be a mapping of keys to values", what);
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = ydoc_node(d, p->key);
        const char *key = NULL;
        if (ydoc_scalar(d, k, "a key", &key, e) < 0)
            return -1;
        const struct ydoc_key *kk = keys;
        while (kk->key && strcmp(kk->key, key))
            kk++;
        if (!kk->key)
            return ydoc_error(d, k, e, "unknown key '%s' in %s", key, what);
        if (kk->apply && kk->apply(ctx, d, ydoc_node(d, p->value), e) < 0)
            return -1;
    }
    return 0;
}

int ydoc_check_keys(struct ydoc *d, const yaml_node_t *n, const char *what,
                    const char *const *known, struct err *e)
{
    struct ydoc_key keys[YDOC_MAX_KEYS + 1];
    size_t k = 0;
    for (; known[k] && k < YDOC_MAX_KEYS; k++)
        keys[k] = (struct ydoc_key){known[k], NULL};
    keys[k].key = NULL;
    return ydoc_each(d, n, what, keys, NULL, e);
}

yaml_node_t *ydoc_get(struct ydoc *d, const yaml_node_t *n, const char *key)
{
    if (!n || n->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = ydoc_node(d, p->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((char *)k->data.scalar.value, key))
            return ydoc_node(d, p->value);
    }
    return NULL;
}

bool ydoc_empty(const yaml_node_t *n)
{
    return (n->type == YAML_SCALAR_NODE && (!n->data.scalar.length ||
                                            !strcmp((char *)n->data.scalar.value, "null"))) ||
           (n->type == YAML_SEQUENCE_NODE && n->data.sequence.items.top == n->data.sequence.items.start) ||
           (n->type == YAML_MAPPING_NODE && n->data.mapping.pairs.top == n->data.mapping.pairs.start);
}
