/* libFuzzer harness for the gRPC server: any bytes after the HTTP/2 client
 * preface, sent over a real unix socket to a server on a libuv loop, end in
 * answers or a closed connection, never a crash, a leak or a hang. The
 * methods cover the server's paths: a unary echo, a stream left open until
 * the client goes, and an error whose message is the request's bytes.
 * The seeds are grpcio's own calls, captured by fuzz/capture_grpc.py. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "grpc/server.h"
#include "util/log.h"

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

static void fuzz_unary(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)ctx;
    grpc_call_send(call, msg, len);
    grpc_call_finish(call, GRPC_OK, NULL);
}

static void fuzz_cancelled(struct grpc_call *call, void *ctx)
{
    (void)call;
    (void)ctx;
}

static void fuzz_stream(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)ctx;
    grpc_call_on_cancel(call, fuzz_cancelled, NULL);
    grpc_call_send(call, msg, len);
    grpc_call_send(call, msg, len / 2);
}

static void fuzz_fail(struct grpc_call *call, const uint8_t *msg, size_t len, void *ctx)
{
    (void)ctx;
    char why[512];
    snprintf(why, sizeof why, "%.*s", (int)(len < 500 ? len : 500), (const char *)msg);
    grpc_call_finish(call, GRPC_INVALID_ARGUMENT, why);
}

static const struct grpc_method fuzz_methods[] = {
    {"/t.S/Unary", fuzz_unary, NULL},
    {"/t.S/Stream", fuzz_stream, NULL},
    {"/t.S/Fail", fuzz_fail, NULL},
};

static uv_loop_t loop;
static char sock_path[108];

/* libFuzzer ends with exit(): leave no socket behind in /tmp. */
static void fuzz_cleanup(void)
{
    unlink(sock_path);
}

static void fuzz_setup(void)
{
    struct grpc_server *s;
    struct err e;
    log_set_level(LOG_ERROR); /* refused streams are logged: most inputs are refused */
    atexit(fuzz_cleanup);
    snprintf(sock_path, sizeof sock_path, "/tmp/gpulet-fuzz-grpc-%d.sock", (int)getpid());
    uv_loop_init(&loop);
    int fd;
    struct unixsock_id id;
    if (unixsock_bind(sock_path, 128, &fd, &id, &e) < 0 ||
        grpc_server_start(&s, &loop, sock_path, fd, id, fuzz_methods, 3, &e) < 0) {
        fprintf(stderr, "fuzz_grpc: %s\n", e.msg);
        abort();
    }
}

static int fuzz_connect(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    memcpy(a.sun_path, sock_path, sizeof sock_path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        abort();
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!sock_path[0])
        fuzz_setup();
    int fd = fuzz_connect();
    /* Inputs are at most -max_len (4 KiB): the socket buffer takes them whole. */
    if (write(fd, preface, sizeof preface - 1) < 0 || (size && write(fd, data, size) < 0))
        abort();
    shutdown(fd, SHUT_WR);
    /* The server sees EOF after the input and must close; drain its answers
     * until it does. A server that never closes trips libFuzzer's timeout. */
    char buf[65536];
    for (;;) {
        uv_run(&loop, UV_RUN_NOWAIT);
        ssize_t n = read(fd, buf, sizeof buf);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            break;
    }
    close(fd);
    uv_run(&loop, UV_RUN_NOWAIT); /* the connection's close callback frees it */
    return 0;
}
