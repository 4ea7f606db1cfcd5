#include "http/http.h"
#include "http/auth.h"
#include "util/xmalloc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HTTP_IDLE_TIMEOUT_S 10     /* a silent or half-open client is dropped after this */
#define HTTP_MAX_CONNECTIONS 2048
/* Per connection: a GET's headers fit easily; libmicrohttpd's 32 KiB default
 * costs 16 MiB at 500 connections. */
#define HTTP_CONNECTION_MEMORY (8 * 1024)

struct http_server {
    struct MHD_Daemon *daemon;
    uv_poll_t poll;            /* on libmicrohttpd's epoll fd */
    uv_timer_t timer;          /* its connection timeouts */
    uv_async_t auth_done;      /* the hashing thread finished a password (auth.h) */
    int handles;
    http_handler_fn fn;
    void *ctx;
    struct http_security sec;
    struct http_auth auth;
    char *tls_key, *tls_cert;  /* PEM, for libmicrohttpd's whole life */
};

int http_parse_addr(const char *addr, struct sockaddr_storage *ss, struct err *e)
{
    memset(ss, 0, sizeof *ss);
    const char *colon = strrchr(addr, ':');
    char host[128];
    char *end;
    if (!colon)
        return err_set(e, "metrics address '%s' needs a port, as in :9400", addr);
    unsigned long port = strtoul(colon + 1, &end, 10);
    if (!colon[1] || *end || port > 65535)
        return err_set(e, "metrics address '%s': bad port", addr);
    size_t hl = (size_t)(colon - addr);
    if (hl >= sizeof host)
        return err_set(e, "metrics address '%s' is too long", addr);
    memcpy(host, addr, hl);
    host[hl] = '\0';
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
        host[hl - 1] = '\0';
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &s6->sin6_addr) != 1)
            return err_set(e, "metrics address '%s': bad IPv6 address", addr);
        return 0;
    }
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    s4->sin_family = AF_INET;
    s4->sin_port = htons((uint16_t)port);
    if (hl == 0)
        s4->sin_addr.s_addr = htonl(INADDR_ANY);
    else if (inet_pton(AF_INET, host, &s4->sin_addr) != 1)
        return err_set(e, "metrics address '%s': bad IPv4 address (use [addr] for IPv6)", addr);
    return 0;
}

static enum MHD_Result http_queue(struct MHD_Connection *c, unsigned status, const char *type,
                                  struct MHD_Response *r, const char *allow)
{
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (allow)
        MHD_add_response_header(r, "Allow", allow);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result http_answer(struct MHD_Connection *c, unsigned status, const char *type,
                                   const char *body, size_t len, const char *allow)
{
    return http_queue(c, status, type,
                      MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY), allow);
}

static void http_job_free(struct http_auth_job *job)
{
    explicit_bzero(job->password, strlen(job->password));
    free(job->password);
    free(job);
}

/* A request's end, answered or not: its password job goes with it. */
static void http_completed(void *cls, struct MHD_Connection *c, void **state,
                           enum MHD_RequestTerminationCode why)
{
    (void)cls;
    (void)c;
    (void)why;
    if (*state)
        http_job_free(*state);
    *state = NULL;
}

static enum MHD_Result http_deny(struct MHD_Connection *c)
{
    static const char msg[] = "unauthorized\n";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof msg - 1, (void *)msg, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    enum MHD_Result q = MHD_queue_basic_auth_fail_response(c, "gpulet", r);
    MHD_destroy_response(r);
    return q;
}

/* The request's credentials: MHD_YES with *verdict ALLOW or DENY, or
 * its connection suspended while the hashing thread checks them (auth.h;
 * the request comes back here, its job in *state, once they are). */
static enum MHD_Result http_authorize(struct http_server *s, struct MHD_Connection *c,
                                      void **state, enum http_auth_verdict *verdict)
{
    struct http_auth_job *job = *state;
    if (job) { /* back from the hashing thread */
        *verdict = job->ok ? HTTP_AUTH_ALLOW : HTTP_AUTH_DENY;
        return MHD_YES;
    }
    char *pass = NULL, *user = MHD_basic_auth_get_username_password(c, &pass);
    unsigned index = 0;
    *verdict = http_auth_cached(&s->auth, user, pass, &index);
    if (*verdict == HTTP_AUTH_HASH) {
        job = xcalloc(1, sizeof *job);
        job->conn = c;
        job->user = index;
        job->password = xstrdup(pass);
    }
    if (user)
        MHD_free(user);
    if (pass)
        MHD_free(pass);
    if (!job)
        return MHD_YES;
    if (!http_auth_post(&s->auth, job)) {
        http_job_free(job);
        static const char msg[] = "busy checking passwords: try again\n";
        return http_answer(c, 503, "text/plain; charset=utf-8", msg, sizeof msg - 1, NULL);
    }
    *state = job;
    MHD_suspend_connection(c);
    return MHD_YES;
}

static enum MHD_Result http_request(void *cls, struct MHD_Connection *c, const char *url,
                                    const char *method, const char *version,
                                    const char *upload, size_t *upload_size, void **state)
{
    (void)version;
    (void)upload;
    (void)upload_size;
    struct http_server *s = cls;
    /* Probes carry no data and have no credentials: only the data needs them. */
    if (s->sec.nusers && strcmp(url, "/healthz") && strcmp(url, "/readyz")) {
        enum http_auth_verdict verdict;
        if (http_authorize(s, c, state, &verdict) != MHD_YES)
            return MHD_NO;
        if (verdict == HTTP_AUTH_HASH)
            return MHD_YES; /* suspended until it is known */
        if (verdict == HTTP_AUTH_DENY)
            return http_deny(c);
    }
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        static const char msg[] = "method not allowed: use GET or HEAD\n";
        return http_answer(c, 405, "text/plain; charset=utf-8", msg, sizeof msg - 1,
                           "GET, HEAD");
    }
    struct http_reply reply = {404, "text/plain; charset=utf-8", {0}, NULL, 0, NULL, NULL};
    s->fn(s->ctx, url, &reply);
    enum MHD_Result ok;
    if (reply.shared) {
        struct MHD_Response *r = MHD_create_response_from_buffer_with_free_callback_cls(
            reply.shared_len, (void *)reply.shared, reply.release, reply.release_ctx);
        if (!r)
            reply.release(reply.release_ctx); /* nobody else will */
        ok = http_queue(c, reply.status, reply.content_type, r, NULL);
    } else {
        ok = http_answer(c, reply.status, reply.content_type,
                         reply.body.data ? reply.body.data : "", reply.body.len, NULL);
    }
    strbuf_free(&reply.body);
    return ok;
}

static void http_on_timer(uv_timer_t *t);

static void http_rearm(struct http_server *s)
{
    MHD_UNSIGNED_LONG_LONG ms;
    if (MHD_get_timeout(s->daemon, &ms) == MHD_YES)
        uv_timer_start(&s->timer, http_on_timer, ms, 0);
    else
        uv_timer_stop(&s->timer);
}

static void http_on_timer(uv_timer_t *t)
{
    struct http_server *s = t->data;
    MHD_run(s->daemon);
    http_rearm(s);
}

static void http_on_poll(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    struct http_server *s = p->data;
    MHD_run(s->daemon);
    http_rearm(s);
}

/* Passwords checked: their connections go on, each to its answer. */
static void http_on_auth_done(uv_async_t *h)
{
    struct http_server *s = h->data;
    for (struct http_auth_job *j = http_auth_finished(&s->auth); j; j = j->next)
        MHD_resume_connection(j->conn);
    MHD_run(s->daemon);
    http_rearm(s);
}

/* Reads a PEM file whole (at most 1 MiB); key names it in errors. */
static char *http_read_pem(const char *path, const char *key, struct err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(e, "web config: %s %s: %s", key, path, strerror(errno)), NULL;
    char *buf = xmalloc((1 << 20) + 1);
    size_t n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    buf[n] = '\0';
    if (!strstr(buf, "-----BEGIN ")) {
        free(buf);
        return err_set(e, "web config: %s %s is not PEM", key, path), NULL;
    }
    return buf;
}

int http_security_load(struct http_security *s, struct err *e)
{
    s->key_pem = s->cert_pem = NULL;
    if (!s->tls)
        return 0;
    if (http_tls_load(e) < 0)
        return -1;
    s->key_pem = http_read_pem(s->key_file, "key_file", e);
    s->cert_pem = s->key_pem ? http_read_pem(s->cert_file, "cert_file", e) : NULL;
    if (s->key_pem && s->cert_pem && http_tls_pair(s->cert_pem, s->key_pem, s, e) == 0)
        return 0;
    http_security_free(s);
    return -1;
}

void http_security_free(struct http_security *s)
{
    free(s->key_pem);
    free(s->cert_pem);
    s->key_pem = s->cert_pem = NULL;
}

static void http_free(struct http_server *s)
{
    http_auth_free(&s->auth);
    free(s->tls_key);
    free(s->tls_cert);
    free(s);
}

int http_start(struct http_server **out, uv_loop_t *loop, const char *addr,
               const struct http_security *sec, http_handler_fn fn, void *ctx, struct err *e)
{
    *out = NULL;
    struct sockaddr_storage ss;
    if (http_parse_addr(addr, &ss, e) < 0)
        return -1;
    if (sec && sec->tls && http_tls_load(e) < 0)
        return -1;
    struct http_server *s = xcalloc(1, sizeof *s);
    s->fn = fn;
    s->ctx = ctx;
    if (sec)
        s->sec = *sec;
    s->sec.key_pem = s->sec.cert_pem = NULL; /* the caller's: copied below */
    if (s->sec.tls && (!sec->key_pem || !sec->cert_pem)) {
        free(s);
        return err_set(e, "metrics over TLS: the key and certificate were not read "
                          "(http_security_load)");
    }
    if (s->sec.tls) {
        s->tls_key = xstrdup(sec->key_pem);
        s->tls_cert = xstrdup(sec->cert_pem);
    }
    if (http_auth_init(&s->auth, &s->sec, &s->auth_done, e) < 0) {
        http_free(s);
        return -1;
    }
    /* No thread of its own: one epoll fd, watched by the loop. */
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0) |
                     (s->sec.tls ? MHD_USE_TLS : 0);
    /* The TLS options come last: without TLS, MHD_OPTION_END ends the list before them. */
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, http_request, s, MHD_OPTION_SOCK_ADDR, &ss,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_IDLE_TIMEOUT_S,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNECTIONS,
                                 MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY,
                                 MHD_OPTION_NOTIFY_COMPLETED, http_completed, s,
                                 s->sec.tls ? MHD_OPTION_HTTPS_MEM_KEY : MHD_OPTION_END, s->tls_key,
                                 MHD_OPTION_HTTPS_MEM_CERT, s->tls_cert, MHD_OPTION_END);
    if (!s->daemon) {
        int errsv = errno;
        http_free(s);
        /* (the key and certificate were checked as a pair: http_security_load) */
        return err_set(e, "cannot listen on %s for metrics%s: %s", addr,
                       sec && sec->tls ? " over TLS" : "",
                       errsv ? strerror(errsv) : "libmicrohttpd refused");
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_EPOLL_FD);
    uv_poll_init(loop, &s->poll, info->epoll_fd);
    uv_timer_init(loop, &s->timer);
    uv_async_init(loop, &s->auth_done, http_on_auth_done); /* before any job: none is posted yet */
    s->poll.data = s->timer.data = s->auth_done.data = s;
    s->handles = 3;
    uv_poll_start(&s->poll, UV_READABLE, http_on_poll);
    http_rearm(s);
    *out = s;
    return 0;
}

static void http_closed(uv_handle_t *h)
{
    struct http_server *s = h->data;
    if (--s->handles > 0)
        return;
    /* libmicrohttpd must not stop with a connection suspended: each one
     * waiting for its password goes on (to be closed), the thread gone. */
    for (struct http_auth_job *j = http_auth_stop(&s->auth); j; j = j->next)
        MHD_resume_connection(j->conn);
    MHD_stop_daemon(s->daemon);
    http_free(s);
}

void http_stop(struct http_server *s)
{
    if (!s)
        return;
    uv_close((uv_handle_t *)&s->poll, http_closed);
    uv_close((uv_handle_t *)&s->timer, http_closed);
    uv_close((uv_handle_t *)&s->auth_done, http_closed);
}
