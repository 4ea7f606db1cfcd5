/* A small client of the Kubernetes API server: credentials from a
 * kubeconfig or the pod's service account, and one blocking request at a
 * time through libcurl, loaded with dlopen (libcurl.so.4). Requests block:
 * callers run them off the loop. */
#ifndef GPULET_KUBE_H
#define GPULET_KUBE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"
#include "util/strbuf.h"

#define KUBE_PATH_MAX 512
#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* Where the API server is and who we are. Filled by kube_creds_load; PEM
 * blobs (from *-data fields) are owned here. */
struct kube_creds {
    char server[256];               /* https://host:port, no trailing slash */
    char source[KUBE_PATH_MAX];     /* the kubeconfig, or "in-cluster", for messages */
    char ca_file[KUBE_PATH_MAX];    /* empty: ca_pem, or the system's CAs */
    struct strbuf ca_pem;
    char cert_file[KUBE_PATH_MAX], key_file[KUBE_PATH_MAX];
    struct strbuf cert_pem, key_pem;
    char token_file[KUBE_PATH_MAX]; /* re-read on every request: tokens rotate */
    struct strbuf token;            /* a fixed token from the kubeconfig */
    bool insecure;                  /* insecure-skip-tls-verify */
};

/* From the kubeconfig at path (its current context), or with path NULL or
 * empty from the service account (KUBERNETES_SERVICE_HOST/PORT and the
 * token and CA in $GPULET_SERVICEACCOUNT_DIR, default KUBE_SA_DIR). */
int kube_creds_load(struct kube_creds *c, const char *path, struct err *e);

/* Parses kubeconfig text; relative file names are taken from dir. */
int kube_creds_parse(struct kube_creds *c, const char *source, const char *dir,
                     const char *text, size_t len, struct err *e);

void kube_creds_free(struct kube_creds *c);

/* True where in-cluster credentials are there to load. */
bool kube_in_cluster(void);

/* libcurl, loaded once. */
int kube_client_init(struct err *e);

struct kube_response {
    long status;                    /* HTTP status; 0 when no answer came */
    struct strbuf body;
};

/* One request: method, path (from /api...), an optional JSON body sent
 * with content_type. Fails only when no HTTP answer came (e names the
 * server and curl's reason); any status is the caller's to judge. stop,
 * when set by another thread, ends the request early. */
int kube_request(const struct kube_creds *c, const char *method, const char *path,
                 const char *content_type, const char *body, struct kube_response *r,
                 atomic_bool *stop, struct err *e);

void kube_response_free(struct kube_response *r);

/* Takes one line of a stream; -1 ends the stream. */
typedef int (*kube_line_fn)(void *ctx, const char *line, size_t len);

/* A GET whose answer is read line by line as it comes (a watch), with no
 * time limit: it ends when the server ends it, or when stop is set (within
 * about a second). *status gets the HTTP status. */
int kube_stream(const struct kube_creds *c, const char *path, kube_line_fn on_line, void *ctx,
                atomic_bool *stop, long *status, struct err *e);

/* The namespace gpulet runs in: $POD_NAMESPACE, else the service
 * account's, else "default". */
void kube_namespace(char *out, size_t len);

/* --- watching one object (watch.c) ----------------------------------------------- */

/* The object as it is now, as JSON text, or NULL when there is none (not
 * created yet, or deleted). Called on the watch's thread, at the first
 * answer and on every change (and again after a relist). */
typedef void (*kube_object_fn)(void *ctx, const char *json, size_t len);
/* Why the object cannot be read now (the watch retries with backoff);
 * called on the watch's thread, once per distinct failure. */
typedef void (*kube_failure_fn)(void *ctx, const char *msg);

struct kube_watch_spec {
    const char *collection;         /* /api/v1/nodes, /api/v1/namespaces/NS/configmaps */
    const char *name;
    kube_object_fn on_object;
    kube_failure_fn on_failure;
    void *ctx;
};

struct kube_watch;

/* Lists the one object (fieldSelector metadata.name) and then watches it,
 * on a thread of its own, until stopped: a relist after the watch expires,
 * backoff from 1 to 30 s while the API cannot be reached. c must outlive
 * the watch. */
int kube_watch_start(struct kube_watch **out, const struct kube_creds *c,
                     const struct kube_watch_spec *spec, struct err *e);

/* Ends the watch and waits for its thread (at most about a second). */
void kube_watch_stop(struct kube_watch *w);

/* Decodes base64 (the *-data fields); false on a bad character. */
bool kube_base64_decode(const char *in, size_t len, struct strbuf *out);

#endif
