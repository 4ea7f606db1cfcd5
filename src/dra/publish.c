/* The node's ResourceSlice on the API server: built on the loop from the
 * agent's records, sent by server-side apply (one request creates or
 * replaces it) on libuv's worker pool, one round at a time; a change
 * during a round makes one more, and a change that leaves the slice as the
 * server holds it makes none (a new pool generation makes the scheduler
 * drop and read the pool again). Failures retry with backoff. The first
 * round asks which version of resource.k8s.io the server speaks and reads
 * the Node's UID (the slice's owner); the last, at stop, deletes the
 * slice, also off the loop. The slice is watched once it is applied, so
 * that the watch's first answer comes after the slice exists: deleted by
 * another, it is applied again. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/backoff.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define DRA_BACKOFF_MIN_MS 500
#define DRA_BACKOFF_MAX_MS 30000

/* What a round does. */
enum dra_round { DRA_ROUND_UID, DRA_ROUND_APPLY, DRA_ROUND_DELETE };

struct dra_publish_job {
    uv_work_t work;
    struct dra *d;
    enum dra_round kind;
    struct strbuf body;               /* the slice, for DRA_ROUND_APPLY */
    enum dra_api api;                 /* the version to speak; a DRA_ROUND_UID job finds it */
    char node_uid[64];                /* written by a DRA_ROUND_UID job */
    unsigned devices;
    unsigned deletions;               /* d->deletions when the round began */
    char error[1024];
};

/* The API's version, and the Node's UID, which the slice's owner
 * reference needs. */
static void dra_node_uid(struct dra_publish_job *j)
{
    if (!j->api && !(j->api = dra_api_discover(j->d, j->error, sizeof j->error)))
        return;
    char path[512];
    snprintf(path, sizeof path, "/api/v1/nodes/%s", j->d->node);
    struct kube_response r = {0};
    if (dra_get(j->d, path, &r, j->error, sizeof j->error) == 0) {
        json_t *node = json_loadb(r.body.data ? r.body.data : "", r.body.len, 0, NULL);
        const char *uid = json_string_value(json_object_get(json_object_get(node, "metadata"), "uid"));
        if (uid && strlen(uid) < sizeof j->node_uid)
            memcpy(j->node_uid, uid, strlen(uid) + 1);
        else
            snprintf(j->error, sizeof j->error, "GET %.400s: no metadata.uid", path);
        json_decref(node);
    }
    kube_response_free(&r);
}

/* Applies the slice, or deletes it (a missing slice is deleted already). */
static void dra_slice_request(struct dra_publish_job *j)
{
    char name[320], path[512];
    dra_slice_name(j->d->node, name, sizeof name);
    bool apply = j->kind == DRA_ROUND_APPLY;
    snprintf(path, sizeof path, "/apis/" DRA_GROUP "/%s/resourceslices/%s%s", dra_api_name(j->api),
             name, apply ? "?fieldManager=gpulet&force=true" : "");
    struct kube_response r = {0};
    struct err e;
    if (kube_request(&j->d->creds, apply ? "PATCH" : "DELETE", path,
                     apply ? "application/apply-patch+yaml" : NULL, apply ? j->body.data : NULL, &r,
                     NULL, &e) < 0)
        snprintf(j->error, sizeof j->error, "%s", e.msg);
    else if (r.status != 200 && r.status != 201 && !(!apply && r.status == 404))
        snprintf(j->error, sizeof j->error, "%s ResourceSlice %.300s: HTTP %ld: %.300s",
                 apply ? "apply" : "delete", name, r.status, r.body.data ? r.body.data : "");
    kube_response_free(&r);
}

static void dra_round_work(uv_work_t *w)
{
    struct dra_publish_job *j = w->data;
    if (j->kind == DRA_ROUND_UID)
        dra_node_uid(j);
    else
        dra_slice_request(j);
}

static void dra_retry(uv_timer_t *t)
{
    dra_publish(t->data);
}

static void dra_round_start(struct dra *d, enum dra_round kind);

/* A failed round: the slice is due again after a backoff. */
static void dra_round_failed(struct dra *d, const char *error)
{
    unsigned wait = backoff_next(&d->backoff_ms, DRA_BACKOFF_MIN_MS, DRA_BACKOFF_MAX_MS);
    log_warn("DRA: %s; again in %u ms", error, wait);
    d->dirty = true;
    uv_timer_start(&d->retry, dra_retry, wait, 0);
}

static void dra_round_done(uv_work_t *w, int status)
{
    (void)status;
    struct dra_publish_job *j = w->data;
    struct dra *d = j->d;
    d->jobs--;
    d->publishing = false;
    if (j->api)
        d->api = j->api;
    if (j->node_uid[0])
        memcpy(d->node_uid, j->node_uid, sizeof d->node_uid);
    if (j->kind == DRA_ROUND_DELETE)
        log_info("DRA: ResourceSlice %s%s%s", j->error[0] ? "not deleted: " : "deleted",
                 j->error, j->error[0] ? " (the kubelet removes it later)" : "");
    else if (j->error[0] && !d->stopping)
        dra_round_failed(d, j->error);
    else if (j->kind == DRA_ROUND_APPLY && !j->error[0])
        log_info("DRA: ResourceSlice published: %u device(s), pool generation %llu", j->devices,
                 d->generation);
    if (!j->error[0] && j->kind == DRA_ROUND_APPLY) {
        d->backoff_ms = 0;
        /* A deletion seen meanwhile may have come after this apply: the
         * next round applies again. */
        d->applied = j->deletions == d->deletions;
        strbuf_free(&d->applied_body);
        d->applied_body = j->body; /* d owns it now */
        j->body = (struct strbuf){0};
        dra_watch_start(d);
    }
    enum dra_round kind = j->kind;
    strbuf_free(&j->body);
    free(j);
    if (d->stopping && kind != DRA_ROUND_DELETE)
        dra_round_start(d, DRA_ROUND_DELETE); /* the stop waited for this round */
    else if (!d->stopping && d->dirty && !uv_is_active((uv_handle_t *)&d->retry))
        dra_publish(d);
    dra_maybe_free(d);
}

static void dra_round_start(struct dra *d, enum dra_round kind)
{
    if (kind == DRA_ROUND_DELETE && !d->node_uid[0])
        return; /* nothing was ever published */
    struct dra_publish_job *j = xcalloc(1, sizeof *j);
    j->d = d;
    j->kind = kind;
    j->api = d->api;
    j->deletions = d->deletions;
    j->work.data = j;
    d->publishing = true;
    d->jobs++;
    if (kind == DRA_ROUND_APPLY) {
        d->generation++;
        struct dra_slice_in in = {d->cfg, d->inv, d->devs, d->node, d->node_uid, d->generation,
                                  d->api, d->pcie_roots};
        dra_slice_json(&in, &j->body);
        j->devices = dra_count(d->cfg, d->inv, d->devs);
    }
    uv_queue_work(d->loop, &j->work, dra_round_work, dra_round_done);
}

/* Whether the slice, built now at the generation last applied, is the one
 * the server holds. */
static bool dra_slice_unchanged(const struct dra *d)
{
    if (!d->applied)
        return false;
    struct strbuf now = {0};
    struct dra_slice_in in = {d->cfg, d->inv, d->devs, d->node, d->node_uid, d->generation,
                              d->api, d->pcie_roots};
    dra_slice_json(&in, &now);
    bool same = now.len == d->applied_body.len && !memcmp(now.data, d->applied_body.data, now.len);
    strbuf_free(&now);
    return same;
}

void dra_publish(struct dra *d)
{
    if (d->stopping)
        return;
    d->dirty = true;
    if (d->publishing)
        return; /* one more round once this one ends */
    /* The first round reads the Node's UID; the slice itself comes next. */
    if (d->node_uid[0]) {
        d->dirty = false;
        if (dra_slice_unchanged(d))
            return;
    }
    dra_round_start(d, d->node_uid[0] ? DRA_ROUND_APPLY : DRA_ROUND_UID);
}

/* On the watch's thread: the slice as it is now. */
static void dra_on_slice(void *ctx, const char *json, size_t len)
{
    (void)len;
    struct dra *d = ctx;
    if (json)
        return;
    atomic_store(&d->slice_gone, true);
    uv_async_send(&d->gone);
}

static void dra_on_watch_failure(void *ctx, const char *msg)
{
    (void)ctx;
    log_warn("DRA: cannot watch the ResourceSlice: %s", msg);
}

void dra_on_gone(uv_async_t *h)
{
    struct dra *d = h->data;
    /* The watch starts once the slice was applied: every absence it
     * reports is a deletion. */
    if (!atomic_exchange(&d->slice_gone, false) || d->stopping)
        return;
    log_warn("DRA: the ResourceSlice was deleted (the kubelet does so when a driver's socket "
             "goes); publishing it again");
    d->applied = false; /* the server holds none */
    d->deletions++;
    dra_publish(d);
}

void dra_watch_start(struct dra *d)
{
    if (d->watch || d->stopping)
        return;
    char name[320], collection[128];
    struct err e;
    dra_slice_name(d->node, name, sizeof name);
    snprintf(collection, sizeof collection, "/apis/" DRA_GROUP "/%s/resourceslices",
             dra_api_name(d->api));
    struct kube_watch_spec spec = {.collection = collection, .name = name, .on_object = dra_on_slice,
                                   .on_failure = dra_on_watch_failure, .ctx = d};
    if (kube_watch_start(&d->watch, &d->creds, &spec, &e) < 0)
        log_error("DRA: cannot watch the ResourceSlice: %s; one deleted by another comes back "
                  "only with the next change", e.msg);
}

/* The watch's thread may be in a request for up to a second: it is joined
 * on the worker pool, and the handle it wakes the loop with closed after. */
struct dra_unwatch {
    uv_work_t work;
    struct dra *d;
    struct kube_watch *watch;
};

static void dra_unwatch_work(uv_work_t *w)
{
    struct dra_unwatch *u = w->data;
    kube_watch_stop(u->watch);
}

static void dra_unwatch_done(uv_work_t *w, int status)
{
    (void)status;
    struct dra_unwatch *u = w->data;
    struct dra *d = u->d;
    free(u);
    d->jobs--;
    uv_close((uv_handle_t *)&d->gone, dra_closed);
}

void dra_unpublish(struct dra *d)
{
    struct dra_unwatch *u = xcalloc(1, sizeof *u);
    u->d = d;
    u->watch = d->watch; /* our own delete is no news */
    u->work.data = u;
    d->watch = NULL;
    d->jobs++;
    uv_queue_work(d->loop, &u->work, dra_unwatch_work, dra_unwatch_done);
    /* A round in flight deletes when it ends (dra_round_done). */
    if (!d->publishing)
        dra_round_start(d, DRA_ROUND_DELETE);
}
