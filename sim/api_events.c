/* NVML's event API: sets, registration and waiting. Faults post events
 * here, and nvmlEventSetWait_v2 hands them out as the real driver does. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim.h"

#include "util/deadline.h"

static bool events_valid_set(nvmlEventSet_t set)
{
    for (struct nvmlEventSet_st *s = sim_state.sets; s; s = s->next)
        if (s == set)
            return true;
    return false;
}

void sim_event_post(struct nvmlDevice_st *g, unsigned long long type, unsigned long long data)
{
    sim_event_post_instance(g, type, data, 0xFFFFFFFFU, 0xFFFFFFFFU);
}

void sim_event_post_instance(struct nvmlDevice_st *g, unsigned long long type,
                             unsigned long long data, unsigned gi, unsigned ci)
{
    unsigned i = g->desc.index;
    for (struct nvmlEventSet_st *s = sim_state.sets; s; s = s->next) {
        if (!(s->mask[i] & type))
            continue;
        if (s->len == SIM_EVENT_QUEUE) {
            /* Full: the oldest event goes, as a slow reader loses history first. */
            s->head = (s->head + 1) % SIM_EVENT_QUEUE;
            s->len--;
        }
        nvmlEventData_t *ev = &s->queue[(s->head + s->len++) % SIM_EVENT_QUEUE];
        ev->device = g;
        ev->eventType = type;
        ev->eventData = data;
        ev->gpuInstanceId = gi;
        ev->computeInstanceId = ci;
    }
    pthread_cond_broadcast(&sim_state.events);
}

void sim_event_lost(struct nvmlDevice_st *g)
{
    unsigned i = g->desc.index;
    for (struct nvmlEventSet_st *s = sim_state.sets; s; s = s->next)
        if (s->mask[i])
            s->lost_pending |= 1ULL << i;
    pthread_cond_broadcast(&sim_state.events);
}

void sim_events_clear(void)
{
    while (sim_state.sets) {
        struct nvmlEventSet_st *s = sim_state.sets;
        sim_state.sets = s->next;
        free(s);
    }
    pthread_cond_broadcast(&sim_state.events);
}

SIM_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    nvmlReturn_t rc = sim_enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!set)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (!s)
        return sim_leave(NVML_ERROR_MEMORY);
    s->next = sim_state.sets;
    sim_state.sets = s;
    *set = s;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    nvmlReturn_t rc = sim_enter();
    if (rc != NVML_SUCCESS)
        return rc;
    for (struct nvmlEventSet_st **p = &sim_state.sets; *p; p = &(*p)->next) {
        if (*p == set) {
            *p = set->next;
            free(set);
            /* Wake a waiter on this set so it can notice the set is gone. */
            pthread_cond_broadcast(&sim_state.events);
            return sim_leave(NVML_SUCCESS);
        }
    }
    return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
}

SIM_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                      unsigned long long *eventTypes)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!eventTypes)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *eventTypes = SIM_SUPPORTED_EVENTS;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                              nvmlEventSet_t set)
{
    nvmlReturn_t rc = sim_enter_device(device);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!events_valid_set(set))
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (eventTypes & ~SIM_SUPPORTED_EVENTS)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    set->mask[device->desc.index] |= eventTypes;
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                         unsigned int timeoutms)
{
    nvmlReturn_t rc = sim_enter();
    if (rc != NVML_SUCCESS)
        return rc;
    if (!data || !events_valid_set(set))
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    struct timespec deadline = deadline_in(timeoutms);
    for (;;) {
        if (sim_state.refcount == 0)
            return sim_leave(NVML_ERROR_UNINITIALIZED);
        if (!events_valid_set(set))
            return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
        if (set->len > 0) {
            *data = set->queue[set->head];
            set->head = (set->head + 1) % SIM_EVENT_QUEUE;
            set->len--;
            return sim_leave(NVML_SUCCESS);
        }
        if (set->lost_pending) {
            /* Reported once per loss, so a watcher does not spin on it. */
            set->lost_pending &= set->lost_pending - 1;
            return sim_leave(NVML_ERROR_GPU_IS_LOST);
        }
        int w = pthread_cond_timedwait(&sim_state.events, &sim_state.lock, &deadline);
        if (w == ETIMEDOUT)
            return sim_leave(NVML_ERROR_TIMEOUT);
    }
}

SIM_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
                                      unsigned int timeoutms)
{
    /* v1 callers pass the older, shorter struct: copy only its fields. */
    nvmlEventData_t full;
    if (!data)
        return nvmlEventSetWait_v2(set, NULL, timeoutms);
    nvmlReturn_t rc = nvmlEventSetWait_v2(set, &full, timeoutms);
    if (rc == NVML_SUCCESS) {
        data->device = full.device;
        data->eventType = full.eventType;
        data->eventData = full.eventData;
    }
    return rc;
}
