/* The one way a request to the API server fails and recovers: a failure
 * is logged once until its message changes, the next try waits with
 * backoff and jitter, and the first success after failures says so once.
 * The watches, the syncs and the fault report's events share it, so that
 * every outage reads the same in the log and costs the server the same. */
#include "kube/kube.h"

#include <stdio.h>
#include <string.h>

#include "util/backoff.h"

void kube_retry_failed(struct kube_retry *r, enum log_level level, const char *what,
                       const char *msg)
{
    if (strcmp(msg, r->last))
        log_msg(level, "%s: %s; trying again with backoff", what, msg);
    snprintf(r->last, sizeof r->last, "%s", msg);
    r->failing = true;
}

unsigned kube_retry_wait(struct kube_retry *r)
{
    return backoff_next(&r->backoff_ms, KUBE_RETRY_MIN_MS, KUBE_RETRY_MAX_MS);
}

void kube_retry_ok(struct kube_retry *r, const char *what, const char *again)
{
    if (r->failing)
        log_info("%s: %s", what, again);
    r->failing = false;
    r->last[0] = '\0';
    r->backoff_ms = 0;
}
