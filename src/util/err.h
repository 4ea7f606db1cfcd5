/* Error messages filled at the point of failure, logged once at the edge. */
#ifndef GPULET_ERR_H
#define GPULET_ERR_H

#include <stddef.h>

struct err {
    char msg[512];
};

/* Formats msg into e (if e is not NULL) and returns -1, so callers can `return err_set(...)`. */
int err_set(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
