/* A gRPC server on a unix socket, run by the libuv loop: unary and
 * server-streaming methods, status trailers, Trailers-Only errors. */
#ifndef GPULET_GRPC_SERVER_H
#define GPULET_GRPC_SERVER_H

#include <stdbool.h>
#include <uv.h>

#include "grpc/grpc.h"
#include "util/err.h"
#include "util/unixsock.h"

struct grpc_server;
struct grpc_call;

/* Called once the request message has arrived. The handler answers, now
 * or later, with grpc_call_send (any number of times) then grpc_call_finish. */
typedef void (*grpc_handler_fn)(struct grpc_call *call, const uint8_t *msg, size_t len,
                                void *ctx);

/* Called when a call ends before it was finished: the client cancelled or
 * went away, or the server is closing. The call is freed right after. */
typedef void (*grpc_cancel_fn)(struct grpc_call *call, void *ctx);

struct grpc_method {
    const char *path; /* "/v1beta1.DevicePlugin/Allocate" */
    grpc_handler_fn fn;
    void *ctx;
};

/* Serves the methods on fd, the socket unixsock_bind made at path (with
 * the file's identity id; the server owns fd from here on); an unknown
 * method gets UNIMPLEMENTED. methods must outlive the server. */
int grpc_server_start(struct grpc_server **out, uv_loop_t *loop, const char *path, int fd,
                      struct unixsock_id id, const struct grpc_method *methods, size_t nmethods,
                      struct err *e);

/* Closes the listener and every connection (cancelling their calls),
 * removes the socket file (on the worker pool, if still its own), and
 * frees the server once libuv is done. */
void grpc_server_close(struct grpc_server *s);

/* Stops serving as grpc_server_close does, but gently: the listener
 * closes and the socket file goes, every call still open ends with
 * UNAVAILABLE, and each connection is left for its peer to close. A
 * kubelet acts on a device plugin's going only once it has closed its
 * side, and acts on whichever plugin holds the name by then: whoever
 * registers again waits for that (plugin_stop). done(ctx) runs once the
 * last connection has closed, or once ms have passed and those left were
 * closed here; the server is freed right after. */
void grpc_server_drain(struct grpc_server *s, unsigned ms, void (*done)(void *ctx), void *ctx);

/* How many connections the server has open now. */
unsigned grpc_server_connections(const struct grpc_server *s);

/* The socket path the server listens on. */
const char *grpc_server_path(const struct grpc_server *s);

/* Queues one response message on the call. */
void grpc_call_send(struct grpc_call *call, const uint8_t *msg, size_t len);

/* Ends the call with a status (and message for errors). The call must not
 * be used afterwards. */
void grpc_call_finish(struct grpc_call *call, enum grpc_status status, const char *message);

/* Registers fn to learn that an unfinished call ended. */
void grpc_call_on_cancel(struct grpc_call *call, grpc_cancel_fn fn, void *ctx);

#endif
