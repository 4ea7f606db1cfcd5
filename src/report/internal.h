/* The reporter's state (report.c's rounds, events.c's events), shared by
 * the files of src/report only. */
#ifndef GPULET_REPORT_INTERNAL_H
#define GPULET_REPORT_INTERNAL_H

#include <stdatomic.h>
#include <time.h>

#include "kube/kube.h"
#include "report/report.h"

#define REPORT_QUEUE 64              /* events waiting for the API server */
#define REPORT_RECENT 32             /* events remembered for aggregation */
#define REPORT_AGGREGATE_S 600       /* the kubelet's recorder: 10 minutes */
#define REPORT_BURST 25.0            /* and its spam filter: 25, one more each 300 s */
#define REPORT_REFILL_S 300.0
#define REPORT_PER_ROUND 8           /* events sent per round */
#define REPORT_RETRY_MIN_MS 250
#define REPORT_RETRY_MAX_MS 1000
#define REPORT_RESYNC_MS 60000

/* An event sent lately: a like one bumps its count. */
struct report_recent {
    char key[600];                   /* reason and message */
    char name[160];
    char first[32];
    unsigned count;
    bool created;                    /* the API server has it */
    double at;                       /* monotonic seconds of its last send */
};

struct report_job {
    uv_work_t work;
    struct report *r;
    struct report_condition cond;
    char taint[64];                  /* "" none wanted */
    struct report_event events[REPORT_PER_ROUND];
    unsigned nevents, sent;          /* sent: how many of them the API server took */
    int rc;
    long status;
    struct err err;
};

struct report {
    uv_loop_t *loop;
    struct kube_creds creds;
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
    /* rounds */
    struct report_job *job;
    bool again;
    uv_timer_t retry, resync;
    unsigned backoff_ms;
    char last_error[768];
    atomic_bool stop;
    int handles;
    bool stopping;
};

static inline double report_mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline void report_now(char *buf, size_t len)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Events (events.c): what changed since the last update, queued; what the
 * API server took of a round's. */
void report_changes(struct report *r, const struct report_gpu *gpus, unsigned count);
void report_took(struct report *r, const struct report_job *j);

#endif
