/* A faulty device's taints (KEP-5055): the device keeps its place in the
 * slice, and the scheduler, claims' tolerations and the eviction
 * controller see why. NVIDIA's keys where NVIDIA's driver has one, so
 * that tolerations written for it hold; gpulet's own where it knows more. */
#include "dra/dra.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *dra_effect(const struct health_faults *evict, const struct gpu_health *h)
{
    return evict && gpu_health_faults_match(evict, h) ? "NoExecute" : "NoSchedule";
}

static void dra_taint_add(struct dra_taint *out, unsigned *n, const char *key, const char *value,
                          const struct health_faults *evict, const struct gpu_health *h)
{
    if (*n >= DRA_MAX_TAINTS)
        return;
    struct dra_taint *t = &out[(*n)++];
    t->key = key;
    snprintf(t->value, sizeof t->value, "%s", value);
    t->effect = dra_effect(evict, h);
    t->since_ms = h->since_ms;
}

unsigned dra_taints(const struct gpu_health *h, const struct health_faults *evict,
                    struct dra_taint *out)
{
    unsigned n = 0;
    if (!h || h->reason == HEALTH_OK)
        return 0;
    char xid[16] = "";
    if (h->xid)
        snprintf(xid, sizeof xid, "%u", h->xid);
    /* An XID, as NVIDIA's driver taints it, whatever else it meant
     * (79: lost; 48: a double-bit error). */
    if (xid[0])
        dra_taint_add(out, &n, DRA_TAINT_XID, xid, evict, h);
    switch (h->reason) {
    case HEALTH_LOST:
        dra_taint_add(out, &n, DRA_TAINT_LOST, "", evict, h);
        break;
    case HEALTH_ECC:
        dra_taint_add(out, &n, DRA_TAINT_ECC, "double-bit", evict, h);
        break;
    case HEALTH_HUNG:
        dra_taint_add(out, &n, DRA_TAINT_HUNG, "", evict, h);
        break;
    case HEALTH_XID:
        if (!xid[0]) /* an XID the record lost the number of: never leave it untainted */
            dra_taint_add(out, &n, DRA_TAINT_XID, "", evict, h);
        break;
    default:
        break;
    }
    return n;
}
