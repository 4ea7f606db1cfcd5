/* The HTTP endpoint (/metrics, /healthz, /readyz) on libmicrohttpd, run by
 * the agent's libuv loop. libmicrohttpd is loaded at run time, as NVML is,
 * so gpulet's binary stays glibc-only and a node without the library still
 * runs the device plugin. */
#ifndef GPULET_HTTP_H
#define GPULET_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "util/err.h"
#include "util/strbuf.h"

struct http_server;

#define HTTP_MAX_USERS 16

/* TLS and basic auth from an exporter-toolkit web config; all off when
 * zeroed. /healthz and /readyz answer without credentials (probes), over
 * TLS when it is on. */
struct http_security {
    bool tls;
    char cert_file[1024], key_file[1024];
    struct {
        char name[64];
        char hash[64];               /* bcrypt */
    } users[HTTP_MAX_USERS];
    unsigned nusers;
};

/* Parses web-config.yml text; relative files are taken from dir. Errors
 * name source:line:column and the key. */
int http_webconfig_parse(struct http_security *s, const char *source, const char *dir,
                         const char *text, size_t len, struct err *e);

/* Reads and parses the web config file at path. */
int http_webconfig_load(struct http_security *s, const char *path, struct err *e);

/* Whether the key and certificate s names (with TLS) can be read and are
 * PEM, as http_start would read them: a start checks before it serves. */
int http_security_check(const struct http_security *s, struct err *e);

/* What a handler answers: status, content type and a body, either copied
 * from body or shared: then release(release_ctx) runs once the response is
 * done with it, so many responses in flight use one buffer. */
struct http_reply {
    unsigned status;
    const char *content_type;
    struct strbuf body;
    const char *shared;
    size_t shared_len;
    void (*release)(void *ctx);
    void *release_ctx;
};

/* Fills the reply for a GET or HEAD of path. Other methods never get here:
 * they are answered 405. */
typedef void (*http_handler_fn)(void *ctx, const char *path, struct http_reply *reply);

/* Loads libmicrohttpd (or lib when not NULL), listens on addr (":9400",
 * "127.0.0.1:9400", "[::]:9400") and serves on the loop. */
int http_start(struct http_server **out, uv_loop_t *loop, const char *addr, const char *lib,
               const struct http_security *sec, http_handler_fn fn, void *ctx, struct err *e);

/* Stops serving and frees the server once libuv is done with it. */
void http_stop(struct http_server *s);

/* Parses a listen address into a socket address; exposed for tests. */
int http_parse_addr(const char *addr, struct sockaddr_storage *ss, struct err *e);

/* Whether libmicrohttpd (lib, or the system's libmicrohttpd.so.12) loads
 * with what gpulet uses of it: 0, or -1 with why and the fix in e. */
int http_available(const char *lib, struct err *e);

#endif
