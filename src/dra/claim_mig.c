/* MIG devices made per claim (--dra-mig): a prepared placement's MIG
 * device is made on its GPU's lane (a GPU instance at the placement, a
 * compute instance spanning it), and destroyed there at unprepare. The
 * GPU's MIG devices, read again after each, go to the agent (hooks.on_mig),
 * which owns them: the inventory, the CDI spec that names the new device,
 * health and metrics follow from there. A prepare answers once its
 * devices are made; the lane keeps one GPU's makes and destroys in order,
 * so a placement freed by an unprepare is free for the next prepare. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/lane.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* One make or destroy: the loop's but between post and done. */
struct dra_mig_op {
    struct gpu_lane_job job;      /* first: the lane hands it back */
    struct dra *d;
    struct dra_job *j;            /* the prepare waiting for it; NULL for a destroy */
    unsigned claim, dev;          /* its device in j */
    bool destroy;
    unsigned profile, start;      /* make: the placement */
    unsigned gi, ci;              /* destroy: the device, where its UUID is still uuid */
    char uuid[96];
    struct nvml *nvml;
    unsigned gpu;
    struct gpu_info seen;         /* the GPU, its MIG devices read again after */
    unsigned made;                /* make: the new device's index in seen */
    int rc;
    char error[512];
    struct dra_mig_op *next;      /* in d->claims.mig_ops */
};

/* On the GPU's lane. */
static void dra_mig_run(struct gpu_lane_job *job)
{
    struct dra_mig_op *op = (struct dra_mig_op *)job;
    struct err e = {0};
    op->rc = op->destroy ? gpu_mig_destroy(op->nvml, &op->seen, op->gi, op->ci, op->uuid, &e)
                         : gpu_mig_create(op->nvml, &op->seen, op->profile, op->start, &op->made, &e);
    snprintf(op->error, sizeof op->error, "%s", op->rc < 0 ? e.msg : "");
}

static struct dra_mig_op *dra_mig_op_new(struct dra *d, unsigned gpu)
{
    struct dra_mig_op *op = xcalloc(1, sizeof *op);
    op->d = d;
    op->gpu = gpu;
    op->nvml = d->gpus.nvml;
    op->seen = d->inv->gpus[gpu];
    op->seen.handle = d->devs[gpu].handle;
    op->job.run = dra_mig_run;
    op->job.notify = &d->claims.mig_done;
    return op;
}

/* Hands op to its GPU's lane; false (op freed) when the lanes are gone. */
static bool dra_mig_post(struct dra *d, struct dra_mig_op *op)
{
    if (!d->gpus.lanes || d->stopping || !gpu_lanes_post(d->gpus.lanes, op->gpu, &op->job)) {
        free(op);
        return false;
    }
    op->next = d->claims.mig_ops;
    d->claims.mig_ops = op;
    return true;
}

unsigned dra_mig_make(struct dra *d, struct dra_job *j)
{
    unsigned posted = 0;
    for (unsigned c = 0; c < j->n; c++) {
        struct dra_job_claim *jc = &j->claims[c];
        for (unsigned k = 0; !jc->known && !jc->error[0] && k < jc->p.count; k++) {
            const struct dra_prepared_device *pd = &jc->p.devs[k];
            if (!pd->placement || pd->uuid[0])
                continue; /* not a placement, or adopted */
            struct dra_mig_op *op = dra_mig_op_new(d, pd->gpu);
            op->j = j;
            op->claim = c;
            op->dev = k;
            op->profile = pd->mig_profile;
            op->start = pd->mig_start;
            if (dra_mig_post(d, op))
                posted++;
            else
                snprintf(jc->error, sizeof jc->error, "%.200s/%.200s: device %s: gpulet is "
                         "stopping", jc->ns, jc->name, pd->device);
        }
    }
    j->making = posted;
    return posted;
}

void dra_mig_unmake(struct dra *d, const struct dra_prepared *p)
{
    for (unsigned k = 0; k < p->count; k++) {
        const struct dra_prepared_device *pd = &p->devs[k];
        if (!pd->mig_made || pd->gpu >= d->inv->count)
            continue;
        struct dra_mig_op *op = dra_mig_op_new(d, pd->gpu);
        op->destroy = true;
        op->gi = pd->gi;
        op->ci = pd->ci;
        snprintf(op->uuid, sizeof op->uuid, "%s", pd->uuid);
        if (!dra_mig_post(d, op))
            log_warn("DRA: MIG device %s of claim %s/%s not destroyed: gpulet is stopping", pd->uuid,
                     p->ns, p->name);
    }
}

char (*dra_mig_made_list(const struct dra *d, unsigned *n))[96]
{
    char(*made)[96] = NULL;
    *n = 0;
    for (unsigned i = 0; i < d->claims.n; i++)
        for (unsigned k = 0; k < d->claims.prepared[i].count; k++)
            if (d->claims.prepared[i].devs[k].mig_made) {
                made = xrealloc(made, (*n + 1) * sizeof *made);
                snprintf(made[(*n)++], sizeof *made, "%s", d->claims.prepared[i].devs[k].uuid);
            }
    /* One being destroyed is still a claim's: its slices come free, not
     * taken by another first (the slice would change twice). */
    for (const struct dra_mig_op *op = d->claims.mig_ops; op; op = op->next)
        if (op->destroy) {
            made = xrealloc(made, (*n + 1) * sizeof *made);
            snprintf(made[(*n)++], sizeof *made, "%s", op->uuid);
        }
    return made;
}

/* A make back: its device is the claim's now, or the claim fails. */
static void dra_mig_made(struct dra_mig_op *op)
{
    struct dra_job_claim *jc = &op->j->claims[op->claim];
    struct dra_prepared_device *pd = &jc->p.devs[op->dev];
    if (op->rc < 0) {
        if (!jc->error[0])
            snprintf(jc->error, sizeof jc->error, "%.200s/%.200s: device %s: %s", jc->ns, jc->name,
                     pd->device, op->error);
    } else {
        const struct gpu_mig *m = &op->seen.mig[op->made];
        snprintf(pd->uuid, sizeof pd->uuid, "%s", m->uuid);
        pd->gi = m->gi;
        pd->ci = m->ci;
        pd->mig_made = true;
        log_info("DRA: made MIG device %s (%s at memory slice %u, GPU instance %u) for claim "
                 "%s/%s", m->uuid, m->profile, op->start, m->gi, jc->ns, jc->name);
    }
    if (--op->j->making == 0)
        dra_job_next(op->j);
}

/* The lanes' notification: every op that is done. Once stopping, the ops
 * are only freed, and the handle closes after the last. */
static void dra_mig_done(uv_async_t *h)
{
    struct dra *d = h->data;
    for (struct dra_mig_op **at = &d->claims.mig_ops, *op; (op = *at);) {
        if (gpu_lane_job_busy(&op->job)) {
            at = &op->next;
            continue;
        }
        *at = op->next;
        if (!d->stopping) {
            struct writer *cdi =
                d->hooks.on_mig ? d->hooks.on_mig(d->hooks.ctx, op->gpu, &op->seen) : NULL;
            if (cdi && op->j && !op->destroy) /* the answer names the device: its spec first */
                dra_job_wait(op->j, cdi);
            if (op->destroy && op->rc < 0)
                log_error("DRA: %s; its memory slices stay out of the slice until it goes",
                          op->error);
            else if (op->destroy)
                log_info("DRA: destroyed MIG device %s", op->uuid);
            if (op->j)
                dra_mig_made(op);
        }
        free(op);
    }
    if (d->stopping && !d->claims.mig_ops && !uv_is_closing((uv_handle_t *)h))
        uv_close((uv_handle_t *)h, dra_closed);
    else if (!d->stopping) {
        dra_publish(d);     /* the MIG devices no claim made keep their slices out */
        dra_health_send(d); /* the placements claims hold now */
    }
}

void dra_mig_start(struct dra *d)
{
    uv_async_init(d->loop, &d->claims.mig_done, dra_mig_done);
    d->claims.mig_done.data = d;
    d->handles++;
}

void dra_mig_stop(struct dra *d)
{
    /* The prepares waiting for a make end with the driver (dra_job_next
     * frees them once stopping); the ops a lane still runs stay until it
     * is done with them (a reload's stop), then the handle closes. */
    for (struct dra_mig_op *op = d->claims.mig_ops; op; op = op->next)
        if (op->j) {
            struct dra_job *j = op->j;
            op->j = NULL;
            if (--j->making == 0)
                dra_job_next(j);
        }
    dra_mig_done(&d->claims.mig_done);
}
