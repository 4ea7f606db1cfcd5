/* A gRPC server on a unix socket, run by the libuv loop: unary and
 * server-streaming methods, status trailers, Trailers-Only errors. */
#ifndef GPULET_GRPC_SERVER_H
#define GPULET_GRPC_SERVER_H

#include <stdbool.h>
#include <uv.h>

#include "grpc/grpc.h"
#include "util/err.h"

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

/* Listens on path (replacing a stale file) and serves the methods; an
 * unknown method gets UNIMPLEMENTED. methods must outlive the server. */
int grpc_server_start(struct grpc_server **out, uv_loop_t *loop, const char *path,
                      const struct grpc_method *methods, size_t nmethods, struct err *e);

/* Closes the listener and every connection (cancelling their calls),
 * removes the socket file, and frees the server once libuv is done. */
void grpc_server_close(struct grpc_server *s);

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
