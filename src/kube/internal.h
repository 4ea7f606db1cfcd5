/* libcurl as the files of src/kube use it (curl.c): loaded once with
 * dlopen, and one easy handle set up the same way for the blocking request
 * (request.c) and the client on the loop (client.c). */
#ifndef GPULET_KUBE_INTERNAL_H
#define GPULET_KUBE_INTERNAL_H

#include <curl/curl.h>

#include "kube/kube.h"

#define KUBE_CONNECT_TIMEOUT_MS 5000L
#define KUBE_TIMEOUT_MS 15000L          /* a request's deadline, unless told */
#define KUBE_MAX_BODY (8u << 20)        /* a Node object is a few KiB; this is a runaway answer */

#define KUBE_CURL_FUNCS(X)                                                               \
    X(global_init, curl_global_init) X(easy_init, curl_easy_init)                         \
    X(setopt, curl_easy_setopt) X(perform, curl_easy_perform)                             \
    X(getinfo, curl_easy_getinfo) X(cleanup, curl_easy_cleanup)                           \
    X(strerror, curl_easy_strerror) X(slist_append, curl_slist_append)                    \
    X(slist_free, curl_slist_free_all) X(multi_init, curl_multi_init)                     \
    X(multi_setopt, curl_multi_setopt) X(multi_add, curl_multi_add_handle)                \
    X(multi_remove, curl_multi_remove_handle) X(multi_action, curl_multi_socket_action)   \
    X(multi_info, curl_multi_info_read) X(multi_cleanup, curl_multi_cleanup)              \
    X(multi_assign, curl_multi_assign)

/* The functions, resolved by kube_client_init; read-only after it. */
struct kube_curl {
    void *dl;
#define KUBE_FIELD(field, sym) __typeof__(&sym) field;
    KUBE_CURL_FUNCS(KUBE_FIELD)
#undef KUBE_FIELD
    const char *lib;
    char error[512];
};
extern struct kube_curl kube_curl;

/* An easy handle for one request to c's server, everything set but what
 * takes the answer (the write callback, its data, the time limit): the
 * URL, the bearer token (the client's copy of its file, else read now:
 * tokens rotate), TLS, HTTP/2 where the
 * server offers it, the headers (*headers: freed by the caller after the
 * transfer), the body (copied). curl_err (CURL_ERROR_SIZE) gets curl's
 * reason for a failure. */
/* A token file's content, trimmed (blocking). */
int kube_token_read(const char *path, char *out, size_t len, struct err *e);
#define KUBE_TOKEN_MAX 8192

CURL *kube_easy(const struct kube_creds *c, const char *method, const char *path,
                const char *content_type, const char *body, struct curl_slist **headers,
                char *curl_err, struct err *e);

/* curl's failure, the same each time for the same cause (no "after N
 * ms"), so that it is logged once until it changes. */
void kube_curl_message(CURLcode rc, char *curl_err);

#endif
