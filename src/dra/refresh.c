/* The claims' containers: from the kubelet's PodResources List where it
 * reports DRA claims (no request at all: dra_consumers_from_pods, below);
 * else read again (the refresh timer): a pod that
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

#include "podresources.pb-c.h"
#include "util/log.h"
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
    if (d->claims.refreshing || !d->claims.n || d->stopping || !d->api.version ||
        d->claims.from_pods)
        return; /* no version yet: the next round reads them; from_pods: the kubelet says */
    if (!d->claims.said_api) {
        d->claims.said_api = true;
        log_info("DRA: the claims' containers are read from the API server every %d s (a GET of "
                 "each claim and of its pods): the kubelet's PodResources List has reported no "
                 "claim of " DRA_DRIVER " (KubeletPodResourcesDynamicResources, on by default "
                 "from Kubernetes 1.34)", DRA_REFRESH_MS / 1000);
    }
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

/* --- from the kubelet's PodResources List, where it reports DRA claims ------------- */

static int dra_consumer_cmp(const void *a, const void *b)
{
    const struct dra_consumer *x = a, *y = b;
    int c = strcmp(x->ns, y->ns);
    if (!c)
        c = strcmp(x->pod, y->pod);
    return c ? c : strcmp(x->container, y->container);
}

/* Whether container ct uses claim p through this driver. */
static bool dra_container_uses(const V1__ContainerResources *ct, const struct dra_prepared *p)
{
    for (size_t k = 0; k < ct->n_dynamic_resources; k++) {
        const V1__DynamicResource *dr = ct->dynamic_resources[k];
        if (strcmp(dr->claim_namespace, p->ns) || strcmp(dr->claim_name, p->name))
            continue;
        for (size_t x = 0; x < dr->n_claim_resources; x++)
            if (!strcmp(dr->claim_resources[x]->driver_name, DRA_DRIVER))
                return true;
    }
    return false;
}

/* Whether the List reports any claim of this driver: a kubelet that does
 * (KubeletPodResourcesDynamicResources, on by default from Kubernetes
 * 1.34) says every claim's containers, so no request is needed. */
static bool dra_pods_report_claims(const V1__ListPodResourcesResponse *r)
{
    for (size_t i = 0; i < r->n_pod_resources; i++)
        for (size_t c = 0; c < r->pod_resources[i]->n_containers; c++) {
            const V1__ContainerResources *ct = r->pod_resources[i]->containers[c];
            for (size_t k = 0; k < ct->n_dynamic_resources; k++)
                for (size_t x = 0; x < ct->dynamic_resources[k]->n_claim_resources; x++)
                    if (!strcmp(ct->dynamic_resources[k]->claim_resources[x]->driver_name, DRA_DRIVER))
                        return true;
        }
    return false;
}

void dra_consumers_from_pods(struct dra *d, const V1__ListPodResourcesResponse *r)
{
    if (!d->claims.from_pods && dra_pods_report_claims(r)) {
        d->claims.from_pods = true;
        log_info("DRA: the claims' containers come from the kubelet's PodResources List: no "
                 "request to the API server for them");
    }
    if (!d->claims.from_pods || d->claims.loading)
        return;
    bool changed = false;
    struct dra_consumer found[DRA_MAX_CONSUMERS];
    for (unsigned i = 0; i < d->claims.n; i++) {
        struct dra_prepared *p = &d->claims.prepared[i];
        unsigned n = 0;
        for (size_t k = 0; k < r->n_pod_resources && n < DRA_MAX_CONSUMERS; k++) {
            const V1__PodResources *pod = r->pod_resources[k];
            for (size_t c = 0; c < pod->n_containers && n < DRA_MAX_CONSUMERS; c++)
                if (dra_container_uses(pod->containers[c], p)) {
                    snprintf(found[n].pod, sizeof found[n].pod, "%s", pod->name);
                    snprintf(found[n].ns, sizeof found[n].ns, "%s", pod->namespace_);
                    snprintf(found[n].container, sizeof found[n].container, "%s",
                             pod->containers[c]->name);
                    n++;
                }
        }
        qsort(found, n, sizeof *found, dra_consumer_cmp);
        if (n == p->nconsumers && (!n || !memcmp(found, p->consumers, n * sizeof *found)))
            continue;
        free(p->consumers);
        p->consumers = n ? xmalloc(n * sizeof *found) : NULL;
        if (n)
            memcpy(p->consumers, found, n * sizeof *found);
        p->nconsumers = n;
        changed = true;
    }
    if (changed)
        dra_claims_changed(d);
}
