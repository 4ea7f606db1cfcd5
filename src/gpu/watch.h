/* The NVML event watcher: a thread blocked in nvmlEventSetWait that hands
 * XID and ECC events to the libuv loop through a uv_async_t. */
#ifndef GPULET_WATCH_H
#define GPULET_WATCH_H

#include <stdbool.h>
#include <uv.h>

#include "gpu/device.h"

#define GPU_WATCH_QUEUE 256
#define GPU_WATCH_ANY_GPU 0xFFFFFFFFU

/* One event, as the loop sees it. */
struct gpu_event {
    unsigned gpu;                  /* position in the inventory, or GPU_WATCH_ANY_GPU */
    unsigned long long type;       /* nvmlEventType* bits; 0 for a wait error */
    unsigned long long data;       /* the XID for XID events */
    unsigned gi;                   /* the GPU instance it happened in; 0xFFFFFFFF: the GPU */
    nvmlReturn_t rc;               /* NVML_SUCCESS, or the wait's error (GPU_IS_LOST...) */
};

typedef void (*gpu_watch_cb)(void *ctx, const struct gpu_event *ev);

struct gpu_watch {
    struct nvml *nvml;
    nvmlDevice_t *handles;         /* the watcher's own copy, guarded by lock */
    unsigned count;
    nvmlEventSet_t set;
    uv_thread_t thread;
    uv_async_t async;
    uv_mutex_t lock;               /* guards queue, len, head, dropped, stop */
    struct gpu_event queue[GPU_WATCH_QUEUE];
    unsigned head, len, dropped;
    bool stop, running;
    gpu_watch_cb cb;
    void *ctx;
    struct gpu_watch_reg *regs;    /* per GPU: its registration after a reset, on its lane */
};

/* Off the loop (the agent's NVML start, on the worker pool): makes the
 * event set and registers every GPU of gpus that is not lost for XID and
 * double-bit ECC events. */
int gpu_watch_register(struct gpu_watch *w, struct nvml *n, const struct gpu_info *gpus,
                       unsigned count, struct err *e);

/* On the loop, once registered: starts the thread; cb runs on the loop for
 * each event. */
int gpu_watch_start(struct gpu_watch *w, uv_loop_t *loop, gpu_watch_cb cb, void *ctx,
                    struct err *e);

/* Stops the thread (within one wait timeout), frees the event set, closes
 * the async; a registration that never started is freed too. */
void gpu_watch_stop(struct gpu_watch *w);

/* A GPU answers with a new handle (after a reset): watch that one. Its
 * events are registered on the GPU's lane (lanes), never on the loop: a
 * GPU just reset is when the driver is least to be trusted. */
struct gpu_lanes;
void gpu_watch_set_handle(struct gpu_watch *w, struct gpu_lanes *lanes, unsigned gpu,
                          nvmlDevice_t handle);

#endif
