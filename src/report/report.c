/* The reporter: keeps the Node's GPUUnhealthy condition, gpulet's taint and
 * the Node's GPU events in step with the GPUs, through the agent's client.
 *
 * - State, not history: the condition and the taint are the latest wanted,
 *   kept in step by kube/sync.c from the agent's watch of the Node: only
 *   what differs is written, an outage is caught up in one go, and what
 *   anyone else removes is put back as soon as the watch says so.
 * - Events go to "default", the one namespace where the API server takes a
 *   Node's core/v1 Events, each named after the node (deploy/confine/
 *   events.yaml keeps that form to the node); a name found taken is never
 *   "sent".
 * - Events are queued (at most REPORT_QUEUE; the oldest go first when it is
 *   full, counted) and sent one at a time. As the kubelet's recorder does,
 *   an event like one sent in the last 10 minutes bumps that one's count
 *   and lastTimestamp instead of making another, and a token bucket (25,
 *   one more every 5 minutes) keeps a flapping GPU from flooding the API
 *   server. */
#include "report/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube/kube.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* --- the condition and the taint, kept in step by kube/sync.c --------------------- */

/* The condition first (nodes/status), then the taint (the Node itself). */
static int report_next(void *ctx, const json_t *node, struct kube_write *w, struct err *e)
{
    struct report *r = ctx;
    if (!node)
        return err_set(e, "no Node %s (check NODE_NAME)", r->node);
    if (!r->told)
        return 0;
    char now[32];
    report_now(now, sizeof now);
    bool foreign = false;
    if (report_condition_patch(node, &r->cond, now, &w->body, e) < 0)
        return -1;
    if (w->body.len) {
        w->method = "PATCH";
        snprintf(w->path, sizeof w->path, "/api/v1/nodes/%s/status", r->node);
        w->content_type = "application/strategic-merge-patch+json";
        return 0;
    }
    if (report_taint_patch(node, r->taint[0] ? r->taint : NULL, &w->body, &foreign, e) < 0)
        return -1;
    if (w->body.len) {
        w->method = "PATCH";
        snprintf(w->path, sizeof w->path, "/api/v1/nodes/%s", r->node);
        w->content_type = "application/merge-patch+json";
    }
    return 0;
}

/* --- events, one at a time ------------------------------------------------------------- */

static void report_send(struct report *r);

static void report_maybe_free(struct report *r)
{
    if (!r->closed || r->call)
        return;
    free(r->gpus);
    free(r);
}

static void report_send_again(uv_timer_t *t)
{
    report_send(t->data);
}

/* The event in flight goes back to the front of the queue, where there is
 * room. */
static void report_unsend(struct report *r)
{
    if (r->nqueue == REPORT_QUEUE)
        return;
    memmove(&r->queue[1], r->queue, r->nqueue * sizeof *r->queue);
    r->queue[0] = r->sending;
    r->nqueue++;
}

static void report_event_done(void *ctx, const struct kube_answer *a)
{
    struct report *r = ctx;
    r->call = NULL;
    if (r->stopping) {
        report_maybe_free(r);
        return;
    }
    struct report_event *ev = &r->sending;
    if (!ev->create && a->status == 404) {
        ev->create = true; /* it expired: make it again */
        report_unsend(r);
        report_send(r);
        return;
    }
    if (ev->create && a->status == 409) {
        /* Not sent: sent again under a new name, after the one backoff. */
        char msg[400];
        snprintf(msg, sizeof msg, "the name %s is taken; sending it as another", ev->name);
        kube_retry_failed(&r->failure, LOG_WARN, "fault report: event not sent", msg);
        report_rename(r, ev);
        report_unsend(r);
        uv_timer_start(&r->retry, report_send_again, kube_retry_wait(&r->failure), 0);
        return;
    }
    if (a->status == 200 || a->status == 201) {
        kube_retry_ok(&r->failure, "fault report", "events reach the API server again");
        report_sent(r, ev);
        report_send(r);
        return;
    }
    char what[200], msg[800];
    snprintf(what, sizeof what, "event %s", ev->name);
    kube_explain(what, "create and patch on events", a, msg, sizeof msg);
    kube_retry_failed(&r->failure, LOG_ERROR, "fault report: event not sent", msg);
    report_unsend(r);
    uv_timer_start(&r->retry, report_send_again, kube_retry_wait(&r->failure), 0);
}

/* Sends the queue's first event, unless one is in flight or waiting. */
static void report_send(struct report *r)
{
    if (r->stopping || r->call || !r->nqueue || uv_is_active((uv_handle_t *)&r->retry))
        return;
    r->sending = r->queue[0];
    memmove(r->queue, &r->queue[1], (r->nqueue - 1) * sizeof *r->queue);
    r->nqueue--;
    struct report_event *ev = &r->sending;
    struct strbuf body = {0};
    char path[320];
    report_event_json(ev, r->node, &body);
    if (ev->create)
        snprintf(path, sizeof path, "/api/v1/namespaces/" REPORT_EVENTS_NAMESPACE "/events");
    else
        snprintf(path, sizeof path, "/api/v1/namespaces/" REPORT_EVENTS_NAMESPACE "/events/%s", ev->name);
    r->call = kube_call(r->kc, &(struct kube_call_spec){
        .method = ev->create ? "POST" : "PATCH", .path = path,
        .content_type = ev->create ? "application/json" : "application/merge-patch+json",
        .body = body.data, .done = report_event_done, .ctx = r, .owner = r});
    strbuf_free(&body);
}

/* --- the reporter ------------------------------------------------------------------------ */

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
        if (gpus[i].mig < 0 && gpu_health_faults_match(&r->taint_faults, &gpus[i].health) &&
            (!worst || gpus[i].health.reason > worst->health.reason))
            worst = &gpus[i];
    if (worst)
        report_reason(&worst->health, taint, sizeof taint);
    bool changed = !r->told || memcmp(&c, &r->cond, sizeof c) || strcmp(taint, r->taint);
    r->cond = c;
    snprintf(r->taint, sizeof r->taint, "%s", taint);
    r->gpus = xrealloc(r->gpus, (count + 1) * sizeof *r->gpus);
    memcpy(r->gpus, gpus, count * sizeof *gpus);
    r->count = count;
    r->told = true;
    if (changed)
        kube_sync_poke(r->sync);
    report_send(r);
}

void report_note(struct report *r, const char *type, const char *reason, const char *message)
{
    if (!r || r->stopping)
        return;
    report_event(r, type, reason, message);
    report_send(r);
}

int report_start(struct report **out, uv_loop_t *loop, const struct config *cfg,
                 struct kube_client *kc, struct kube_watch *node, struct err *e)
{
    *out = NULL;
    if (cfg->fault_report == CONFIG_REPORT_NONE || !kc || !node)
        return 0;
    struct report *r = xcalloc(1, sizeof *r);
    r->kc = kc;
    r->taint_on = cfg->fault_taint;
    if (gpu_health_faults_parse(&r->taint_faults, "--fault-taint-on", cfg->fault_taint_on, e) < 0) {
        free(r);
        return -1;
    }
    snprintf(r->node, sizeof r->node, "%s", cfg->node_name);
    r->tokens = REPORT_BURST;
    r->tokens_at = report_mono();
    uv_timer_init(loop, &r->retry);
    r->retry.data = r;
    char what[200];
    snprintf(what, sizeof what, "fault report on Node %s", r->node);
    const struct kube_sync_spec spec = {
        .what = what, .rbac = "patch on nodes/status and nodes, get, list and watch on nodes",
        .watch = node, .next = report_next, .ctx = r};
    kube_sync_start(&r->sync, kc, &spec, e);
    log_info("fault report: the condition %s%s and GPU events on Node %s", REPORT_CONDITION,
             r->taint_on ? ", the taint " REPORT_TAINT_KEY : "", r->node);
    *out = r;
    return 0;
}

static void report_closed(uv_handle_t *h)
{
    struct report *r = h->data;
    r->closed = true;
    report_maybe_free(r);
}

void report_stop(struct report *r)
{
    if (!r)
        return;
    r->stopping = true;
    kube_sync_stop(r->sync);
    uv_close((uv_handle_t *)&r->retry, report_closed);
    kube_call_cancel(r->call);
}
