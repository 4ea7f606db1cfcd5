/* The agent's side of GPU health: NVML events mark GPUs unhealthy, probes
 * on libuv's threadpool find lost GPUs and recoveries, and every change
 * reaches the kubelet through ListAndWatch at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "util/log.h"

static void agent_health_changed(struct agent *a, unsigned gpu)
{
    const struct gpu_health *h = &a->health[gpu];
    metrics_on_health(a->metrics, gpu, h);
    const struct gpu_info *g = &a->inv.gpus[gpu];
    if (h->reason == HEALTH_OK)
        log_info("GPU %u (%s) is healthy again", gpu, g->uuid);
    else
        log_warn("GPU %u (%s) is unhealthy: %s", gpu, g->uuid, h->detail);
    if (a->plugin_running)
        plugin_health_changed(&a->plugin);
}

static void agent_probe_start(struct agent *a);

static void agent_on_event(void *ctx, const struct gpu_event *ev)
{
    struct agent *a = ctx;
    double now = (double)uv_now(&a->loop);
    if (ev->rc != NVML_SUCCESS) {
        /* The wait does not say which GPU: probe them all to find out. */
        log_warn("NVML event wait: %s; probing every GPU", nvml_strerror(&a->nvml, ev->rc));
        agent_probe_start(a);
        return;
    }
    if (ev->gpu >= a->inv.count)
        return; /* an event for a device we do not advertise */
    const char *uuid = a->inv.gpus[ev->gpu].uuid;
    bool changed = false;
    if (ev->type & nvmlEventTypeXidCriticalError) {
        unsigned xid = (unsigned)ev->data;
        metrics_on_xid(a->metrics, ev->gpu, xid); /* counted whatever the policy says */
        if (!health_xid_fatal(&a->policy, xid)) {
            log_info("GPU %u (%s): XID %u, not a GPU fault by the health policy", ev->gpu, uuid, xid);
            return;
        }
        changed = health_on_xid(&a->health[ev->gpu], xid, now);
        if (!changed)
            log_warn("GPU %u (%s): XID %u while unhealthy", ev->gpu, uuid, xid);
    } else if (ev->type & nvmlEventTypeDoubleBitEccError) {
        changed = health_on_ecc(&a->health[ev->gpu], now);
    }
    if (changed)
        agent_health_changed(a, ev->gpu);
}

/* Worker thread: asks NVML about every GPU. Reads only what does not change
 * while it runs (UUIDs) and writes only the probe arrays. */
static void agent_probe_work(uv_work_t *w)
{
    struct agent *a = w->data;
    struct nvml *n = &a->nvml;
    for (unsigned i = 0; i < a->inv.count; i++) {
        struct health_probe *p = &a->probe[i];
        memset(p, 0, sizeof *p);
        nvmlDevice_t h = NULL;
        nvmlReturn_t rc = n->DeviceGetHandleByUUID
                              ? n->DeviceGetHandleByUUID(a->inv.gpus[i].uuid, &h)
                              : n->DeviceGetHandleByIndex(a->inv.gpus[i].index, &h);
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        if (rc == NVML_SUCCESS)
            rc = n->DeviceGetUUID(h, uuid, sizeof uuid);
        p->lost = rc == NVML_ERROR_GPU_IS_LOST;
        p->answered = rc == NVML_SUCCESS;
        a->probe_handle[i] = p->answered ? h : NULL;
        unsigned long long dbe;
        if (p->answered && n->DeviceGetTotalEccErrors &&
            n->DeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
                                       &dbe) == NVML_SUCCESS) {
            p->dbe_known = true;
            p->dbe = dbe;
        }
    }
}

static void agent_probe_done(uv_work_t *w, int status)
{
    struct agent *a = w->data;
    a->probing = false;
    if (status == UV_ECANCELED)
        return;
    double now = (double)uv_now(&a->loop);
    double quiet = (double)a->cfg.xid_recovery_s * 1000.0;
    for (unsigned i = 0; i < a->inv.count; i++) {
        if (a->probe_handle[i] && a->probe_handle[i] != a->inv.gpus[i].handle) {
            /* A reset can give the GPU a new handle: use and watch that one. */
            a->inv.gpus[i].handle = a->probe_handle[i];
            gpu_watch_set_handle(&a->watch, i, a->probe_handle[i]);
        }
        if (health_on_probe(&a->health[i], &a->probe[i], now, quiet))
            agent_health_changed(a, i);
    }
    if (a->probe_again) {
        a->probe_again = false;
        agent_probe_start(a);
    }
}

static void agent_probe_start(struct agent *a)
{
    if (a->probing) {
        a->probe_again = true; /* one more pass once this one is back */
        return;
    }
    a->probing = true;
    a->probe_work.data = a;
    uv_queue_work(&a->loop, &a->probe_work, agent_probe_work, agent_probe_done);
}

static void agent_probe_tick(uv_timer_t *t)
{
    struct agent *a = t->data;
    for (unsigned i = 0; i < a->inv.count; i++) {
        if (a->health[i].reason != HEALTH_OK) {
            agent_probe_start(a);
            return;
        }
    }
}

int agent_health_start(struct agent *a, struct err *e)
{
    unsigned n = a->inv.count ? a->inv.count : 1;
    a->health = calloc(n, sizeof *a->health);
    a->probe = calloc(n, sizeof *a->probe);
    a->probe_handle = calloc(n, sizeof *a->probe_handle);
    if (!a->health || !a->probe || !a->probe_handle)
        return err_set(e, "out of memory");
    for (unsigned i = 0; i < a->inv.count; i++)
        if (a->inv.gpus[i].lost)
            health_on_lost(&a->health[i], (double)uv_now(&a->loop));
    if (!health_policy_active(&a->policy)) {
        log_warn("health checking is off (DP_DISABLE_HEALTHCHECKS)");
        return 0;
    }
    if (gpu_watch_start(&a->watch, &a->loop, &a->nvml, &a->inv, agent_on_event, a, e) < 0)
        return -1;
    uv_timer_init(&a->loop, &a->probe_timer);
    a->probe_timer.data = a;
    a->probe_timer_on = true;
    uv_timer_start(&a->probe_timer, agent_probe_tick, a->cfg.probe_ms, a->cfg.probe_ms);
    return 0;
}

void agent_health_stop(struct agent *a)
{
    gpu_watch_stop(&a->watch);
    if (a->probe_timer_on) {
        uv_close((uv_handle_t *)&a->probe_timer, NULL);
        a->probe_timer_on = false;
    }
}

int agent_health_clear(struct agent *a, const char *gpu, char *why, size_t why_len)
{
    char *end;
    unsigned long idx = strtoul(gpu, &end, 10);
    unsigned found = a->inv.count;
    for (unsigned i = 0; i < a->inv.count; i++)
        if ((*gpu && !*end && idx == i) || !strcmp(a->inv.gpus[i].uuid, gpu))
            found = i;
    if (found == a->inv.count)
        return snprintf(why, why_len, "no GPU '%s' (this node has GPUs 0-%d)", gpu,
                        (int)a->inv.count - 1), -1;
    if (health_clear(&a->health[found])) {
        log_warn("GPU %u (%s) cleared by an operator", found, a->inv.gpus[found].uuid);
        agent_health_changed(a, found);
    }
    return 0;
}
