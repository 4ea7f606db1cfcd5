/* NodePrepareResources and NodeUnprepareResources. The kubelet names the
 * claims only: their allocations are read from the API server on libuv's
 * worker pool, then mapped to the node's GPUs and answered with the CDI
 * device of each (nvidia.com/gpu=<uuid>, from gpulet's own spec). A claim
 * prepared before (the checkpoint) is answered the same without asking. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dra.pb-c.h"
#include "util/arena.h"
#include "util/log.h"
#include "util/xmalloc.h"

void dra_reply(struct grpc_call *call, const ProtobufCMessage *m)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = xmalloc(len + 1);
    protobuf_c_message_pack(m, buf);
    grpc_call_send(call, buf, len);
    grpc_call_finish(call, GRPC_OK, NULL);
    free(buf);
}

struct dra_job_claim {
    char ns[256], name[256], uid[64];
    bool known;                       /* prepared before: the checkpoint answers */
    struct dra_allocation alloc;      /* written by the job's thread */
    char error[1024];
};

struct dra_job {
    uv_work_t work;
    struct dra *d;
    struct grpc_call *call;           /* NULL once the kubelet went away */
    unsigned n;
    struct dra_job_claim *claims;
};

/* On the worker: each claim not prepared before, from the API server. */
static void dra_job_work(uv_work_t *w)
{
    struct dra_job *j = w->data;
    for (unsigned i = 0; i < j->n; i++) {
        struct dra_job_claim *c = &j->claims[i];
        if (c->known)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "/apis/resource.k8s.io/v1beta1/namespaces/%s/resourceclaims/%s",
                 c->ns, c->name);
        struct kube_response r = {0};
        struct err e;
        if (kube_request(&j->d->creds, "GET", path, NULL, NULL, &r, NULL, &e) < 0)
            snprintf(c->error, sizeof c->error, "%s", e.msg);
        else if (r.status != 200)
            snprintf(c->error, sizeof c->error, "GET %.400s: HTTP %ld", path, r.status);
        else if (dra_claim_parse(r.body.data ? r.body.data : "", r.body.len, &c->alloc, &e) < 0)
            snprintf(c->error, sizeof c->error, "%.200s/%.200s: %.500s", c->ns, c->name, e.msg);
        else if (strcmp(c->alloc.uid, c->uid))
            snprintf(c->error, sizeof c->error, "%.200s/%.200s is claim %.64s now, not %.64s", c->ns, c->name,
                     c->alloc.uid, c->uid);
        kube_response_free(&r);
    }
}

/* The GPU a result names on this node, and its MIG device (*mig, 0 for
 * the GPU whole), or -1 with why. */
static int dra_result_gpu(const struct dra *d, const struct dra_result *r, unsigned *mig, char *why,
                          size_t len)
{
    if (strcmp(r->pool, d->node)) {
        snprintf(why, len, "device %s is in pool %s, not this node's (%s)", r->device, r->pool, d->node);
        return -1;
    }
    for (unsigned i = 0; i < d->inv->count; i++) {
        const struct gpu_info *g = &d->inv->gpus[i];
        for (unsigned k = 0; k <= dra_migs(g); k++) {
            char name[64];
            dra_device_name(g, k, name, sizeof name);
            if (strcmp(name, r->device))
                continue;
            if (!config_dra_takes(d->cfg, g)) {
                snprintf(why, len, "device %s (%s) is the device plugin's here, not DRA's (--dra-gpus)",
                         name, g->uuid);
                return -1;
            }
            if (!dra_publishes(d->cfg, d->inv, d->devs, i, k)) {
                const struct gpu_health *h = k ? &d->devs[i].mig_health[k - 1] : &d->devs[i].health;
                snprintf(why, len, "device %s (%s) is unhealthy or not published: %s", name,
                         k ? g->mig[k - 1].uuid : g->uuid,
                         d->devs[i].health.reason != HEALTH_OK ? d->devs[i].health.detail : h->detail);
                return -1;
            }
            *mig = k;
            return (int)i;
        }
    }
    snprintf(why, len, "this node has no device %s", r->device);
    return -1;
}

/* The allocation as prepared devices; false with why where one cannot be. */
static bool dra_job_map(struct dra *d, const struct dra_job_claim *c, struct dra_prepared *p,
                        char *why, size_t len)
{
    memset(p, 0, sizeof *p);
    snprintf(p->uid, sizeof p->uid, "%s", c->uid);
    for (unsigned k = 0; k < c->alloc.count; k++) {
        unsigned mig = 0;
        int g = dra_result_gpu(d, &c->alloc.results[k], &mig, why, len);
        if (g < 0)
            return false;
        struct dra_prepared_device *pd = &p->devs[p->count++];
        snprintf(pd->request, sizeof pd->request, "%s", c->alloc.results[k].request);
        snprintf(pd->device, sizeof pd->device, "%s", c->alloc.results[k].device);
        /* gpulet's CDI spec names each GPU and each MIG device by its UUID. */
        snprintf(pd->uuid, sizeof pd->uuid, "%s",
                 mig ? d->inv->gpus[g].mig[mig - 1].uuid : d->inv->gpus[g].uuid);
    }
    return true;
}

static Drav1beta1__NodePrepareResourceResponse *dra_answer(struct arena *a, const struct dra *d,
                                                           const struct dra_prepared *p,
                                                           const char *error)
{
    Drav1beta1__NodePrepareResourceResponse *r = arena_alloc(a, sizeof *r);
    drav1beta1__node_prepare_resource_response__init(r);
    if (error) {
        r->error = arena_strdup(a, error);
        return r;
    }
    r->devices = arena_alloc(a, (p->count + 1) * sizeof *r->devices);
    for (unsigned k = 0; k < p->count; k++) {
        Drav1beta1__Device *dev = arena_alloc(a, sizeof *dev);
        drav1beta1__device__init(dev);
        dev->n_request_names = 1;
        dev->request_names = arena_alloc(a, sizeof *dev->request_names);
        dev->request_names[0] = arena_strdup(a, p->devs[k].request);
        dev->pool_name = arena_strdup(a, d->node);
        dev->device_name = arena_strdup(a, p->devs[k].device);
        dev->n_cdi_device_ids = 1;
        dev->cdi_device_ids = arena_alloc(a, sizeof *dev->cdi_device_ids);
        dev->cdi_device_ids[0] = arena_printf(a, "nvidia.com/gpu=%s", p->devs[k].uuid);
        r->devices[r->n_devices++] = dev;
    }
    return r;
}

/* One claim's answer: the checkpoint's, a new preparation, or an error. */
static Drav1beta1__NodePrepareResourceResponse *dra_job_claim_answer(struct arena *a, struct dra *d,
                                                                     struct dra_job_claim *c,
                                                                     bool *changed)
{
    const struct dra_prepared *known = dra_prepared_find(d, c->uid);
    if (known)
        return dra_answer(a, d, known, NULL);
    struct dra_prepared p;
    char why[512];
    if (c->known) /* its allocation was not read: the checkpoint had it */
        snprintf(c->error, sizeof c->error, "claim %s was unprepared while being prepared", c->uid);
    if (c->error[0] || !dra_job_map(d, c, &p, why, sizeof why)) {
        const char *msg = c->error[0] ? c->error : why;
        log_warn("DRA: claim %s/%s (%s) not prepared: %s", c->ns, c->name, c->uid, msg);
        return dra_answer(a, d, NULL, msg);
    }
    d->prepared = xrealloc(d->prepared, (d->nprepared + 1) * sizeof *d->prepared);
    d->prepared[d->nprepared++] = p;
    *changed = true;
    log_info("DRA: prepared claim %s/%s (%s): %u device(s)", c->ns, c->name, c->uid, p.count);
    return dra_answer(a, d, &p, NULL);
}

static void dra_job_done(uv_work_t *w, int status)
{
    (void)status;
    struct dra_job *j = w->data;
    struct dra *d = j->d;
    d->jobs--;
    if (j->call && !d->stopping) {
        struct arena a = {0};
        Drav1beta1__NodePrepareResourcesResponse resp = DRAV1BETA1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
        resp.claims = arena_alloc(&a, (j->n + 1) * sizeof *resp.claims);
        bool changed = false;
        for (unsigned i = 0; i < j->n; i++) {
            Drav1beta1__NodePrepareResourcesResponse__ClaimsEntry *entry = arena_alloc(&a, sizeof *entry);
            drav1beta1__node_prepare_resources_response__claims_entry__init(entry);
            entry->key = j->claims[i].uid;
            entry->value = dra_job_claim_answer(&a, d, &j->claims[i], &changed);
            resp.claims[resp.n_claims++] = entry;
        }
        struct err e;
        if (changed && dra_checkpoint_save(d, &e) < 0)
            log_error("DRA: %s; a restarted gpulet will not know these claims", e.msg);
        dra_reply(j->call, &resp.base);
        arena_free(&a);
    }
    free(j->claims);
    free(j);
    dra_maybe_free(d);
}

static void dra_job_cancelled(struct grpc_call *call, void *ctx)
{
    (void)call;
    struct dra_job *j = ctx;
    j->call = NULL;
}

void dra_prepare(struct dra *d, struct grpc_call *call, const uint8_t *msg, size_t len)
{
    Drav1beta1__NodePrepareResourcesRequest *req =
        drav1beta1__node_prepare_resources_request__unpack(NULL, len, msg);
    if (!req) {
        grpc_call_finish(call, GRPC_INVALID_ARGUMENT, "not a NodePrepareResourcesRequest");
        return;
    }
    struct dra_job *j = xcalloc(1, sizeof *j);
    j->d = d;
    j->call = call;
    j->work.data = j;
    j->claims = xcalloc(req->n_claims + 1, sizeof *j->claims);
    for (size_t i = 0; i < req->n_claims; i++) {
        const Drav1beta1__Claim *c = req->claims[i];
        struct dra_job_claim *jc = &j->claims[j->n++];
        snprintf(jc->ns, sizeof jc->ns, "%s", c->namespace_ ? c->namespace_ : "");
        snprintf(jc->name, sizeof jc->name, "%s", c->name ? c->name : "");
        snprintf(jc->uid, sizeof jc->uid, "%s", c->uid ? c->uid : "");
        jc->known = dra_prepared_find(d, jc->uid) != NULL;
    }
    drav1beta1__node_prepare_resources_request__free_unpacked(req, NULL);
    grpc_call_on_cancel(call, dra_job_cancelled, j);
    d->jobs++;
    uv_queue_work(d->loop, &j->work, dra_job_work, dra_job_done);
}

void dra_unprepare(struct dra *d, struct grpc_call *call, const uint8_t *msg, size_t len)
{
    Drav1beta1__NodeUnprepareResourcesRequest *req =
        drav1beta1__node_unprepare_resources_request__unpack(NULL, len, msg);
    if (!req) {
        grpc_call_finish(call, GRPC_INVALID_ARGUMENT, "not a NodeUnprepareResourcesRequest");
        return;
    }
    struct arena a = {0};
    Drav1beta1__NodeUnprepareResourcesResponse resp = DRAV1BETA1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
    resp.claims = arena_alloc(&a, (req->n_claims + 1) * sizeof *resp.claims);
    bool changed = false;
    for (size_t i = 0; i < req->n_claims; i++) {
        const char *uid = req->claims[i]->uid ? req->claims[i]->uid : "";
        struct dra_prepared *p = dra_prepared_find(d, uid);
        if (p) {
            log_info("DRA: unprepared claim %s/%s (%s)", req->claims[i]->namespace_,
                     req->claims[i]->name, uid);
            *p = d->prepared[--d->nprepared];
            changed = true;
        }
        Drav1beta1__NodeUnprepareResourcesResponse__ClaimsEntry *entry = arena_alloc(&a, sizeof *entry);
        drav1beta1__node_unprepare_resources_response__claims_entry__init(entry);
        entry->key = arena_strdup(&a, uid);
        entry->value = arena_alloc(&a, sizeof *entry->value);
        drav1beta1__node_unprepare_resource_response__init(entry->value);
        resp.claims[resp.n_claims++] = entry;
    }
    drav1beta1__node_unprepare_resources_request__free_unpacked(req, NULL);
    struct err e;
    if (changed && dra_checkpoint_save(d, &e) < 0)
        log_error("DRA: %s", e.msg);
    dra_reply(call, &resp.base);
    arena_free(&a);
}
