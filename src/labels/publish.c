/* The label publisher: NFD's feature file, or the Node object through the
 * API server, written only on change, retried with backoff. */
#include "labels/publish.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube/kube.h"
#include "util/backoff.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define PUBLISH_BACKOFF_MIN_MS 500
#define PUBLISH_BACKOFF_MAX_MS 30000

/* One API round (GET, then PATCH if needed), run off the loop. */
struct publish_job {
    uv_work_t work;
    struct labels_publisher *p;
    struct label_set want;          /* the job's own copy */
    int rc;
    long status;                    /* the failing answer's HTTP status, 0 none */
    unsigned changes;
    struct err err;
};

struct labels_publisher {
    uv_loop_t *loop;
    int mode;                       /* CONFIG_LABELS_FILE or _API */
    char path[CONFIG_PATH_MAX];     /* the feature file */
    bool keep_file;
    char node[128];
    struct kube_creds creds;
    struct label_set want;          /* the latest labels */
    struct label_set sent;          /* what the Node or file holds, as far as we know */
    bool published;                 /* sent is valid */
    struct publish_job *job;        /* in flight, or NULL */
    bool again;                     /* want changed while a job ran */
    atomic_bool stop;
    uv_timer_t retry;
    unsigned backoff_ms;
    char last_error[768];           /* logged once until it changes */
    int handles;
    bool stopping;
};

/* --- the Node object --------------------------------------------------------------- */

static void publish_round(struct publish_job *j, const char *node_path)
{
    struct labels_publisher *p = j->p;
    struct kube_response r;
    if (kube_request(&p->creds, "GET", node_path, NULL, NULL, &r, &p->stop, &j->err) < 0) {
        j->rc = -1;
        return;
    }
    if (r.status != 200) {
        j->status = r.status;
        err_set(&j->err, "GET nodes/%s", p->node);
        kube_response_free(&r);
        j->rc = -1;
        return;
    }
    struct strbuf patch = {0};
    j->rc = labels_node_patch(r.body.data, r.body.len, &j->want, &patch, &j->changes, &j->err);
    kube_response_free(&r);
    if (j->rc == 0 && patch.len) {
        j->rc = kube_request(&p->creds, "PATCH", node_path, "application/merge-patch+json",
                             patch.data, &r, &p->stop, &j->err);
        if (j->rc == 0 && r.status != 200) {
            j->status = r.status;
            err_set(&j->err, "PATCH nodes/%s", p->node);
            j->rc = -1;
        }
        kube_response_free(&r);
    }
    strbuf_free(&patch);
}

static void publish_work(uv_work_t *w)
{
    struct publish_job *j = w->data;
    char path[256];
    snprintf(path, sizeof path, "/api/v1/nodes/%s", j->p->node);
    publish_round(j, path);
}

/* The one line an operator needs for an answer that is not 200. */
static void publish_explain(const struct publish_job *j, char *out, size_t len)
{
    const char *what = j->err.msg;
    switch (j->status) {
    case 0: snprintf(out, len, "%.500s", what); break;
    case 401:
        snprintf(out, len, "%.300s: 401 Unauthorized: the API server does not accept the credentials "
                 "(expired or wrong token, or a client certificate it does not trust)", what);
        break;
    case 403:
        snprintf(out, len, "%.300s: 403 Forbidden: the service account needs get and patch on nodes "
                 "(ClusterRole rule: apiGroups [\"\"], resources [nodes], verbs [get, patch])", what);
        break;
    case 404:
        snprintf(out, len, "%.300s: 404 Not Found: no Node of that name (check NODE_NAME)", what);
        break;
    default: snprintf(out, len, "%.300s: HTTP %ld", what, j->status); break;
    }
}

static void publish_start(struct labels_publisher *p);

static void publish_retry(uv_timer_t *t)
{
    publish_start(t->data);
}

static void publish_maybe_free(struct labels_publisher *p)
{
    if (!p->stopping || p->handles || p->job)
        return;
    kube_creds_free(&p->creds);
    label_set_free(&p->want);
    label_set_free(&p->sent);
    free(p);
}

/* After a write or an API round: remember what was published, or log
 * the failure (once until it changes) and retry with backoff. */
static void publish_result(struct labels_publisher *p, const struct label_set *done, int rc,
                           const char *failure, unsigned changes)
{
    if (rc == 0) {
        if (p->last_error[0] || !p->published)
            log_info("labels: %u published to %s%s (%u changed)", done->count,
                     p->mode == CONFIG_LABELS_API ? "Node " : "",
                     p->mode == CONFIG_LABELS_API ? p->node : p->path, changes);
        else if (changes)
            log_debug("labels: %u changed", changes);
        p->last_error[0] = '\0';
        p->backoff_ms = 0;
        label_set_copy(&p->sent, done);
        p->published = true;
        return;
    }
    if (strcmp(failure, p->last_error))
        log_error("labels not published: %s; retrying with backoff", failure);
    snprintf(p->last_error, sizeof p->last_error, "%s", failure);
    uv_timer_start(&p->retry, publish_retry,
                   backoff_next(&p->backoff_ms, PUBLISH_BACKOFF_MIN_MS, PUBLISH_BACKOFF_MAX_MS), 0);
}

static void publish_done(uv_work_t *w, int status)
{
    struct publish_job *j = w->data;
    struct labels_publisher *p = j->p;
    p->job = NULL;
    if (p->stopping || status == UV_ECANCELED) {
        label_set_free(&j->want);
        free(j);
        publish_maybe_free(p);
        return;
    }
    char msg[sizeof p->last_error] = "";
    if (j->rc < 0)
        publish_explain(j, msg, sizeof msg);
    publish_result(p, &j->want, j->rc, msg, j->changes);
    label_set_free(&j->want);
    free(j);
    if (p->again && !uv_is_active((uv_handle_t *)&p->retry))
        publish_start(p);
}

static void publish_start(struct labels_publisher *p)
{
    if (p->mode == CONFIG_LABELS_FILE) {
        struct err e;
        unsigned changes = p->published ? 0 : p->want.count;
        for (unsigned i = 0; p->published && i < p->want.count; i++) {
            const char *had = label_set_get(&p->sent, p->want.items[i].key);
            changes += !had || strcmp(had, p->want.items[i].value);
        }
        int rc = labels_write_file(p->path, &p->want, &e);
        publish_result(p, &p->want, rc, rc < 0 ? e.msg : "", changes);
        return;
    }
    if (p->job) {
        p->again = true;
        return;
    }
    struct publish_job *j = xcalloc(1, sizeof *j);
    j->p = p;
    j->work.data = j;
    label_set_copy(&j->want, &p->want);
    p->job = j;
    p->again = false;
    uv_queue_work(p->loop, &j->work, publish_work, publish_done);
}

/* --- the publisher ------------------------------------------------------------------ */

static int publish_mode(const struct config *cfg)
{
    if (cfg->labels_output != CONFIG_LABELS_AUTO)
        return cfg->labels_output;
    if ((cfg->kubeconfig[0] || kube_in_cluster()) && cfg->node_name[0])
        return CONFIG_LABELS_API;
    return CONFIG_LABELS_NONE;
}

int labels_publisher_start(struct labels_publisher **out, uv_loop_t *loop,
                           const struct config *cfg, struct err *e)
{
    *out = NULL;
    int mode = publish_mode(cfg);
    if (mode == CONFIG_LABELS_NONE) {
        if (cfg->labels_output == CONFIG_LABELS_AUTO)
            log_info("labels: not published (no API server credentials or NODE_NAME; "
                     "--labels api or file to choose)");
        return 0;
    }
    struct labels_publisher *p = xcalloc(1, sizeof *p);
    p->loop = loop;
    p->mode = mode;
    if (mode == CONFIG_LABELS_API) {
        if (!cfg->node_name[0]) {
            free(p);
            return err_set(e, "labels: --labels api needs NODE_NAME or --node-name");
        }
        if (kube_creds_load(&p->creds, cfg->kubeconfig, e) < 0 || kube_client_init(e) < 0) {
            kube_creds_free(&p->creds);
            free(p);
            return -1;
        }
        snprintf(p->node, sizeof p->node, "%s", cfg->node_name);
        log_info("labels: publishing to Node %s at %s (credentials: %s)", p->node,
                 p->creds.server, p->creds.source);
    } else {
        snprintf(p->path, sizeof p->path, "%s", cfg->output_file);
        p->keep_file = cfg->keep_labels_file;
    }
    uv_timer_init(loop, &p->retry);
    p->retry.data = p;
    p->handles = 1;
    *out = p;
    return 0;
}

void labels_publisher_update(struct labels_publisher *p, const struct label_set *want)
{
    if (!p || p->stopping)
        return;
    label_set_copy(&p->want, want);
    /* Already on its way, or already there: nothing to send. */
    const struct label_set *ahead = p->job ? &p->job->want : p->published ? &p->sent : NULL;
    if (ahead && label_set_equal(ahead, &p->want)) {
        p->again = false;
        return;
    }
    /* While backing off, the retry takes the newest labels. */
    if (!uv_is_active((uv_handle_t *)&p->retry))
        publish_start(p);
}

static void publish_closed(uv_handle_t *h)
{
    struct labels_publisher *p = h->data;
    p->handles--;
    publish_maybe_free(p);
}

void labels_publisher_stop(struct labels_publisher *p)
{
    if (!p)
        return;
    p->stopping = true;
    atomic_store(&p->stop, true);
    if (p->mode == CONFIG_LABELS_FILE && p->published && !p->keep_file) {
        if (unlink(p->path) < 0 && errno != ENOENT)
            log_warn("labels file %s not removed: %s", p->path, strerror(errno));
    }
    if (p->job)
        uv_cancel((uv_req_t *)&p->job->work);
    uv_close((uv_handle_t *)&p->retry, publish_closed);
}
