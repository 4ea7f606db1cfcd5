/* Error messages filled at the point of failure, logged once at the edge. */
#ifndef GPULET_ERR_H
#define GPULET_ERR_H

#include <stdbool.h>
#include <stddef.h>

struct err {
    char msg[512];
    bool usage;     /* the command line (a flag, an option's variable) was wrong: exit 2 */
};

/* Formats msg into e (if e is not NULL) and returns -1, so callers can `return err_set(...)`. */
int err_set(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same for a wrong command line: an option's value, a preset's name. */
int err_usage(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
