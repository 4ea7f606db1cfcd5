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

/* On the GPU's lane (lane.c). */
void dra_mig_run(struct dra_lane_op *op)
{
    struct err e = {0};
    op->rc = op->kind == DRA_LANE_DESTROY
                 ? gpu_mig_destroy(op->nvml, &op->seen, op->gi, op->ci, op->uuid, &e)
                 : gpu_mig_create(op->nvml, &op->seen, op->profile, op->start, &op->made, &e);
    snprintf(op->error, sizeof op->error, "%s", op->rc < 0 ? e.msg : "");
}

static struct dra_lane_op *dra_mig_op_new(struct dra *d, enum dra_lane_kind kind, unsigned gpu)
{
    struct dra_lane_op *op = dra_lane_op_new(d, kind, gpu);
    op->nvml = d->gpus.nvml;
    op->seen = d->inv->gpus[gpu];
    op->seen.handle = d->devs[gpu].handle;
    return op;
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
            struct dra_lane_op *op = dra_mig_op_new(d, DRA_LANE_MAKE, pd->gpu);
            op->j = j;
            op->claim = c;
            op->dev = k;
            op->profile = pd->mig_profile;
            op->start = pd->mig_start;
            if (dra_lane_post(d, op))
                posted++;
            else
                snprintf(jc->error, sizeof jc->error, "%.200s/%.200s: device %s: gpulet is "
                         "stopping", jc->ns, jc->name, pd->device);
        }
    }
    j->making += posted;
    return posted;
}

void dra_mig_unmake(struct dra *d, const struct dra_prepared *p)
{
    for (unsigned k = 0; k < p->count; k++) {
        const struct dra_prepared_device *pd = &p->devs[k];
        if (!pd->mig_made || pd->gpu >= d->inv->count)
            continue;
        struct dra_lane_op *op = dra_mig_op_new(d, DRA_LANE_DESTROY, pd->gpu);
        op->gi = pd->gi;
        op->ci = pd->ci;
        snprintf(op->uuid, sizeof op->uuid, "%s", pd->uuid);
        if (!dra_lane_post(d, op))
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
    for (const struct dra_lane_op *op = d->claims.lane_ops; op; op = op->next)
        if (op->kind == DRA_LANE_DESTROY) {
            made = xrealloc(made, (*n + 1) * sizeof *made);
            snprintf(made[(*n)++], sizeof *made, "%s", op->uuid);
        }
    return made;
}

/* A make back: its device is the claim's now, or the claim fails. */
static void dra_mig_made(struct dra_lane_op *op)
{
    struct dra_job_claim *jc = &op->j->claims[op->claim];
    struct dra_prepared_device *pd = &jc->p.devs[op->dev];
    if (op->rc < 0) {
        if (!jc->error[0])
            snprintf(jc->error, sizeof jc->error, "%.200s/%.200s: device %s: %.500s", jc->ns, jc->name,
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

/* A make or destroy back, on the loop: the agent reads the GPU's MIG
 * devices again, and the prepare that waits for it goes on. */
void dra_mig_done(struct dra_lane_op *op)
{
    struct dra *d = op->d;
    bool destroy = op->kind == DRA_LANE_DESTROY;
    struct writer *cdi = d->hooks.on_mig ? d->hooks.on_mig(d->hooks.ctx, op->gpu, &op->seen) : NULL;
    if (cdi && op->j && !destroy) /* the answer names the device: its spec first */
        dra_job_wait(op->j, cdi);
    if (destroy && op->rc < 0)
        log_error("DRA: %s; its memory slices stay out of the slice until it goes", op->error);
    else if (destroy)
        log_info("DRA: destroyed MIG device %s", op->uuid);
    if (op->j)
        dra_mig_made(op);
}
