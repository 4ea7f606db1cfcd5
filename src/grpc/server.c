#include "grpc/server.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "grpc/h2io.h"
#include "util/dirs.h"
#include "util/log.h"
#include "util/unixsock.h"
#include "util/xmalloc.h"

/* The largest header block a request may carry (advertised in SETTINGS and
 * enforced here, since nghttp2's own HTTP checks are off: see
 * grpc_server_start). A kubelet's requests carry a few hundred bytes. */
#define SERVER_MAX_HEADER_LIST 16384
/* Lines one connection may log about what it sent wrong; after that it
 * still gets refused, quietly. */
#define SERVER_MAX_LOGGED 4

struct grpc_conn {
    struct h2io io;                  /* first: the h2io callbacks cast back to us */
    struct grpc_server *srv;
    struct grpc_call *calls;
    unsigned logged;                 /* refusals logged for this connection */
    struct grpc_conn *next, *prev;
};

struct grpc_call {
    struct grpc_conn *conn;
    int32_t stream_id;
    char path[256];
    bool post, grpc_type;            /* :method POST; content-type application/grpc[+...] */
    size_t header_bytes;             /* as HTTP/2 counts them: name + value + 32 each */
    struct strbuf req;               /* the request body as it arrives */
    bool too_large;                  /* answered RESOURCE_EXHAUSTED already */
    struct strbuf out;               /* framed response bytes not yet taken by nghttp2 */
    size_t out_off;
    bool headers_sent;               /* response HEADERS submitted */
    bool finish_pending;             /* trailers go once out is drained */
    bool finished;                   /* grpc_call_finish was called */
    enum grpc_status status;
    char message[256];
    grpc_cancel_fn on_cancel;
    void *cancel_ctx;
    struct grpc_call *next, *prev;
};

struct grpc_server {
    uv_loop_t *loop;
    uv_pipe_t listener;
    char path[108];
    struct unixsock_id id;            /* the socket file made: only that one is removed */
    const struct grpc_method *methods;
    size_t nmethods;
    nghttp2_session_callbacks *cbs;
    nghttp2_option *opt;
    struct grpc_conn *conns;
    bool closing, listener_closed;
    uv_timer_t drain_timer;           /* grpc_server_drain's limit */
    bool drain_timer_open;
    void (*drained)(void *ctx);
    void *drained_ctx;
};

#define NV(name, value)                                                                  \
    {(uint8_t *)(name), (uint8_t *)(value), sizeof(name) - 1, strlen(value),             \
     NGHTTP2_NV_FLAG_NO_COPY_NAME}

static void server_timer_closed(uv_handle_t *h);

static void server_maybe_free(struct grpc_server *s)
{
    if (!s->closing || !s->listener_closed || s->conns)
        return;
    if (s->drain_timer_open) {
        if (!uv_is_closing((uv_handle_t *)&s->drain_timer))
            uv_close((uv_handle_t *)&s->drain_timer, server_timer_closed);
        return;
    }
    if (s->drained)
        s->drained(s->drained_ctx);
    nghttp2_session_callbacks_del(s->cbs);
    nghttp2_option_del(s->opt);
    free(s);
}

static void server_timer_closed(uv_handle_t *h)
{
    struct grpc_server *s = h->data;
    s->drain_timer_open = false;
    server_maybe_free(s);
}

/* --- calls ---------------------------------------------------------------- */

static void call_free(struct grpc_call *c)
{
    struct grpc_conn *conn = c->conn;
    if (c->prev)
        c->prev->next = c->next;
    else
        conn->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    strbuf_free(&c->req);
    strbuf_free(&c->out);
    free(c);
}

/* Tells the owner of an unfinished call that it is gone, then frees it. */
static void call_end(struct grpc_call *c)
{
    if (!c->finished && c->on_cancel)
        c->on_cancel(c, c->cancel_ctx);
    call_free(c);
}

static ssize_t call_read(nghttp2_session *h2, int32_t stream_id, uint8_t *buf, size_t len,
                         uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)ud;
    struct grpc_call *c = src->ptr;
    size_t avail = c->out.len - c->out_off;
    if (avail) {
        size_t n = avail < len ? avail : len;
        memcpy(buf, c->out.data + c->out_off, n);
        c->out_off += n;
        if (c->out_off == c->out.len)
            c->out.len = c->out_off = 0; /* drained: reuse the buffer */
        return (ssize_t)n;
    }
    if (!c->finish_pending)
        return NGHTTP2_ERR_DEFERRED;
    /* All data sent: end DATA without END_STREAM and close with trailers. */
    char code[16], msg[768];
    snprintf(code, sizeof code, "%d", (int)c->status);
    grpc_percent_encode(c->message, msg, sizeof msg);
    nghttp2_nv trailers[] = {NV("grpc-status", code), NV("grpc-message", msg)};
    *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
    c->finish_pending = false;
    nghttp2_submit_trailer(h2, stream_id, trailers, c->message[0] ? 2 : 1);
    return 0;
}

static void call_submit_headers(struct grpc_call *c)
{
    nghttp2_nv hdrs[] = {NV(":status", "200"), NV("content-type", "application/grpc")};
    nghttp2_data_provider prd = {.source.ptr = c, .read_callback = call_read};
    nghttp2_submit_response(c->conn->io.h2, c->stream_id, hdrs, 2, &prd);
    c->headers_sent = true;
}

void grpc_call_send(struct grpc_call *c, const uint8_t *msg, size_t len)
{
    if (c->finished)
        return;
    grpc_frame(&c->out, msg, len);
    if (!c->headers_sent)
        call_submit_headers(c);
    else
        nghttp2_session_resume_data(c->conn->io.h2, c->stream_id);
    grpc_h2io_flush(&c->conn->io);
}

void grpc_call_finish(struct grpc_call *c, enum grpc_status status, const char *message)
{
    if (c->finished)
        return;
    c->finished = true;
    c->on_cancel = NULL;
    c->status = status;
    snprintf(c->message, sizeof c->message, "%s", message ? message : "");
    nghttp2_session *h2 = c->conn->io.h2;
    if (!c->headers_sent) {
        /* Trailers-Only: one HEADERS frame with the status and END_STREAM. */
        char code[16], msg[768];
        snprintf(code, sizeof code, "%d", (int)status);
        grpc_percent_encode(c->message, msg, sizeof msg);
        nghttp2_nv hdrs[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                             NV("grpc-status", code), NV("grpc-message", msg)};
        nghttp2_submit_response(h2, c->stream_id, hdrs, c->message[0] ? 4 : 3, NULL);
        c->headers_sent = true;
    } else {
        c->finish_pending = true;
        nghttp2_session_resume_data(h2, c->stream_id);
    }
    grpc_h2io_flush(&c->conn->io);
}

void grpc_call_on_cancel(struct grpc_call *c, grpc_cancel_fn fn, void *ctx)
{
    c->on_cancel = fn;
    c->cancel_ctx = ctx;
}

static void call_dispatch(struct grpc_call *c)
{
    struct grpc_server *s = c->conn->srv;
    const struct grpc_method *m = NULL;
    for (size_t i = 0; i < s->nmethods && !m; i++)
        if (!strcmp(s->methods[i].path, c->path))
            m = &s->methods[i];
    if (!m) {
        char msg[300];
        snprintf(msg, sizeof msg, "unknown method %s", c->path);
        grpc_call_finish(c, GRPC_UNIMPLEMENTED, msg);
        return;
    }
    const uint8_t *msg;
    size_t len;
    const char *why;
    enum grpc_status st = grpc_unframe_one((const uint8_t *)c->req.data, c->req.len, &msg, &len, &why);
    if (st != GRPC_OK) {
        grpc_call_finish(c, st, why);
        return;
    }
    m->fn(c, msg, len, m->ctx);
}

/* --- nghttp2 callbacks --------------------------------------------------- */

static int on_begin_headers(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    struct grpc_conn *conn = ud;
    if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct grpc_call *c = xcalloc(1, sizeof *c);
    c->conn = conn;
    c->stream_id = f->hd.stream_id;
    c->next = conn->calls;
    if (conn->calls)
        conn->calls->prev = c;
    conn->calls = c;
    nghttp2_session_set_stream_user_data(h2, f->hd.stream_id, c);
    return 0;
}

/* Logs why the server refused something of a connection: one line each,
 * at most SERVER_MAX_LOGGED per connection, so a broken client cannot
 * flood the log. */
static void conn_refused(struct grpc_conn *conn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void conn_refused(struct grpc_conn *conn, const char *fmt, ...)
{
    if (conn->logged > SERVER_MAX_LOGGED)
        return;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    log_warn("gRPC %s: %s%s", conn->srv->path, msg,
             conn->logged++ == SERVER_MAX_LOGGED ? " (further refusals on this connection are "
                                                   "not logged)" : "");
}

static bool has_prefix(const uint8_t *s, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    return len >= n && !memcmp(s, prefix, n);
}

/* Takes what the server needs from a request's headers. :authority is not
 * looked at: clients send "localhost", the socket path (grpc-go dialling a
 * path, as kubelets up to 1.25 do), or nothing, and a unix socket has no
 * host to check it against. */
static int on_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *ud)
{
    (void)flags;
    struct grpc_conn *conn = ud;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!c)
        return 0;
    c->header_bytes += namelen + valuelen + 32;
    if (c->header_bytes > SERVER_MAX_HEADER_LIST) {
        conn_refused(conn, "stream %d reset: headers larger than %d bytes", (int)f->hd.stream_id,
                     SERVER_MAX_HEADER_LIST);
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE; /* resets this stream only */
    }
    if (f->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* trailers from a client carry nothing we use */
    if (namelen == 5 && !memcmp(name, ":path", 5))
        snprintf(c->path, sizeof c->path, "%.*s", (int)valuelen, (const char *)value);
    else if (namelen == 7 && !memcmp(name, ":method", 7))
        c->post = valuelen == 4 && !memcmp(value, "POST", 4);
    else if (namelen == 12 && !memcmp(name, "content-type", 12))
        c->grpc_type = has_prefix(value, valuelen, "application/grpc") &&
                       (valuelen == 16 || value[16] == '+' || value[16] == ';');
    return 0;
}

/* What HTTP/2 and gRPC require of a request that nghttp2 no longer checks
 * for us; NULL when it is a gRPC call. */
static const char *request_problem(const struct grpc_call *c)
{
    if (!c->post)
        return ":method is not POST";
    if (c->path[0] != '/')
        return ":path is missing or not absolute";
    if (!c->grpc_type)
        return "content-type is not application/grpc";
    return NULL;
}

static int on_data(nghttp2_session *h2, uint8_t flags, int32_t stream_id, const uint8_t *data,
                   size_t len, void *ud)
{
    (void)flags;
    (void)ud;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(h2, stream_id);
    if (!c || c->too_large)
        return 0;
    if (c->req.len + len > GRPC_MAX_MESSAGE + 5) {
        c->too_large = true;
        strbuf_free(&c->req);
        grpc_call_finish(c, GRPC_RESOURCE_EXHAUSTED, "request larger than 4 MiB");
        return 0;
    }
    strbuf_append(&c->req, (const char *)data, len);
    return 0;
}

static int on_frame(nghttp2_session *h2, const nghttp2_frame *f, void *ud)
{
    struct grpc_conn *conn = ud;
    if (f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(h2, f->hd.stream_id);
    if (!c || c->finished)
        return 0;
    if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
        const char *problem = request_problem(c);
        if (problem) {
            conn_refused(conn, "stream %d reset: %s", (int)f->hd.stream_id, problem);
            c->finished = true; /* nothing is dispatched; freed when the stream closes */
            nghttp2_submit_rst_stream(h2, NGHTTP2_FLAG_NONE, f->hd.stream_id,
                                      NGHTTP2_PROTOCOL_ERROR);
            return 0;
        }
    }
    if (f->hd.flags & NGHTTP2_FLAG_END_STREAM)
        call_dispatch(c);
    return 0;
}

/* nghttp2 ends a connection (or a stream) the peer broke the protocol on:
 * say why once rather than let the socket just close. */
static int on_error(nghttp2_session *h2, int code, const char *msg, size_t len, void *ud)
{
    (void)h2;
    (void)code;
    conn_refused(ud, "%.*s", (int)len, msg);
    return 0;
}

static int on_invalid_frame(nghttp2_session *h2, const nghttp2_frame *f, int code, void *ud)
{
    (void)h2;
    /* The kubelet's grpc-go says goodbye with a GOAWAY whose last stream ID
     * nghttp2 reads as one of its own: a client closing, not a fault. */
    if (f->hd.type == NGHTTP2_GOAWAY)
        return 0;
    conn_refused(ud, "invalid frame (type %u) on stream %d: %s", f->hd.type,
                 (int)f->hd.stream_id, nghttp2_strerror(code));
    return 0;
}

static int on_stream_close(nghttp2_session *h2, int32_t stream_id, uint32_t error, void *ud)
{
    (void)error;
    (void)ud;
    struct grpc_call *c = nghttp2_session_get_stream_user_data(h2, stream_id);
    if (c)
        call_end(c);
    return 0;
}

/* --- connections ---------------------------------------------------------- */

static void conn_closed(struct h2io *io)
{
    struct grpc_conn *conn = (struct grpc_conn *)io;
    struct grpc_server *s = conn->srv;
    while (conn->calls)
        call_end(conn->calls);
    nghttp2_session_del(io->h2);
    if (conn->prev)
        conn->prev->next = conn->next;
    else
        s->conns = conn->next;
    if (conn->next)
        conn->next->prev = conn->prev;
    free(conn);
    server_maybe_free(s);
}

static void server_on_connection(uv_stream_t *listener, int status)
{
    struct grpc_server *s = listener->data;
    if (status < 0 || s->closing)
        return;
    struct grpc_conn *conn = xcalloc(1, sizeof *conn);
    conn->srv = s;
    conn->io.on_closed = conn_closed;
    uv_pipe_init(s->loop, &conn->io.pipe, 0);
    conn->io.pipe.data = &conn->io;
    conn->next = s->conns;
    if (s->conns)
        s->conns->prev = conn;
    s->conns = conn;
    if (uv_accept(listener, (uv_stream_t *)&conn->io.pipe) < 0 ||
        nghttp2_session_server_new2(&conn->io.h2, s->cbs, conn, s->opt) != 0) {
        grpc_h2io_close(&conn->io);
        return;
    }
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, SERVER_MAX_HEADER_LIST},
    };
    nghttp2_submit_settings(conn->io.h2, NGHTTP2_FLAG_NONE, settings, 2);
    if (grpc_h2io_start(&conn->io) < 0) {
        grpc_h2io_close(&conn->io);
        return;
    }
    grpc_h2io_flush(&conn->io);
}

int grpc_server_start(struct grpc_server **out, uv_loop_t *loop, const char *path, int fd,
                      struct unixsock_id id, const struct grpc_method *methods, size_t nmethods,
                      struct err *e)
{
    *out = NULL;
    struct grpc_server *s = xcalloc(1, sizeof *s);
    if (strlen(path) >= sizeof s->path) {
        free(s);
        close(fd);
        return err_set(e, "socket path too long: %s", path);
    }
    strcpy(s->path, path);
    s->loop = loop;
    s->methods = methods;
    s->nmethods = nmethods;
    nghttp2_session_callbacks_new(&s->cbs);
    nghttp2_session_callbacks_set_on_begin_headers_callback(s->cbs, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(s->cbs, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(s->cbs, on_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(s->cbs, on_frame);
    nghttp2_session_callbacks_set_on_stream_close_callback(s->cbs, on_stream_close);
    nghttp2_session_callbacks_set_error_callback2(s->cbs, on_error);
    nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(s->cbs, on_invalid_frame);
    /* nghttp2's HTTP messaging checks reset every request whose :authority
     * holds a '/', which is what grpc-go sends when it dials a socket path:
     * kubelets up to 1.25 would register and then have every call fail.
     * Framing, HPACK, flow control and stream limits stay nghttp2's; the
     * request checks a gRPC server needs are request_problem's. */
    nghttp2_option_new(&s->opt);
    nghttp2_option_set_no_http_messaging(s->opt, 1);
    uv_pipe_init(loop, &s->listener, 0);
    s->listener.data = s;
    s->id = id;
    struct err why;
    if (unixsock_serve(&s->listener, fd, 128, server_on_connection, path, &why) < 0) {
        err_set(e, "cannot listen on %s", why.msg);
        grpc_server_close(s);
        return -1;
    }
    *out = s;
    return 0;
}

static void server_listener_closed(uv_handle_t *h)
{
    struct grpc_server *s = h->data;
    s->listener_closed = true;
    server_maybe_free(s);
}

void grpc_server_close(struct grpc_server *s)
{
    if (!s)
        return;
    bool bound = !s->closing;
    s->closing = true;
    uv_close((uv_handle_t *)&s->listener, server_listener_closed);
    if (bound)
        unixsock_remove(s->loop, s->path, s->id);
    for (struct grpc_conn *c = s->conns; c; c = c->next)
        grpc_h2io_close(&c->io);
}

unsigned grpc_server_connections(const struct grpc_server *s)
{
    unsigned n = 0;
    for (const struct grpc_conn *c = s->conns; c; c = c->next)
        n++;
    return n;
}

/* The drain's limit: the connections the peers kept open are closed. */
static void server_drain_timeout(uv_timer_t *t)
{
    struct grpc_server *s = t->data;
    log_warn("%s: %u connection(s) still open when the server stopped, closed now",
             s->path, grpc_server_connections(s));
    for (struct grpc_conn *c = s->conns; c; c = c->next)
        grpc_h2io_close(&c->io);
}

void grpc_server_drain(struct grpc_server *s, unsigned ms, void (*done)(void *ctx), void *ctx)
{
    s->drained = done;
    s->drained_ctx = ctx;
    uv_timer_init(s->loop, &s->drain_timer);
    s->drain_timer.data = s;
    s->drain_timer_open = true;
    uv_timer_start(&s->drain_timer, server_drain_timeout, ms, 0);
    for (struct grpc_conn *c = s->conns; c; c = c->next) {
        for (struct grpc_call *call = c->calls, *next; call; call = next) {
            next = call->next; /* a finished call's stream may close, and free it, at once */
            if (!call->finished)
                grpc_call_finish(call, GRPC_UNAVAILABLE, "the server is stopping");
        }
        grpc_h2io_flush(&c->io);
    }
    s->closing = true;
    uv_close((uv_handle_t *)&s->listener, server_listener_closed);
    unixsock_remove(s->loop, s->path, s->id);
}

const char *grpc_server_path(const struct grpc_server *s)
{
    return s->path;
}
