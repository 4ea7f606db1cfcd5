/* Preferred allocation over replicas of shared GPUs. The policy: a request
 * for k replicas gets k distinct GPUs whenever k GPUs have a free replica
 * (NVIDIA's plugin does not promise it: #491); among GPUs not yet used by
 * the request, `distributed` (the default) takes the least loaded, `packed`
 * the most loaded, ties to the lower index (docs/sharing.md). */
#include "plugin/internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

/* Position of the device with this ID, or -1. */
static int replicas_find(const struct plugin *p, const char *id)
{
    const struct plugin_device *d = plugin_find(p, id);
    return d ? (int)(d - p->devs) : -1;
}

/* Maps IDs to device positions; fails on an unknown or repeated ID. */
static int replicas_ids(const struct plugin *p, char **ids, size_t n, unsigned *out,
                        const char *what, struct err *e)
{
    for (size_t i = 0; i < n; i++) {
        int k = replicas_find(p, ids[i]);
        if (k < 0)
            return err_set(e, "unknown device ID '%s' in %s", ids[i], what);
        for (size_t j = 0; j < i; j++)
            if (out[j] == (unsigned)k)
                return err_set(e, "device ID '%s' appears twice in %s", ids[i], what);
        out[i] = (unsigned)k;
    }
    return 0;
}

int plugin_prefer_replicas(const struct plugin *p, char **avail_ids, size_t navail,
                           char **must_ids, size_t nmust, size_t size, unsigned *out,
                           struct err *e)
{
    unsigned ngpu = p->inv->count;
    unsigned *avail = xcalloc(navail + 1, sizeof *avail), *must = xcalloc(nmust + 1, sizeof *must);
    unsigned *free_of = xcalloc(ngpu + 1, sizeof *free_of), *used = xcalloc(ngpu + 1, sizeof *used);
    unsigned *total = xcalloc(ngpu + 1, sizeof *total);
    bool *taken = xcalloc(p->ndevs + 1, sizeof *taken);
    int rc = -1;
    if (replicas_ids(p, avail_ids, navail, avail, "available_deviceIDs", e) < 0 ||
        replicas_ids(p, must_ids, nmust, must, "must_include_deviceIDs", e) < 0)
        goto out;
    for (size_t i = 0; i < p->ndevs; i++)
        total[p->devs[i].gpu]++;
    for (size_t i = 0; i < navail; i++)
        free_of[p->devs[avail[i]].gpu]++;
    size_t n = 0;
    for (size_t i = 0; i < nmust; i++) {
        bool ok = false;
        for (size_t j = 0; j < navail; j++)
            ok |= avail[j] == must[i];
        if (!ok) {
            err_set(e, "must-include device '%s' is not among the available ones", must_ids[i]);
            goto out;
        }
        taken[must[i]] = true;
        used[p->devs[must[i]].gpu]++;
        out[n++] = must[i];
    }
    bool packed = p->cfg->shared_policy == CONFIG_POLICY_PACKED;
    while (n < size) {
        int best = -1;
        unsigned best_gpu = 0;
        for (size_t j = 0; j < navail; j++) {
            unsigned k = avail[j], g = p->devs[k].gpu;
            if (taken[k])
                continue;
            if (best >= 0) {
                unsigned bg = best_gpu;
                /* Distinct GPUs first, then load (replicas held by others). */
                if (used[g] != used[bg]) {
                    if (used[g] > used[bg])
                        continue;
                } else {
                    unsigned load = total[g] - free_of[g], bload = total[bg] - free_of[bg];
                    if (load == bload ? k >= (unsigned)best : packed ? load < bload : load > bload)
                        continue;
                }
            }
            best = (int)k;
            best_gpu = g;
        }
        if (best < 0)
            break;
        taken[best] = true;
        used[best_gpu]++;
        out[n++] = (unsigned)best;
    }
    if (n < size) {
        err_set(e, "cannot choose %zu replicas from %zu available", size, navail);
        goto out;
    }
    rc = 0;
out:
    free(avail);
    free(must);
    free(free_of);
    free(used);
    free(total);
    free(taken);
    return rc;
}
