/* NodePrepareResources and NodeUnprepareResources. The kubelet names the
 * claims only; a prepare is a job that runs through the stages of enum
 * dra_stage (internal.h) in dra_job_next, below, top to bottom: its
 * claims' allocations read from the API server (read.c), mapped to the
 * node's GPUs (map.c) with their time slices set (timeslice.c), MIG
 * devices made (claim_mig.c), recorded with their MPS daemons started
 * (claim_mps.c), the files its answer names on disk (the checkpoint, the
 * CDI specs), the daemons up, and the answer: the CDI devices of each
 * claim (nvidia.com/gpu=<uuid>, from gpulet's own spec). A claim prepared
 * before (the checkpoint) is answered the same without asking. An
 * unprepare answers once the checkpoint without its claims is on disk. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cdi/cdi.h"
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

#define DRA_MPS_WAIT_MS 15000    /* a prepare waits this long for its claim's MPS daemon */

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
    bool mps = false;
    for (unsigned k = 0; k < p->count; k++) {
        Drav1beta1__Device *dev = arena_alloc(a, sizeof *dev);
        drav1beta1__device__init(dev);
        dev->n_request_names = 1;
        dev->request_names = arena_alloc(a, sizeof *dev->request_names);
        dev->request_names[0] = arena_strdup(a, p->devs[k].request);
        dev->pool_name = arena_strdup(a, d->node);
        dev->device_name = arena_strdup(a, p->devs[k].device);
        if (p->devs[k].share_id[0])
            dev->share_id = arena_strdup(a, p->devs[k].share_id);
        dev->cdi_device_ids = arena_alloc(a, 2 * sizeof *dev->cdi_device_ids);
        dev->cdi_device_ids[dev->n_cdi_device_ids++] = arena_printf(a, CDI_KIND "=%s", p->devs[k].uuid);
        /* The claim's MPS edits once: the runtime would mount them twice. */
        if (p->devs[k].strategy == GPU_SHARING_MPS && !mps) {
            dev->cdi_device_ids[dev->n_cdi_device_ids++] =
                arena_printf(a, DRA_CLAIM_CDI_KIND "=%s", p->uid);
            mps = true;
        }
        r->devices[r->n_devices++] = dev;
    }
    return r;
}

/* Maps the claims of a prepare not prepared before to the node's devices
 * (on the loop). */
static void dra_job_map_all(struct dra *d, struct dra_job *j)
{
    for (unsigned i = 0; i < j->n; i++) {
        struct dra_job_claim *c = &j->claims[i];
        char why[512];
        if (c->known || c->cancelled || c->error[0] || !c->alloc || dra_prepared_find(d, c->uid))
            continue;
        if (!dra_map(d, c->uid, c->ns, c->name, c->alloc, &c->p, why, sizeof why))
            snprintf(c->error, sizeof c->error, "%.200s/%.200s: %s", c->ns, c->name, why);
    }
}

/* One claim of a prepare not prepared before, mapped, on the loop:
 * recorded (with its MPS daemon started), or its error set. */
static void dra_job_settle(struct dra *d, struct dra_job *j, struct dra_job_claim *c, bool *changed)
{
    struct dra_prepared *p = &c->p;
    struct err e;
    if (c->known || c->cancelled) /* known: not read, the checkpoint had it */
        snprintf(c->error, sizeof c->error, "claim %s was unprepared while being prepared", c->uid);
    else if (!c->error[0] && dra_mps_start(d, p, j, &e) < 0)
        snprintf(c->error, sizeof c->error, "%.200s/%.200s: %s", c->ns, c->name, e.msg);
    if (c->error[0]) {
        log_warn("DRA: claim %s/%s (%s) not prepared: %s", c->ns, c->name, c->uid, c->error);
        if (c->timeslice_set)
            dra_timeslice_reset(d, p); /* set on the lanes: back to Default */
        dra_mig_unmake(d, p);          /* and the MIG devices made for it go */
        return;
    }
    struct dra_prepared *held = dra_claims_add(&d->claims);
    *held = *p;
    p->devs = NULL; /* moved: the driver's record holds them now */
    p->count = 0;
    p->consumers = NULL;
    p->nconsumers = 0;
    p = held;
    *changed = true;
    log_info("DRA: prepared claim %s/%s (%s): %u device(s)%s%s, in %.1f ms", c->ns, c->name, c->uid,
             p->count, dra_prepared_mps(p) ? ", MPS" : "",
             dra_timeslice_wanted(p) ? ", time slice set" : "",
             (double)(uv_hrtime() - j->begun_ns) / 1e6);
}

/* Whether every claim of j has its answer: an error, or its MPS daemon up. */
static bool dra_job_ready(const struct dra_job *j)
{
    for (unsigned i = 0; i < j->n; i++)
        if (!j->claims[i].error[0] && !dra_mps_ready(j->d, j->claims[i].uid))
            return false;
    return true;
}

static void dra_job_reply(struct dra_job *j)
{
    struct dra *d = j->d;
    if (!j->call || d->stopping)
        return;
    struct arena a = {0};
    Drav1beta1__NodePrepareResourcesResponse resp = DRAV1BETA1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
    resp.claims = arena_alloc(&a, (j->n + 1) * sizeof *resp.claims);
    for (unsigned i = 0; i < j->n; i++) {
        struct dra_job_claim *c = &j->claims[i];
        const struct dra_prepared *p = c->error[0] ? NULL : dra_prepared_find(d, c->uid);
        if (!c->error[0] && (!p || c->cancelled))
            snprintf(c->error, sizeof c->error, "claim %s was unprepared while being prepared", c->uid);
        else if (p && j->write_error[0])
            snprintf(c->error, sizeof c->error, "claim %s/%s is prepared, but a file it needs was not "
                     "written (%s); gpulet writes it again: ask again", c->ns, c->name, j->write_error);
        else if (p && !dra_mps_ready(d, c->uid))
            snprintf(c->error, sizeof c->error, "the MPS daemon of claim %s/%s is not up after %d s "
                     "(gpulet's log says why); it keeps trying", c->ns, c->name, DRA_MPS_WAIT_MS / 1000);
        Drav1beta1__NodePrepareResourcesResponse__ClaimsEntry *entry = arena_alloc(&a, sizeof *entry);
        drav1beta1__node_prepare_resources_response__claims_entry__init(entry);
        entry->key = c->uid;
        entry->value = dra_answer(&a, d, p, c->error[0] ? c->error : NULL);
        resp.claims[resp.n_claims++] = entry;
    }
    dra_reply(j->call, &resp.base);
    arena_free(&a);
}

static void dra_job_begin(struct dra_job *j);

/* Whether a prepare before j, not yet past its files, has one of j's
 * claims: j then waits, and answers from what that one recorded. */
static bool dra_job_behind(const struct dra_job *j)
{
    for (const struct dra_job *k = j->d->jobs.active; k && k != j; k = k->active_next) {
        if (k->blocked || k->stage > DRA_FILES)
            continue;
        for (unsigned a = 0; a < k->n; a++)
            for (unsigned b = 0; b < j->n; b++)
                if (!strcmp(k->claims[a].uid, j->claims[b].uid))
                    return true;
    }
    return false;
}

/* Begins each prepare that waited behind another and need not now (the
 * list is read again after each: a begun one may end at once). */
static void dra_jobs_unblock(struct dra *d)
{
    for (bool again = true; again;) {
        again = false;
        for (struct dra_job *j = d->jobs.active; j; j = j->active_next)
            if (j->blocked && !dra_job_behind(j)) {
                j->blocked = false;
                dra_job_begin(j);
                again = true;
                break;
            }
    }
}

static void dra_job_freed(struct dra_job *j)
{
    struct dra *d = j->d;
    struct dra_job **at = &d->jobs.active;
    while (*at && *at != j)
        at = &(*at)->active_next;
    if (*at)
        *at = j->active_next;
    if (!d->stopping)
        dra_jobs_unblock(d);
    for (unsigned i = 0; i < j->n; i++) {
        dra_prepared_free(&j->claims[i].p); /* a claim not settled: its mapping */
        free(j->claims[i].alloc);
    }
    free(j->claims);
    free(j);
    d->jobs.n--;
    dra_maybe_free(d);
}

static void dra_job_closed(uv_handle_t *h)
{
    dra_job_freed(h->data);
}

static void dra_job_free(struct dra_job *j)
{
    if (j->writes) { /* a write still names j: freed at its end */
        j->freeing = true;
        return;
    }
    if (j->timer_used)
        uv_close((uv_handle_t *)&j->timer, dra_job_closed);
    else
        dra_job_freed(j);
}

static void dra_job_unwait(struct dra_job *j)
{
    struct dra_job **at = &j->d->jobs.daemons;
    while (*at != j)
        at = &(*at)->next;
    *at = j->next;
}

static void dra_job_timeout(uv_timer_t *t)
{
    struct dra_job *j = t->data;
    dra_job_unwait(j);
    dra_job_next(j); /* answered: a daemon not up is that claim's error */
}

void dra_prepare_wake(struct dra *d)
{
    for (struct dra_job *j = d->jobs.daemons, *next; j; j = next) {
        next = j->next;
        if (j->call && !dra_job_ready(j))
            continue;
        dra_job_unwait(j);
        dra_job_next(j);
    }
}

void dra_prepare_stop(struct dra *d)
{
    while (d->jobs.daemons) {
        struct dra_job *j = d->jobs.daemons;
        dra_job_unwait(j);
        dra_job_free(j);
    }
    for (struct dra_job *j = d->jobs.active, *next; j; j = next) {
        next = j->active_next;
        if (j->blocked) /* never begun: nothing of it elsewhere */
            dra_job_free(j);
    }
}

static void dra_job_written(void *ctx, const struct err *e, bool written)
{
    (void)written;
    struct dra_job *j = ctx;
    if (e) /* the file's owner logs it; the answer says it */
        snprintf(j->write_error, sizeof j->write_error, "%.255s", e->msg);
    if (--j->writes)
        return;
    if (j->freeing)
        dra_job_free(j);
    else if (j->stage == DRA_FILES) /* waiting for them: on it goes */
        dra_job_next(j);
}

void dra_job_wait(struct dra_job *j, struct writer *w)
{
    j->writes++;
    writer_then(w, dra_job_written, j);
}

/* The claims of j not prepared before, recorded; the answer waits for
 * the checkpoint that holds them. */
static void dra_job_settle_all(struct dra *d, struct dra_job *j)
{
    bool changed = false;
    for (unsigned i = 0; i < j->n; i++)
        if (!dra_prepared_find(d, j->claims[i].uid))
            dra_job_settle(d, j, &j->claims[i], &changed);
    if (changed || d->claims.failing) /* a failed write: this prepare writes it again */
        dra_claims_changed(d);
    if (d->claims.writer) /* the answer waits for the checkpoint that holds its claims */
        dra_job_wait(j, d->claims.writer);
    if (changed) /* their containers, once they are there */
        uv_timer_start(&d->claims.refresh, dra_refresh, DRA_REFRESH_SOON_MS, DRA_REFRESH_MS);
}

/* Waits for the claims' MPS daemons (dra_prepare_wake, or the timeout,
 * comes back); false when none is starting. */
static bool dra_job_wait_daemons(struct dra *d, struct dra_job *j)
{
    if (dra_job_ready(j))
        return false;
    uv_timer_init(d->loop, &j->timer);
    j->timer.data = j;
    j->timer_used = true;
    uv_timer_start(&j->timer, dra_job_timeout, DRA_MPS_WAIT_MS, 0);
    j->next = d->jobs.daemons;
    d->jobs.daemons = j;
    return true;
}

/* A prepare from where it is to its answer, stage by stage (enum
 * dra_stage): each stage does its work and goes on, or returns where the
 * work is elsewhere (a GPU's lane, the disk, a daemon),
 * whose end comes back here. A prepare whose kubelet went away before its
 * claims were mapped ends there; one mapped is settled all the same (the
 * kubelet asks again, and finds it prepared). */
void dra_job_next(struct dra_job *j)
{
    struct dra *d = j->d;
    for (;;) {
        if (d->stopping || (!j->call && j->stage <= DRA_MAP)) {
            dra_job_free(j);
            return;
        }
        switch (j->stage) {
        case DRA_READ: /* read (read.c): on to the rest */
            j->stage = DRA_MAP;
            break;
        case DRA_MAP:
            dra_job_map_all(d, j);
            j->stage = DRA_LANES;
            break;
        case DRA_LANES: /* back here once the lanes are done with them */
            j->stage = DRA_SETTLE;
            dra_mig_make(d, j);
            dra_timeslice_set(d, j);
            if (j->making)
                return;
            break;
        case DRA_SETTLE:
            dra_job_settle_all(d, j);
            j->stage = DRA_FILES;
            break;
        case DRA_FILES:
            if (j->writes) /* back here from dra_job_written */
                return;
            j->stage = DRA_DAEMONS;
            dra_jobs_unblock(d); /* a repeated prepare behind it answers from its files */
            break;
        case DRA_DAEMONS:
            j->stage = DRA_ANSWER;
            if (dra_job_wait_daemons(d, j))
                return;
            break;
        case DRA_ANSWER:
            dra_job_reply(j);
            dra_job_free(j);
            return;
        }
    }
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
    j->begun_ns = uv_hrtime();
    j->claims = xcalloc(req->n_claims + 1, sizeof *j->claims);
    for (size_t i = 0; i < req->n_claims; i++) {
        const Drav1beta1__Claim *c = req->claims[i];
        struct dra_job_claim *jc = &j->claims[j->n++];
        snprintf(jc->ns, sizeof jc->ns, "%s", c->namespace_ ? c->namespace_ : "");
        snprintf(jc->name, sizeof jc->name, "%s", c->name ? c->name : "");
        snprintf(jc->uid, sizeof jc->uid, "%s", c->uid ? c->uid : "");
    }
    drav1beta1__node_prepare_resources_request__free_unpacked(req, NULL);
    grpc_call_on_cancel(call, dra_job_cancelled, j);
    d->jobs.n++; /* d outlives it */
    struct dra_job **at = &d->jobs.active;
    while (*at)
        at = &(*at)->active_next;
    *at = j;
    if (dra_job_behind(j))
        j->blocked = true; /* begun once the earlier one's files are on disk */
    else
        dra_job_begin(j);
}

/* A prepare begins: its claims prepared before (the checkpoint, or an
 * earlier prepare) are answered the same; the others are read. */
static void dra_job_begin(struct dra_job *j)
{
    for (unsigned i = 0; i < j->n; i++)
        j->claims[i].known = dra_prepared_find(j->d, j->claims[i].uid) != NULL;
    dra_job_queue(j->d, j);
}

/* The claim uid in a prepare not yet settled: cancelled, so that it is
 * never recorded, and what it made (MIG devices, a time slice) is undone
 * where it settles; that prepare answers it with an error. */
static void dra_prepare_cancel(struct dra *d, const char *uid)
{
    for (struct dra_job *j = d->jobs.active; j; j = j->active_next)
        for (unsigned i = 0; j->stage < DRA_FILES && i < j->n; i++)
            if (!strcmp(j->claims[i].uid, uid) && !j->claims[i].cancelled) {
                j->claims[i].cancelled = true;
                log_info("DRA: claim %s/%s (%s) unprepared while being prepared: it is not kept",
                         j->claims[i].ns, j->claims[i].name, uid);
            }
}

/* An unprepare's answer, sent once the checkpoint without its claims is
 * on disk: a gpulet killed before would otherwise adopt them again. */
struct dra_unprepared {
    struct dra *d;
    struct grpc_call *call; /* NULL once the kubelet went away */
    uint8_t *buf;
    size_t len;
};

static void dra_unprepare_cancelled(struct grpc_call *call, void *ctx)
{
    (void)call;
    struct dra_unprepared *u = ctx;
    u->call = NULL;
}

static void dra_unprepare_written(void *ctx, const struct err *e, bool written)
{
    (void)written;
    struct dra_unprepared *u = ctx;
    struct dra *d = u->d;
    if (u->call && !d->stopping && e) { /* not done: a gpulet restarted now would keep them */
        char why[700];
        snprintf(why, sizeof why, "the checkpoint without these claims was not written (%.500s); "
                 "gpulet writes it again: ask again", e->msg);
        grpc_call_finish(u->call, GRPC_UNAVAILABLE, why);
    } else if (u->call && !d->stopping) {
        grpc_call_send(u->call, u->buf, u->len);
        grpc_call_finish(u->call, GRPC_OK, NULL);
    }
    free(u->buf);
    free(u);
    d->jobs.n--;
    dra_maybe_free(d);
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
        dra_prepare_cancel(d, uid);
        if (p) {
            log_info("DRA: unprepared claim %s/%s (%s)", req->claims[i]->namespace_,
                     req->claims[i]->name, uid);
            dra_mps_stop(d, uid);
            dra_timeslice_reset(d, p);
            dra_mig_unmake(d, p);
            dra_prepared_free(p);
            *p = d->claims.prepared[--d->claims.n];
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
    if (!changed && !d->claims.failing) {
        dra_reply(call, &resp.base);
        arena_free(&a);
        return;
    }
    struct dra_unprepared *u = xcalloc(1, sizeof *u);
    u->d = d;
    u->call = call;
    u->len = protobuf_c_message_get_packed_size(&resp.base);
    u->buf = xmalloc(u->len + 1);
    protobuf_c_message_pack(&resp.base, u->buf);
    arena_free(&a);
    d->jobs.n++; /* d outlives the answer */
    grpc_call_on_cancel(call, dra_unprepare_cancelled, u);
    dra_claims_changed(d);
    writer_then(d->claims.writer, dra_unprepare_written, u);
    dra_prepare_wake(d); /* a prepare waiting for one of their daemons answers now */
}
