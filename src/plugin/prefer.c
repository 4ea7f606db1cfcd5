/* GetPreferredAllocation: the best-connected set of GPUs of a given size.
 * A pair scores 100 per NVLink between them plus its PCIe closeness (one
 * switch 50, several switches 40, host bridge 30, NUMA node 20, across
 * nodes 10), as NVIDIA's allocator weighs links. A set scores the sum over
 * its pairs. Small searches try every set; large ones grow greedily. Ties
 * go to the lowest GPU indexes, so the answer is deterministic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin.pb-c.h"
#include "grpc/grpc.h"
#include "plugin/internal.h"
#include "util/xmalloc.h"
#include "util/arena.h"

#define PREFER_EXHAUSTIVE_LIMIT 200000.0 /* sets to try before going greedy */

static int prefer_pcie(int level)
{
    switch (level) {
    case NVML_TOPOLOGY_INTERNAL: return 60;
    case NVML_TOPOLOGY_SINGLE: return 50;
    case NVML_TOPOLOGY_MULTIPLE: return 40;
    case NVML_TOPOLOGY_HOSTBRIDGE: return 30;
    case NVML_TOPOLOGY_NODE: return 20;
    case NVML_TOPOLOGY_SYSTEM: return 10;
    default: return 0;
    }
}

static long prefer_pair(const struct gpu_inventory *inv, unsigned a, unsigned b)
{
    const struct gpu_link *l = gpu_inventory_link(inv, a, b);
    return 100L * l->nvlinks + prefer_pcie(l->pcie);
}

/* Score that adding gpu brings to a set. */
static long prefer_gain(const struct gpu_inventory *inv, const unsigned *set, size_t n,
                        unsigned gpu)
{
    long s = 0;
    for (size_t i = 0; i < n; i++)
        s += prefer_pair(inv, set[i], gpu);
    return s;
}

struct prefer_search {
    const struct gpu_inventory *inv;
    const unsigned *cand;
    size_t ncand, size;
    unsigned *cur, *best;
    long best_score;
};

/* Tries every way to fill cur[n..size) from cand[from..), in index order;
 * strict improvement keeps the first (lowest-index) of equal sets. */
static void prefer_all(struct prefer_search *s, size_t n, size_t from, long score)
{
    if (n == s->size) {
        if (score > s->best_score) {
            s->best_score = score;
            memcpy(s->best, s->cur, s->size * sizeof *s->cur);
        }
        return;
    }
    for (size_t i = from; i + (s->size - n) <= s->ncand; i++) {
        s->cur[n] = s->cand[i];
        prefer_all(s, n + 1, i + 1, score + prefer_gain(s->inv, s->cur, n, s->cand[i]));
    }
}

static double prefer_choose(size_t n, size_t k)
{
    double c = 1;
    for (size_t i = 0; i < k; i++)
        c = c * (double)(n - i) / (double)(i + 1);
    return c;
}

static void prefer_greedy(struct prefer_search *s, size_t n)
{
    bool *used = xcalloc(s->ncand, sizeof *used);
    while (n < s->size) {
        long best = -1;
        size_t pick = 0;
        for (size_t i = 0; i < s->ncand; i++) {
            if (used[i])
                continue;
            /* An empty set has no pairs yet: seed it with the best-connected GPU. */
            long g = n ? prefer_gain(s->inv, s->cur, n, s->cand[i])
                       : prefer_gain(s->inv, s->cand, s->ncand, s->cand[i]);
            if (g > best)
                best = g, pick = i;
        }
        used[pick] = true;
        s->cur[n++] = s->cand[pick];
    }
    free(used);
    memcpy(s->best, s->cur, s->size * sizeof *s->cur);
}

static int prefer_cmp(const void *a, const void *b)
{
    unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;
    return x < y ? -1 : x > y;
}

int plugin_prefer(const struct gpu_inventory *inv, const unsigned *avail, size_t navail,
                  const unsigned *must, size_t nmust, size_t size, unsigned *out)
{
    if (size < nmust || size > navail)
        return -1;
    unsigned *cand = xmalloc((navail + 1) * sizeof *cand);
    unsigned *cur = xmalloc((size + 1) * sizeof *cur);
    size_t ncand = 0;
    for (size_t i = 0; i < navail; i++) {
        bool required = false;
        for (size_t j = 0; j < nmust; j++)
            required |= avail[i] == must[j];
        if (!required)
            cand[ncand++] = avail[i];
    }
    qsort(cand, ncand, sizeof *cand, prefer_cmp);
    if (nmust)
        memcpy(cur, must, nmust * sizeof *must);
    long base = 0;
    for (size_t i = 1; i < nmust; i++)
        base += prefer_gain(inv, cur, i, cur[i]);
    struct prefer_search s = {inv, cand, ncand, size, cur, out, -1};
    if (prefer_choose(ncand, size - nmust) <= PREFER_EXHAUSTIVE_LIMIT)
        prefer_all(&s, nmust, 0, base);
    else
        prefer_greedy(&s, nmust);
    qsort(out, size, sizeof *out, prefer_cmp);
    free(cand);
    free(cur);
    return 0;
}

/* Maps a request's device IDs to GPUs; fails naming the first bad ID. */
static int prefer_ids(const struct plugin *p, char **ids, size_t n, unsigned *gpus,
                      const char *what, struct err *e)
{
    for (size_t i = 0; i < n; i++) {
        const struct plugin_device *d = plugin_find(p, ids[i]);
        if (!d)
            return err_set(e, "unknown device ID '%s' in %s", ids[i], what);
        for (size_t j = 0; j < i; j++)
            if (gpus[j] == d->gpu)
                return err_set(e, "device ID '%s' appears twice in %s", ids[i], what);
        gpus[i] = d->gpu;
    }
    return 0;
}

/* The reason given when the requested size cannot be met. */
static void prefer_cannot(const V1beta1__ContainerPreferredAllocationRequest *cr, struct err *e)
{
    err_set(e, "cannot choose %d devices from %zu available with %zu required",
             cr->allocation_size, cr->n_available_deviceids, cr->n_must_include_deviceids);
}

/* For whole GPUs: the best-connected size GPUs of avail keeping must, as
 * device positions in chosen. */
static int prefer_gpus(const struct plugin *p,
                       const V1beta1__ContainerPreferredAllocationRequest *cr, unsigned *avail,
                       unsigned *must, size_t size, unsigned *chosen, struct err *e)
{
    if (prefer_ids(p, cr->available_deviceids, cr->n_available_deviceids, avail,
                   "available_deviceIDs", e) < 0 ||
        prefer_ids(p, cr->must_include_deviceids, cr->n_must_include_deviceids, must,
                   "must_include_deviceIDs", e) < 0)
        return -1;
    for (size_t i = 0; i < cr->n_must_include_deviceids; i++) {
        bool found = false;
        for (size_t j = 0; j < cr->n_available_deviceids; j++)
            found |= must[i] == avail[j];
        if (!found)
            return err_set(e, "must-include device '%s' is not among the available ones",
                           cr->must_include_deviceids[i]);
    }
    if (plugin_prefer(p->inv, avail, cr->n_available_deviceids, must,
                      cr->n_must_include_deviceids, size, chosen) < 0) {
        prefer_cannot(cr, e);
        return -1;
    }
    for (size_t i = 0; i < size; i++)
        for (unsigned d = 0; d < p->ndevs; d++)
            if (p->devs[d].gpu == chosen[i]) {
                chosen[i] = d;
                break;
            }
    return 0;
}

int plugin_preferred(const struct plugin *p, const uint8_t *req, size_t len, uint8_t **out,
                     size_t *out_len, struct err *e)
{
    V1beta1__PreferredAllocationRequest *r =
        v1beta1__preferred_allocation_request__unpack(NULL, len, req);
    if (!r)
        return err_set(e, "malformed PreferredAllocationRequest"), GRPC_INVALID_ARGUMENT;
    struct arena a = {0};
    V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    resp.n_container_responses = r->n_container_requests;
    resp.container_responses = arena_alloc(&a, r->n_container_requests * sizeof(void *));
    int status = GRPC_OK;
    for (size_t c = 0; c < r->n_container_requests && status == GRPC_OK; c++) {
        V1beta1__ContainerPreferredAllocationRequest *cr = r->container_requests[c];
        unsigned *avail = arena_alloc(&a, (cr->n_available_deviceids + 1) * sizeof *avail);
        unsigned *must = arena_alloc(&a, (cr->n_must_include_deviceids + 1) * sizeof *must);
        /* The size comes off the wire: check it before sizing anything by it. */
        if (cr->allocation_size <= 0 || (size_t)cr->allocation_size > cr->n_available_deviceids ||
            (size_t)cr->allocation_size < cr->n_must_include_deviceids) {
            prefer_cannot(cr, e);
            status = GRPC_INVALID_ARGUMENT;
            break;
        }
        size_t size = (size_t)cr->allocation_size;
        unsigned *chosen = arena_alloc(&a, (size + 1) * sizeof *chosen);
        /* chosen ends up holding device positions, whichever path chose. */
        if (plugin_many_per_gpu(p)) {
            if (plugin_prefer_replicas(p, cr->available_deviceids, cr->n_available_deviceids,
                                       cr->must_include_deviceids, cr->n_must_include_deviceids,
                                       size, chosen, e) < 0) {
                status = GRPC_INVALID_ARGUMENT;
                break;
            }
        } else if (prefer_gpus(p, cr, avail, must, size, chosen, e) < 0) {
            status = GRPC_INVALID_ARGUMENT;
            break;
        }
        V1beta1__ContainerPreferredAllocationResponse *out_c = arena_alloc(&a, sizeof *out_c);
        v1beta1__container_preferred_allocation_response__init(out_c);
        out_c->n_deviceids = size;
        out_c->deviceids = arena_alloc(&a, size * sizeof(char *));
        for (size_t i = 0; i < size; i++)
            out_c->deviceids[i] = (char *)p->devs[chosen[i]].id;
        resp.container_responses[c] = out_c;
    }
    if (status == GRPC_OK) {
        *out_len = v1beta1__preferred_allocation_response__get_packed_size(&resp);
        *out = xmalloc(*out_len + 1);
        v1beta1__preferred_allocation_response__pack(&resp, *out);
    }
    arena_free(&a);
    v1beta1__preferred_allocation_request__free_unpacked(r, NULL);
    return status;
}
