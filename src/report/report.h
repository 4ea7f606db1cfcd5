/* What the control plane hears of GPU faults, with no other DaemonSet
 * (docs/health.md, "The control plane"): the Node condition GPUUnhealthy,
 * node-problem-detector's convention (True while a GPU gpulet serves is
 * unhealthy); Events on the Node when a GPU turns unhealthy or healthy,
 * aggregated and rate-limited as the kubelet's event recorder does; and,
 * opt-in, a NoSchedule taint while a fault that needs a reset or a reboot
 * stands. The reporter runs on the agent's loop, its requests on the
 * agent's client; it keeps only the latest wanted state and a bounded
 * queue of events, so nothing grows while the API server is down. */
#ifndef GPULET_REPORT_H
#define GPULET_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <uv.h>

#include "config/config.h"
#include "gpu/health.h"
#include "kube/kube.h"
#include "util/err.h"
#include "util/strbuf.h"

#define REPORT_CONDITION "GPUUnhealthy"
#define REPORT_TAINT_KEY "gpulet.io/gpu-fault"
/* On the Node while gpulet's taint is: the taint is gpulet's to remove. */
#define REPORT_TAINT_ANNOTATION "gpulet.io/gpu-fault-taint"
#define REPORT_MESSAGE_MAX 1024

/* One GPU as the report sees it (the agent's record, copied). */
/* A GPU, or one of its MIG devices (mig >= 0), with its health. */
struct report_gpu {
    unsigned index;
    int mig;                         /* -1: the GPU whole */
    char uuid[96];                   /* the GPU's, or the MIG device's */
    char profile[32];                /* a MIG device's: "1g.10gb" */
    struct gpu_health health;
};

/* The condition wanted now. */
struct report_condition {
    bool unhealthy;
    long long since_ms;              /* unhealthy: the first current fault's time (as its taints') */
    char reason[64];                 /* GPUsHealthy, XID79, GPULost, GPUHung, ... */
    char message[REPORT_MESSAGE_MAX];
};

/* --- pure functions (build.c) ------------------------------------------------------ */

/* The reason a fault gives the condition, the taint and the events:
 * XID<n>, XID79 (a GPU off the bus), GPULost, GPUHung, ECCUncorrectable. */
const char *report_reason(const struct gpu_health *h, char *buf, size_t len);

/* "GPU 3 (GPU-...): XID 79: fallen off the bus": the health's detail
 * without its "since", so that the same fault reads the same each time. */
void report_gpu_text(const struct report_gpu *g, char *buf, size_t len);

/* The condition for these GPUs: False (GPUsHealthy) while all are healthy,
 * else True with the worst fault's reason and each unhealthy GPU listed. */
void report_condition_build(const struct report_gpu *gpus, unsigned count,
                            struct report_condition *c);

/* The strategic merge patch of nodes/status that sets the condition and
 * touches no other (conditions merge by type), from the Node (parsed); empty
 * where the Node has it already. lastTransitionTime is kept while the
 * status stays; else it is the fault's time (c->since_ms), or now (RFC
 * 3339) for a recovery. */
int report_condition_patch(const json_t *node, const struct report_condition *c, const char *now,
                           struct strbuf *patch, struct err *e);

/* The merge patch of the Node that puts gpulet's NoSchedule taint on with
 * value (reason), or, value NULL, takes off the one gpulet put on (the
 * annotation says so); empty where nothing changes. A taint of that key
 * that gpulet did not put on is never touched (*foreign). The patch
 * carries the Node's resourceVersion: a Node changed meanwhile refuses it
 * (409), and the caller reads it again. */
int report_taint_patch(const json_t *node, const char *value, struct strbuf *patch, bool *foreign,
                       struct err *e);

/* A core/v1 Event on the Node, in "default": the API server takes an
 * Event about a cluster-scoped object in no other namespace (but
 * kube-system, for events.k8s.io's new kind). */
#define REPORT_EVENTS_NAMESPACE "default"

/* A core/v1 Event on the Node. */
struct report_event {
    char name[160];                  /* <node>.<hex>: time and serial */
    char type[16];                   /* Warning, Normal */
    char reason[32];                 /* GPUUnhealthy, GPUHealthy */
    char message[512];
    char first[32], last[32];        /* RFC 3339 */
    unsigned count;
    bool create;                     /* POST it; else PATCH count and lastTimestamp */
};

/* The Event's JSON (POST), or the merge patch of its count and
 * lastTimestamp (PATCH), as ev->create says. */
void report_event_json(const struct report_event *ev, const char *node, struct strbuf *out);

/* --- the reporter (report.c) -------------------------------------------------------- */

struct report;

/* Starts where the agent has a client of the API server and a watch of
 * its Node (--fault-report auto). *out stays NULL otherwise. */
int report_start(struct report **out, uv_loop_t *loop, const struct config *cfg,
                 struct kube_client *kc, struct kube_watch *node, struct err *e);

/* The GPUs as they are now: the condition, the taint and the events follow
 * within a request's time, or once the API server answers again. r may be
 * NULL. */
void report_update(struct report *r, const struct report_gpu *gpus, unsigned count);

/* An Event on the Node about something else than a GPU's health (the MIG
 * manager's outcome): type Normal or Warning, reason in CamelCase. Queued,
 * aggregated and rate limited as the GPUs' own. r may be NULL. */
void report_note(struct report *r, const char *type, const char *reason, const char *message);

/* Ends a request in flight; frees once libuv is done. r may be NULL. */
void report_stop(struct report *r);

#endif
