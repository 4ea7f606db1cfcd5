/* YAML documents as JSON values (yjson.c). */
#ifndef GPULET_YJSON_H
#define GPULET_YJSON_H

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

/* Every document of a YAML stream (`---` between them), as a JSON array of
 * their values; NULL with "source:line:col: why" in e. */
json_t *yjson_load_all(const char *source, const char *text, size_t len, struct err *e);

#endif
