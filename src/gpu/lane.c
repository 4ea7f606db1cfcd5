/* GPU lanes (gpu/lane.h). Each lane is a pthread, not a uv_thread: a lane
 * stuck in the driver at shutdown is detached and left, which libuv's
 * threads cannot be. The lanes' memory goes with the last of their threads
 * (or with stop, when none is left), so a lane that returns late finds it. */
#include "gpu/lane.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "nvml/nvml.h"
#include "util/xmalloc.h"

struct gpu_lane {
    struct gpu_lanes *all;
    pthread_t thread;
    bool started;
    pthread_mutex_t lock;
    pthread_cond_t wake;             /* a job was posted, or stop */
    pthread_cond_t done;             /* a job is done */
    struct gpu_lane_job *head, *tail;
    uint64_t since;                  /* under lock: when the running job began; 0 idle */
    bool stop;                       /* under lock */
    atomic_int call;                 /* enum nvml_fn the job is in; -1 none */
};

struct gpu_lanes {
    unsigned count;
    atomic_uint refs;                /* the owner's, and one per lane thread */
    struct gpu_lane lane[];
};

static void lanes_release(struct gpu_lanes *l)
{
    if (atomic_fetch_sub(&l->refs, 1) != 1)
        return;
    for (unsigned i = 0; i < l->count; i++) {
        pthread_mutex_destroy(&l->lane[i].lock);
        pthread_cond_destroy(&l->lane[i].wake);
        pthread_cond_destroy(&l->lane[i].done);
    }
    free(l);
}

/* The job's end: done for its owner, and news of it unless stopped. */
static void lane_finish(struct gpu_lane *ln, struct gpu_lane_job *j)
{
    uv_async_t *notify = j->notify;
    atomic_store_explicit(&j->busy, false, memory_order_release);
    pthread_cond_broadcast(&ln->done);
    if (notify && !ln->stop)
        uv_async_send(notify);
}

static void *lane_main(void *arg)
{
    struct gpu_lane *ln = arg;
    nvml_call_slot = &ln->call;
    pthread_mutex_lock(&ln->lock);
    for (;;) {
        while (!ln->stop && !ln->head)
            pthread_cond_wait(&ln->wake, &ln->lock);
        if (ln->stop)
            break;
        struct gpu_lane_job *j = ln->head;
        ln->head = j->next;
        if (!ln->head)
            ln->tail = NULL;
        ln->since = uv_hrtime();
        atomic_store_explicit(&ln->call, -1, memory_order_relaxed);
        pthread_mutex_unlock(&ln->lock);
        j->run(j);
        pthread_mutex_lock(&ln->lock);
        ln->since = 0;
        lane_finish(ln, j);
    }
    pthread_mutex_unlock(&ln->lock);
    lanes_release(ln->all);
    return NULL;
}

int gpu_lanes_start(struct gpu_lanes **out, unsigned count, struct err *e)
{
    struct gpu_lanes *l = xcalloc(1, sizeof *l + count * sizeof l->lane[0]);
    l->count = count;
    atomic_init(&l->refs, 1);
    pthread_condattr_t monotonic; /* deadlines are uv_hrtime's clock */
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    for (unsigned i = 0; i < count; i++) {
        struct gpu_lane *ln = &l->lane[i];
        ln->all = l;
        pthread_mutex_init(&ln->lock, NULL);
        pthread_cond_init(&ln->wake, NULL);
        pthread_cond_init(&ln->done, &monotonic);
        atomic_init(&ln->call, -1);
    }
    pthread_condattr_destroy(&monotonic);
    for (unsigned i = 0; i < count; i++) {
        struct gpu_lane *ln = &l->lane[i];
        atomic_fetch_add(&l->refs, 1);
        if (pthread_create(&ln->thread, NULL, lane_main, ln) != 0) {
            atomic_fetch_sub(&l->refs, 1);
            gpu_lanes_stop(l, 0);
            *out = NULL;
            return err_set(e, "cannot start the thread of GPU %u's NVML lane", i);
        }
        ln->started = true;
    }
    *out = l;
    return 0;
}

bool gpu_lanes_post(struct gpu_lanes *l, unsigned gpu, struct gpu_lane_job *job)
{
    if (!l || gpu >= l->count)
        return false;
    struct gpu_lane *ln = &l->lane[gpu];
    pthread_mutex_lock(&ln->lock);
    bool ok = !ln->stop && !atomic_load_explicit(&job->busy, memory_order_acquire);
    if (ok) {
        atomic_store_explicit(&job->busy, true, memory_order_relaxed);
        job->next = NULL;
        if (ln->tail)
            ln->tail->next = job;
        else
            ln->head = job;
        ln->tail = job;
        pthread_cond_signal(&ln->wake);
    }
    pthread_mutex_unlock(&ln->lock);
    return ok;
}

/* deadline (uv_hrtime) as the CLOCK_MONOTONIC timespec the conds wait on. */
static struct timespec lane_abstime(uint64_t deadline)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t now = uv_hrtime(), left = deadline > now ? deadline - now : 0;
    uint64_t ns = (uint64_t)ts.tv_nsec + left % 1000000000ULL;
    ts.tv_sec += (time_t)(left / 1000000000ULL + ns / 1000000000ULL);
    ts.tv_nsec = (long)(ns % 1000000000ULL);
    return ts;
}

bool gpu_lanes_wait(struct gpu_lanes *l, unsigned gpu, struct gpu_lane_job *job,
                    uint64_t deadline)
{
    struct gpu_lane *ln = &l->lane[gpu];
    pthread_mutex_lock(&ln->lock);
    while (gpu_lane_job_busy(job) && uv_hrtime() < deadline) {
        struct timespec at = lane_abstime(deadline);
        pthread_cond_timedwait(&ln->done, &ln->lock, &at);
    }
    pthread_mutex_unlock(&ln->lock);
    return !gpu_lane_job_busy(job);
}

uint64_t gpu_lanes_busy(struct gpu_lanes *l, unsigned gpu, const char **call)
{
    struct gpu_lane *ln = &l->lane[gpu];
    pthread_mutex_lock(&ln->lock);
    uint64_t since = ln->since;
    pthread_mutex_unlock(&ln->lock);
    int fn = atomic_load_explicit(&ln->call, memory_order_relaxed);
    *call = since && fn >= 0 && fn < NVML_FN_COUNT ? nvml_fn_names[fn] : NULL;
    return since;
}

unsigned gpu_lanes_stop(struct gpu_lanes *l, unsigned grace_ms)
{
    if (!l)
        return 0;
    uint64_t deadline = uv_hrtime() + (uint64_t)grace_ms * 1000000ULL;
    unsigned stuck = 0;
    for (unsigned i = 0; i < l->count; i++) {
        struct gpu_lane *ln = &l->lane[i];
        pthread_mutex_lock(&ln->lock);
        ln->stop = true;
        /* Jobs not started will never run: done, for their owners to free. */
        for (struct gpu_lane_job *j = ln->head; j; j = j->next)
            atomic_store_explicit(&j->busy, false, memory_order_release);
        ln->head = ln->tail = NULL;
        pthread_cond_signal(&ln->wake);
        while (ln->since && uv_hrtime() < deadline) {
            struct timespec at = lane_abstime(deadline);
            pthread_cond_timedwait(&ln->done, &ln->lock, &at);
        }
        bool in_call = ln->since != 0;
        pthread_mutex_unlock(&ln->lock);
        if (!ln->started)
            continue;
        if (in_call) {
            pthread_detach(ln->thread); /* it releases the lanes when its call returns */
            stuck++;
        } else {
            pthread_join(ln->thread, NULL);
        }
    }
    lanes_release(l);
    return stuck;
}
