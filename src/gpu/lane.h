/* A GPU's lane: one thread through which the NVML calls on that GPU go,
 * one job at a time. A GPU whose calls block (the driver waits on a GPU
 * that stopped answering) stalls its own lane and nothing else.
 *
 * - Posting never blocks, and nothing piles up behind a hung GPU: a job is
 *   posted again only once it is done, and each user (the sampler, the
 *   agent's probe, its MIG check) owns one job per GPU.
 * - A lane says since when its job runs and which NVML call it is in
 *   (NVML_CALL), so that the agent can call the GPU hung.
 * - Stopping drops the jobs not started, waits a moment for the running
 *   ones, and leaves a lane that is still in a call to end with the
 *   process: when its call returns it marks its job done and stops, and
 *   sends nothing. Its owner keeps that job's memory (gpu_lane_job_busy). */
#ifndef GPULET_GPU_LANE_H
#define GPULET_GPU_LANE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "util/err.h"

struct gpu_lane_job;
typedef void (*gpu_lane_fn)(struct gpu_lane_job *job);

/* A job: its owner embeds it in a struct of its own, sets run and notify,
 * and between gpu_lanes_post and the job being done touches nothing that
 * run touches. */
struct gpu_lane_job {
    gpu_lane_fn run;                 /* on the lane's thread */
    uv_async_t *notify;              /* sent once done, where not NULL (not after stop) */
    /* the lanes' own */
    atomic_bool busy;                /* posted and not yet done */
    struct gpu_lane_job *next;
};

struct gpu_lanes;

/* One lane per GPU, each a thread. */
int gpu_lanes_start(struct gpu_lanes **out, unsigned count, struct err *e);

/* Hands job to GPU gpu's lane, after the jobs already there. false (and
 * nothing done) while the job is still busy from an earlier post, or after
 * stop. */
bool gpu_lanes_post(struct gpu_lanes *l, unsigned gpu, struct gpu_lane_job *job);

/* Whether job is posted and not yet done: until then its owner must not
 * touch what run touches. */
static inline bool gpu_lane_job_busy(struct gpu_lane_job *job)
{
    return atomic_load_explicit(&job->busy, memory_order_acquire);
}

/* Waits until job (posted to GPU gpu's lane) is done, or until deadline
 * (uv_hrtime nanoseconds): true when done. */
bool gpu_lanes_wait(struct gpu_lanes *l, unsigned gpu, struct gpu_lane_job *job,
                    uint64_t deadline);

/* Since when (uv_hrtime nanoseconds) GPU gpu's lane has run its current
 * job, or 0 when idle; *call is the NVML call it is in (NULL: none yet). */
uint64_t gpu_lanes_busy(struct gpu_lanes *l, unsigned gpu, const char **call);

/* Stops every lane: drops the jobs not started, gives the running ones up
 * to grace_ms, joins the lanes that stopped and leaves the others (see
 * above). Returns how many were left in a call. NULL is fine. */
unsigned gpu_lanes_stop(struct gpu_lanes *l, unsigned grace_ms);

#endif
