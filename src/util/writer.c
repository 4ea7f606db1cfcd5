/* Files written off the loop: an fsync takes milliseconds on an idle disk
 * and seconds on a node pulling a large image, which is when pods start and
 * claims are prepared; the loop answers the kubelet meanwhile. */
#include "util/writer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/dirs.h"
#include "util/file.h"
#include "util/xmalloc.h"

struct writer_waiter {
    writer_done_cb *done;
    void *ctx;
};

/* One write: the text (or a removal) and who waits for it. The worker
 * reads the writer's settings, which never change, and fills rc and e. */
struct writer_job {
    uv_work_t work;
    struct writer *w;
    struct strbuf text;
    bool remove;
    bool written; /* false: the file held the text already */
    int rc;
    struct err e;
    struct writer_waiter *waiters;
    unsigned nwaiters;
};

struct writer {
    uv_loop_t *loop;
    char *path, *tmp; /* set once: read by the worker too */
    mode_t mode;
    unsigned flags;
    struct writer_job *running; /* on the worker pool */
    struct writer_job *next;    /* the newest text, once running has ended */
    bool closing, telling;      /* telling: inside after_work's callbacks */
};

/* Writes put and not yet ended, of every writer (the loop's own count: a
 * hand-over answers only once none is left). */
static unsigned writer_jobs;

unsigned writer_pending(void)
{
    return writer_jobs;
}

static void writer_free(struct writer *w)
{
    free(w->path);
    free(w->tmp);
    free(w);
}

static void writer_job_free(struct writer_job *j)
{
    writer_jobs--;
    strbuf_free(&j->text);
    free(j->waiters);
    free(j);
}

/* On the worker: the directories, then the file, then tmp's own directory. */
static void writer_work(uv_work_t *req)
{
    struct writer_job *j = req->data;
    const struct writer *w = j->w;
    char dir[4096];
    j->rc = 0;
    j->written = true;
    if (w->flags & WRITER_MKDIR && !j->remove) { /* a file to remove needs no directory made */
        struct err made;
        dirs_parent(w->path, dir, sizeof dir);
        j->rc = dirs_make(NULL, dir, 0755, &made);
        dirs_parent(w->tmp, dir, sizeof dir);
        if (j->rc == 0)
            j->rc = dirs_make(NULL, dir, 0755, &made);
        if (j->rc < 0)
            err_set(&j->e, "cannot write %s: %s", w->path, made.msg);
    }
    if (j->rc == 0 && j->remove)
        j->rc = file_remove(w->path, &j->e);
    else if (j->rc == 0 && w->flags & WRITER_KEEP_SAME &&
             file_holds(w->path, j->text.data, j->text.len))
        j->written = false;
    else if (j->rc == 0)
        j->rc = file_replace(w->path, w->tmp, j->text.data ? j->text.data : "", j->text.len, w->mode,
                             &j->e);
    if (w->flags & WRITER_TMP_DIR) {
        dirs_parent(w->tmp, dir, sizeof dir);
        rmdir(dir);
    }
}

static void writer_start(struct writer *w);

static void writer_done(uv_work_t *req, int status)
{
    (void)status; /* never cancelled: writes are not abandoned */
    struct writer_job *j = req->data;
    struct writer *w = j->w;
    w->running = NULL;
    w->telling = true;
    for (unsigned i = 0; i < j->nwaiters; i++)
        j->waiters[i].done(j->waiters[i].ctx, j->rc < 0 ? &j->e : NULL, j->rc == 0 && j->written);
    w->telling = false;
    writer_job_free(j);
    if (w->next && !w->running)
        writer_start(w);
    else if (!w->running && w->closing)
        writer_free(w);
}

static void writer_start(struct writer *w)
{
    w->running = w->next;
    w->next = NULL;
    w->running->work.data = w->running;
    uv_queue_work(w->loop, &w->running->work, writer_work, writer_done);
}

struct writer *writer_new(uv_loop_t *loop, const char *path, const char *tmp, mode_t mode,
                          unsigned flags)
{
    struct writer *w = xcalloc(1, sizeof *w);
    w->loop = loop;
    w->path = xstrdup(path);
    w->tmp = xstrdup(tmp);
    w->mode = mode;
    w->flags = flags;
    return w;
}

/* The job the next put goes in: the waiting one, else a new one. */
static struct writer_job *writer_next(struct writer *w)
{
    if (!w->next) {
        w->next = xcalloc(1, sizeof *w->next);
        w->next->w = w;
        writer_jobs++;
    }
    return w->next;
}

void writer_put(struct writer *w, struct strbuf *text)
{
    struct writer_job *j = writer_next(w);
    strbuf_free(&j->text);
    j->text = *text;
    *text = (struct strbuf){0};
    j->remove = false;
    if (!w->running)
        writer_start(w);
}

void writer_remove(struct writer *w)
{
    struct writer_job *j = writer_next(w);
    strbuf_free(&j->text);
    j->remove = true;
    if (!w->running)
        writer_start(w);
}

void writer_then(struct writer *w, writer_done_cb *done, void *ctx)
{
    struct writer_job *j = w->next ? w->next : w->running;
    if (!j) {
        done(ctx, NULL, false);
        return;
    }
    j->waiters = xrealloc(j->waiters, (j->nwaiters + 1) * sizeof *j->waiters);
    j->waiters[j->nwaiters++] = (struct writer_waiter){done, ctx};
}

const char *writer_path(const struct writer *w)
{
    return w->path;
}

bool writer_busy(const struct writer *w)
{
    return w->running || w->next;
}

void writer_close(struct writer *w)
{
    if (!w)
        return;
    w->closing = true;
    if (!w->running && !w->next && !w->telling)
        writer_free(w);
}
