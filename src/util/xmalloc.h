/* One out-of-memory rule, as redis's zmalloc: an allocation that fails
 * ends the process with a message. gpulet's allocations are small and
 * bounded; a node that cannot give a few KiB is better restarted by its
 * DaemonSet than served by a daemon that half-handles the failure. */
#ifndef GPULET_XMALLOC_H
#define GPULET_XMALLOC_H

#include <stddef.h>

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t size);
char *xstrdup(const char *s);

/* The rule itself, for allocations made inside libraries (jansson) that
 * report failure by returning NULL. */
void xmalloc_fail(size_t size) __attribute__((noreturn));

#endif
