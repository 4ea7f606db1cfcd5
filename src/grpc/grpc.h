/* gRPC over HTTP/2 (nghttp2) on unix sockets, on the libuv loop: the parts
 * shared by the server and the client. Messages are opaque bytes here;
 * protobuf-c encodes and decodes them. */
#ifndef GPULET_GRPC_H
#define GPULET_GRPC_H

#include <stddef.h>
#include <stdint.h>

#include "util/strbuf.h"

/* gRPC status codes (the ones gpulet uses). */
enum grpc_status {
    GRPC_OK = 0,
    GRPC_CANCELLED = 1,
    GRPC_UNKNOWN = 2,
    GRPC_INVALID_ARGUMENT = 3,
    GRPC_DEADLINE_EXCEEDED = 4,
    GRPC_NOT_FOUND = 5,
    GRPC_RESOURCE_EXHAUSTED = 8,
    GRPC_FAILED_PRECONDITION = 9,
    GRPC_UNIMPLEMENTED = 12,
    GRPC_INTERNAL = 13,
    GRPC_UNAVAILABLE = 14,
};

/* The largest message accepted or sent: grpc-go's default. */
#define GRPC_MAX_MESSAGE (4u * 1024u * 1024u)

/* Appends msg with gRPC's 5-byte prefix (uncompressed flag, big-endian length). */
void grpc_frame(struct strbuf *out, const uint8_t *msg, size_t len);

/* Reads the one message a unary request or response carries. Returns
 * GRPC_OK with msg and msg_len set, or a status with a reason in why. */
enum grpc_status grpc_unframe_one(const uint8_t *buf, size_t len, const uint8_t **msg,
                                  size_t *msg_len, const char **why);

/* Percent-encodes a grpc-message value as the gRPC spec requires. */
void grpc_percent_encode(const char *in, char *out, size_t out_len);

/* Decodes a percent-encoded grpc-message value in place. */
void grpc_percent_decode(char *s);

#endif
