/* The node's ResourceSlice on the API server: built on the loop from the
 * agent's records, sent by server-side apply (one request creates or
 * replaces it) on libuv's worker pool, one round at a time; a change
 * during a round makes one more. Failures retry with backoff. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/log.h"
#include "util/xmalloc.h"

#define DRA_BACKOFF_MIN_MS 500
#define DRA_BACKOFF_MAX_MS 30000

struct dra_publish_job {
    uv_work_t work;
    struct dra *d;
    struct strbuf body;               /* the slice; empty until the Node's UID is known */
    char node_uid[64];                /* written by the job when it had to look */
    unsigned devices;
    char error[1024];
};

/* The Node's UID, which the slice's owner reference needs. */
static int dra_node_uid(struct dra_publish_job *j)
{
    char path[512];
    snprintf(path, sizeof path, "/api/v1/nodes/%s", j->d->node);
    struct kube_response r = {0};
    struct err e;
    int rc = -1;
    if (kube_request(&j->d->creds, "GET", path, NULL, NULL, &r, NULL, &e) < 0) {
        snprintf(j->error, sizeof j->error, "%s", e.msg);
    } else if (r.status != 200) {
        snprintf(j->error, sizeof j->error, "GET %.400s: HTTP %ld", path, r.status);
    } else {
        json_t *node = json_loadb(r.body.data ? r.body.data : "", r.body.len, 0, NULL);
        const char *uid = json_string_value(json_object_get(json_object_get(node, "metadata"), "uid"));
        if (uid && strlen(uid) < sizeof j->node_uid) {
            memcpy(j->node_uid, uid, strlen(uid) + 1);
            rc = 0;
        } else {
            snprintf(j->error, sizeof j->error, "GET %.400s: no metadata.uid", path);
        }
        json_decref(node);
    }
    kube_response_free(&r);
    return rc;
}

static void dra_publish_work(uv_work_t *w)
{
    struct dra_publish_job *j = w->data;
    if (!j->body.len)
        return; /* the UID round: dra_node_uid only */
    char name[320], path[512];
    dra_slice_name(j->d->node, name, sizeof name);
    snprintf(path, sizeof path,
             "/apis/resource.k8s.io/v1beta1/resourceslices/%s?fieldManager=gpulet&force=true", name);
    struct kube_response r = {0};
    struct err e;
    if (kube_request(&j->d->creds, "PATCH", path, "application/apply-patch+yaml", j->body.data, &r,
                     NULL, &e) < 0)
        snprintf(j->error, sizeof j->error, "%s", e.msg);
    else if (r.status != 200 && r.status != 201)
        snprintf(j->error, sizeof j->error, "apply ResourceSlice %.300s: HTTP %ld: %.300s", name,
                 r.status, r.body.data ? r.body.data : "");
    kube_response_free(&r);
}

static void dra_uid_work(uv_work_t *w)
{
    struct dra_publish_job *j = w->data;
    dra_node_uid(j);
}

static void dra_retry(uv_timer_t *t)
{
    dra_publish(t->data);
}

static void dra_publish_done(uv_work_t *w, int status)
{
    (void)status;
    struct dra_publish_job *j = w->data;
    struct dra *d = j->d;
    d->jobs--;
    d->publishing = false;
    if (j->node_uid[0])
        memcpy(d->node_uid, j->node_uid, sizeof d->node_uid);
    if (j->error[0]) {
        d->backoff_ms = d->backoff_ms ? d->backoff_ms * 2 : DRA_BACKOFF_MIN_MS;
        if (d->backoff_ms > DRA_BACKOFF_MAX_MS)
            d->backoff_ms = DRA_BACKOFF_MAX_MS;
        log_warn("DRA: %s; again in %u ms", j->error, d->backoff_ms);
        d->dirty = true;
        if (!d->stopping)
            uv_timer_start(&d->retry, dra_retry, d->backoff_ms, 0);
    } else if (j->body.len) {
        d->backoff_ms = 0;
        log_info("DRA: ResourceSlice published: %u device(s), pool generation %llu", j->devices,
                 d->generation);
    }
    if (d->stopping && j->body.len && !j->error[0])
        dra_unpublish(d); /* this round landed after the stop's delete */
    strbuf_free(&j->body);
    free(j);
    if (!d->stopping && (d->dirty || !d->node_uid[0]) && !uv_is_active((uv_handle_t *)&d->retry))
        dra_publish(d);
    dra_maybe_free(d);
}

void dra_publish(struct dra *d)
{
    if (d->stopping)
        return;
    if (d->publishing) {
        d->dirty = true; /* one more round once this one ends */
        return;
    }
    struct dra_publish_job *j = xcalloc(1, sizeof *j);
    j->d = d;
    j->work.data = j;
    d->publishing = true;
    d->dirty = false;
    d->jobs++;
    if (!d->node_uid[0]) {
        d->dirty = true; /* the slice itself comes next */
        uv_queue_work(d->loop, &j->work, dra_uid_work, dra_publish_done);
        return;
    }
    d->generation++;
    dra_slice_json(d->cfg, d->inv, d->devs, d->node, d->node_uid, d->generation, &j->body);
    j->devices = dra_count(d->cfg, d->inv, d->devs);
    uv_queue_work(d->loop, &j->work, dra_publish_work, dra_publish_done);
}

void dra_unpublish(struct dra *d)
{
    if (!d->node_uid[0])
        return;
    char name[320], path[512];
    dra_slice_name(d->node, name, sizeof name);
    snprintf(path, sizeof path, "/apis/resource.k8s.io/v1beta1/resourceslices/%s", name);
    struct kube_response r = {0};
    struct err e;
    if (kube_request(&d->creds, "DELETE", path, NULL, NULL, &r, NULL, &e) < 0)
        log_warn("DRA: ResourceSlice %s not deleted: %s (the kubelet removes it later)", name, e.msg);
    else if (r.status != 200 && r.status != 404)
        log_warn("DRA: ResourceSlice %s not deleted: HTTP %ld", name, r.status);
    else
        log_info("DRA: ResourceSlice %s deleted", name);
    kube_response_free(&r);
}
