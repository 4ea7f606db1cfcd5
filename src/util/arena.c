#include "util/arena.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

void *arena_alloc(struct arena *a, size_t size)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 32;
        a->blocks = xrealloc(a->blocks, cap * sizeof *a->blocks);
        a->cap = cap;
    }
    void *p = xcalloc(1, size);
    a->blocks[a->n++] = p;
    return p;
}

char *arena_strdup(struct arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(arena_alloc(a, n), s, n);
}

char *arena_printf(struct arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = arena_alloc(a, (size_t)(n < 0 ? 0 : n) + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

void arena_free(struct arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->blocks[i]);
    free(a->blocks);
    a->blocks = NULL;
    a->n = a->cap = 0;
}
