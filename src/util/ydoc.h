/* A loaded YAML document with typed accessors whose errors carry
 * "source:line:column", shared by every YAML input (scenarios, config). */
#ifndef GPULET_YDOC_H
#define GPULET_YDOC_H

#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "util/err.h"

struct ydoc {
    yaml_document_t doc;
    char source[256]; /* file name or "preset NAME", for error messages */
    bool loaded;
};

/* Parses text into d; on failure fills e with source, line and column. A
 * mapping that repeats a key is a failure too. */
int ydoc_load(struct ydoc *d, const char *source, const char *text, size_t len, struct err *e);

/* Reads and parses a file (at most 1 MiB). */
int ydoc_load_file(struct ydoc *d, const char *path, struct err *e);

/* Frees the document. Safe on a document that failed to load. */
void ydoc_free(struct ydoc *d);

/* The root node, or NULL for an empty document. */
yaml_node_t *ydoc_root(struct ydoc *d);

/* Node by id within a mapping pair or sequence item. */
yaml_node_t *ydoc_node(struct ydoc *d, int id);

/* Fills e with "source:line:col: <message>" for the node and returns -1. */
int ydoc_error(struct ydoc *d, const yaml_node_t *n, struct err *e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The node's scalar text, or an error if it is not a scalar. */
int ydoc_scalar(struct ydoc *d, const yaml_node_t *n, const char *what, const char **out,
                struct err *e);

/* A decimal integer within [min, max]. */
int ydoc_int(struct ydoc *d, const yaml_node_t *n, const char *what, long min, long max,
             long *out, struct err *e);

/* A plain true/false, or any other YAML 1.1 boolean (yes/no, on/off, y/n in
 * their three cases), as NVIDIA's parser reads them; a quoted one is refused. */
int ydoc_bool(struct ydoc *d, const yaml_node_t *n, const char *what, bool *out, struct err *e);

/* Checks that n is a mapping whose keys are all in the NULL-terminated list
 * (at most 64 of them). */
int ydoc_check_keys(struct ydoc *d, const yaml_node_t *n, const char *what,
                    const char *const *known, struct err *e);

/* One key of a mapping and what to do with its value (ydoc_each). */
struct ydoc_key {
    const char *key;
    int (*apply)(void *ctx, struct ydoc *d, yaml_node_t *value, struct err *e);
};

/* Applies each pair of mapping n in the file's order through its key's
 * entry in keys (ended by a NULL key), so that of several errors the first
 * in the file is reported; a key not in keys is an error at its place. */
int ydoc_each(struct ydoc *d, const yaml_node_t *n, const char *what, const struct ydoc_key *keys,
              void *ctx, struct err *e);

/* The value node of key in mapping n, or NULL when absent. */
yaml_node_t *ydoc_get(struct ydoc *d, const yaml_node_t *n, const char *key);

/* An empty value (null, [] or {}): a section left out. */
bool ydoc_empty(const yaml_node_t *n);

#endif
