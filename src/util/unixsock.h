/* One request on a unix socket (the agent's status socket, the simulator's
 * control socket). */
#ifndef GPULET_UNIXSOCK_H
#define GPULET_UNIXSOCK_H

#include <stddef.h>

#include "util/err.h"

/* Sends one line to a unix socket and reads the whole answer into reply.
 * Fails, naming the socket, when it cannot connect (errno then says why). */
int unixsock_request(const char *path, const char *line, char *reply, size_t len,
                     struct err *e);

#endif
