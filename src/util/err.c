#include "util/err.h"

#include <stdarg.h>
#include <stdio.h>

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
