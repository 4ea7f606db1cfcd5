/* Files written whole (file.c). */
#ifndef GPULET_FILE_H
#define GPULET_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "util/err.h"

/* Replaces path with the len bytes of data, whole or not at all, even
 * across a crash or a power cut: they are written to tmp (a name on path's
 * file system that no reader of path's directory takes for one of its
 * files), flushed to disk, renamed over path, and the rename flushed with
 * the directory. Fails naming path; tmp is gone either way. */
int file_replace(const char *path, const char *tmp, const void *data, size_t len, mode_t mode,
                 struct err *e);

/* Removes path (gone already is no error), the removal flushed with its
 * directory. */
int file_remove(const char *path, struct err *e);

/* Appends the whole of path to out: 0, or -1 with errno (ENOENT: none). */
struct strbuf;
int file_read(const char *path, struct strbuf *out);

/* Whether path holds exactly the len bytes of data. */
bool file_holds(const char *path, const void *data, size_t len);

#endif
