/* The gRPC server and client against each other on one loop: unary and
 * streaming calls, error statuses, deadlines, cancellation, size limits. */
#include <nghttp2/nghttp2.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "grpc/client.h"
#include "grpc/server.h"
#include "testutil.h"

struct result {
    int calls;
    enum grpc_status status;
    char message[512];
    char body[256];
    size_t len;
};

static char sock[108];
static uv_loop_t loop;
static struct grpc_call *stream_call;
static int cancelled;

static void echo(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)ctx;
    grpc_call_send(call, msg, len);
    grpc_call_finish(call, GRPC_OK, NULL);
}

static void refuse(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)msg;
    (void)len;
    (void)ctx;
    grpc_call_finish(call, GRPC_INVALID_ARGUMENT, "unknown device ID 'GPU-x' (100%)");
}

static void on_cancel(struct grpc_call *call, void *ctx)
{
    (void)call;
    (void)ctx;
    cancelled++;
    stream_call = NULL;
}

static void silent(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)msg;
    (void)len;
    (void)ctx;
    stream_call = call; /* never answers on its own */
    grpc_call_on_cancel(call, on_cancel, NULL);
}

static const struct grpc_method methods[] = {
    {"/test.Svc/Echo", echo, NULL},
    {"/test.Svc/Refuse", refuse, NULL},
    {"/test.Svc/Silent", silent, NULL},
};

/* The deadline of a call that must be answered: long enough for any loaded
 * machine under valgrind (a first call there once took over a second
 * beside two busy threads); it bounds a failure, and a pass is not slowed. */
#define ANSWER_MS 30000

static void done(void *ctx, enum grpc_status status, const char *message, const uint8_t *resp,
                 size_t len)
{
    struct result *r = ctx;
    r->calls++;
    r->status = status;
    snprintf(r->message, sizeof r->message, "%s", message);
    r->len = len;
    if (resp && len < sizeof r->body)
        memcpy(r->body, resp, len);
}

static void run_until(struct result *r)
{
    while (r->calls == 0 && uv_run(&loop, UV_RUN_ONCE))
        ;
}

static int setup(void **state)
{
    static struct grpc_server *srv;
    signal(SIGPIPE, SIG_IGN); /* as gpulet's main does: a peer may hang up mid-write */
    snprintf(sock, sizeof sock, "/tmp/gpulet-grpc-test-%d.sock", (int)getpid());
    uv_loop_init(&loop);
    struct err e;
    int fd;
    struct unixsock_id id;
    if (unixsock_bind(sock, 128, &fd, &id, &e) < 0 ||
        grpc_server_start(&srv, &loop, sock, fd, id, methods, 3, &e) < 0)
        fail_msg("%s", e.msg);
    *state = srv;
    return 0;
}

static int teardown(void **state)
{
    grpc_server_close(*state);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0); /* every handle was closed */
    assert_int_equal(access(sock, F_OK), -1);  /* socket file removed */
    return 0;
}

static void test_unary_echo(void **state)
{
    (void)state;
    struct result r = {0};
    grpc_client_unary(&loop, sock, "/test.Svc/Echo", (const uint8_t *)"hello", 5, ANSWER_MS, done, &r);
    run_until(&r);
    assert_int_equal(r.status, GRPC_OK);
    assert_int_equal(r.len, 5);
    assert_memory_equal(r.body, "hello", 5);
    struct result empty = {0};
    grpc_client_unary(&loop, sock, "/test.Svc/Echo", NULL, 0, ANSWER_MS, done, &empty);
    run_until(&empty);
    assert_int_equal(empty.status, GRPC_OK);
    assert_int_equal(empty.len, 0);
}

static void test_errors(void **state)
{
    (void)state;
    struct result r = {0};
    grpc_client_unary(&loop, sock, "/test.Svc/Refuse", (const uint8_t *)"x", 1, ANSWER_MS, done, &r);
    run_until(&r);
    assert_int_equal(r.status, GRPC_INVALID_ARGUMENT);
    assert_string_equal(r.message, "unknown device ID 'GPU-x' (100%)"); /* percent-encoded on the wire */
    struct result u = {0};
    grpc_client_unary(&loop, sock, "/test.Svc/Nope", NULL, 0, ANSWER_MS, done, &u);
    run_until(&u);
    assert_int_equal(u.status, GRPC_UNIMPLEMENTED);
    assert_contains(u.message, "/test.Svc/Nope");
}

static void test_too_large(void **state)
{
    (void)state;
    size_t n = GRPC_MAX_MESSAGE + 1;
    uint8_t *big = calloc(1, n);
    struct result r = {0};
    grpc_client_unary(&loop, sock, "/test.Svc/Echo", big, n, 5000, done, &r);
    free(big);
    run_until(&r);
    assert_int_equal(r.status, GRPC_RESOURCE_EXHAUSTED);
}

static void test_deadline_and_cancel(void **state)
{
    (void)state;
    struct result r = {0};
    cancelled = 0;
    /* The server must hold the call before its deadline passes, or it never
     * learns of it: the deadline is long enough for a loaded machine under
     * valgrind, and the test says so if it was not. */
    grpc_client_unary(&loop, sock, "/test.Svc/Silent", NULL, 0, 1000, done, &r);
    while (!stream_call && r.calls == 0 && uv_run(&loop, UV_RUN_ONCE))
        ;
    assert_non_null(stream_call);
    run_until(&r);
    assert_int_equal(r.status, GRPC_DEADLINE_EXCEEDED);
    /* The client hung up: the server side learns the call is gone. */
    while (cancelled == 0 && uv_run(&loop, UV_RUN_ONCE))
        ;
    assert_int_equal(cancelled, 1);
    assert_null(stream_call);
    /* A cancelled client call never calls back. */
    struct result c = {0};
    struct grpc_client_call *call = grpc_client_unary(&loop, sock, "/test.Svc/Echo",
                                                      (const uint8_t *)"x", 1, 1000, done, &c);
    grpc_client_cancel(call);
    for (int i = 0; i < 20; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    assert_int_equal(c.calls, 0);
}

static void test_no_server(void **state)
{
    (void)state;
    struct result r = {0};
    grpc_client_unary(&loop, "/tmp/gpulet-no-such.sock", "/test.Svc/Echo", NULL, 0, ANSWER_MS, done, &r);
    run_until(&r);
    assert_int_equal(r.status, GRPC_UNAVAILABLE);
    assert_contains(r.message, "cannot connect to /tmp/gpulet-no-such.sock");
}

static void test_frame_helpers(void **state)
{
    (void)state;
    const uint8_t *m;
    size_t len;
    const char *why;
    uint8_t two[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(grpc_unframe_one(two, 10, &m, &len, &why), GRPC_INTERNAL);
    assert_contains(why, "got more");
    uint8_t zipped[5] = {1, 0, 0, 0, 0};
    assert_int_equal(grpc_unframe_one(zipped, 5, &m, &len, &why), GRPC_UNIMPLEMENTED);
    char enc[64];
    grpc_percent_encode("a%b\xc3\xa9", enc, sizeof enc);
    assert_string_equal(enc, "a%25b%C3%A9");
    grpc_percent_decode(enc);
    assert_string_equal(enc, "a%b\xc3\xa9");
}

/* --- raw requests: headers that gRPC's own client never sends ------------ */

/* One request sent by a bare nghttp2 client on its own thread (the server
 * runs on the test's loop), and how its stream ended. */
struct raw {
    const nghttp2_nv *nva;
    size_t nnv;
    int fd;
    int grpc_status;           /* from the response, -1 none */
    uint32_t rst;              /* the stream's close code */
    bool closed;
    atomic_bool done;             /* the thread is through: set there, polled by the loop */
};

static ssize_t raw_send(nghttp2_session *h2, const uint8_t *data, size_t len, int flags, void *ud)
{
    (void)h2;
    (void)flags;
    return send(((struct raw *)ud)->fd, data, len, MSG_NOSIGNAL);
}

static int raw_header(nghttp2_session *h2, const nghttp2_frame *f, const uint8_t *name,
                      size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags, void *ud)
{
    (void)h2;
    (void)f;
    (void)flags;
    (void)valuelen;
    if (namelen == 11 && !memcmp(name, "grpc-status", 11))
        ((struct raw *)ud)->grpc_status = atoi((const char *)value);
    return 0;
}

static int raw_close(nghttp2_session *h2, int32_t id, uint32_t code, void *ud)
{
    (void)h2;
    (void)id;
    struct raw *r = ud;
    r->rst = code;
    r->closed = true;
    return 0;
}

static ssize_t raw_body(nghttp2_session *h2, int32_t id, uint8_t *buf, size_t len,
                        uint32_t *flags, nghttp2_data_source *src, void *ud)
{
    (void)h2;
    (void)id;
    (void)src;
    (void)ud;
    static const uint8_t msg[] = {0, 0, 0, 0, 2, 'h', 'i'}; /* one framed message */
    if (len < sizeof msg)
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    memcpy(buf, msg, sizeof msg);
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return sizeof msg;
}

/* (No cmocka asserts here: they cannot fail from another thread.) */
static void raw_thread(void *arg)
{
    struct raw *r = arg;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    strcpy(addr.sun_path, sock);
    r->fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(r->fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        close(r->fd);
        r->rst = 0xdead;
        atomic_store(&r->done, true);
        return;
    }
    nghttp2_session_callbacks *cbs;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_send_callback(cbs, raw_send);
    nghttp2_session_callbacks_set_on_header_callback(cbs, raw_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cbs, raw_close);
    nghttp2_session *h2;
    nghttp2_session_client_new(&h2, cbs, r);
    nghttp2_submit_settings(h2, NGHTTP2_FLAG_NONE, NULL, 0);
    nghttp2_data_provider body = {.read_callback = raw_body};
    nghttp2_submit_request(h2, NULL, r->nva, r->nnv, &body, NULL);
    uint8_t buf[16384];
    ssize_t n;
    while (!r->closed && nghttp2_session_send(h2) == 0 && (n = read(r->fd, buf, sizeof buf)) > 0)
        nghttp2_session_mem_recv(h2, buf, (size_t)n);
    nghttp2_session_del(h2);
    nghttp2_session_callbacks_del(cbs);
    close(r->fd);
    atomic_store(&r->done, true);
}

#define RAW_NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), 0}

/* Sends one request with these headers; returns how it ended. */
static struct raw raw_request(const nghttp2_nv *nva, size_t nnv)
{
    struct raw r = {.nva = nva, .nnv = nnv, .grpc_status = -1};
    uv_thread_t t;
    uv_thread_create(&t, raw_thread, &r);
    while (!atomic_load(&r.done)) {
        uv_run(&loop, UV_RUN_NOWAIT);
        usleep(1000);
    }
    uv_thread_join(&t);
    for (int i = 0; i < 10; i++)
        uv_run(&loop, UV_RUN_NOWAIT); /* the server notices the hang-up */
    return r;
}

static void test_any_authority(void **state)
{
    (void)state;
    /* grpc-go dialling a socket path sends the path (kubelets up to 1.25). */
    const nghttp2_nv path[] = {
        RAW_NV(":method", "POST"), RAW_NV(":scheme", "http"), RAW_NV(":path", "/test.Svc/Echo"),
        RAW_NV(":authority", "/var/lib/kubelet/device-plugins/gpulet-nvidia-gpu.sock"),
        RAW_NV("content-type", "application/grpc"), RAW_NV("te", "trailers")};
    struct raw r = raw_request(path, 6);
    assert_int_equal(r.grpc_status, GRPC_OK);
    assert_int_equal(r.rst, NGHTTP2_NO_ERROR);
    /* No :authority at all, and a content-type with a codec suffix. */
    const nghttp2_nv none[] = {
        RAW_NV(":method", "POST"), RAW_NV(":scheme", "http"), RAW_NV(":path", "/test.Svc/Echo"),
        RAW_NV("content-type", "application/grpc+proto")};
    r = raw_request(none, 4);
    assert_int_equal(r.grpc_status, GRPC_OK);
}

static void test_refused_requests(void **state)
{
    (void)state;
    const nghttp2_nv get[] = {RAW_NV(":method", "GET"), RAW_NV(":scheme", "http"),
                              RAW_NV(":path", "/test.Svc/Echo"),
                              RAW_NV("content-type", "application/grpc")};
    struct raw r = raw_request(get, 4);
    assert_int_equal(r.grpc_status, -1);
    assert_int_equal(r.rst, NGHTTP2_PROTOCOL_ERROR);
    const nghttp2_nv text[] = {RAW_NV(":method", "POST"), RAW_NV(":scheme", "http"),
                               RAW_NV(":path", "/test.Svc/Echo"),
                               RAW_NV("content-type", "application/grpcx")};
    r = raw_request(text, 4);
    assert_int_equal(r.rst, NGHTTP2_PROTOCOL_ERROR);
    const nghttp2_nv nopath[] = {RAW_NV(":method", "POST"), RAW_NV(":scheme", "http"),
                                 RAW_NV("content-type", "application/grpc")};
    r = raw_request(nopath, 3);
    assert_int_equal(r.rst, NGHTTP2_PROTOCOL_ERROR);
    /* Headers past the advertised 16 KiB reset the stream, not the server. */
    char *big = malloc(20000);
    memset(big, 'a', 19999);
    big[19999] = '\0';
    const nghttp2_nv huge[] = {RAW_NV(":method", "POST"), RAW_NV(":scheme", "http"),
                               RAW_NV(":path", "/test.Svc/Echo"),
                               RAW_NV("content-type", "application/grpc"), RAW_NV("x-big", big)};
    r = raw_request(huge, 5);
    free(big);
    assert_int_equal(r.grpc_status, -1);
    assert_int_not_equal(r.rst, NGHTTP2_NO_ERROR);
    /* The server still answers. */
    struct result ok = {0};
    grpc_client_unary(&loop, sock, "/test.Svc/Echo", (const uint8_t *)"x", 1, ANSWER_MS, done, &ok);
    run_until(&ok);
    assert_int_equal(ok.status, GRPC_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary_echo),  cmocka_unit_test(test_errors),
        cmocka_unit_test(test_too_large),   cmocka_unit_test(test_deadline_and_cancel),
        cmocka_unit_test(test_no_server),   cmocka_unit_test(test_frame_helpers),
        cmocka_unit_test(test_any_authority), cmocka_unit_test(test_refused_requests),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
