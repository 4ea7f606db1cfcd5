#include "util/strbuf.h"
#include "util/xmalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void strbuf_reserve(struct strbuf *b, size_t extra)
{
    if (b->len + extra + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1)
        cap *= 2;
    b->data = xrealloc(b->data, cap);
    b->cap = cap;
}

void strbuf_append(struct strbuf *b, const char *s, size_t len)
{
    strbuf_reserve(b, len);
    memcpy(b->data + b->len, s, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void strbuf_puts(struct strbuf *b, const char *s)
{
    strbuf_append(b, s, strlen(s));
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    strbuf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void strbuf_free(struct strbuf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}
