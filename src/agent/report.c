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
    struct report_gpu *g = xcalloc(a->inv.count + 1, sizeof *g);
    for (unsigned i = 0; i < a->inv.count; i++) {
        g[i].index = a->inv.gpus[i].index;
        snprintf(g[i].uuid, sizeof g[i].uuid, "%s", a->inv.gpus[i].uuid);
        g[i].health = a->devs[i].health;
    }
    report_update(a->report, g, a->inv.count);
    free(g);
}

/* Where the report goes: the settings a reload must compare. */
static bool agent_report_same(const struct config *a, const struct config *b)
{
    return a->fault_report == b->fault_report && a->fault_taint == b->fault_taint &&
           !strcmp(a->fault_taint_on, b->fault_taint_on) && !strcmp(a->kubeconfig, b->kubeconfig) &&
           !strcmp(a->node_name, b->node_name);
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
        if (report_start(&a->report, &a->loop, &a->cfg, &e) < 0) {
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
