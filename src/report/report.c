/* The reporter: keeps the Node's GPUUnhealthy condition, gpulet's taint and
 * the Node's GPU events in step with the GPUs, through the API server.
 *
 * - State, not history: the condition and the taint are the latest wanted;
 *   a round reads the Node and writes only what differs, so a round after
 *   an outage catches up in one go, and a resync each minute restores what
 *   anyone else removed.
 * - Events are queued (at most REPORT_QUEUE; the oldest go first when it is
 *   full, counted) and sent with the next round. As the kubelet's recorder
 *   does, an event like one sent in the last 10 minutes bumps that one's
 *   count and lastTimestamp instead of making another, and a token bucket
 *   (25, one more every 5 minutes) keeps a flapping GPU from flooding the
 *   API server.
 * - One request round at a time, on libuv's worker pool; after a failure
 *   the next round comes within a second, so the Node catches up within a
 *   second of the API server answering again. */
#include "report/internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube/kube.h"
#include "util/backoff.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* --- a round, off the loop ------------------------------------------------------------ */

static int report_call(struct report_job *j, const char *method, const char *path,
                       const char *type, const char *body, long want, long also)
{
    struct report *r = j->r;
    struct kube_response resp;
    if (kube_request(&r->creds, method, path, type, body, &resp, &r->stop, &j->err) < 0)
        return -1;
    long st = resp.status;
    kube_response_free(&resp);
    if (st == want || st == also)
        return (int)st;
    j->status = st;
    return err_set(&j->err, "%s %s", method, path);
}

static int report_node(struct report_job *j, struct kube_response *resp)
{
    char path[256];
    snprintf(path, sizeof path, "/api/v1/nodes/%s", j->r->node);
    if (kube_request(&j->r->creds, "GET", path, NULL, NULL, resp, &j->r->stop, &j->err) < 0)
        return -1;
    if (resp->status == 200)
        return 0;
    j->status = resp->status;
    kube_response_free(resp);
    return err_set(&j->err, "GET nodes/%s", j->r->node);
}

/* The condition, then the taint (again once where the Node changed
 * between reading and writing it). */
static int report_node_round(struct report_job *j)
{
    char now[32], path[256];
    report_now(now, sizeof now);
    for (int tries = 0; tries < 3; tries++) {
        struct kube_response node;
        if (report_node(j, &node) < 0)
            return -1;
        struct strbuf cond = {0}, taint = {0};
        bool foreign = false;
        int rc = report_condition_patch(node.body.data, node.body.len, &j->cond, now, &cond, &j->err);
        if (rc == 0)
            rc = report_taint_patch(node.body.data, node.body.len, j->taint[0] ? j->taint : NULL,
                                    &taint, &foreign, &j->err);
        kube_response_free(&node);
        if (rc == 0 && cond.len) {
            snprintf(path, sizeof path, "/api/v1/nodes/%s/status", j->r->node);
            rc = report_call(j, "PATCH", path, "application/strategic-merge-patch+json", cond.data,
                             200, 200) < 0 ? -1 : 0;
        }
        int st = 200;
        if (rc == 0 && taint.len) {
            snprintf(path, sizeof path, "/api/v1/nodes/%s", j->r->node);
            st = report_call(j, "PATCH", path, "application/merge-patch+json", taint.data, 200, 409);
            rc = st < 0 ? -1 : 0;
        }
        strbuf_free(&cond);
        strbuf_free(&taint);
        if (rc < 0 || st != 409)
            return rc;
    }
    return err_set(&j->err, "PATCH nodes/%s: the Node kept changing (409)", j->r->node);
}

static void report_work(uv_work_t *w)
{
    struct report_job *j = w->data;
    j->rc = report_node_round(j);
    for (unsigned k = 0; j->rc == 0 && k < j->nevents; k++) {
        struct report_event *ev = &j->events[k];
        char path[320];
        struct strbuf body = {0};
        int st;
        if (!ev->create) {
            snprintf(path, sizeof path, "/api/v1/namespaces/default/events/%s", ev->name);
            report_event_json(ev, j->r->node, &body);
            st = report_call(j, "PATCH", path, "application/merge-patch+json", body.data, 200, 404);
            strbuf_free(&body);
            ev->create = st == 404; /* it expired: make it again */
            if (st < 0 || st == 200) {
                j->rc = st < 0 ? -1 : 0;
                j->sent += st == 200;
                continue;
            }
        }
        report_event_json(ev, j->r->node, &body);
        st = report_call(j, "POST", "/api/v1/namespaces/default/events", "application/json",
                         body.data, 201, 409);
        strbuf_free(&body);
        j->rc = st < 0 ? -1 : 0;
        j->sent += st > 0;
    }
}

/* --- on the loop ---------------------------------------------------------------------- */

static void report_round(struct report *r);

static void report_again(uv_timer_t *t)
{
    report_round(t->data);
}

static void report_maybe_free(struct report *r)
{
    if (!r->stopping || r->handles || r->job)
        return;
    kube_creds_free(&r->creds);
    free(r->gpus);
    free(r);
}

/* The one line an operator needs for an answer that is not what it should be. */
static void report_explain(const struct report_job *j, char *out, size_t len)
{
    const char *what = j->err.msg;
    switch (j->status) {
    case 0: snprintf(out, len, "%.500s", what); break;
    case 403:
        snprintf(out, len, "%.300s: 403 Forbidden: the service account needs patch on nodes/status "
                 "and nodes, and create and patch on events (deploy/base/rbac.yaml)", what);
        break;
    default: snprintf(out, len, "%.300s: HTTP %ld", what, j->status); break;
    }
}

static void report_done(uv_work_t *w, int status)
{
    struct report_job *j = w->data;
    struct report *r = j->r;
    r->job = NULL;
    if (r->stopping || status == UV_ECANCELED) {
        free(j);
        report_maybe_free(r);
        return;
    }
    report_took(r, j);
    if (j->rc == 0) {
        if (r->last_error[0])
            log_info("fault report: the Node %s is up to date again", r->node);
        r->last_error[0] = '\0';
        r->backoff_ms = 0;
        free(j);
        if (r->again || r->nqueue)
            report_round(r);
        return;
    }
    char msg[sizeof r->last_error];
    report_explain(j, msg, sizeof msg);
    if (strcmp(msg, r->last_error))
        log_error("fault report not written: %s; trying again within a second", msg);
    snprintf(r->last_error, sizeof r->last_error, "%s", msg);
    free(j);
    uv_timer_start(&r->retry, report_again,
                   backoff_next(&r->backoff_ms, REPORT_RETRY_MIN_MS, REPORT_RETRY_MAX_MS), 0);
}

static void report_round(struct report *r)
{
    if (r->stopping || !r->told)
        return;
    if (r->job) {
        r->again = true;
        return;
    }
    uv_timer_stop(&r->retry);
    struct report_job *j = xcalloc(1, sizeof *j);
    j->r = r;
    j->work.data = j;
    j->cond = r->cond;
    snprintf(j->taint, sizeof j->taint, "%s", r->taint);
    j->nevents = r->nqueue < REPORT_PER_ROUND ? r->nqueue : REPORT_PER_ROUND;
    memcpy(j->events, r->queue, j->nevents * sizeof *j->events);
    memmove(r->queue, &r->queue[j->nevents], (r->nqueue - j->nevents) * sizeof *r->queue);
    r->nqueue -= j->nevents;
    r->job = j;
    r->again = false;
    uv_queue_work(r->loop, &j->work, report_work, report_done);
}

static void report_resync(uv_timer_t *t)
{
    report_round(t->data);
}

void report_update(struct report *r, const struct report_gpu *gpus, unsigned count)
{
    if (!r || r->stopping)
        return;
    report_changes(r, gpus, count);
    struct report_condition c;
    report_condition_build(gpus, count, &c);
    char taint[64] = "";
    const struct report_gpu *worst = NULL;
    /* A fault of one MIG device keeps pods off that device, not the node. */
    for (unsigned i = 0; r->taint_on && i < count; i++)
        if (gpus[i].mig < 0 && health_faults_match(&r->taint_faults, &gpus[i].health) &&
            (!worst || gpus[i].health.reason > worst->health.reason))
            worst = &gpus[i];
    if (worst)
        report_reason(&worst->health, taint, sizeof taint);
    bool changed = !r->told || memcmp(&c, &r->cond, sizeof c) || strcmp(taint, r->taint) ||
                   r->nqueue;
    r->cond = c;
    snprintf(r->taint, sizeof r->taint, "%s", taint);
    r->gpus = xrealloc(r->gpus, (count + 1) * sizeof *r->gpus);
    memcpy(r->gpus, gpus, count * sizeof *gpus);
    r->count = count;
    r->told = true;
    /* While backing off, the retry takes the newest state. */
    if (changed && !uv_is_active((uv_handle_t *)&r->retry))
        report_round(r);
}

int report_start(struct report **out, uv_loop_t *loop, const struct config *cfg, struct err *e)
{
    *out = NULL;
    if (cfg->fault_report == CONFIG_REPORT_NONE ||
        ((!cfg->kubeconfig[0] && !kube_in_cluster()) || !cfg->node_name[0]))
        return 0;
    struct report *r = xcalloc(1, sizeof *r);
    r->loop = loop;
    r->taint_on = cfg->fault_taint;
    if (health_faults_parse(&r->taint_faults, "--fault-taint-on", cfg->fault_taint_on, e) < 0 ||
        kube_creds_load(&r->creds, cfg->kubeconfig, e) < 0 || kube_client_init(e) < 0) {
        kube_creds_free(&r->creds);
        free(r);
        return -1;
    }
    snprintf(r->node, sizeof r->node, "%s", cfg->node_name);
    r->tokens = REPORT_BURST;
    r->tokens_at = report_mono();
    uv_timer_init(loop, &r->retry);
    uv_timer_init(loop, &r->resync);
    r->retry.data = r->resync.data = r;
    r->handles = 2;
    uv_timer_start(&r->resync, report_resync, REPORT_RESYNC_MS, REPORT_RESYNC_MS);
    log_info("fault report: the condition %s%s and GPU events on Node %s", REPORT_CONDITION,
             r->taint_on ? ", the taint " REPORT_TAINT_KEY : "", r->node);
    *out = r;
    return 0;
}

static void report_closed(uv_handle_t *h)
{
    struct report *r = h->data;
    r->handles--;
    report_maybe_free(r);
}

void report_stop(struct report *r)
{
    if (!r)
        return;
    r->stopping = true;
    atomic_store(&r->stop, true);
    if (r->job)
        uv_cancel((uv_req_t *)&r->job->work);
    uv_close((uv_handle_t *)&r->retry, report_closed);
    uv_close((uv_handle_t *)&r->resync, report_closed);
}
