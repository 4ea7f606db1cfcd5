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

/* Listens on a unix socket at path with the (initialised) pipe p: a stale
 * socket file of an earlier run is removed first, never one a live process
 * serves. 0 with the file's identity in *id, or -1 naming path and why
 * (another process serves it; or the bind's error, with whose directory it
 * is where that explains a refusal). */
#include <uv.h>
int unixsock_listen(uv_pipe_t *p, const char *path, int backlog, uv_connection_cb on_connection,
                    struct unixsock_id *id, struct err *e);

#endif
