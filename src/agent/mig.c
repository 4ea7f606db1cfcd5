/* MIG reconfiguration without a restart. NVIDIA's plugin reads MIG devices
 * once and needs a restart after mig-parted changes them. Here, with a MIG
 * strategy, a worker reads each MIG GPU's devices every 2 s (a handful of
 * NVML calls, microseconds each); when the set differs, the plugins stop
 * and start again on the new devices, and the labels follow. Pods holding a
 * device that went keep running: the kubelet never takes a device back, it
 * only stops offering it. */
#include "agent/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/strbuf.h"
#include "util/xmalloc.h"

#define MIG_CHECK_MS 2000

static bool mig_any(const struct agent *a)
{
    for (unsigned i = 0; i < a->inv.count; i++)
        if (a->inv.gpus[i].mig_mode == NVML_DEVICE_MIG_ENABLE)
            return true;
    return false;
}

/* Off the loop: each MIG GPU's devices, into mig_seen. */
static void mig_work(uv_work_t *w)
{
    struct agent *a = w->data;
    for (unsigned i = 0; i < a->inv.count; i++) {
        struct gpu_info *g = &a->mig_seen[i];
        if (g->mig_mode == NVML_DEVICE_MIG_ENABLE && !g->lost && g->handle)
            gpu_mig_read(&a->nvml, g);
    }
}

static bool mig_same(const struct gpu_info *a, const struct gpu_info *b)
{
    if (a->nmig != b->nmig)
        return false;
    for (unsigned k = 0; k < a->nmig; k++)
        if (strcmp(a->mig[k].uuid, b->mig[k].uuid))
            return false;
    return true;
}

/* "3g.40gb MIG-..., 1g.10gb MIG-..." of the devices of from that to lacks. */
static void mig_diff(const struct gpu_info *from, const struct gpu_info *to, struct strbuf *out)
{
    for (unsigned k = 0; k < from->nmig; k++) {
        bool kept = false;
        for (unsigned j = 0; j < to->nmig && !kept; j++)
            kept = !strcmp(from->mig[k].uuid, to->mig[j].uuid);
        if (!kept)
            strbuf_printf(out, "%s%s %s", out->len ? ", " : "", from->mig[k].profile,
                          from->mig[k].uuid);
    }
    if (!out->len)
        strbuf_puts(out, "none");
}

static void mig_done(uv_work_t *w, int status)
{
    struct agent *a = w->data;
    a->mig_checking = false;
    if (status == UV_ECANCELED || a->stopping)
        return;
    bool changed = false;
    for (unsigned i = 0; i < a->inv.count; i++) {
        const struct gpu_info *now = &a->mig_seen[i], *was = &a->inv.gpus[i];
        if (now->mig_mode != NVML_DEVICE_MIG_ENABLE || mig_same(now, was))
            continue;
        struct strbuf gone = {0}, added = {0};
        mig_diff(was, now, &gone);
        mig_diff(now, was, &added);
        log_info("GPU %u: MIG devices changed: gone %s; new %s", i, gone.data, added.data);
        strbuf_free(&gone);
        strbuf_free(&added);
        changed = true;
    }
    if (!changed)
        return;
    log_info("MIG: re-advertising; pods holding a device that went keep running, and it is no "
             "longer offered");
    a->mig_update = true;
    agent_plugins_restart(a);
}

static void mig_tick(uv_timer_t *t)
{
    struct agent *a = t->data;
    if (a->mig_checking || a->mig_update || a->restart_pending || !a->nvml_up)
        return;
    /* The worker reads with the device model's handles, into its own copy. */
    for (unsigned i = 0; i < a->inv.count; i++) {
        a->mig_seen[i] = a->inv.gpus[i];
        a->mig_seen[i].handle = a->devs[i].handle;
        a->mig_seen[i].lost = a->devs[i].health.reason == HEALTH_LOST;
    }
    a->mig_checking = true;
    a->mig_work.data = a;
    uv_queue_work(&a->loop, &a->mig_work, mig_work, mig_done);
}

void agent_mig_start(struct agent *a)
{
    if (a->cfg.mig_strategy == CONFIG_MIG_NONE || !mig_any(a) || a->mig_timer_on)
        return;
    a->mig_seen = xcalloc(a->inv.count + 1, sizeof *a->mig_seen);
    uv_timer_init(&a->loop, &a->mig_timer);
    a->mig_timer.data = a;
    uv_timer_start(&a->mig_timer, mig_tick, MIG_CHECK_MS, MIG_CHECK_MS);
    a->mig_timer_on = true;
}

void agent_mig_apply(struct agent *a)
{
    if (!a->mig_update)
        return;
    for (unsigned i = 0; i < a->inv.count; i++) {
        if (mig_same(&a->inv.gpus[i], &a->mig_seen[i]))
            continue;
        memcpy(a->inv.gpus[i].mig, a->mig_seen[i].mig, sizeof a->inv.gpus[i].mig);
        a->inv.gpus[i].nmig = a->mig_seen[i].nmig;
        /* New devices start healthy; the GPU's own health stays. */
        memset(a->devs[i].mig_health, 0, sizeof a->devs[i].mig_health);
    }
    a->mig_update = false;
}

void agent_mig_stop(struct agent *a)
{
    if (a->mig_timer_on)
        uv_close((uv_handle_t *)&a->mig_timer, NULL);
    a->mig_timer_on = false;
}
