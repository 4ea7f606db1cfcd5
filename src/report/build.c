/* The condition, taint and event bodies: pure functions from the GPUs'
 * health and the Node's JSON to the API's JSON, tested without a server. */
#include "report/report.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "util/jsonx.h"

const char *report_reason(const struct gpu_health *h, char *buf, size_t len)
{
    switch (h->reason) {
    case HEALTH_OK: snprintf(buf, len, "GPUsHealthy"); break;
    case HEALTH_XID: snprintf(buf, len, "XID%u", h->xid); break;
    case HEALTH_ECC: snprintf(buf, len, "ECCUncorrectable"); break;
    case HEALTH_HUNG: snprintf(buf, len, "GPUHung"); break;
    case HEALTH_LOST:
    case HEALTH_REASONS:
        if (h->xid)
            snprintf(buf, len, "XID%u", h->xid);
        else
            snprintf(buf, len, "GPULost");
        break;
    }
    return buf;
}

void report_gpu_text(const struct report_gpu *g, char *buf, size_t len)
{
    char what[160];
    if (g->mig >= 0)
        snprintf(what, sizeof what, "GPU %u MIG device %u:%d %s (%s)", g->index, g->index, g->mig,
                 g->profile, g->uuid);
    else
        snprintf(what, sizeof what, "GPU %u (%s)", g->index, g->uuid);
    if (g->health.reason == HEALTH_OK)
        snprintf(buf, len, "%s is healthy", what);
    else /* the cause alone: the condition and the Event carry the time as their own field */
        snprintf(buf, len, "%s: %s", what, g->health.detail);
}

void report_condition_build(const struct report_gpu *gpus, unsigned count,
                            struct report_condition *c)
{
    memset(c, 0, sizeof *c);
    const struct report_gpu *worst = NULL;
    unsigned bad = 0, faults = 0, gpus_n = 0;
    int last_bad = -1;
    struct strbuf msg = {0};
    for (unsigned i = 0; i < count; i++) {
        const struct report_gpu *g = &gpus[i];
        gpus_n += g->mig < 0;
        if (g->health.reason == HEALTH_OK)
            continue;
        char text[400];
        report_gpu_text(g, text, sizeof text);
        strbuf_printf(&msg, "%s%s", faults++ ? "; " : "", text);
        bad += last_bad != (int)g->index; /* a GPU counts once, with its MIG devices' faults */
        last_bad = (int)g->index;
        if (!worst || g->health.reason > worst->health.reason)
            worst = g;
        if (!c->since_ms || g->health.since_ms < c->since_ms)
            c->since_ms = g->health.since_ms;
    }
    count = gpus_n;
    c->unhealthy = bad > 0;
    if (worst)
        report_reason(&worst->health, c->reason, sizeof c->reason);
    else
        snprintf(c->reason, sizeof c->reason, "GPUsHealthy");
    if (bad)
        snprintf(c->message, sizeof c->message, "%u of %u GPUs unhealthy: %s", bad, count, msg.data);
    else
        snprintf(c->message, sizeof c->message, "all %u GPUs gpulet serves are healthy", count);
    strbuf_free(&msg);
}

static int report_is_node(const json_t *node, struct err *e)
{
    if (!json_is_object(node) || !json_is_object(json_object_get(node, "metadata")))
        return err_set(e, "the answer is not a Node object");
    return 0;
}

/* The string member key of obj, or "". */
static const char *report_str(const json_t *obj, const char *key)
{
    const char *s = json_string_value(json_object_get(obj, key));
    return s ? s : "";
}

int report_condition_patch(const json_t *node, const struct report_condition *c, const char *now,
                           struct strbuf *patch, struct err *e)
{
    if (report_is_node(node, e) < 0)
        return -1;
    const char *status = c->unhealthy ? "True" : "False";
    json_t *conds = json_object_get(json_object_get(node, "status"), "conditions"), *have = NULL;
    size_t i;
    json_t *x;
    json_array_foreach(conds, i, x) {
        if (json_is_object(x) && !strcmp(report_str(x, "type"), REPORT_CONDITION))
            have = x;
    }
    bool same_status = have && !strcmp(report_str(have, "status"), status);
    if (same_status && !strcmp(report_str(have, "reason"), c->reason) &&
        !strcmp(report_str(have, "message"), c->message))
        return 0; /* already so */
    /* The status changes: when its fault began (the time its taints say),
     * or now for a recovery; kept while the status stays. */
    char fault[32];
    gpu_health_time(c->unhealthy ? c->since_ms : 0, fault, sizeof fault);
    const char *since = same_status && *report_str(have, "lastTransitionTime")
                            ? report_str(have, "lastTransitionTime") : fault[0] ? fault : now;
    json_t *p = jsonx_ok(json_pack(
        "{s:{s:[{s:s, s:s, s:s, s:s, s:s, s:s}]}}", "status", "conditions", "type", REPORT_CONDITION,
        "status", status, "reason", c->reason, "message", c->message, "lastHeartbeatTime", now,
        "lastTransitionTime", since));
    jsonx_dump(p, JSON_COMPACT, patch);
    json_decref(p);
    return 0;
}

int report_taint_patch(const json_t *node, const char *value, struct strbuf *patch, bool *foreign,
                       struct err *e)
{
    *foreign = false;
    if (report_is_node(node, e) < 0)
        return -1;
    json_t *meta = json_object_get(node, "metadata");
    bool owned = json_is_string(json_object_get(json_object_get(meta, "annotations"),
                                                REPORT_TAINT_ANNOTATION));
    json_t *taints = json_object_get(json_object_get(node, "spec"), "taints");
    json_t *keep = jsonx_ok(json_array()), *ours = NULL;
    size_t i;
    json_t *t;
    json_array_foreach(taints, i, t) {
        if (json_is_object(t) && !strcmp(report_str(t, "key"), REPORT_TAINT_KEY))
            ours = t;
        else
            jsonx_append(keep, json_incref(t));
    }
    if (ours && !owned) {
        *foreign = true; /* someone else's taint of that key: never gpulet's to touch */
    } else if (value ? !ours || strcmp(report_str(ours, "value"), value) ||
                           strcmp(report_str(ours, "effect"), "NoSchedule")
                     : ours != NULL || owned) {
        if (value)
            jsonx_append(keep, jsonx_ok(json_pack("{s:s, s:s, s:s}", "key", REPORT_TAINT_KEY,
                                                  "value", value, "effect", "NoSchedule")));
        json_t *p = jsonx_ok(json_pack(
            "{s:{s:s, s:{s:o}}, s:{s:O}}", "metadata", "resourceVersion",
            report_str(meta, "resourceVersion"), "annotations", REPORT_TAINT_ANNOTATION,
            value ? json_string(value) : json_null(), "spec", "taints",
            json_array_size(keep) ? keep : json_null()));
        jsonx_dump(p, JSON_COMPACT, patch);
        json_decref(p);
    }
    json_decref(keep);
    return 0;
}

void report_event_json(const struct report_event *ev, const char *node, struct strbuf *out)
{
    json_t *j;
    if (ev->create)
        j = json_pack("{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s, s:s, s:s}, s:s, s:s, s:s, "
                      "s:{s:s, s:s}, s:s, s:s, s:i, s:s, s:s}",
                      "apiVersion", "v1", "kind", "Event", "metadata", "name", ev->name,
                      "namespace", REPORT_EVENTS_NAMESPACE, "involvedObject", "kind", "Node", "apiVersion", "v1",
                      "name", node, "uid", node, "reason", ev->reason, "message", ev->message,
                      "type", ev->type, "source", "component", "gpulet", "host", node,
                      "firstTimestamp", ev->first, "lastTimestamp", ev->last, "count",
                      (json_int_t)ev->count, "reportingComponent", "gpulet", "reportingInstance",
                      node);
    else
        j = json_pack("{s:i, s:s}", "count", (json_int_t)ev->count, "lastTimestamp", ev->last);
    jsonx_ok(j);
    jsonx_dump(j, JSON_COMPACT, out);
    json_decref(j);
}
