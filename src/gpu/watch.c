#include "gpu/watch.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu/lane.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define WATCH_WAIT_MS 200   /* bounds how long stopping takes */
#define WATCH_EVENTS (nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError)

static unsigned watch_gpu_of(struct gpu_watch *w, nvmlDevice_t dev)
{
    unsigned gpu = GPU_WATCH_ANY_GPU;
    uv_mutex_lock(&w->lock);
    for (unsigned i = 0; i < w->count && gpu == GPU_WATCH_ANY_GPU; i++)
        if (w->handles[i] == dev)
            gpu = i;
    uv_mutex_unlock(&w->lock);
    return gpu;
}

static void watch_push(struct gpu_watch *w, const struct gpu_event *ev)
{
    uv_mutex_lock(&w->lock);
    if (w->len == GPU_WATCH_QUEUE)
        w->dropped++; /* the loop is far behind; keep what it has not seen */
    else
        w->queue[(w->head + w->len++) % GPU_WATCH_QUEUE] = *ev;
    uv_mutex_unlock(&w->lock);
    uv_async_send(&w->async);
}

static bool watch_stopping(struct gpu_watch *w)
{
    uv_mutex_lock(&w->lock);
    bool stop = w->stop;
    uv_mutex_unlock(&w->lock);
    return stop;
}

static void watch_thread(void *arg)
{
    struct gpu_watch *w = arg;
    while (!watch_stopping(w)) {
        nvmlEventData_t data;
        memset(&data, 0, sizeof data);
        nvmlReturn_t rc = w->nvml->EventSetWait(w->set, &data, WATCH_WAIT_MS);
        if (rc == NVML_ERROR_TIMEOUT)
            continue;
        struct gpu_event ev = {GPU_WATCH_ANY_GPU, 0, 0, 0xFFFFFFFFU, rc};
        if (rc == NVML_SUCCESS) {
            ev.gpu = watch_gpu_of(w, data.device);
            ev.type = data.eventType;
            ev.data = data.eventData;
            ev.gi = data.gpuInstanceId;
        }
        watch_push(w, &ev);
        /* A broken wait must not spin a core; back off a second, in steps
         * short enough that stopping still takes one wait timeout at most. */
        for (int i = 0; rc != NVML_SUCCESS && rc != NVML_ERROR_GPU_IS_LOST && i < 5 &&
                        !watch_stopping(w);
             i++)
            usleep(WATCH_WAIT_MS * 1000);
    }
}

static void watch_drain(uv_async_t *async)
{
    struct gpu_watch *w = async->data;
    for (;;) {
        uv_mutex_lock(&w->lock);
        if (w->dropped) {
            log_warn("NVML event queue overflowed: %u events dropped", w->dropped);
            w->dropped = 0;
        }
        if (w->len == 0) {
            uv_mutex_unlock(&w->lock);
            return;
        }
        struct gpu_event ev = w->queue[w->head];
        w->head = (w->head + 1) % GPU_WATCH_QUEUE;
        w->len--;
        uv_mutex_unlock(&w->lock);
        w->cb(w->ctx, &ev);
    }
}

static void watch_register_gpu(struct gpu_watch *w, unsigned gpu, nvmlDevice_t h)
{
    struct nvml *n = w->nvml;
    unsigned long long supported = WATCH_EVENTS;
    if (n->DeviceGetSupportedEventTypes &&
        NVML_CALL(n, DeviceGetSupportedEventTypes, h, &supported) != NVML_SUCCESS)
        supported = 0;
    nvmlReturn_t rc = NVML_CALL(n, DeviceRegisterEvents, h, supported & WATCH_EVENTS, w->set);
    if (rc != NVML_SUCCESS)
        log_warn("GPU %u: cannot watch XID/ECC events: %s", gpu, nvml_strerror(n, rc));
}

/* A GPU's registration after a reset: the loop's but between post and done. */
struct gpu_watch_reg {
    struct gpu_lane_job job;       /* first: the lane hands it back */
    struct gpu_watch *w;
    unsigned gpu;
    nvmlDevice_t handle;
};

static void watch_reg_run(struct gpu_lane_job *job)
{
    struct gpu_watch_reg *r = (struct gpu_watch_reg *)job;
    watch_register_gpu(r->w, r->gpu, r->handle);
}

/* Frees what gpu_watch_register made. */
static void watch_unregister(struct gpu_watch *w)
{
    if (w->set)
        w->nvml->EventSetFree(w->set);
    w->set = NULL;
    free(w->handles);
    w->handles = NULL;
    free(w->regs);
    w->regs = NULL;
}

int gpu_watch_register(struct gpu_watch *w, struct nvml *n, const struct gpu_info *gpus,
                       unsigned count, struct err *e)
{
    memset(w, 0, sizeof *w);
    w->nvml = n;
    if (!n->EventSetCreate || !n->DeviceRegisterEvents || !n->EventSetWait || !n->EventSetFree)
        return err_set(e, "this NVML has no event API; health events are off");
    nvmlReturn_t rc = NVML_CALL(n, EventSetCreate, &w->set);
    if (rc != NVML_SUCCESS) {
        w->set = NULL;
        return err_set(e, "nvmlEventSetCreate: %s", nvml_strerror(n, rc));
    }
    w->count = count;
    w->handles = xcalloc(count + 1, sizeof *w->handles);
    w->regs = xcalloc(count + 1, sizeof *w->regs);
    for (unsigned i = 0; i < count; i++) {
        w->handles[i] = gpus[i].handle;
        if (gpus[i].handle && !gpus[i].lost)
            watch_register_gpu(w, i, gpus[i].handle);
    }
    return 0;
}

void gpu_watch_set_handle(struct gpu_watch *w, struct gpu_lanes *lanes, unsigned gpu,
                          nvmlDevice_t handle)
{
    if (!w->running || gpu >= w->count)
        return;
    uv_mutex_lock(&w->lock);
    w->handles[gpu] = handle;
    uv_mutex_unlock(&w->lock);
    struct gpu_watch_reg *r = &w->regs[gpu];
    if (gpu_lane_job_busy(&r->job)) {
        log_warn("GPU %u: its events are still being registered; its new handle's are not", gpu);
        return;
    }
    *r = (struct gpu_watch_reg){.job = {.run = watch_reg_run}, .w = w, .gpu = gpu, .handle = handle};
    if (!gpu_lanes_post(lanes, gpu, &r->job))
        log_warn("GPU %u: cannot watch XID/ECC events: its lane is not running", gpu);
}

int gpu_watch_start(struct gpu_watch *w, uv_loop_t *loop, gpu_watch_cb cb, void *ctx,
                    struct err *e)
{
    w->cb = cb;
    w->ctx = ctx;
    uv_mutex_init(&w->lock);
    uv_async_init(loop, &w->async, watch_drain);
    w->async.data = w;
    if (uv_thread_create(&w->thread, watch_thread, w) != 0) {
        uv_close((uv_handle_t *)&w->async, NULL);
        uv_mutex_destroy(&w->lock);
        watch_unregister(w);
        return err_set(e, "cannot start the NVML event thread");
    }
    w->running = true;
    return 0;
}

void gpu_watch_stop(struct gpu_watch *w)
{
    if (!w->running) {
        if (w->nvml)
            watch_unregister(w); /* registered, never started */
        return;
    }
    uv_mutex_lock(&w->lock);
    w->stop = true;
    uv_mutex_unlock(&w->lock);
    uv_thread_join(&w->thread);
    /* A registration a stuck lane still runs keeps the set and its job. */
    bool busy = false;
    for (unsigned i = 0; w->regs && i < w->count; i++)
        busy |= gpu_lane_job_busy(&w->regs[i].job);
    if (!busy) {
        w->nvml->EventSetFree(w->set);
        free(w->regs);
    }
    w->regs = NULL;
    w->set = NULL;
    uv_close((uv_handle_t *)&w->async, NULL);
    uv_mutex_destroy(&w->lock);
    free(w->handles);
    w->handles = NULL;
    w->running = false;
}
