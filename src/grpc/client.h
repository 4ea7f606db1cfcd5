/* gRPC unary calls to a unix socket, on the libuv loop, each with a
 * deadline and its own connection (the calls gpulet makes are rare). */
#ifndef GPULET_GRPC_CLIENT_H
#define GPULET_GRPC_CLIENT_H

#include <uv.h>

#include "grpc/grpc.h"

struct grpc_client_call;

/* The call's one outcome: status, message, and the response on GRPC_OK. */
typedef void (*grpc_client_done_fn)(void *ctx, enum grpc_status status, const char *message,
                                    const uint8_t *resp, size_t len);

/* Starts a call; done runs exactly once, from the loop, unless the call is
 * cancelled first. */
struct grpc_client_call *grpc_client_unary(uv_loop_t *loop, const char *socket_path,
                                           const char *method_path, const uint8_t *req,
                                           size_t len, unsigned timeout_ms,
                                           grpc_client_done_fn done, void *ctx);

/* Abandons a call in flight: done will not run. */
void grpc_client_cancel(struct grpc_client_call *call);

#endif
