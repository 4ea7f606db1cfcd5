/* Requests to the API server through libcurl, loaded with dlopen so that
 * the binary needs only glibc, and nodes without the API mode need no curl. */
#include "kube/kube.h"

#include <curl/curl.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* OpenSSL's build first, then GnuTLS's (the image's: it shares GnuTLS with
 * libmicrohttpd). Same API; GnuTLS's takes CA and client certificates as
 * files only, which is what in-cluster credentials are. */
static const char *const kube_curl_libs[] = {"libcurl.so.4", "libcurl-gnutls.so.4"};
#define KUBE_CONNECT_TIMEOUT_S 5L
#define KUBE_TIMEOUT_S 15L
#define KUBE_MAX_BODY (8u << 20)   /* a Node object is a few KiB; this is a runaway answer */

#define KUBE_CURL_FUNCS(X)                                                               \
    X(global_init, curl_global_init) X(easy_init, curl_easy_init)                         \
    X(setopt, curl_easy_setopt) X(perform, curl_easy_perform)                             \
    X(getinfo, curl_easy_getinfo) X(cleanup, curl_easy_cleanup)                           \
    X(strerror, curl_easy_strerror) X(slist_append, curl_slist_append)                    \
    X(slist_free, curl_slist_free_all)

static struct {
    void *dl;
#define KUBE_FIELD(field, sym) __typeof__(&sym) field;
    KUBE_CURL_FUNCS(KUBE_FIELD)
#undef KUBE_FIELD
    const char *lib;
    char error[512];
} curl;

static pthread_once_t kube_once = PTHREAD_ONCE_INIT;

static void kube_load(void)
{
    for (size_t i = 0; i < sizeof kube_curl_libs / sizeof *kube_curl_libs && !curl.dl; i++)
        curl.dl = dlopen(curl.lib = kube_curl_libs[i], RTLD_NOW | RTLD_LOCAL);
    if (!curl.dl) {
        snprintf(curl.error, sizeof curl.error, "cannot load libcurl.so.4 or libcurl-gnutls.so.4 "
                 "for the Kubernetes API (install libcurl4): %s", dlerror());
        return;
    }
#define KUBE_RESOLVE(field, sym)                                                        \
    if (!(curl.field = (__typeof__(curl.field))dlsym(curl.dl, #sym))) {                 \
        snprintf(curl.error, sizeof curl.error, "%s lacks %s", curl.lib, #sym);          \
        return;                                                                         \
    }
    KUBE_CURL_FUNCS(KUBE_RESOLVE)
#undef KUBE_RESOLVE
    if (curl.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        snprintf(curl.error, sizeof curl.error, "curl_global_init failed");
}

int kube_client_init(struct err *e)
{
    pthread_once(&kube_once, kube_load);
    return curl.error[0] ? err_set(e, "%s", curl.error) : 0;
}

void kube_response_free(struct kube_response *r)
{
    strbuf_free(&r->body);
}

struct kube_transfer {
    struct kube_response *r;
    bool too_big;
};

static size_t kube_write(char *data, size_t size, size_t n, void *ctx)
{
    struct kube_transfer *t = ctx;
    if (t->r->body.len + size * n > KUBE_MAX_BODY) {
        t->too_big = true;
        return 0;
    }
    strbuf_append(&t->r->body, data, size * n);
    return size * n;
}

static int kube_progress(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    atomic_bool *stop = ctx;
    return stop && atomic_load(stop) ? 1 : 0;
}

/* The bearer token: the kubeconfig's, else the token file's current content. */
static int kube_token(const struct kube_creds *c, char *out, size_t len, struct err *e)
{
    out[0] = '\0';
    if (c->token.len) {
        snprintf(out, len, "%s", c->token.data);
        return 0;
    }
    if (!c->token_file[0])
        return 0;
    FILE *f = fopen(c->token_file, "r");
    if (!f)
        return err_set(e, "token file %s: %s", c->token_file, strerror(errno));
    size_t n = fread(out, 1, len - 1, f);
    fclose(f);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ' || out[n - 1] == '\r'))
        out[--n] = '\0';
    return 0;
}

static void kube_blob(CURL *h, CURLoption opt, const struct strbuf *pem)
{
    struct curl_blob blob = {pem->data, pem->len, CURL_BLOB_COPY};
    curl.setopt(h, opt, &blob);
}

static void kube_tls(CURL *h, const struct kube_creds *c)
{
    if (c->ca_file[0])
        curl.setopt(h, CURLOPT_CAINFO, c->ca_file);
    else if (c->ca_pem.len)
        kube_blob(h, CURLOPT_CAINFO_BLOB, &c->ca_pem);
    if (c->cert_file[0])
        curl.setopt(h, CURLOPT_SSLCERT, c->cert_file);
    else if (c->cert_pem.len)
        kube_blob(h, CURLOPT_SSLCERT_BLOB, &c->cert_pem);
    if (c->key_file[0])
        curl.setopt(h, CURLOPT_SSLKEY, c->key_file);
    else if (c->key_pem.len)
        kube_blob(h, CURLOPT_SSLKEY_BLOB, &c->key_pem);
    if (c->insecure) {
        curl.setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl.setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
}

/* curl says how long it waited ("after 3 ms", "after 5001 milliseconds"):
 * taken out, so that the same failure reads the same each time and its
 * callers, which log a failure once until it changes, log it once. */
static void kube_steady_message(char *s)
{
    for (char *at = strstr(s, " after "); at; at = strstr(at + 1, " after ")) {
        char *p = at + 7;
        while (*p >= '0' && *p <= '9')
            p++;
        if (p == at + 7)
            continue;
        if (!strncmp(p, " milliseconds", 13))
            p += 13;
        else if (!strncmp(p, " ms", 3))
            p += 3;
        else
            continue;
        memmove(at, p, strlen(p) + 1);
    }
}

/* One transfer: the common part of kube_request and kube_stream. write
 * takes the body as it comes; timeout_s 0 is no limit (a watch). */
static int kube_perform(const struct kube_creds *c, const char *method, const char *path,
                        const char *content_type, const char *body, curl_write_callback write,
                        void *write_ctx, atomic_bool *stop, long timeout_s, long *status,
                        char *curl_err, struct err *e)
{
    *status = 0;
    if (kube_client_init(e) < 0)
        return -1;
    char token[8192], url[1536], header[8300];
    if (kube_token(c, token, sizeof token, e) < 0)
        return -1;
    snprintf(url, sizeof url, "%s%s", c->server, path);
    CURL *h = curl.easy_init();
    if (!h)
        return err_set(e, "curl_easy_init failed");
    struct curl_slist *headers = curl.slist_append(NULL, "Accept: application/json");
    if (token[0]) {
        snprintf(header, sizeof header, "Authorization: Bearer %s", token);
        headers = curl.slist_append(headers, header);
    }
    if (content_type) {
        snprintf(header, sizeof header, "Content-Type: %s", content_type);
        headers = curl.slist_append(headers, header);
    }
    curl_err[0] = '\0';
    curl.setopt(h, CURLOPT_URL, url);
    curl.setopt(h, CURLOPT_CUSTOMREQUEST, method);
    curl.setopt(h, CURLOPT_HTTPHEADER, headers);
    curl.setopt(h, CURLOPT_USERAGENT, "gpulet");
    curl.setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl.setopt(h, CURLOPT_CONNECTTIMEOUT, KUBE_CONNECT_TIMEOUT_S);
    curl.setopt(h, CURLOPT_TIMEOUT, timeout_s);
    curl.setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    curl.setopt(h, CURLOPT_WRITEFUNCTION, write);
    curl.setopt(h, CURLOPT_WRITEDATA, write_ctx);
    curl.setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl.setopt(h, CURLOPT_XFERINFOFUNCTION, kube_progress);
    curl.setopt(h, CURLOPT_XFERINFODATA, stop);
    curl.setopt(h, CURLOPT_ERRORBUFFER, curl_err);
    if (body)
        curl.setopt(h, CURLOPT_POSTFIELDS, body);
    kube_tls(h, c);
    CURLcode rc = curl.perform(h);
    if (rc == CURLE_OK)
        curl.getinfo(h, CURLINFO_RESPONSE_CODE, status);
    else if (!curl_err[0])
        snprintf(curl_err, CURL_ERROR_SIZE, "%s", curl.strerror(rc));
    kube_steady_message(curl_err);
    curl.cleanup(h);
    curl.slist_free(headers);
    return rc == CURLE_OK ? 0 : -1;
}

int kube_request(const struct kube_creds *c, const char *method, const char *path,
                 const char *content_type, const char *body, struct kube_response *r,
                 atomic_bool *stop, struct err *e)
{
    memset(r, 0, sizeof *r);
    struct kube_transfer t = {r, false};
    char curl_err[CURL_ERROR_SIZE];
    struct err pe = {.msg = ""};
    if (kube_perform(c, method, path, content_type, body, kube_write, &t, stop, KUBE_TIMEOUT_S,
                     &r->status, curl_err, &pe) < 0) {
        kube_response_free(r);
        r->status = 0;
        if (pe.msg[0])
            return err_set(e, "%s", pe.msg);
        if (t.too_big)
            return err_set(e, "%s %s%s: the answer is over %u bytes", method, c->server, path,
                           KUBE_MAX_BODY);
        return err_set(e, "%s %s%s: %s", method, c->server, path, curl_err);
    }
    if (!r->body.data)
        strbuf_append(&r->body, "", 0);
    return 0;
}

/* A stream's lines, handed on one at a time. */
struct kube_lines {
    struct strbuf line;
    kube_line_fn on_line;
    void *ctx;
    bool too_big;
};

static size_t kube_write_lines(char *data, size_t size, size_t n, void *arg)
{
    struct kube_lines *l = arg;
    for (size_t i = 0; i < size * n; i++) {
        if (data[i] != '\n') {
            if (l->line.len >= KUBE_MAX_BODY) {
                l->too_big = true;
                return 0;
            }
            strbuf_append(&l->line, &data[i], 1);
            continue;
        }
        if (l->line.len && l->on_line(l->ctx, l->line.data, l->line.len) < 0)
            return 0;
        l->line.len = 0;
    }
    return size * n;
}

int kube_stream(const struct kube_creds *c, const char *path, kube_line_fn on_line, void *ctx,
                atomic_bool *stop, long *status, struct err *e)
{
    struct kube_lines l = {{0}, on_line, ctx, false};
    char curl_err[CURL_ERROR_SIZE];
    struct err pe = {.msg = ""};
    int rc = kube_perform(c, "GET", path, NULL, NULL, kube_write_lines, &l, stop, 0, status,
                          curl_err, &pe);
    if (rc == 0 && l.line.len && *status == 200)
        on_line(ctx, l.line.data, l.line.len);
    strbuf_free(&l.line);
    if (rc < 0) {
        if (pe.msg[0])
            return err_set(e, "%s", pe.msg);
        if (l.too_big)
            return err_set(e, "GET %s%s: a line is over %u bytes", c->server, path, KUBE_MAX_BODY);
        return err_set(e, "GET %s%s: %s", c->server, path, curl_err);
    }
    return 0;
}
