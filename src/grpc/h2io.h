/* One HTTP/2 connection on a libuv pipe: bytes read go into nghttp2, bytes
 * nghttp2 wants to send go out with uv_write. Embedded first in the
 * server's connection and the client's call. Internal to src/grpc. */
#ifndef GPULET_H2IO_H
#define GPULET_H2IO_H

#include <nghttp2/nghttp2.h>
#include <stdbool.h>
#include <uv.h>

/* A peer that leaves this much unread is dropped rather than buffered. */
#define H2IO_MAX_QUEUED (8u * 1024u * 1024u)

struct h2io;
typedef void (*h2io_close_fn)(struct h2io *io);

struct h2io {
    uv_pipe_t pipe;            /* pipe.data points back at the h2io */
    nghttp2_session *h2;
    bool in_recv;              /* inside nghttp2_session_mem_recv: flush afterwards */
    bool closing;
    h2io_close_fn on_closed;   /* after the pipe is closed; frees the owner */
    char rbuf[16384];
};

/* Starts reading; on error or EOF the connection closes. */
int grpc_h2io_start(struct h2io *io);

/* Sends whatever nghttp2 has queued; closes when the session is done. */
void grpc_h2io_flush(struct h2io *io);

/* Closes the pipe (once); on_closed runs from the loop afterwards. */
void grpc_h2io_close(struct h2io *io);

#endif
