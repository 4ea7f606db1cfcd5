/* GnuTLS for the linked-in libmicrohttpd, loaded only when TLS is asked for.
 *
 * libmicrohttpd is linked statically so that /metrics needs glibc alone
 * (Ubuntu's GPU hosts have no libmicrohttpd). Its static archive calls GnuTLS,
 * whose own static archive cannot be linked (it needs p11-kit, which Debian
 * ships only shared). So the GnuTLS functions libmicrohttpd calls are defined
 * here and forward to the host's libgnutls.so.30, opened the first time a
 * web config turns TLS on. Without TLS, libmicrohttpd calls only
 * gnutls_global_init and _deinit (from its constructor and destructor),
 * which do nothing until the library is open. Every other function is
 * called only by a TLS daemon, which http_start starts after http_tls_load.
 *
 * These definitions stay inside the binary: it exports no symbols (no
 * -rdynamic), so a GnuTLS that libcurl brings in never sees them. */
#include "http/http.h"

#include <dlfcn.h>
#include <gnutls/abstract.h> /* the certificate retrieve functions */
#include <gnutls/gnutls.h>
#include <stdlib.h>
#include <string.h>

#define TLS_LIB "libgnutls.so.30"

/* Each function: return type, name, parameters, arguments. */
#define TLS_CALLS(X)                                                                          \
    X(int, gnutls_alpn_set_protocols,                                                          \
      (gnutls_session_t s, const gnutls_datum_t *p, unsigned n, unsigned f), (s, p, n, f))     \
    X(int, gnutls_bye, (gnutls_session_t s, gnutls_close_request_t how), (s, how))             \
    X(int, gnutls_certificate_allocate_credentials, (gnutls_certificate_credentials_t * c), (c)) \
    X(int, gnutls_certificate_set_x509_key_mem,                                                \
      (gnutls_certificate_credentials_t c, const gnutls_datum_t *cert,                         \
       const gnutls_datum_t *key, gnutls_x509_crt_fmt_t t),                                    \
      (c, cert, key, t))                                                                       \
    X(int, gnutls_certificate_set_x509_key_mem2,                                               \
      (gnutls_certificate_credentials_t c, const gnutls_datum_t *cert,                         \
       const gnutls_datum_t *key, gnutls_x509_crt_fmt_t t, const char *pass, unsigned f),      \
      (c, cert, key, t, pass, f))                                                              \
    X(int, gnutls_certificate_set_x509_trust_mem,                                              \
      (gnutls_certificate_credentials_t c, const gnutls_datum_t *ca, gnutls_x509_crt_fmt_t t), \
      (c, ca, t))                                                                              \
    X(gnutls_cipher_algorithm_t, gnutls_cipher_get, (gnutls_session_t s), (s))                 \
    X(int, gnutls_credentials_set,                                                             \
      (gnutls_session_t s, gnutls_credentials_type_t t, void *c), (s, t, c))                   \
    X(int, gnutls_dh_params_import_pkcs3,                                                      \
      (gnutls_dh_params_t d, const gnutls_datum_t *p, gnutls_x509_crt_fmt_t f), (d, p, f))     \
    X(int, gnutls_dh_params_init, (gnutls_dh_params_t * d), (d))                               \
    X(int, gnutls_handshake, (gnutls_session_t s), (s))                                        \
    X(int, gnutls_init, (gnutls_session_t * s, unsigned f), (s, f))                            \
    X(int, gnutls_priority_init, (gnutls_priority_t * p, const char *s, const char **at),      \
      (p, s, at))                                                                              \
    X(int, gnutls_priority_set, (gnutls_session_t s, gnutls_priority_t p), (s, p))             \
    X(gnutls_protocol_t, gnutls_protocol_get_version, (gnutls_session_t s), (s))               \
    X(int, gnutls_psk_allocate_server_credentials, (gnutls_psk_server_credentials_t * c), (c)) \
    X(size_t, gnutls_record_check_pending, (gnutls_session_t s), (s))                          \
    X(int, gnutls_record_get_direction, (gnutls_session_t s), (s))                             \
    X(ssize_t, gnutls_record_recv, (gnutls_session_t s, void *d, size_t n), (s, d, n))         \
    X(ssize_t, gnutls_record_send, (gnutls_session_t s, const void *d, size_t n), (s, d, n))   \
    X(void *, gnutls_session_get_ptr, (gnutls_session_t s), (s))                               \
    X(const char *, gnutls_strerror, (int code), (code))

/* The same for functions that return nothing. */
#define TLS_VOID_CALLS(X)                                                                     \
    X(gnutls_certificate_free_credentials, (gnutls_certificate_credentials_t c), (c))          \
    X(gnutls_certificate_server_set_request,                                                   \
      (gnutls_session_t s, gnutls_certificate_request_t r), (s, r))                            \
    X(gnutls_certificate_set_dh_params,                                                        \
      (gnutls_certificate_credentials_t c, gnutls_dh_params_t d), (c, d))                      \
    X(gnutls_certificate_set_retrieve_function2,                                               \
      (gnutls_certificate_credentials_t c, gnutls_certificate_retrieve_function2 *f), (c, f))  \
    X(gnutls_certificate_set_retrieve_function3,                                               \
      (gnutls_certificate_credentials_t c, gnutls_certificate_retrieve_function3 *f), (c, f))  \
    X(gnutls_deinit, (gnutls_session_t s), (s))                                                \
    X(gnutls_dh_params_deinit, (gnutls_dh_params_t d), (d))                                    \
    X(gnutls_priority_deinit, (gnutls_priority_t p), (p))                                      \
    X(gnutls_psk_free_server_credentials, (gnutls_psk_server_credentials_t c), (c))            \
    X(gnutls_psk_set_server_credentials_function,                                              \
      (gnutls_psk_server_credentials_t c, gnutls_psk_server_credentials_function *f), (c, f))  \
    X(gnutls_session_set_ptr, (gnutls_session_t s, void *p), (s, p))                           \
    X(gnutls_transport_set_int2, (gnutls_session_t s, int r, int w), (s, r, w))

/* Written once, by the first http_tls_load (at start, on the loop's thread,
 * before any TLS daemon runs); read by the forwarders. */
static struct {
    void *dl;
    int (*global_init)(void);
    void (*global_deinit)(void);
#define TLS_FIELD(ret, name, params, args) ret(*name) params;
#define TLS_VOID_FIELD(name, params, args) void(*name) params;
    TLS_CALLS(TLS_FIELD)
    TLS_VOID_CALLS(TLS_VOID_FIELD)
#undef TLS_FIELD
#undef TLS_VOID_FIELD
} tls;

/* libmicrohttpd hands PSK keys to GnuTLS, which frees them with free(). */
gnutls_alloc_function gnutls_malloc = malloc;

#define TLS_FORWARD(ret, name, params, args) \
    ret name params { return tls.name args; }
#define TLS_VOID_FORWARD(name, params, args) \
    void name params { tls.name args; }
TLS_CALLS(TLS_FORWARD)
TLS_VOID_CALLS(TLS_VOID_FORWARD)
#undef TLS_FORWARD
#undef TLS_VOID_FORWARD

int gnutls_global_init(void)
{
    return tls.dl ? tls.global_init() : 0;
}

void gnutls_global_deinit(void)
{
    if (tls.dl)
        tls.global_deinit();
}

static void *tls_symbol(void *dl, const char *name, const char *path, struct err *e)
{
    void *p = dlsym(dl, name);
    if (!p)
        err_set(e, "%s lacks %s", path, name);
    return p;
}

int http_tls_load(struct err *e)
{
    if (tls.dl)
        return 0;
    /* GPULET_GNUTLS_LIB: a host that keeps it elsewhere (and the tests' host
     * without it). */
    const char *env = getenv("GPULET_GNUTLS_LIB");
    const char *path = env && *env ? env : TLS_LIB;
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        return err_set(e, "TLS needs %s (GnuTLS: apt-get install libgnutls30, dnf install "
                          "gnutls): %s", path, dlerror());
    bool ok = (tls.global_init = tls_symbol(dl, "gnutls_global_init", path, e)) &&
              (tls.global_deinit = tls_symbol(dl, "gnutls_global_deinit", path, e));
#define TLS_RESOLVE(ret, name, params, args) \
    ok = ok && (tls.name = (ret(*) params)tls_symbol(dl, #name, path, e));
#define TLS_VOID_RESOLVE(name, params, args) \
    ok = ok && (tls.name = (void(*) params)tls_symbol(dl, #name, path, e));
    TLS_CALLS(TLS_RESOLVE)
    TLS_VOID_CALLS(TLS_VOID_RESOLVE)
#undef TLS_RESOLVE
#undef TLS_VOID_RESOLVE
    if (!ok || tls.global_init() < 0) {
        if (ok)
            err_set(e, "%s: gnutls_global_init failed", path);
        dlclose(dl);
        return -1;
    }
    tls.dl = dl;
    return 0;
}

int http_tls_pair(const char *cert, const char *key, const struct http_security *s, struct err *e)
{
    if (http_tls_load(e) < 0)
        return -1;
    gnutls_certificate_credentials_t c;
    if (gnutls_certificate_allocate_credentials(&c) < 0)
        return err_set(e, "GnuTLS cannot allocate credentials");
    gnutls_datum_t cd = {(unsigned char *)cert, (unsigned)strlen(cert)};
    gnutls_datum_t kd = {(unsigned char *)key, (unsigned)strlen(key)};
    int rc = gnutls_certificate_set_x509_key_mem(c, &cd, &kd, GNUTLS_X509_FMT_PEM);
    gnutls_certificate_free_credentials(c);
    if (rc < 0)
        return err_set(e, "web config: cert_file %s and key_file %s are not a certificate and its "
                          "key: %s", s->cert_file, s->key_file, gnutls_strerror(rc));
    return 0;
}
