/* The Kubernetes API server's client: credentials from a kubeconfig or the
 * pod's service account; libcurl, loaded with dlopen (libcurl.so.4); the
 * agent's one client on its loop, watches of one object and the one way
 * to keep an object in step; and a blocking request for the commands. */
#ifndef GPULET_KUBE_H
#define GPULET_KUBE_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include <uv.h>

#include "util/err.h"
#include "util/log.h"
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
    char token_file[KUBE_PATH_MAX]; /* tokens rotate: read again (below, or per request) */
    struct strbuf token;            /* a fixed token from the kubeconfig */
    struct strbuf file_token;       /* token_file's content, where a client keeps it: read
                                     * at its start, then every minute on the worker pool */
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

/* One blocking request (request.c), for the commands that are not the
 * agent: method, path (from /api...), an optional JSON body sent with
 * content_type. Fails only when no HTTP answer came (e names the server
 * and curl's reason); any status is the caller's to judge. */
int kube_request(const struct kube_creds *c, const char *method, const char *path,
                 const char *content_type, const char *body, struct kube_response *r,
                 struct err *e);

void kube_response_free(struct kube_response *r);

/* The namespace gpulet runs in: $POD_NAMESPACE, else the service
 * account's, else "default". */
void kube_namespace(char *out, size_t len);

/* Decodes base64 (the *-data fields); false on a bad character. */
bool kube_base64_decode(const char *in, size_t len, struct strbuf *out);

/* --- the agent's client, on its loop (client.c) ------------------------------------ */

/* The one retry of API work after a failure (util/backoff.c's, jittered):
 * watches, kube_sync's writes, Events, DRA's version search. */
#define KUBE_RETRY_MIN_MS 250
#define KUBE_RETRY_MAX_MS 30000

/* A failing request's state (retry.c), its user's: zeroed, it works. */
struct kube_retry {
    unsigned backoff_ms;
    bool failing;
    char last[1200];                /* the failure last logged */
};
/* A failure of what: logged at level as "<what>: <msg>; trying again with
 * backoff" once until msg changes. */
void kube_retry_failed(struct kube_retry *r, enum log_level level, const char *what,
                       const char *msg);
/* The wait before the next try, longer each time until a success. */
unsigned kube_retry_wait(struct kube_retry *r);
/* A success: "<what>: <again>" once after failures; the backoff starts over. */
void kube_retry_ok(struct kube_retry *r, const char *what, const char *again);

/* One per agent: every request and watch of the agent goes through it, on
 * one connection (HTTP/2; HTTP/1.1 keep-alive where the server has no
 * HTTP/2). Touched on the loop only. */
struct kube_client;
struct kube_call;

/* An answer. */
struct kube_answer {
    long status;                    /* the HTTP status; 0: no answer came */
    const char *body;               /* NUL-terminated; "" for a stream */
    size_t len;
    const char *error;              /* why no answer came ("cancelled" for a cancel); "" */
};

/* Called once per call, on the loop, with the answer; the call is freed
 * after it returns. */
typedef void (*kube_done_fn)(void *ctx, const struct kube_answer *a);
/* Takes one line of a stream; -1 ends the stream (done follows). */
typedef int (*kube_line_fn)(void *ctx, const char *line, size_t len);

struct kube_call_spec {
    const char *method, *path;      /* path from /api... */
    const char *content_type, *body; /* a JSON body (copied), or NULL */
    unsigned timeout_ms;            /* the deadline; 0: 15 s (none for a stream) */
    kube_line_fn on_line;           /* set: a stream (a watch), read line by line */
    kube_done_fn done;
    void *ctx;
    const void *owner;              /* for kube_client_cancel */
};

/* Counted since start, for status and tests. */
struct kube_client_stats {
    unsigned long long requests;    /* calls made */
    unsigned long long connections; /* TCP (and TLS) connections opened for them */
    unsigned long long failures;    /* calls that got no answer */
};

/* Loads the credentials (kubeconfig, or in-cluster with kubeconfig NULL or
 * empty) and libcurl. */
int kube_client_start(struct kube_client **out, uv_loop_t *loop, const char *kubeconfig,
                      struct err *e);
const struct kube_creds *kube_client_creds(const struct kube_client *kc);
/* The one line an operator needs for an answer that is not 2xx (or no
 * answer): what was asked, the status and what it means (401: the
 * credentials; 403: what the service account needs), or the server's
 * message. */
void kube_explain(const char *what, const char *needs, const struct kube_answer *a, char *out,
                  size_t len);
/* Whether an answer's text (its Status message, or the whole body) is an
 * admission policy's refusal (deploy/confine/), not RBAC's. */
bool kube_policy_refused(const char *text);
uv_loop_t *kube_client_loop(const struct kube_client *kc);
struct kube_client_stats kube_client_stats(const struct kube_client *kc);

/* The client's requests since start by method, resource and code, as
 * client-go's rest_client metrics count them, with their latency (a
 * watch's stream is counted, not timed). Loop thread; the rows are the
 * client's. */
#define KUBE_LATENCY_BUCKETS 10
extern const double kube_latency_bounds[KUBE_LATENCY_BUCKETS]; /* seconds, ascending */
struct kube_request_row {
    char method[8];                 /* GET, POST, PATCH, PUT, DELETE */
    char resource[64];              /* nodes, nodes/status, events, resourceslices... */
    long code;                      /* HTTP status; 0: no answer */
    unsigned long long count;
    unsigned long long timed;       /* of them, not streams: in the latency below */
    double seconds;                 /* their latencies' sum */
    unsigned long long bucket[KUBE_LATENCY_BUCKETS]; /* timed ones up to each bound (not cumulative) */
};
const struct kube_request_row *kube_client_requests(const struct kube_client *kc, unsigned *n);

/* The resource a path names (its subresource after a slash), as the rows
 * above say it: /api/v1/nodes/n/status -> nodes/status; a group's own
 * path (what it serves) -> discovery. */
void kube_path_resource(const char *path, char *out, size_t len);

/* Sends a request; its done comes later, on the loop, also for a request
 * that could not be sent. The call belongs to the client: the pointer is
 * only for kube_call_cancel, until done. */
struct kube_call *kube_call(struct kube_client *kc, const struct kube_call_spec *s);

/* Ends a call now: done is called at once with error "cancelled" (or, from
 * inside a callback of the call's own, as soon as it returns). */
void kube_call_cancel(struct kube_call *c);
/* Cancels every call of owner. */
void kube_client_cancel(struct kube_client *kc, const void *owner);

/* Frees the client once the calls in flight have ended (a slice deleted
 * at stop still goes out). kc may be NULL. */
void kube_client_close(struct kube_client *kc);

/* --- one object, watched (watch.c) ------------------------------------------------- */

/* client-go's list-and-watch for one object: a list with a field selector
 * on its name, then a watch from its resourceVersion, renewed when the
 * server ends it and listed again on 410 Gone; backoff with jitter while
 * the API server cannot be read, one log line per outage and one when it
 * answers again. The object is kept, and the listeners hear of each
 * change of it, on the loop. */
struct kube_watch;

struct kube_watch_spec {
    const char *collection;         /* /api/v1/nodes, /api/v1/namespaces/NS/configmaps */
    const char *name;
    const char *what;               /* "Node n1", for the log */
};

/* A listener: the object changed (or the first list answered). */
typedef void (*kube_object_fn)(void *ctx, struct kube_watch *w);

int kube_watch_start(struct kube_watch **out, struct kube_client *kc,
                     const struct kube_watch_spec *spec, struct err *e);
/* At most KUBE_WATCH_LISTENERS per watch. */
#define KUBE_WATCH_LISTENERS 8
void kube_watch_listen(struct kube_watch *w, kube_object_fn fn, void *ctx);
void kube_watch_unlisten(struct kube_watch *w, kube_object_fn fn, void *ctx);
/* Whether the first list has answered: before it, the object is unknown. */
bool kube_watch_known(const struct kube_watch *w);
/* The object, parsed once for all its readers (who must not change it);
 * NULL while there is none (or before the list). */
const json_t *kube_watch_object(const struct kube_watch *w);
/* The answer of a write to the object (parsed; the watch takes its own
 * reference): it is the object now where it is newer than what the watch
 * brought (its resourceVersion), so that the next write is built on it
 * before the watch's event comes. */
void kube_watch_offer(struct kube_watch *w, json_t *obj);
/* Ends the watch; freed once its request has ended. w may be NULL. */
void kube_watch_stop(struct kube_watch *w);

/* One line of a watch's stream, {"type": ..., "object": {...}}: what it
 * is, and its object (*obj, the caller's to json_decref; NULL for a line
 * that is no event). */
enum kube_event { KUBE_EVENT_BAD, KUBE_EVENT_SET, KUBE_EVENT_DELETED, KUBE_EVENT_BOOKMARK,
                  KUBE_EVENT_ERROR };
enum kube_event kube_event_parse(const char *line, size_t len, json_t **obj);

/* --- keeping one object in step (sync.c) ------------------------------------------- */

/* One write toward the wanted state. */
struct kube_write {
    const char *method;             /* NULL: nothing to write */
    char path[KUBE_PATH_MAX];
    const char *content_type;
    struct strbuf body;
};

struct kube_sync_spec {
    const char *what;               /* "labels on Node n1", for the log */
    const char *rbac;               /* what a 403 lacks: "patch on nodes" */
    struct kube_watch *watch;       /* the object as the server holds it */
    /* The next write that takes the object (the watch's; NULL: there is
     * none) toward what is wanted; w->method NULL when nothing differs. -1
     * with e: it cannot be done now (logged, tried again with backoff). */
    int (*next)(void *ctx, const json_t *obj, struct kube_write *w, struct err *e);
    /* A write the server took, with the object its answer holds (parsed
     * once, the watch's too; NULL: none). */
    void (*took)(void *ctx, const json_t *now);
    void *ctx;
};

/* The one way gpulet keeps an object in step with what it wants: writes
 * only what differs from what the watch says the server holds; bursts of
 * changes fold into one write; one backoff with jitter; one error line
 * per outage and one when it recovers; a change by another (the watch's
 * news) is repaired; a write refused for a stale resourceVersion (409)
 * waits for the watch's newer object. */
struct kube_sync;
int kube_sync_start(struct kube_sync **out, struct kube_client *kc,
                    const struct kube_sync_spec *spec, struct err *e);
/* What is wanted changed: a write follows soon, folded with others. */
void kube_sync_poke(struct kube_sync *s);
/* Whether the server holds what was last wanted (nothing to write, no
 * failure since). */
bool kube_sync_settled(const struct kube_sync *s);
/* Ends a write in flight; freed once libuv is done. s may be NULL. */
void kube_sync_stop(struct kube_sync *s);

#endif
