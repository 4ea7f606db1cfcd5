/* The reporter's state (report.c's rounds, events.c's events), shared by
 * the files of src/report only. */
#ifndef GPULET_REPORT_INTERNAL_H
#define GPULET_REPORT_INTERNAL_H

#include <time.h>

#include "kube/kube.h"
#include "report/report.h"

#define REPORT_QUEUE 64              /* events waiting for the API server */
#define REPORT_RECENT 32             /* events remembered for aggregation */
#define REPORT_AGGREGATE_S 600       /* the kubelet's recorder: 10 minutes */
#define REPORT_BURST 25.0            /* and its spam filter: 25, one more each 300 s */
#define REPORT_REFILL_S 300.0

/* An event sent lately: a like one bumps its count. */
struct report_recent {
    char key[600];                   /* reason and message */
    char name[160];
    char first[32];
    unsigned count;
    bool created;                    /* the API server has it */
    double at;                       /* monotonic seconds of its last send */
};

struct report {
    struct kube_client *kc;
    struct kube_sync *sync;          /* the condition and the taint on the Node */
    char node[128];
    bool taint_on;                   /* --fault-taint */
    struct health_faults taint_faults;
    /* wanted */
    struct report_condition cond;
    char taint[64];
    struct report_gpu *gpus;         /* as last told, for events */
    unsigned count;
    bool told;
    /* events */
    struct report_event queue[REPORT_QUEUE];
    unsigned nqueue;
    unsigned long long dropped;
    bool dropping;                   /* said once per run of drops */
    struct report_recent recent[REPORT_RECENT];
    double tokens, tokens_at;
    unsigned serial;
    struct report_event sending;     /* the event in flight (out of the queue) */
    struct kube_call *call;
    uv_timer_t retry;                /* events, after a failure */
    struct kube_retry failure;       /* kube's one retry: logged once, backoff */
    bool stopping, closed;
};

static inline double report_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void report_now(char *buf, size_t len)
{
    gpu_health_time((long long)time(NULL) * 1000, buf, len);
}

/* Events (events.c): what changed since the last update, queued; an
 * event the API server has now. */
void report_changes(struct report *r, const struct report_gpu *gpus, unsigned count);
void report_event(struct report *r, const char *type, const char *reason, const char *msg);
void report_sent(struct report *r, const struct report_event *ev);
void report_rename(struct report *r, struct report_event *ev);

#endif
