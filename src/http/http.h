/* The HTTP endpoint (/metrics, /healthz, /readyz) on libmicrohttpd, run by
 * the agent's libuv loop. libmicrohttpd is linked in; the GnuTLS it uses for
 * TLS is loaded at run time, only when a web config asks for TLS (tls.c), so
 * gpulet's binary needs glibc alone. */
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
    char *key_pem, *cert_pem;        /* http_security_load's, for TLS; freed by http_security_free */
};

/* Parses web-config.yml text; relative files are taken from dir. Errors
 * name source:line:column and the key. */
int http_webconfig_parse(struct http_security *s, const char *source, const char *dir,
                         const char *text, size_t len, struct err *e);

/* Reads and parses the web config file at path. */
int http_webconfig_load(struct http_security *s, const char *path, struct err *e);

/* For TLS, where s asks for it: GnuTLS loaded, and the key and certificate
 * read into s (PEM) and checked as a pair, for http_start. Blocking (files):
 * before the loop serves. */
int http_security_load(struct http_security *s, struct err *e);
void http_security_free(struct http_security *s);

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

/* Listens on addr (":9400", "127.0.0.1:9400", "[::]:9400") and serves on
 * the loop; sec (NULL: open, plain HTTP) as http_security_load made it. */
int http_start(struct http_server **out, uv_loop_t *loop, const char *addr,
               const struct http_security *sec, http_handler_fn fn, void *ctx, struct err *e);

/* Stops serving and frees the server once libuv is done with it. */
void http_stop(struct http_server *s);

/* Parses a listen address into a socket address; exposed for tests. */
int http_parse_addr(const char *addr, struct sockaddr_storage *ss, struct err *e);

/* Opens the host's GnuTLS for libmicrohttpd's TLS (once; later calls
 * return at once): 0, or -1 with why and the fix in e. */
int http_tls_load(struct err *e);

/* Whether cert and key (PEM, as s's cert_file and key_file hold them) are
 * a certificate and its private key, as GnuTLS loads them: a key of
 * another certificate, or the two swapped, fail naming both files. */
int http_tls_pair(const char *cert, const char *key, const struct http_security *s,
                  struct err *e);

#endif
