#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>

static void err_format(struct err *e, bool usage, const char *fmt, va_list ap)
{
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    e->usage = usage;
}

int err_set(struct err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    err_format(e, false, fmt, ap);
    va_end(ap);
    return -1;
}

int err_usage(struct err *e, const char *fmt, ...)
{
    if (!e)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    err_format(e, true, fmt, ap);
    va_end(ap);
    return -1;
}
