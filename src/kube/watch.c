/* Watching one object through the API server: a list with a field
 * selector on its name gives the object and a resourceVersion, then a
 * watch from there streams its changes, one JSON event a line. This is
 * client-go's list-and-watch, for one object: no polling, and the API
 * server's cost is one open stream per node. */
#include "kube/kube.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

#include "util/backoff.h"
#include "util/jsonx.h"
#include "util/xmalloc.h"

#define WATCH_BACKOFF_MIN_MS 1000
#define WATCH_BACKOFF_MAX_MS 30000
#define WATCH_TIMEOUT_S 240         /* the server ends each watch; a new one follows */

struct kube_watch {
    const struct kube_creds *creds;
    char collection[KUBE_PATH_MAX];
    char name[256];
    kube_object_fn on_object;
    kube_failure_fn on_failure;
    void *ctx;
    uv_thread_t thread;
    uv_mutex_t lock;
    uv_cond_t wake;                 /* stop, during a backoff */
    atomic_bool stop;
    char version[64];               /* resourceVersion to watch from */
    bool relist;                    /* the watch expired: list again now */
    char last_failure[512];
};

static void watch_failure(struct kube_watch *w, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reports a failure once until a different one, or a success, comes. */
static void watch_failure(struct kube_watch *w, const char *fmt, ...)
{
    char msg[sizeof w->last_failure];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!strcmp(msg, w->last_failure))
        return;
    snprintf(w->last_failure, sizeof w->last_failure, "%s", msg);
    w->on_failure(w->ctx, msg);
}

static void watch_status_failure(struct kube_watch *w, const char *verb, long status)
{
    const char *why = status == 401 ? ": the API server does not accept the credentials"
                      : status == 403 ? ": the service account may not do this (RBAC: get, list "
                                        "and watch on it)"
                                      : "";
    watch_failure(w, "%s %s?fieldSelector=metadata.name=%s: HTTP %ld%s", verb, w->collection,
                  w->name, status, why);
}

/* Hands on the object (or its absence) and notes its resourceVersion. */
static void watch_deliver(struct kube_watch *w, json_t *obj)
{
    const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"),
                                                       "resourceVersion"));
    if (rv)
        snprintf(w->version, sizeof w->version, "%s", rv);
    if (!obj) {
        w->on_object(w->ctx, NULL, 0);
        return;
    }
    struct strbuf text = {0};
    jsonx_dump(obj, JSON_COMPACT, &text);
    w->on_object(w->ctx, text.data, text.len);
    strbuf_free(&text);
}

static int watch_list(struct kube_watch *w)
{
    char path[1024];
    snprintf(path, sizeof path, "%s?fieldSelector=metadata.name%%3D%s", w->collection, w->name);
    struct kube_response r;
    struct err e;
    if (kube_request(w->creds, "GET", path, NULL, NULL, &r, &w->stop, &e) < 0) {
        watch_failure(w, "%s", e.msg);
        return -1;
    }
    int rc = -1;
    json_t *list = NULL;
    if (r.status != 200) {
        watch_status_failure(w, "list", r.status);
    } else if (!(list = json_loadb(r.body.data, r.body.len, 0, NULL)) ||
               !json_is_array(json_object_get(list, "items"))) {
        watch_failure(w, "list %s: the answer is not a list", w->collection);
    } else {
        w->last_failure[0] = '\0';
        json_t *items = json_object_get(list, "items");
        watch_deliver(w, json_array_size(items) ? json_array_get(items, 0) : NULL);
        const char *rv = json_string_value(json_object_get(json_object_get(list, "metadata"),
                                                           "resourceVersion"));
        snprintf(w->version, sizeof w->version, "%s", rv ? rv : "");
        rc = 0;
    }
    json_decref(list);
    kube_response_free(&r);
    return rc;
}

/* One watch event: {"type": ..., "object": {...}}. */
static int watch_event(void *ctx, const char *line, size_t len)
{
    struct kube_watch *w = ctx;
    json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *obj = json_object_get(ev, "object");
    int rc = 0;
    if (!type || !json_is_object(obj)) {
        watch_failure(w, "watch %s: an event that is not one", w->collection);
        rc = -1;
    } else if (!strcmp(type, "ADDED") || !strcmp(type, "MODIFIED")) {
        watch_deliver(w, obj);
    } else if (!strcmp(type, "DELETED")) {
        watch_deliver(w, NULL);
    } else if (!strcmp(type, "BOOKMARK")) {
        const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"),
                                                           "resourceVersion"));
        if (rv)
            snprintf(w->version, sizeof w->version, "%s", rv);
    } else {
        /* ERROR: mostly 410 Gone, the version is too old to watch from. */
        w->relist = true;
        rc = -1;
    }
    json_decref(ev);
    return rc;
}

/* 0 when the server ended the watch (watch again), -1 otherwise. */
static int watch_stream(struct kube_watch *w)
{
    char path[1024];
    snprintf(path, sizeof path,
             "%s?fieldSelector=metadata.name%%3D%s&watch=1&allowWatchBookmarks=true"
             "&resourceVersion=%s&timeoutSeconds=%d",
             w->collection, w->name, w->version, WATCH_TIMEOUT_S);
    long status;
    struct err e;
    w->relist = false;
    if (kube_stream(w->creds, path, watch_event, w, &w->stop, &status, &e) < 0) {
        if (!w->relist && !atomic_load(&w->stop))
            watch_failure(w, "%s", e.msg);
        return -1;
    }
    if (status != 200) {
        watch_status_failure(w, "watch", status);
        return -1;
    }
    return w->relist ? -1 : 0;
}

/* Waits ms, or less when stopped. */
static void watch_sleep(struct kube_watch *w, unsigned ms)
{
    uint64_t until = uv_hrtime() + (uint64_t)ms * 1000000, now;
    uv_mutex_lock(&w->lock);
    while (!atomic_load(&w->stop) && (now = uv_hrtime()) < until)
        uv_cond_timedwait(&w->wake, &w->lock, until - now);
    uv_mutex_unlock(&w->lock);
}

static void watch_main(void *arg)
{
    struct kube_watch *w = arg;
    unsigned backoff = 0;
    while (!atomic_load(&w->stop)) {
        if (watch_list(w) == 0) {
            backoff = 0;
            while (!atomic_load(&w->stop) && watch_stream(w) == 0)
                ;
            if (w->relist)
                continue;
        }
        if (atomic_load(&w->stop))
            break;
        watch_sleep(w, backoff_next(&backoff, WATCH_BACKOFF_MIN_MS, WATCH_BACKOFF_MAX_MS));
    }
}

int kube_watch_start(struct kube_watch **out, const struct kube_creds *c,
                     const struct kube_watch_spec *spec, struct err *e)
{
    *out = NULL;
    if (kube_client_init(e) < 0)
        return -1;
    struct kube_watch *w = xcalloc(1, sizeof *w);
    w->creds = c;
    snprintf(w->collection, sizeof w->collection, "%s", spec->collection);
    snprintf(w->name, sizeof w->name, "%s", spec->name);
    w->on_object = spec->on_object;
    w->on_failure = spec->on_failure;
    w->ctx = spec->ctx;
    uv_mutex_init(&w->lock);
    uv_cond_init(&w->wake);
    int rc = uv_thread_create(&w->thread, watch_main, w);
    if (rc) {
        uv_cond_destroy(&w->wake);
        uv_mutex_destroy(&w->lock);
        free(w);
        return err_set(e, "watch %s/%s: cannot start a thread: %s", spec->collection, spec->name,
                       uv_strerror(rc));
    }
    *out = w;
    return 0;
}

void kube_watch_stop(struct kube_watch *w)
{
    if (!w)
        return;
    uv_mutex_lock(&w->lock);
    atomic_store(&w->stop, true);
    uv_cond_signal(&w->wake);
    uv_mutex_unlock(&w->lock);
    uv_thread_join(&w->thread);
    uv_cond_destroy(&w->wake);
    uv_mutex_destroy(&w->lock);
    free(w);
}
