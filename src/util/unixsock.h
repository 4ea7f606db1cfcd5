/* One request on a unix socket (the agent's status socket, the simulator's
 * control socket). */
#ifndef GPULET_UNIXSOCK_H
#define GPULET_UNIXSOCK_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

/* Sends one line to a unix socket and reads the whole answer into reply.
 * Fails, naming the socket, when it cannot connect (errno then says why). */
int unixsock_request(const char *path, const char *line, char *reply, size_t len,
                     struct err *e);

/* The same, the answer of any length appended to reply (a strbuf). */
struct strbuf;
int unixsock_request_all(const char *path, const char *line, struct strbuf *reply,
                         struct err *e);

/* Whether a process listens on the unix socket at path now. */
bool unixsock_live(const char *path);

/* A socket file's identity (inode and change time, since inodes are
 * reused), so that a server notices its file replaced and removes only the
 * file it made, never one another process bound there since. {0, 0}: no
 * file at path. */
struct unixsock_id {
    unsigned long long ino;
    long long ctime_ns;
};
struct unixsock_id unixsock_id_of(const char *path);
bool unixsock_id_same(struct unixsock_id a, struct unixsock_id b);
/* Whether path is still the file whose identity is id. */
bool unixsock_ours(const char *path, struct unixsock_id id);

/* A server's socket. Its file is on the node's disk, which the agent's loop
 * never touches (docs/architecture.md, "Executors"): it is bound on libuv's
 * worker pool (or before the loop serves), served on the loop, and its file
 * removed on the pool. libuv never learns the file's name, so its close
 * never removes a file another process bound there since. */
#include <sys/types.h>
#include <uv.h>

/* Blocking: binds and listens on a unix socket at path (non-blocking,
 * close-on-exec): a stale socket file of an earlier run is removed first,
 * never one a live process serves. 0 with the fd and the file's identity,
 * or -1 naming path and why (another process serves it; or the bind's
 * error, with whose directory it is where that explains a refusal). */
int unixsock_bind(const char *path, int backlog, int *fd, struct unixsock_id *id, struct err *e);

/* On the loop: serves the fd unixsock_bind made with the (initialised)
 * pipe p, which owns the fd from here on, even when this fails. */
int unixsock_serve(uv_pipe_t *p, int fd, int backlog, uv_connection_cb on_connection, const char *path,
                   struct err *e);

/* unixsock_bind on the worker pool, its directory made first (dir_mode; 0:
 * not made). done gets the fd and the file's identity, or -1 and why. */
struct unixsock_binding;
typedef void (*unixsock_bound_cb)(void *ctx, int fd, struct unixsock_id id, const struct err *e);
struct unixsock_binding *unixsock_bind_start(uv_loop_t *loop, const char *path, mode_t dir_mode,
                                             int backlog, unixsock_bound_cb done, void *ctx);
/* done is not called; a socket bound meanwhile is closed and its file removed. */
void unixsock_bind_cancel(struct unixsock_binding *b);

/* Removes path on the worker pool, if it is still the file whose identity
 * is id: never one another process bound there since. */
void unixsock_remove(uv_loop_t *loop, const char *path, struct unixsock_id id);

/* Binds and removals posted and not yet done, in the whole process: a
 * hand-over answers only once none is (a removal still queued could take
 * the file the new agent binds in its place). */
unsigned unixsock_pending(void);

#endif
