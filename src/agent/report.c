/* GPU faults to the control plane (src/report): the reporter gets the
 * agent's record of every GPU on each health change, and at start. */
#include "agent/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/xmalloc.h"

void agent_report_refresh(struct agent *a)
{
    if (!a->report)
        return;
    /* Each GPU, then each of its MIG devices: a fault in one GPU
     * instance is reported as that instance's. */
    struct report_gpu *g = xcalloc((size_t)a->inv.count * (GPU_MIG_MAX + 1) + 1, sizeof *g);
    unsigned n = 0;
    for (unsigned i = 0; i < a->inv.count; i++) {
        const struct gpu_info *info = &a->inv.gpus[i];
        for (int k = -1; k < (int)(info->mig_mode == NVML_DEVICE_MIG_ENABLE ? info->nmig : 0); k++) {
            struct report_gpu *x = &g[n++];
            x->index = info->index;
            x->mig = k;
            snprintf(x->uuid, sizeof x->uuid, "%s", k < 0 ? info->uuid : info->mig[k].uuid);
            if (k >= 0)
                snprintf(x->profile, sizeof x->profile, "%s", info->mig[k].profile);
            x->health = k < 0 ? a->devs[i].health : a->devs[i].mig_health[k];
        }
    }
    report_update(a->report, g, n);
    free(g);
}

/* Where the report goes: the settings a reload must compare. */
static bool agent_report_same(const struct config *a, const struct config *b)
{
    return a->fault_report == b->fault_report && a->fault_taint == b->fault_taint &&
           !strcmp(a->fault_taint_on, b->fault_taint_on);
}

/* Starts reporting, or after a reload (old: the configuration before it)
 * goes on with the same reporter where its settings are the same. The
 * report is not essential: without it the rest runs on. */
void agent_report_start(struct agent *a, const struct config *old)
{
    if (!old || !agent_report_same(old, &a->cfg)) {
        report_stop(a->report);
        a->report = NULL;
        struct err e;
        if (report_start(&a->report, &a->loop, &a->cfg, a->kube, a->node, &e) < 0) {
            log_error("%s; GPU faults go to the Node's allocatable and labels only", e.msg);
            return;
        }
    }
    agent_report_refresh(a);
}

void agent_report_stop(struct agent *a)
{
    report_stop(a->report);
    a->report = NULL;
}
