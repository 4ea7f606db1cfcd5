/* An arena: many small allocations freed together, for building nested
 * protobuf-c messages whose parts have no other owner. */
#ifndef GPULET_ARENA_H
#define GPULET_ARENA_H

#include <stddef.h>

struct arena {
    void **blocks;
    size_t n, cap;
};

/* Zeroed memory owned by the arena; aborts when out of memory. */
void *arena_alloc(struct arena *a, size_t size);

/* A copy of s owned by the arena. */
char *arena_strdup(struct arena *a, const char *s);

/* A formatted string owned by the arena. */
char *arena_printf(struct arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Frees everything the arena holds. */
void arena_free(struct arena *a);

#endif
