/* jansson with gpulet's one out-of-memory rule: jansson reports a failed
 * allocation as NULL, and these end the process instead (util/xmalloc.h),
 * so callers build JSON without checking every call. */
#ifndef GPULET_JSONX_H
#define GPULET_JSONX_H

#include <jansson.h>

#include "util/strbuf.h"

/* v, which must not be NULL. */
json_t *jsonx_ok(json_t *v);

/* Sets obj[key] = v, taking v's reference. */
void jsonx_set(json_t *obj, const char *key, json_t *v);

/* Appends v to the array arr, taking v's reference. */
void jsonx_append(json_t *arr, json_t *v);

/* Appends v's text (json_dumps flags) to out, and frees nothing of v. */
void jsonx_dump(const json_t *v, size_t flags, struct strbuf *out);

#endif
