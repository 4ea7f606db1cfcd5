/* The gRPC server and client against each other on one loop: unary and
 * streaming calls, error statuses, deadlines, cancellation, size limits. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    if (grpc_server_start(&srv, &loop, sock, methods, 3, &e) < 0)
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
    grpc_client_unary(&loop, sock, "/test.Svc/Echo", (const uint8_t *)"hello", 5, 1000, done, &r);
    run_until(&r);
    assert_int_equal(r.status, GRPC_OK);
    assert_int_equal(r.len, 5);
    assert_memory_equal(r.body, "hello", 5);
    struct result empty = {0};
    grpc_client_unary(&loop, sock, "/test.Svc/Echo", NULL, 0, 1000, done, &empty);
    run_until(&empty);
    assert_int_equal(empty.status, GRPC_OK);
    assert_int_equal(empty.len, 0);
}

static void test_errors(void **state)
{
    (void)state;
    struct result r = {0};
    grpc_client_unary(&loop, sock, "/test.Svc/Refuse", (const uint8_t *)"x", 1, 1000, done, &r);
    run_until(&r);
    assert_int_equal(r.status, GRPC_INVALID_ARGUMENT);
    assert_string_equal(r.message, "unknown device ID 'GPU-x' (100%)"); /* percent-encoded on the wire */
    struct result u = {0};
    grpc_client_unary(&loop, sock, "/test.Svc/Nope", NULL, 0, 1000, done, &u);
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
    grpc_client_unary(&loop, sock, "/test.Svc/Silent", NULL, 0, 50, done, &r);
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
    grpc_client_unary(&loop, "/tmp/gpulet-no-such.sock", "/test.Svc/Echo", NULL, 0, 1000, done, &r);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary_echo),  cmocka_unit_test(test_errors),
        cmocka_unit_test(test_too_large),   cmocka_unit_test(test_deadline_and_cancel),
        cmocka_unit_test(test_no_server),   cmocka_unit_test(test_frame_helpers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
