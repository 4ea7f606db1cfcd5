/* The claims' containers, read again (the refresh timer): a pod that
 * joins a shared claim later is not prepared for again, so each prepared
 * claim's reservedFor, then its pods, are read every DRA_REFRESH_MS, and
 * DRA_REFRESH_SOON_MS after a prepare. Their containers go to metrics'
 * pod labels (and the checkpoint). A refresh is a small job of its own:
 * a claim's name and, once its pods are read, their containers; a failure
 * only leaves a claim's containers as they were. One at a time. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

struct dra_refresh_claim {
    struct dra_refresh *r;
    char ns[256], name[256], uid[64];
    bool read;                        /* every pod of it answered: consumers is right */
    unsigned nconsumers;
    struct dra_consumer *consumers;   /* DRA_MAX_CONSUMERS, once the claim names pods */
};

struct dra_refresh {
    struct dra *d;
    unsigned n, pending;              /* claims; requests in flight */
    struct dra_refresh_claim claims[];
};

static bool dra_refresh_same(const struct dra_prepared *p, const struct dra_refresh_claim *c)
{
    return p->nconsumers == c->nconsumers &&
           (!c->nconsumers || !memcmp(p->consumers, c->consumers, c->nconsumers * sizeof *c->consumers));
}

/* Every answer is in: the containers of the claims still prepared, set
 * where they changed. */
static void dra_refresh_end(struct dra_refresh *r)
{
    struct dra *d = r->d;
    bool changed = false;
    for (unsigned i = 0; i < r->n; i++) {
        struct dra_refresh_claim *c = &r->claims[i];
        struct dra_prepared *p = c->read && !d->stopping ? dra_prepared_find(d, c->uid) : NULL;
        if (p && !dra_refresh_same(p, c)) {
            free(p->consumers);
            p->consumers = NULL;
            p->nconsumers = c->nconsumers;
            if (c->nconsumers) { /* moved, cut to size */
                p->consumers = xrealloc(c->consumers, c->nconsumers * sizeof *c->consumers);
                c->consumers = NULL;
            }
            changed = true;
        }
        free(c->consumers);
    }
    if (changed)
        dra_claims_changed(d);
    d->claims.refreshing = false;
    free(r);
    d->jobs.n--;
    dra_maybe_free(d);
}

static void dra_refresh_answered(struct dra_refresh *r)
{
    if (--r->pending == 0)
        dra_refresh_end(r);
}

static void dra_refresh_pod(void *ctx, const struct kube_answer *a)
{
    struct dra_refresh_claim *c = ctx;
    if (a->status == 200)
        c->nconsumers = dra_pod_consumers(a->body, a->len, c->name, c->consumers, c->nconsumers,
                                          DRA_MAX_CONSUMERS);
    else
        c->read = false;
    dra_refresh_answered(c->r);
}

static void dra_refresh_get(struct dra_refresh *r, const char *path, kube_done_fn done, void *ctx)
{
    r->pending++;
    kube_call(r->d->kc, &(struct kube_call_spec){.method = "GET", .path = path, .done = done,
                                                 .ctx = ctx, .owner = r->d});
}

/* The claim: the pods it is reserved for, each read in turn. */
static void dra_refresh_claim(void *ctx, const struct kube_answer *a)
{
    struct dra_refresh_claim *c = ctx;
    char pods[DRA_MAX_CONSUMERS][128], path[1024];
    int n = a->status == 200 && !c->r->d->stopping
                ? dra_claim_pods(a->body, a->len, c->uid, pods, DRA_MAX_CONSUMERS) : -1;
    if (n >= 0) { /* read, and still the claim prepared */
        c->read = true;
        if (n)
            c->consumers = xcalloc(DRA_MAX_CONSUMERS, sizeof *c->consumers);
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "/api/v1/namespaces/%.255s/pods/%.127s", c->ns, pods[i]);
            dra_refresh_get(c->r, path, dra_refresh_pod, c);
        }
    }
    dra_refresh_answered(c->r);
}

void dra_refresh(uv_timer_t *t)
{
    struct dra *d = t->data;
    if (d->claims.failing && !d->stopping && !writer_busy(d->claims.writer))
        dra_claims_changed(d); /* the last checkpoint failed: written again, each round */
    if (d->claims.refreshing || !d->claims.n || d->stopping || !d->api.version)
        return; /* no version yet: the next round reads them */
    struct dra_refresh *r = xcalloc(1, sizeof *r + d->claims.n * sizeof *r->claims);
    r->d = d;
    r->n = d->claims.n;
    r->pending = 1; /* this loop's own: no answer ends the refresh before it is through */
    d->claims.refreshing = true;
    d->jobs.n++;
    for (unsigned i = 0; i < r->n; i++) {
        struct dra_refresh_claim *c = &r->claims[i];
        char path[1024];
        c->r = r;
        snprintf(c->ns, sizeof c->ns, "%s", d->claims.prepared[i].ns);
        snprintf(c->name, sizeof c->name, "%s", d->claims.prepared[i].name);
        snprintf(c->uid, sizeof c->uid, "%s", d->claims.prepared[i].uid);
        snprintf(path, sizeof path, "/apis/" DRA_GROUP "/%s/namespaces/%s/resourceclaims/%s",
                 dra_api_name(d->api.version), c->ns, c->name);
        dra_refresh_get(r, path, dra_refresh_claim, c);
    }
    dra_refresh_answered(r);
}
