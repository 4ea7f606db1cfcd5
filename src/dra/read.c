/* A prepare's claims read through the agent's client, all at once: each
 * claim it has not prepared before (one prepared before is answered from
 * the checkpoint). The job goes on (dra_job_next) when the last answer is
 * in. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

static void dra_read_end(struct dra_job *j)
{
    if (--j->pending == 0)
        dra_job_next(j);
}

static void dra_claim_answer(void *ctx, const struct kube_answer *a)
{
    struct dra_job_claim *c = ctx;
    struct err e;
    if (a->status == 200)
        c->alloc = xcalloc(1, sizeof *c->alloc);
    if (!a->status)
        snprintf(c->error, sizeof c->error, "%s", a->error);
    else if (a->status != 200)
        snprintf(c->error, sizeof c->error, "GET resourceclaim %.200s/%.200s: HTTP %ld", c->ns,
                 c->name, a->status);
    else if (dra_claim_parse(a->body, a->len, c->alloc, &e) < 0)
        snprintf(c->error, sizeof c->error, "%.200s/%.200s: %.500s", c->ns, c->name, e.msg);
    else if (strcmp(c->alloc->uid, c->uid))
        snprintf(c->error, sizeof c->error, "%.200s/%.200s is claim %.64s now, not %.64s", c->ns,
                 c->name, c->alloc->uid, c->uid);
    if (c->error[0]) {
        free(c->alloc);
        c->alloc = NULL;
    }
    dra_read_end(c->job);
}

static void dra_read_claim(struct dra_job_claim *c)
{
    struct dra_job *j = c->job;
    char path[1024];
    snprintf(path, sizeof path, "/apis/" DRA_GROUP "/%s/namespaces/%s/resourceclaims/%s",
             dra_api_name(j->d->api.version), c->ns, c->name);
    j->pending++;
    kube_call(j->d->kc, &(struct kube_call_spec){.method = "GET", .path = path,
                                                 .done = dra_claim_answer, .ctx = c,
                                                 .owner = j->d});
}

static void dra_read(struct dra_job *j)
{
    struct dra *d = j->d;
    j->pending = 1; /* this loop's own: no answer ends the job before it is through */
    for (unsigned i = 0; i < j->n; i++) {
        struct dra_job_claim *c = &j->claims[i];
        c->job = j;
        if (c->known)
            continue;
        if (!d->api.version) /* the search failed: its reason */
            snprintf(c->error, sizeof c->error, "%s", d->api.error);
        else
            dra_read_claim(c);
    }
    dra_read_end(j);
}

void dra_job_queue(struct dra *d, struct dra_job *j)
{
    if (!d->api.version && !d->api.error[0]) {
        j->next = d->jobs.api; /* the first search is on */
        d->jobs.api = j;
        return;
    }
    dra_read(j);
}

void dra_job_api(struct dra *d)
{
    while (d->jobs.api) {
        struct dra_job *j = d->jobs.api;
        d->jobs.api = j->next;
        j->next = NULL;
        dra_read(j);
    }
}
