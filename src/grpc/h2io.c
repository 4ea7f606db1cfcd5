#include "grpc/h2io.h"
#include "util/xmalloc.h"

#include <stdlib.h>
#include <string.h>

struct h2io_write {
    uv_write_t req;
    size_t len;
    uint8_t data[];
};

static void h2io_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    (void)suggested;
    struct h2io *io = h->data;
    *buf = uv_buf_init(io->rbuf, sizeof io->rbuf);
}

static void h2io_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    struct h2io *io = s->data;
    if (n < 0) {
        grpc_h2io_close(io);
        return;
    }
    io->in_recv = true;
    ssize_t rv = nghttp2_session_mem_recv(io->h2, (const uint8_t *)buf->base, (size_t)n);
    io->in_recv = false;
    if (rv < 0) {
        grpc_h2io_close(io);
        return;
    }
    grpc_h2io_flush(io);
}

int grpc_h2io_start(struct h2io *io)
{
    io->pipe.data = io;
    return uv_read_start((uv_stream_t *)&io->pipe, h2io_alloc, h2io_read);
}

static void h2io_written(uv_write_t *req, int status)
{
    struct h2io_write *w = (struct h2io_write *)req;
    struct h2io *io = req->handle->data;
    free(w);
    if (status < 0)
        grpc_h2io_close(io);
}

void grpc_h2io_flush(struct h2io *io)
{
    if (io->in_recv || io->closing)
        return; /* h2io_read flushes once nghttp2 has taken the whole read */
    size_t total = 0, cap = 0;
    struct h2io_write *w = NULL;
    for (;;) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(io->h2, &data);
        if (n < 0) {
            free(w);
            grpc_h2io_close(io);
            return;
        }
        if (n == 0)
            break;
        if (total + (size_t)n > cap) {
            cap = (total + (size_t)n) * 2;
            w = xrealloc(w, sizeof *w + cap);
        }
        memcpy(w->data + total, data, (size_t)n);
        total += (size_t)n;
    }
    if (w) {
        w->len = total;
        uv_buf_t buf = uv_buf_init((char *)w->data, (unsigned)total);
        if (uv_write(&w->req, (uv_stream_t *)&io->pipe, &buf, 1, h2io_written) < 0) {
            free(w);
            grpc_h2io_close(io);
            return;
        }
    }
    if (uv_stream_get_write_queue_size((uv_stream_t *)&io->pipe) > H2IO_MAX_QUEUED ||
        (!nghttp2_session_want_read(io->h2) && !nghttp2_session_want_write(io->h2)))
        grpc_h2io_close(io);
}

static void h2io_closed(uv_handle_t *h)
{
    struct h2io *io = h->data;
    io->on_closed(io);
}

void grpc_h2io_close(struct h2io *io)
{
    if (io->closing)
        return;
    io->closing = true;
    uv_close((uv_handle_t *)&io->pipe, h2io_closed);
}
