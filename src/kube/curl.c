/* libcurl, loaded with dlopen so that the binary needs only glibc and nodes
 * without the API mode need no curl; and the one way an easy handle is set
 * up for the API server. */
#include "kube/internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* OpenSSL's build first, then GnuTLS's (the image's: its GnuTLS also serves
 * /metrics over TLS). Same API; GnuTLS's takes CA and client certificates as
 * files only, which is what in-cluster credentials are. Both speak HTTP/2
 * through nghttp2. */
static const char *const kube_curl_libs[] = {"libcurl.so.4", "libcurl-gnutls.so.4"};
#define KUBE_KEEPALIVE_S 30L        /* TCP keepalive: a dead peer ends a quiet watch */

struct kube_curl kube_curl;
static pthread_once_t kube_once = PTHREAD_ONCE_INIT;

static void kube_load(void)
{
    struct kube_curl *k = &kube_curl;
    for (size_t i = 0; i < sizeof kube_curl_libs / sizeof *kube_curl_libs && !k->dl; i++)
        k->dl = dlopen(k->lib = kube_curl_libs[i], RTLD_NOW | RTLD_LOCAL);
    if (!k->dl) {
        snprintf(k->error, sizeof k->error, "cannot load libcurl.so.4 or libcurl-gnutls.so.4 "
                 "for the Kubernetes API (install libcurl4): %s", dlerror());
        return;
    }
#define KUBE_RESOLVE(field, sym)                                                        \
    if (!(k->field = (__typeof__(k->field))dlsym(k->dl, #sym))) {                       \
        snprintf(k->error, sizeof k->error, "%s lacks %s", k->lib, #sym);                \
        return;                                                                         \
    }
    KUBE_CURL_FUNCS(KUBE_RESOLVE)
#undef KUBE_RESOLVE
    if (k->global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        snprintf(k->error, sizeof k->error, "curl_global_init failed");
}

int kube_client_init(struct err *e)
{
    pthread_once(&kube_once, kube_load);
    return kube_curl.error[0] ? err_set(e, "%s", kube_curl.error) : 0;
}

int kube_token_read(const char *path, char *out, size_t len, struct err *e)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(e, "token file %s: %s", path, strerror(errno));
    size_t n = fread(out, 1, len - 1, f);
    fclose(f);
    out[n] = '\0';
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ' || out[n - 1] == '\r'))
        out[--n] = '\0';
    return 0;
}

/* The bearer token: the kubeconfig's, else the token file's: as the
 * client last read it, or (a one-off request's) read now. */
static int kube_token(const struct kube_creds *c, char *out, size_t len, struct err *e)
{
    out[0] = '\0';
    if (c->token.len) {
        snprintf(out, len, "%s", c->token.data);
        return 0;
    }
    if (c->file_token.len) {
        snprintf(out, len, "%s", c->file_token.data);
        return 0;
    }
    return c->token_file[0] ? kube_token_read(c->token_file, out, len, e) : 0;
}

static void kube_blob(CURL *h, CURLoption opt, const struct strbuf *pem)
{
    struct curl_blob blob = {pem->data, pem->len, CURL_BLOB_COPY};
    kube_curl.setopt(h, opt, &blob);
}

static void kube_tls(CURL *h, const struct kube_creds *c)
{
    if (c->ca_file[0])
        kube_curl.setopt(h, CURLOPT_CAINFO, c->ca_file);
    else if (c->ca_pem.len)
        kube_blob(h, CURLOPT_CAINFO_BLOB, &c->ca_pem);
    if (c->cert_file[0])
        kube_curl.setopt(h, CURLOPT_SSLCERT, c->cert_file);
    else if (c->cert_pem.len)
        kube_blob(h, CURLOPT_SSLCERT_BLOB, &c->cert_pem);
    if (c->key_file[0])
        kube_curl.setopt(h, CURLOPT_SSLKEY, c->key_file);
    else if (c->key_pem.len)
        kube_blob(h, CURLOPT_SSLKEY_BLOB, &c->key_pem);
    if (c->insecure) {
        kube_curl.setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        kube_curl.setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
}

CURL *kube_easy(const struct kube_creds *c, const char *method, const char *path,
                const char *content_type, const char *body, struct curl_slist **headers,
                char *curl_err, struct err *e)
{
    *headers = NULL;
    if (kube_client_init(e) < 0)
        return NULL;
    char token[KUBE_TOKEN_MAX], url[1536], header[KUBE_TOKEN_MAX + 100];
    if (kube_token(c, token, sizeof token, e) < 0)
        return NULL;
    snprintf(url, sizeof url, "%s%s", c->server, path);
    CURL *h = kube_curl.easy_init();
    if (!h) {
        err_set(e, "curl_easy_init failed");
        return NULL;
    }
    struct curl_slist *hs = kube_curl.slist_append(NULL, "Accept: application/json");
    if (token[0]) {
        snprintf(header, sizeof header, "Authorization: Bearer %s", token);
        hs = kube_curl.slist_append(hs, header);
    }
    if (content_type) {
        snprintf(header, sizeof header, "Content-Type: %s", content_type);
        hs = kube_curl.slist_append(hs, header);
    }
    *headers = hs;
    curl_err[0] = '\0';
    kube_curl.setopt(h, CURLOPT_URL, url);
    kube_curl.setopt(h, CURLOPT_CUSTOMREQUEST, method);
    kube_curl.setopt(h, CURLOPT_HTTPHEADER, hs);
    kube_curl.setopt(h, CURLOPT_USERAGENT, "gpulet");
    kube_curl.setopt(h, CURLOPT_NOSIGNAL, 1L);
    kube_curl.setopt(h, CURLOPT_CONNECTTIMEOUT_MS, KUBE_CONNECT_TIMEOUT_MS);
    kube_curl.setopt(h, CURLOPT_PROTOCOLS_STR, "https,http");
    kube_curl.setopt(h, CURLOPT_ERRORBUFFER, curl_err);
    /* HTTP/2 over TLS (HTTP/1.1 where the server has no HTTP/2, and over
     * plain HTTP), and wait for the connection that is being made rather
     * than open a second: every request and watch shares one. */
    kube_curl.setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    kube_curl.setopt(h, CURLOPT_PIPEWAIT, 1L);
    kube_curl.setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    kube_curl.setopt(h, CURLOPT_TCP_KEEPIDLE, KUBE_KEEPALIVE_S);
    kube_curl.setopt(h, CURLOPT_TCP_KEEPINTVL, KUBE_KEEPALIVE_S / 3);
    if (body)
        kube_curl.setopt(h, CURLOPT_COPYPOSTFIELDS, body);
    kube_tls(h, c);
    return h;
}

/* curl says how long it waited ("after 3 ms", "after 5001 milliseconds"):
 * taken out. */
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

void kube_curl_message(CURLcode rc, char *curl_err)
{
    if (!curl_err[0])
        snprintf(curl_err, CURL_ERROR_SIZE, "%s", kube_curl.strerror(rc));
    kube_steady_message(curl_err);
}
