/* Watching one object through the agent's client: a list with a field
 * selector on its name gives the object and a resourceVersion, then a
 * watch from there streams its changes, one JSON event a line, on the
 * client's one connection. The watch asks no timeout: the API server ends
 * it after 30 to 60 minutes (--min-request-timeout), and a new one
 * resumes from the last version, so that a node at rest costs the API
 * server one request every half hour or more. */
#include "kube/kube.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/log.h"
#include "util/xmalloc.h"

#define WATCH_SHORT_NS 1000000000ull  /* a watch that ends sooner, empty, is a failure */

struct kube_watch {
    struct kube_client *kc;
    char collection[KUBE_PATH_MAX];
    char name[256];
    char what[310];              /* "watch <spec's what>", for the log */
    struct { kube_object_fn fn; void *ctx; } listeners[KUBE_WATCH_LISTENERS];
    unsigned nlisteners;
    struct kube_call *call;          /* the list or the watch in flight */
    uv_timer_t retry;
    struct kube_retry failure;
    char version[64];                /* resourceVersion to watch from */
    bool known, relist, news;        /* news: the stream brought something */
    bool relisted;                   /* the last list came of a 410: one more backs off */
    uint64_t stream_begun;
    json_t *object;                  /* parsed once, read by all; NULL: none */
    unsigned long long object_rv;
    bool stopping, closed;
};

static void watch_maybe_free(struct kube_watch *w)
{
    if (!w->stopping || w->call || !w->closed)
        return;
    json_decref(w->object);
    free(w);
}

static void watch_closed(uv_handle_t *h)
{
    struct kube_watch *w = h->data;
    w->closed = true;
    watch_maybe_free(w);
}

static void watch_failed(struct kube_watch *w, const char *msg)
{
    kube_retry_failed(&w->failure, LOG_WARN, w->what, msg);
}

static void watch_answering(struct kube_watch *w)
{
    kube_retry_ok(&w->failure, w->what, "the API server answers again");
}

static void watch_status_failure(struct kube_watch *w, const char *verb,
                                 const struct kube_answer *a)
{
    char what[900], needs[200], msg[1200];
    const char *resource = strrchr(w->collection, '/');
    snprintf(what, sizeof what, "%s %s?fieldSelector=metadata.name=%s", verb, w->collection, w->name);
    snprintf(needs, sizeof needs, "get, list and watch on %s", resource ? resource + 1 : "it");
    kube_explain(what, needs, a, msg, sizeof msg);
    watch_failed(w, msg);
}

static unsigned long long watch_rv(const json_t *obj)
{
    const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"),
                                                       "resourceVersion"));
    return rv ? strtoull(rv, NULL, 10) : 0;
}

static void watch_tell(struct kube_watch *w)
{
    /* By index, and again from the start where one left: a listener may
     * go (unlisten) while it hears. */
    for (unsigned i = 0; i < w->nlisteners && !w->stopping; i++)
        w->listeners[i].fn(w->listeners[i].ctx, w);
}

/* The object is now obj (NULL: none; the watch takes a reference); the
 * listeners hear where it changed. */
static void watch_set(struct kube_watch *w, json_t *obj)
{
    bool first = !w->known, same = obj && w->object ? json_equal(obj, w->object) : obj == w->object;
    w->known = true;
    if (same && !first)
        return;
    json_decref(w->object);
    w->object = json_incref(obj);
    w->object_rv = obj ? watch_rv(obj) : 0;
    watch_tell(w);
}

static void watch_list(struct kube_watch *w);
static void watch_stream(struct kube_watch *w);

static void watch_again(uv_timer_t *t)
{
    watch_list(t->data);
}

static void watch_backoff(struct kube_watch *w)
{
    uv_timer_start(&w->retry, watch_again, kube_retry_wait(&w->failure), 0);
}

static void watch_listed(void *ctx, const struct kube_answer *a)
{
    struct kube_watch *w = ctx;
    w->call = NULL;
    if (w->stopping) {
        watch_maybe_free(w);
        return;
    }
    json_t *list = a->status == 200 ? json_loadb(a->body, a->len, 0, NULL) : NULL;
    json_t *items = json_object_get(list, "items");
    if (!a->status)
        watch_failed(w, a->error);
    else if (a->status != 200)
        watch_status_failure(w, "list", a);
    else if (!json_is_array(items))
        watch_failed(w, "the list's answer is not a list");
    if (!json_is_array(items)) {
        json_decref(list);
        watch_backoff(w);
        return;
    }
    watch_answering(w);
    const char *rv = json_string_value(json_object_get(json_object_get(list, "metadata"),
                                                       "resourceVersion"));
    snprintf(w->version, sizeof w->version, "%s", rv ? rv : "");
    json_t *obj = json_array_size(items) ? json_array_get(items, 0) : NULL;
    watch_set(w, json_is_object(obj) ? obj : NULL);
    json_decref(list);
    if (!w->stopping)
        watch_stream(w);
}

static void watch_list(struct kube_watch *w)
{
    char path[1024];
    snprintf(path, sizeof path, "%s?fieldSelector=metadata.name%%3D%s", w->collection, w->name);
    w->relist = false;
    w->call = kube_call(w->kc, &(struct kube_call_spec){.method = "GET", .path = path,
                                                         .done = watch_listed, .ctx = w, .owner = w});
}

enum kube_event kube_event_parse(const char *line, size_t len, json_t **obj)
{
    static const struct { const char *type; enum kube_event kind; } kinds[] = {
        {"ADDED", KUBE_EVENT_SET},         {"MODIFIED", KUBE_EVENT_SET},
        {"DELETED", KUBE_EVENT_DELETED},   {"BOOKMARK", KUBE_EVENT_BOOKMARK},
        {"ERROR", KUBE_EVENT_ERROR},
    };
    *obj = NULL;
    json_t *ev = json_loadb(line, len, 0, NULL);
    const char *type = json_string_value(json_object_get(ev, "type"));
    json_t *o = json_object_get(ev, "object");
    enum kube_event kind = KUBE_EVENT_BAD;
    for (size_t i = 0; type && json_is_object(o) && i < sizeof kinds / sizeof *kinds; i++)
        if (!strcmp(type, kinds[i].type))
            kind = kinds[i].kind;
    if (kind != KUBE_EVENT_BAD)
        *obj = json_incref(o);
    json_decref(ev);
    return kind;
}

/* One line of the stream. */
static int watch_event(void *ctx, const char *line, size_t len)
{
    struct kube_watch *w = ctx;
    json_t *obj;
    enum kube_event kind = kube_event_parse(line, len, &obj);
    const char *rv = json_string_value(json_object_get(json_object_get(obj, "metadata"),
                                                       "resourceVersion"));
    int rc = 0;
    switch (kind) {
    case KUBE_EVENT_BAD:
        watch_failed(w, "an event that is not one: listing again");
        /* fall through */
    case KUBE_EVENT_ERROR: /* mostly 410 Gone: the version is too old to watch from */
        w->relist = true;
        rc = -1;
        break;
    case KUBE_EVENT_SET:
    case KUBE_EVENT_DELETED:
    case KUBE_EVENT_BOOKMARK:
        w->news = true;
        if (rv)
            snprintf(w->version, sizeof w->version, "%s", rv);
        /* An event older than a write's answer already taken is no news. */
        if (kind == KUBE_EVENT_DELETED)
            watch_set(w, NULL);
        else if (kind == KUBE_EVENT_SET && watch_rv(obj) >= w->object_rv)
            watch_set(w, obj);
        break;
    }
    json_decref(obj);
    return rc;
}

static void watch_ended(void *ctx, const struct kube_answer *a)
{
    struct kube_watch *w = ctx;
    w->call = NULL;
    if (w->stopping) {
        watch_maybe_free(w);
        return;
    }
    bool quick = uv_hrtime() - w->stream_begun < WATCH_SHORT_NS && !w->news;
    if (!quick)
        w->relisted = false;
    if (w->relist && !w->relisted) {
        w->relisted = true;
        watch_list(w); /* at once: the list says where to watch from */
    } else if (w->relist) {
        watch_failed(w, "the watch expires as soon as it starts (410 Gone after a list)");
        watch_backoff(w);
    } else if (a->status == 200 && !quick) {
        w->failure.backoff_ms = 0;
        watch_stream(w); /* the server ended it: a new one from the last version */
    } else {
        if (!a->status)
            watch_failed(w, a->error);
        else if (a->status != 200)
            watch_status_failure(w, "watch", a);
        watch_backoff(w);
    }
}

static void watch_stream(struct kube_watch *w)
{
    char path[1024];
    snprintf(path, sizeof path,
             "%s?fieldSelector=metadata.name%%3D%s&watch=1&allowWatchBookmarks=true"
             "&resourceVersion=%s",
             w->collection, w->name, w->version);
    w->news = false;
    w->stream_begun = uv_hrtime();
    w->call = kube_call(w->kc, &(struct kube_call_spec){.method = "GET", .path = path,
                                                         .on_line = watch_event,
                                                         .done = watch_ended, .ctx = w, .owner = w});
}

int kube_watch_start(struct kube_watch **out, struct kube_client *kc,
                     const struct kube_watch_spec *spec, struct err *e)
{
    (void)e;
    struct kube_watch *w = xcalloc(1, sizeof *w);
    w->kc = kc;
    snprintf(w->collection, sizeof w->collection, "%s", spec->collection);
    snprintf(w->name, sizeof w->name, "%s", spec->name);
    snprintf(w->what, sizeof w->what, "watch %s", spec->what);
    /* The loop of the client's: its first handle's. */
    uv_timer_init(kube_client_loop(kc), &w->retry);
    w->retry.data = w;
    watch_list(w);
    *out = w;
    return 0;
}

void kube_watch_listen(struct kube_watch *w, kube_object_fn fn, void *ctx)
{
    if (w->nlisteners == KUBE_WATCH_LISTENERS)
        abort(); /* a fixed number of readers, each known at build time */
    w->listeners[w->nlisteners].fn = fn;
    w->listeners[w->nlisteners++].ctx = ctx;
}

void kube_watch_unlisten(struct kube_watch *w, kube_object_fn fn, void *ctx)
{
    if (!w)
        return;
    for (unsigned i = 0; i < w->nlisteners; i++)
        if (w->listeners[i].fn == fn && w->listeners[i].ctx == ctx) {
            memmove(&w->listeners[i], &w->listeners[i + 1],
                    (w->nlisteners - i - 1) * sizeof *w->listeners);
            w->nlisteners--;
            return;
        }
}

bool kube_watch_known(const struct kube_watch *w)
{
    return w->known;
}

const json_t *kube_watch_object(const struct kube_watch *w)
{
    return w->object;
}

void kube_watch_offer(struct kube_watch *w, json_t *obj)
{
    if (json_is_object(obj) && w->known && watch_rv(obj) > w->object_rv)
        watch_set(w, obj);
}

void kube_watch_stop(struct kube_watch *w)
{
    if (!w || w->stopping)
        return;
    w->stopping = true;
    w->nlisteners = 0;
    uv_close((uv_handle_t *)&w->retry, watch_closed);
    kube_call_cancel(w->call);
}
