/* The claims' containers, read again (the refresh timer): a pod that
 * joins a shared claim later is not prepared for again, so the claim's
 * reservedFor and its pods are read every DRA_REFRESH_MS, and
 * DRA_REFRESH_SOON_MS after a prepare, on the worker pool (the same job as
 * a prepare's, refresh set). Their containers go to metrics' pod labels. */
#include "dra/internal.h"

#include <stdio.h>
#include <string.h>

#include "util/xmalloc.h"

/* The containers of the claim's pods (for metrics; a failure only leaves
 * them unknown). */
void dra_job_consumers(const struct dra *d, struct dra_job_claim *c, const struct strbuf *body)
{
    char pods[DRA_MAX_CONSUMERS][128], path[1024], error[512];
    unsigned n = dra_claim_pods(body->data ? body->data : "", body->len, pods, DRA_MAX_CONSUMERS);
    for (unsigned i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/api/v1/namespaces/%.255s/pods/%.127s", c->ns, pods[i]);
        struct kube_response r = {0};
        int rc = dra_get(d, path, &r, error, sizeof error);
        if (rc == 0)
            c->nconsumers = dra_pod_consumers(r.body.data ? r.body.data : "", r.body.len, c->name,
                                              c->consumers, c->nconsumers, DRA_MAX_CONSUMERS);
        kube_response_free(&r);
        if (rc < 0)
            return;
    }
    c->have_consumers = true;
}

void dra_refresh(uv_timer_t *t)
{
    struct dra *d = t->data;
    if (d->refreshing || !d->nprepared || d->stopping)
        return;
    struct dra_job *j = xcalloc(1, sizeof *j);
    j->d = d;
    j->api = d->api;
    j->refresh = true;
    j->work.data = j;
    j->claims = xcalloc(d->nprepared, sizeof *j->claims);
    for (unsigned i = 0; i < d->nprepared; i++) {
        struct dra_job_claim *c = &j->claims[j->n++];
        snprintf(c->ns, sizeof c->ns, "%s", d->prepared[i].ns);
        snprintf(c->name, sizeof c->name, "%s", d->prepared[i].name);
        snprintf(c->uid, sizeof c->uid, "%s", d->prepared[i].uid);
        c->known = true;
    }
    d->refreshing = true;
    dra_job_queue(d, j);
}

