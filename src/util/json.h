/* Helpers for writing JSON text into a strbuf. */
#ifndef GPULET_JSON_H
#define GPULET_JSON_H

#include "util/strbuf.h"

/* Appends s as a quoted JSON string, escaping what JSON requires. */
void json_string(struct strbuf *b, const char *s);

#endif
