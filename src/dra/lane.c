/* DRA's work on the GPUs' lanes (gpu/lane.h): every NVML call and every
 * nvidia-smi it makes runs on its GPU's lane, never on the loop and never
 * on the worker pool that the durable writes use. A GPU that stalls holds
 * up its own lane and the prepares that wait for it, nothing else. Each
 * kind of op has its run (on the lane) and its done (on the loop), in
 * lane_kinds below: MIG devices made and destroyed (claim_mig.c), time
 * slices set and set back (timeslice.c). */
#include "dra/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

static const struct {
    void (*run)(struct dra_lane_op *op);   /* on the lane */
    void (*done)(struct dra_lane_op *op);  /* on the loop, unless stopping */
} lane_kinds[] = {
    [DRA_LANE_MAKE] = {dra_mig_run, dra_mig_done},
    [DRA_LANE_DESTROY] = {dra_mig_run, dra_mig_done},
    [DRA_LANE_SLICE] = {dra_timeslice_run, dra_timeslice_done},
};

static void lane_run(struct gpu_lane_job *job)
{
    struct dra_lane_op *op = (struct dra_lane_op *)job;
    lane_kinds[op->kind].run(op);
}

struct dra_lane_op *dra_lane_op_new(struct dra *d, enum dra_lane_kind kind, unsigned gpu)
{
    struct dra_lane_op *op = xcalloc(1, sizeof *op);
    op->d = d;
    op->kind = kind;
    op->gpu = gpu;
    op->job.run = lane_run;
    op->job.notify = &d->claims.lane_done;
    return op;
}

static void lane_op_free(struct dra_lane_op *op)
{
    free(op->cfg);
    free(op);
}

bool dra_lane_post(struct dra *d, struct dra_lane_op *op)
{
    if (!d->gpus.lanes || d->stopping || !gpu_lanes_post(d->gpus.lanes, op->gpu, &op->job)) {
        lane_op_free(op);
        return false;
    }
    op->next = d->claims.lane_ops;
    d->claims.lane_ops = op;
    return true;
}

/* The lanes' notification: every op that is done. Once stopping, the ops
 * are only freed, and the handle closes after the last. */
static void lane_done(uv_async_t *h)
{
    struct dra *d = h->data;
    bool mig = false;
    for (struct dra_lane_op **at = &d->claims.lane_ops, *op; (op = *at);) {
        if (gpu_lane_job_busy(&op->job)) {
            at = &op->next;
            continue;
        }
        *at = op->next;
        if (!d->stopping) {
            lane_kinds[op->kind].done(op);
            mig |= op->kind != DRA_LANE_SLICE;
        }
        lane_op_free(op);
    }
    if (d->stopping && !d->claims.lane_ops && !uv_is_closing((uv_handle_t *)h))
        uv_close((uv_handle_t *)h, dra_closed);
    else if (!d->stopping && mig) {
        dra_publish(d);     /* the MIG devices no claim made keep their slices out */
        dra_health_send(d); /* the placements claims hold now */
    }
}

void dra_lane_start(struct dra *d)
{
    uv_async_init(d->loop, &d->claims.lane_done, lane_done);
    d->claims.lane_done.data = d;
    d->handles++;
}

void dra_lane_stop(struct dra *d)
{
    /* The prepares waiting for an op end with the driver (dra_job_next
     * frees them once stopping); the ops a lane still runs stay until it
     * is done with them (a reload's stop), then the handle closes. */
    for (struct dra_lane_op *op = d->claims.lane_ops; op; op = op->next)
        if (op->j) {
            struct dra_job *j = op->j;
            op->j = NULL;
            if (--j->making == 0)
                dra_job_next(j);
        }
    lane_done(&d->claims.lane_done);
}

int dra_gpu_of(const struct dra *d, const char *uuid)
{
    for (unsigned i = 0; i < d->inv->count; i++)
        if (!strcmp(d->inv->gpus[i].uuid, uuid))
            return (int)i;
    return -1;
}
