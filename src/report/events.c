/* The Node's GPU Events: queued from what changed, aggregated as the
 * kubelet's recorder does (a like event in the last 10 minutes bumps that
 * one's count), rate limited by a token bucket, and sent one at a time by
 * report.c. */
#include "report/internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util/log.h"

static struct report_recent *report_recent_of(struct report *r, const char *key)
{
    for (unsigned i = 0; i < REPORT_RECENT; i++)
        if (r->recent[i].count && !strcmp(r->recent[i].key, key))
            return &r->recent[i];
    return NULL;
}

/* The API server has ev now: a like event bumps it (PATCH) from here on. */
void report_sent(struct report *r, const struct report_event *ev)
{
    for (unsigned i = 0; i < REPORT_RECENT; i++)
        if (!strcmp(r->recent[i].name, ev->name))
            r->recent[i].created = true;
}

/* An Event's name: the node's, a dot, then hex only (time and serial), the
 * form deploy/confine/events.yaml keeps to this node, so that no other node
 * can take the names this one will use. */
static void report_name(struct report *r, char *out, size_t len)
{
    snprintf(out, len, "%s.%llx%04x", r->node, (unsigned long long)time(NULL), r->serial++ & 0xffff);
}

/* The name ev wanted was taken (409): a new one, for it and for the like
 * events after it. A 409 is never taken for "sent": another writer's
 * object under that name is not this event. */
void report_rename(struct report *r, struct report_event *ev)
{
    char name[sizeof ev->name];
    report_name(r, name, sizeof name);
    for (unsigned i = 0; i < REPORT_RECENT; i++)
        if (!strcmp(r->recent[i].name, ev->name))
            snprintf(r->recent[i].name, sizeof r->recent[i].name, "%s", name);
    for (unsigned i = 0; i < r->nqueue; i++)
        if (!strcmp(r->queue[i].name, ev->name))
            snprintf(r->queue[i].name, sizeof r->queue[i].name, "%s", name);
    snprintf(ev->name, sizeof ev->name, "%s", name);
}

/* The spam filter: false when the bucket is empty. */
static bool report_token(struct report *r)
{
    double now = report_mono();
    r->tokens += (now - r->tokens_at) / REPORT_REFILL_S;
    r->tokens_at = now;
    if (r->tokens > REPORT_BURST)
        r->tokens = REPORT_BURST;
    if (r->tokens < 1)
        return false;
    r->tokens -= 1;
    return true;
}

static void report_drop(struct report *r, const char *why)
{
    r->dropped++;
    if (!r->dropping)
        log_warn("fault report: events dropped (%s); the condition still says it all", why);
    r->dropping = true;
}

/* Queues an event: a like one waiting or sent in the last 10 minutes gets
 * its count bumped instead. */
void report_event(struct report *r, const char *type, const char *reason, const char *msg)
{
    char key[600], now[32];
    snprintf(key, sizeof key, "%s %s", reason, msg);
    report_now(now, sizeof now);
    for (unsigned i = 0; i < r->nqueue; i++) {
        struct report_event *q = &r->queue[i];
        if (!strcmp(q->reason, reason) && !strcmp(q->message, msg)) {
            q->count++;
            snprintf(q->last, sizeof q->last, "%s", now);
            if (report_recent_of(r, key))
                report_recent_of(r, key)->count = q->count;
            return;
        }
    }
    if (!report_token(r)) {
        report_drop(r, "more than 25 in a burst for this Node");
        return;
    }
    if (r->nqueue == REPORT_QUEUE) {
        memmove(r->queue, &r->queue[1], (REPORT_QUEUE - 1) * sizeof *r->queue);
        r->nqueue--;
        report_drop(r, "the API server is not answering");
    }
    r->dropping = false;
    double mono = report_mono();
    struct report_recent *seen = report_recent_of(r, key);
    if (seen && mono - seen->at > REPORT_AGGREGATE_S)
        seen->count = 0; /* too old to aggregate: a new event */
    if (!seen || !seen->count) {
        seen = &r->recent[0];
        for (unsigned i = 1; i < REPORT_RECENT; i++) /* the slot used longest ago */
            if (r->recent[i].at < seen->at)
                seen = &r->recent[i];
        memset(seen, 0, sizeof *seen);
        snprintf(seen->key, sizeof seen->key, "%s", key);
        report_name(r, seen->name, sizeof seen->name);
        snprintf(seen->first, sizeof seen->first, "%s", now);
    }
    seen->count++;
    seen->at = mono;
    struct report_event *ev = &r->queue[r->nqueue++];
    memset(ev, 0, sizeof *ev);
    snprintf(ev->name, sizeof ev->name, "%s", seen->name);
    snprintf(ev->type, sizeof ev->type, "%s", type);
    snprintf(ev->reason, sizeof ev->reason, "%s", reason);
    snprintf(ev->message, sizeof ev->message, "%s", msg);
    snprintf(ev->first, sizeof ev->first, "%s", seen->first);
    snprintf(ev->last, sizeof ev->last, "%s", now);
    ev->count = seen->count;
    ev->create = !seen->created;
}

/* The events of what changed since the last update: a GPU that turned
 * unhealthy (or to another fault), or healthy again. */
void report_changes(struct report *r, const struct report_gpu *gpus, unsigned count)
{
    for (unsigned i = 0; i < count; i++) {
        const struct gpu_health *now = &gpus[i].health, *was = NULL;
        /* By UUID: a new MIG layout moves the devices in the list. */
        for (unsigned k = 0; r->told && k < r->count && !was; k++)
            if (!strcmp(r->gpus[k].uuid, gpus[i].uuid))
                was = &r->gpus[k].health;
        bool was_bad = was && was->reason != HEALTH_OK;
        char text[512];
        report_gpu_text(&gpus[i], text, sizeof text);
        if (now->reason != HEALTH_OK && (!was || was->reason != now->reason || was->xid != now->xid))
            report_event(r, "Warning", "GPUUnhealthy", text);
        else if (now->reason == HEALTH_OK && was_bad)
            report_event(r, "Normal", "GPUHealthy", text);
    }
}

