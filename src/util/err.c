#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(struct err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(struct err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    char old[sizeof e->msg];
    memcpy(old, e->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof e->msg)
        snprintf(e->msg + n, sizeof e->msg - (size_t)n, ": %s", old);
    return -1;
}
