#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

/* The one process-wide setting. A reload (SIGHUP, the node's config) sets
 * it on the loop while the lanes, the watcher and workers log: atomic,
 * relaxed, since a line a moment late at the old level is no matter. */
static atomic_int min_level = LOG_INFO;

void log_set_level(enum log_level level)
{
    atomic_store_explicit(&min_level, (int)level, memory_order_relaxed);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    if ((int)level < atomic_load_explicit(&min_level, memory_order_relaxed))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char line[1024];
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, names[level]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line keeps lines whole when threads log concurrently. */
    fprintf(stderr, "%s\n", line);
}
