#include "grpc/client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/h2io.h"
#include "util/xmalloc.h"

struct grpc_client_call {
    struct h2io io;              /* first: h2io callbacks cast back to us */
    uv_connect_t connect;
    uv_timer_t timer;
    int handles;                 /* open libuv handles; freed at zero */
    char socket[108];
    char path[256];
    unsigned timeout_ms;
    struct strbuf req;           /* the framed request */
    size_t req_off;
    struct strbuf resp;
    int http_status;
    int grpc_status;             /* -1 until a grpc-status header arrives */
    char message[512];
    bool done;                   /* the callback ran or was cancelled */
    grpc_client_done_fn cb;
    void *ctx;
};

#define NV(name, value)                                                                  \
    {(uint8_t *)(name), (uint8_t *)(value), sizeof(name) - 1, strlen(value),             \
     NGHTTP2_NV_FLAG_NO_COPY_NAME}

static void client_handle_closed(uv_handle_t *h)
{
    struct grpc_client_call *c = h->data;
    if (--c->handles > 0)
        return;
    if (c->io.h2)
        nghttp2_session_del(c->io.h2);
    strbuf_free(&c->req);
    strbuf_free(&c->resp);
    free(c);
}

static void client_pipe_closed(struct h2io *io)
{
    client_handle_closed((uv_handle_t *)&io->pipe);
}

/* Reports the outcome once, then tears the connection down. */
static void client_complete(struct grpc_client_call *c, enum grpc_status st, const char *msg)
{
    if (!c->done) {
        c->done = true;
        const uint8_t *m = NULL;
        size_t len = 0;
        const char *why = msg;
        if (st == GRPC_OK) {
            st = grpc_unframe_one((const uint8_t *)c->resp.data, c->resp.len, &m, &len, &why);
            if (st != GRPC_OK)
                m = NULL, len = 0;
        }
        c->cb(c->ctx, st, why ? why : "", m, len);
    }
    uv_timer_stop(&c->timer);
    if (!uv_is_closing((uv_handle_t *)&c->timer))
        uv_close((uv_handle_t *)&c->timer, client_handle_closed);
    grpc_h2io_close(&c->io);
}

static void client_timeout(uv_timer_t *t)
{
    struct grpc_client_call *c = t->data;
    char msg[96];
    snprintf(msg, sizeof msg, "deadline of %u ms exceeded", c->timeout_ms);
    client_complete(c, GRPC_DEADLINE_EXCEEDED, msg);
}

static ssize_t client_read_req(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t len,
                               uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)h2;
    (void)id;
    (void)ud;
    struct grpc_client_call *c = src->ptr;
    size_t n = c->req.len - c->req_off;
    if (n > len)
        n = len;
    memcpy(buf, c->req.data + c->req_off, n);
    c->req_off += n;
    if (c->req_off == c->req.len)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

static int client_on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                            size_t namelen, const uint8_t *value, size_t valuelen,
                            uint8_t flags, void *ud)
{
    (void)h2;
    (void)f;
    (void)flags;
    struct grpc_client_call *c = ud;
    char v[512];
    snprintf(v, sizeof v, "%.*s", (int)valuelen, (const char *)value);
    /* grpc-status may come in the first HEADERS (Trailers-Only) or the trailers. */
    if (namelen == 7 && !memcmp(name, ":status", 7))
        c->http_status = atoi(v);
    else if (namelen == 11 && !memcmp(name, "grpc-status", 11))
        c->grpc_status = atoi(v);
    else if (namelen == 12 && !memcmp(name, "grpc-message", 12)) {
        grpc_percent_decode(v);
        snprintf(c->message, sizeof c->message, "%s", v);
    }
    return 0;
}

static int client_on_data(nghttp2_session *h2, uint8_t flags, int32_t id, const uint8_t *data,
                          size_t len, void *ud)
{
    (void)h2;
    (void)flags;
    (void)id;
    struct grpc_client_call *c = ud;
    if (c->resp.len + len > GRPC_MAX_MESSAGE + 5)
        return NGHTTP2_ERR_CALLBACK_FAILURE; /* closes; reported below */
    strbuf_append(&c->resp, (const char *)data, len);
    return 0;
}

static int client_on_close(nghttp2_session *h2, int32_t id, uint32_t error, void *ud)
{
    (void)h2;
    (void)id;
    struct grpc_client_call *c = ud;
    char msg[600];
    if (c->grpc_status >= 0) {
        client_complete(c, (enum grpc_status)c->grpc_status, c->message);
    } else {
        snprintf(msg, sizeof msg, "stream closed without a gRPC status (HTTP %d, HTTP/2 error %u)",
                 c->http_status, error);
        client_complete(c, c->http_status == 200 ? GRPC_INTERNAL : GRPC_UNAVAILABLE, msg);
    }
    return 0;
}

static void client_pipe_gone(struct grpc_client_call *c)
{
    if (!c->done) {
        char msg[160];
        snprintf(msg, sizeof msg, "connection to %s closed before an answer", c->socket);
        client_complete(c, GRPC_UNAVAILABLE, msg);
    }
}

static void client_io_closed(struct h2io *io)
{
    struct grpc_client_call *c = (struct grpc_client_call *)io;
    client_pipe_gone(c);
    client_pipe_closed(io);
}

static int client_session(struct grpc_client_call *c)
{
    nghttp2_session_callbacks *cbs;
    if (nghttp2_session_callbacks_new(&cbs) != 0)
        return -1;
    nghttp2_session_callbacks_set_on_header_callback(cbs, client_on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, client_on_data);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, client_on_close);
    int rc = nghttp2_session_client_new(&c->io.h2, cbs, c);
    nghttp2_session_callbacks_del(cbs);
    if (rc != 0)
        return -1;
    nghttp2_submit_settings(c->io.h2, NGHTTP2_FLAG_NONE, NULL, 0);
    char timeout[32];
    snprintf(timeout, sizeof timeout, "%um", c->timeout_ms);
    /* :authority and te are required by gRPC servers; grpc-go accepts "localhost". */
    nghttp2_nv hdrs[] = {
        NV(":method", "POST"),           NV(":scheme", "http"),
        NV(":path", c->path),            NV(":authority", "localhost"),
        NV("content-type", "application/grpc"), NV("te", "trailers"),
        NV("grpc-timeout", timeout),     NV("user-agent", "gpulet-grpc/0.1"),
    };
    nghttp2_data_provider prd = {.source.ptr = c, .read_callback = client_read_req};
    return nghttp2_submit_request(c->io.h2, NULL, hdrs, sizeof hdrs / sizeof *hdrs, &prd, c) < 0
               ? -1 : 0;
}

static void client_connected(uv_connect_t *req, int status)
{
    struct grpc_client_call *c = req->data;
    if (c->done) {
        grpc_h2io_close(&c->io);
        return;
    }
    char msg[200];
    if (status < 0) {
        snprintf(msg, sizeof msg, "cannot connect to %s: %s", c->socket, uv_strerror(status));
        client_complete(c, GRPC_UNAVAILABLE, msg);
        return;
    }
    if (client_session(c) < 0 || grpc_h2io_start(&c->io) < 0) {
        client_complete(c, GRPC_INTERNAL, "cannot start an HTTP/2 session");
        return;
    }
    grpc_h2io_flush(&c->io);
}

struct grpc_client_call *grpc_client_unary(uv_loop_t *loop, const char *socket_path,
                                           const char *method_path, const uint8_t *req,
                                           size_t len, unsigned timeout_ms,
                                           grpc_client_done_fn done, void *ctx)
{
    struct grpc_client_call *c = xcalloc(1, sizeof *c);
    snprintf(c->socket, sizeof c->socket, "%s", socket_path);
    snprintf(c->path, sizeof c->path, "%s", method_path);
    c->timeout_ms = timeout_ms;
    c->grpc_status = -1;
    c->cb = done;
    c->ctx = ctx;
    grpc_frame(&c->req, req, len);
    c->io.on_closed = client_io_closed;
    uv_pipe_init(loop, &c->io.pipe, 0);
    c->io.pipe.data = &c->io;
    uv_timer_init(loop, &c->timer);
    c->timer.data = c;
    c->handles = 2;
    uv_timer_start(&c->timer, client_timeout, timeout_ms, 0);
    c->connect.data = c;
    uv_pipe_connect(&c->connect, &c->io.pipe, c->socket, client_connected);
    return c;
}

void grpc_client_cancel(struct grpc_client_call *c)
{
    if (!c || c->done)
        return;
    c->done = true;
    uv_timer_stop(&c->timer);
    if (!uv_is_closing((uv_handle_t *)&c->timer))
        uv_close((uv_handle_t *)&c->timer, client_handle_closed);
    grpc_h2io_close(&c->io);
}
