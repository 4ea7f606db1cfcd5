/* Keeping one object in step with what gpulet wants, the one way (labels,
 * the fault report and the DRA slice use it):
 *
 * - The server's object comes from a watch (kube_watch): nothing is read
 *   to decide a write, and a write is made only where the object differs
 *   from what is wanted (the owner's next() says what differs).
 * - Changes fold: a poke arms a short timer, and the changes that come
 *   while it runs or while a write is in flight make one write after.
 * - A write's answer is the object now (kube_watch_offer), so a second
 *   write (the condition, then the taint) is built on it at once.
 * - A change by another is news from the watch: the object is compared
 *   again and repaired.
 * - Failures back off with jitter (the one retry, retry.c); one error
 *   line per outage, one line when it is over. A 409 (the object changed
 *   since it was read) waits for the watch's newer object. */
#include "kube/kube.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/xmalloc.h"

#define SYNC_FOLD_MS 20              /* changes within this make one write */
#define SYNC_WRITES_MAX 8            /* writes in a row with no news: the server keeps none */

struct kube_sync {
    struct kube_client *kc;
    struct kube_sync_spec spec;
    char what[300], rbac[200];
    struct kube_call *call;          /* the write in flight */
    uv_timer_t timer;                /* the fold, or the backoff */
    struct kube_retry retry;
    bool due;                        /* something may differ: compare again */
    unsigned writes;                 /* in a row, since the last poke or news */
    char request[KUBE_PATH_MAX + 16]; /* the write in flight: "PATCH /api/v1/nodes/n1" */
    bool stopping, closed;
};

static void sync_run(struct kube_sync *s);

static void sync_maybe_free(struct kube_sync *s)
{
    if (!s->stopping || s->call || !s->closed)
        return;
    free(s);
}

static void sync_closed(uv_handle_t *h)
{
    struct kube_sync *s = h->data;
    s->closed = true;
    sync_maybe_free(s);
}

static void sync_on_timer(uv_timer_t *t)
{
    sync_run(t->data);
}

static void sync_failed(struct kube_sync *s, const char *msg)
{
    char text[sizeof s->retry.last];
    snprintf(text, sizeof text, "not written: %.1100s", msg);
    kube_retry_failed(&s->retry, LOG_ERROR, s->what, text);
    s->due = true;
    uv_timer_start(&s->timer, sync_on_timer, kube_retry_wait(&s->retry), 0);
}

static void sync_settled(struct kube_sync *s)
{
    kube_retry_ok(&s->retry, s->what, "up to date again");
}

static void sync_wrote(void *ctx, const struct kube_answer *a)
{
    struct kube_sync *s = ctx;
    s->call = NULL;
    if (s->stopping) {
        sync_maybe_free(s);
        return;
    }
    if (a->status >= 200 && a->status < 300) {
        s->due = true;
        json_t *now = a->len ? json_loadb(a->body, a->len, 0, NULL) : NULL;
        kube_watch_offer(s->spec.watch, now); /* may poke: due already */
        if (s->spec.took)
            s->spec.took(s->spec.ctx, now);
        json_decref(now);
        sync_run(s); /* the next write, if any, at once */
        return;
    }
    if (a->status == 409) {
        /* The object changed since it was read: the watch brings the new
         * one (a poke), or the backoff tries again. */
        s->due = true;
        uv_timer_start(&s->timer, sync_on_timer,
                       kube_retry_wait(&s->retry), 0);
        return;
    }
    char msg[900];
    if (!a->status)
        snprintf(msg, sizeof msg, "%s", a->error);
    else
        kube_explain(s->request, s->rbac, a, msg, sizeof msg);
    sync_failed(s, msg);
}

static void sync_run(struct kube_sync *s)
{
    if (s->stopping || s->call || !s->due || !kube_watch_known(s->spec.watch))
        return; /* the watch's first answer pokes */
    uv_timer_stop(&s->timer);
    s->due = false;
    struct kube_write w = {0};
    struct err e = {.msg = ""};
    if (s->spec.next(s->spec.ctx, kube_watch_object(s->spec.watch), &w, &e) < 0) {
        strbuf_free(&w.body);
        sync_failed(s, e.msg);
        return;
    }
    if (!w.method) {
        strbuf_free(&w.body);
        s->writes = 0;
        sync_settled(s);
        return;
    }
    if (++s->writes > SYNC_WRITES_MAX) {
        strbuf_free(&w.body);
        s->writes = 0;
        sync_failed(s, "the API server does not keep what is written (the same write again)");
        return;
    }
    snprintf(s->request, sizeof s->request, "%s %s", w.method, w.path);
    log_debug("%s: %s", s->what, s->request);
    s->call = kube_call(s->kc, &(struct kube_call_spec){
        .method = w.method, .path = w.path, .content_type = w.content_type, .body = w.body.data,
        .done = sync_wrote, .ctx = s, .owner = s});
    strbuf_free(&w.body);
}

void kube_sync_poke(struct kube_sync *s)
{
    if (!s || s->stopping)
        return;
    s->due = true;
    s->writes = 0;
    /* While backing off, the retry takes the newest state. */
    if (!s->call && !uv_is_active((uv_handle_t *)&s->timer))
        uv_timer_start(&s->timer, sync_on_timer, SYNC_FOLD_MS, 0);
}

static void sync_on_news(void *ctx, struct kube_watch *w)
{
    (void)w;
    struct kube_sync *s = ctx;
    if (s->call)
        return; /* the write's answer makes it compare again */
    s->due = true;
    if (!uv_is_active((uv_handle_t *)&s->timer))
        uv_timer_start(&s->timer, sync_on_timer, SYNC_FOLD_MS, 0);
}

int kube_sync_start(struct kube_sync **out, struct kube_client *kc,
                    const struct kube_sync_spec *spec, struct err *e)
{
    (void)e;
    struct kube_sync *s = xcalloc(1, sizeof *s);
    s->kc = kc;
    s->spec = *spec;
    snprintf(s->what, sizeof s->what, "%s", spec->what);
    snprintf(s->rbac, sizeof s->rbac, "%s", spec->rbac ? spec->rbac : "the right to write it");
    s->spec.what = s->what;
    s->spec.rbac = s->rbac;
    uv_timer_init(kube_client_loop(kc), &s->timer);
    s->timer.data = s;
    kube_watch_listen(spec->watch, sync_on_news, s);
    *out = s;
    return 0;
}

bool kube_sync_settled(const struct kube_sync *s)
{
    return s && !s->due && !s->call && !s->retry.failing;
}

void kube_sync_stop(struct kube_sync *s)
{
    if (!s || s->stopping)
        return;
    s->stopping = true;
    kube_watch_unlisten(s->spec.watch, sync_on_news, s);
    uv_close((uv_handle_t *)&s->timer, sync_closed);
    kube_call_cancel(s->call);
}
