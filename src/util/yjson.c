/* YAML documents as JSON values (jansson): for inputs that people hold in
 * either form, such as the manifests `kubectl get -o yaml` prints. libyaml
 * parses; this only maps its node tree. Plain scalars take YAML 1.1's core
 * types (null, true/false, integers); quoted ones stay strings. Nesting and
 * aliases are bounded, so that no input can exhaust the stack or memory. */
#include "util/yjson.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "util/jsonx.h"

#define YJSON_MAX_DEPTH 64
#define YJSON_MAX_NODES 1000000 /* an alias counts each time it is used */

struct yjson {
    yaml_document_t *doc;
    unsigned long nodes;
};

static json_t *yjson_scalar(const yaml_node_t *n)
{
    const char *s = (const char *)n->data.scalar.value;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return jsonx_ok(json_string(s));
    if (!*s || !strcmp(s, "~") || !strcasecmp(s, "null"))
        return json_null();
    if (!strcasecmp(s, "true"))
        return json_true();
    if (!strcasecmp(s, "false"))
        return json_false();
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*end && !errno && (s[0] != '0' || !s[1]) && strspn(s, "-0123456789") == strlen(s))
        return jsonx_ok(json_integer(v));
    return jsonx_ok(json_string(s));
}

static json_t *yjson_node(struct yjson *y, const yaml_node_t *n, int depth, struct err *e)
{
    if (!n || depth > YJSON_MAX_DEPTH || ++y->nodes > YJSON_MAX_NODES) {
        if (n)
            err_set(e, "line %zu: nested deeper than %d levels or over %d nodes",
                    n->start_mark.line + 1, YJSON_MAX_DEPTH, YJSON_MAX_NODES);
        else
            err_set(e, "a node is missing");
        return NULL;
    }
    if (n->type == YAML_SCALAR_NODE)
        return yjson_scalar(n);
    if (n->type == YAML_SEQUENCE_NODE) {
        json_t *a = jsonx_ok(json_array());
        for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top; i++) {
            json_t *v = yjson_node(y, yaml_document_get_node(y->doc, *i), depth + 1, e);
            if (!v)
                return json_decref(a), NULL;
            jsonx_append(a, v);
        }
        return a;
    }
    json_t *o = jsonx_ok(json_object());
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(y->doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE) {
            err_set(e, "line %zu: a mapping key that is not a plain value",
                    (k ? k : n)->start_mark.line + 1);
            return json_decref(o), NULL;
        }
        json_t *v = yjson_node(y, yaml_document_get_node(y->doc, p->value), depth + 1, e);
        if (!v)
            return json_decref(o), NULL;
        jsonx_set(o, (const char *)k->data.scalar.value, v);
    }
    return o;
}

json_t *yjson_load_all(const char *source, const char *text, size_t len, struct err *e)
{
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p)) {
        err_set(e, "%s: out of memory", source);
        return NULL;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    json_t *docs = jsonx_ok(json_array());
    for (;;) {
        yaml_document_t doc;
        if (!yaml_parser_load(&p, &doc)) {
            err_set(e, "%s:%zu:%zu: %s%s%s", source, p.problem_mark.line + 1,
                    p.problem_mark.column + 1, p.problem ? p.problem : "invalid YAML",
                    p.context ? " " : "", p.context ? p.context : "");
            json_decref(docs);
            docs = NULL;
            break;
        }
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (!root) { /* the end of the stream */
            yaml_document_delete(&doc);
            break;
        }
        struct yjson y = {&doc, 0};
        struct err why;
        json_t *v = yjson_node(&y, root, 0, &why);
        yaml_document_delete(&doc);
        if (!v) {
            err_set(e, "%s: %s", source, why.msg);
            json_decref(docs);
            docs = NULL;
            break;
        }
        jsonx_append(docs, v);
    }
    yaml_parser_delete(&p);
    return docs;
}
