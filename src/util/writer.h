/* A file the loop keeps on disk without ever waiting on the disk
 * (writer.c): the loop hands over the whole new text; libuv's worker pool
 * replaces the file (util/file.c: written, flushed, renamed, the rename
 * flushed), one write at a time per file and in order, the newest text only
 * (a put while a write runs waits for it, and a later put replaces it).
 * Whoever must not act before the text is on disk (a DRA prepare's answer
 * and its checkpoint) asks to be told with writer_then. */
#ifndef GPULET_WRITER_H
#define GPULET_WRITER_H

#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

#include "util/err.h"
#include "util/strbuf.h"

enum {
    WRITER_MKDIR = 1 << 0,     /* make the file's directory and tmp's, where missing */
    WRITER_KEEP_SAME = 1 << 1, /* leave a file that holds the text already as it is */
    WRITER_TMP_DIR = 1 << 2,   /* tmp's directory is the writer's own: removed after each write */
};

/* On the loop, once every write asked for before it has ended: e NULL when
 * the file holds the text (or is gone, after writer_remove), else why not;
 * written false where WRITER_KEEP_SAME found it holding the text already. */
typedef void writer_done_cb(void *ctx, const struct err *e, bool written);

struct writer;

/* A writer of path, through tmp (a name on the same file system that no
 * reader of path's directory takes for one of its files). */
struct writer *writer_new(uv_loop_t *loop, const char *path, const char *tmp, mode_t mode,
                          unsigned flags);

/* The file's new text, moved out of text (left empty). */
void writer_put(struct writer *w, struct strbuf *text);

/* The file removed (in turn, after the writes before). */
void writer_remove(struct writer *w);

/* done once what was put (or removed) so far is on disk; at once (before
 * writer_then returns) when nothing is under way. ctx must live until then. */
void writer_then(struct writer *w, writer_done_cb *done, void *ctx);

/* The file w writes. */
const char *writer_path(const struct writer *w);

/* Whether a write is under way or waiting. */
bool writer_busy(const struct writer *w);

/* How many writes, of every writer, are put and not yet ended (the loop's
 * to ask). */
unsigned writer_pending(void);

/* Lets go of w: it is freed once its writes have ended (they are not
 * abandoned; their waiters are still told). */
void writer_close(struct writer *w);

#endif
