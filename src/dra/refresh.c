/* The claims' containers, read again (the refresh timer): a pod that
 * joins a shared claim later is not prepared for again, so the claim's
 * reservedFor and its pods are read every DRA_REFRESH_MS, and
 * DRA_REFRESH_SOON_MS after a prepare (the same job as a prepare's, refresh
 * set; read.c reads it). Their containers go to metrics' pod labels. */
#include "dra/internal.h"

#include <stdio.h>
#include <string.h>

#include "util/xmalloc.h"

void dra_refresh(uv_timer_t *t)
{
    struct dra *d = t->data;
    if (d->refreshing || !d->nprepared || d->stopping)
        return;
    struct dra_job *j = xcalloc(1, sizeof *j);
    j->d = d;
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

