/* The node's ResourceSlice on the API server, kept in step by kube/sync.c:
 * the slice is watched (once the API's version is known) and applied by
 * server-side apply (one request creates or replaces it) only where the
 * server's differs from the one built from the agent's records. A slice
 * the same as the server's sends nothing, and keeps its pool generation: a
 * new generation makes the scheduler drop and read the pool again. So a
 * restarted agent whose GPUs did not change writes nothing, and a slice
 * deleted by another (the kubelet does so when a driver's socket goes) is
 * applied again as soon as the watch says so. At stop the slices stay (for
 * the next gpulet); DRA turned off deletes them. With --dra-mig the pool
 * has more slices (slice.c): each is kept in step this way on its own, and
 * all carry the pool's one generation. A starting agent deletes the slices
 * of its node and driver that it does not publish (an earlier gpulet's,
 * with other settings). */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/jsonx.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* Whether every field of want is in have, the same (have may hold more: the
 * server's defaults, but never a device's taints, which only we write: a
 * fault that ended must lift them). */
static bool dra_json_within(const json_t *want, const json_t *have)
{
    if (json_is_object(want)) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)want, key, v)
            if (!dra_json_within(v, json_object_get(have, key)))
                return false;
        return json_is_object(have) &&
               (json_object_get(want, "taints") || !json_object_get(have, "taints"));
    }
    if (json_is_array(want)) {
        if (!json_is_array(have) || json_array_size(want) != json_array_size(have))
            return false;
        for (size_t i = 0; i < json_array_size(want); i++)
            if (!dra_json_within(json_array_get(want, i), json_array_get(have, i)))
                return false;
        return true;
    }
    return have && json_equal(want, have);
}

static unsigned long long dra_generation(const json_t *slice)
{
    json_t *g = json_object_get(json_object_get(json_object_get(slice, "spec"), "pool"),
                                "generation");
    return json_is_integer(g) && json_integer_value(g) > 0 ? (unsigned long long)json_integer_value(g)
                                                            : 0;
}

bool dra_tainted(const struct dra *d)
{
    return (d->api.version == DRA_API_V1 || d->api.version == DRA_API_V1BETA2) && !d->pool.taints_dropped;
}

void dra_slice_of(const struct dra *d, const char *uid, unsigned long long generation,
                  struct health_faults *evict, struct dra_slice_in *in)
{
    struct err e;
    if (evict && gpu_health_faults_parse(evict, "--dra-evict-on", d->cfg->dra_evict_on, &e) < 0)
        memset(evict, 0, sizeof *evict); /* checked with the configuration */
    *in = (struct dra_slice_in){d->cfg, d->inv, d->devs, d->node, uid, generation, d->api.version,
                                (const char(*)[32])d->pcie_roots, dra_tainted(d), evict, d->pool.held,
                                d->api.version == DRA_API_V1 || d->api.version == DRA_API_V1BETA2,
                                d->api.version == DRA_API_V1 && !d->pool.counters_dropped, NULL, 0};
    in->made = (const char(*)[96])dra_mig_made_list(d, &in->nmade);
}

void dra_slice_in_free(struct dra_slice_in *in)
{
    free((void *)in->made);
    in->made = NULL;
}

/* Slice s of d's pool as the agent's records make it now (its
 * generation: the caller's to set). */
static json_t *dra_build(const struct dra *d, const char *uid, unsigned s)
{
    struct health_faults evict;
    struct dra_slice_in in;
    dra_slice_of(d, uid, 0, &evict, &in);
    json_t *slice = dra_slice_object(&in, s);
    dra_slice_in_free(&in);
    return slice;
}

static void dra_dump(json_t *slice, unsigned long long generation, struct strbuf *out)
{
    dra_slice_generation(slice, generation);
    strbuf_free(out);
    jsonx_dump(slice, JSON_COMPACT | JSON_SORT_KEYS, out);
}

/* Whether a slice (JSON) has a device with taints, or counter sets. */
static bool dra_has(const json_t *s, const char *list, const char *field)
{
    json_t *items = json_object_get(json_object_get(s, "spec"), list), *item;
    size_t i;
    bool found = false;
    json_array_foreach(items, i, item)
        found = found || !field || json_object_get(item, field);
    return found;
}

/* Whether the server's slice (have, at generation g) is want: the one
 * last applied, or one whose every field we set it holds (after a restart,
 * whose first slice seen gives the generation). */
static bool dra_slice_holds(struct dra_slice_obj *o, json_t *want, const json_t *have,
                            unsigned long long g)
{
    struct dra *d = o->d;
    struct strbuf now = {0};
    dra_dump(want, g, &now);
    bool same = g == d->pool.generation && now.len == o->applied.len &&
                !memcmp(now.data, o->applied.data, now.len);
    if (!same && (g == d->pool.generation || !d->pool.generation))
        same = dra_json_within(json_object_get(want, "spec"), json_object_get(have, "spec"));
    if (same && g > d->pool.generation)
        d->pool.generation = g; /* a restart: the server's generation goes on */
    strbuf_free(&now);
    return same;
}

static void dra_poke_others(struct dra *d, const struct dra_slice_obj *o)
{
    for (unsigned k = 0; k < d->pool.nslices; k++)
        if (d->pool.slices[k] != o)
            kube_sync_poke(d->pool.slices[k]->sync);
}

/* The next write of slice o: the slice built once from the records,
 * compared with the server's (have), and applied where it differs. */
static int dra_slice_next(void *ctx, const json_t *have, struct kube_write *w, struct err *e)
{
    (void)e;
    struct dra_slice_obj *o = ctx;
    struct dra *d = o->d;
    const json_t *node = kube_watch_object(d->node_watch);
    const char *owner = json_string_value(json_object_get(json_object_get(node, "metadata"), "uid"));
    if (!owner || !owner[0]) /* the Node's watch pokes when it has it */
        return 0;
    if (!d->pool.held) /* the GPUs pods hold are being read: the answer pokes */
        return 0;
    unsigned long long g = have ? dra_generation(have) : 0;
    json_t *want = dra_build(d, owner, o->index);
    if (have && dra_slice_holds(o, want, have, g)) {
        json_decref(want);
        return 0;
    }
    if (!have && o->applied.len)
        log_warn("DRA: the ResourceSlice %s was deleted (the kubelet does so when a driver's "
                 "socket goes); publishing it again", o->name);
    if (g > d->pool.generation)
        d->pool.generation = g;
    /* A change the pool's slices already carry at this generation needs a
     * new one, and the others follow it; a slice behind is only brought
     * up to it (one change, one new generation). */
    if (!d->pool.generation || (have && g == d->pool.generation)) {
        d->pool.generation++;
        dra_poke_others(d, o);
    }
    dra_dump(want, d->pool.generation, &o->applied);
    json_decref(want);
    strbuf_append(&w->body, o->applied.data, o->applied.len);
    w->method = "PATCH";
    snprintf(w->path, sizeof w->path, "/apis/" DRA_GROUP "/%s/resourceslices/%s"
             "?fieldManager=gpulet&force=true", dra_api_name(d->api.version), o->name);
    w->content_type = "application/apply-patch+yaml";
    return 0;
}

static void dra_slice_took(void *ctx, const json_t *took)
{
    struct dra_slice_obj *o = ctx;
    struct dra *d = o->d;
    /* A server whose DRADeviceTaints gate is off drops the field without a
     * word: then a faulty device would look healthy to the scheduler. It
     * leaves the slice instead, as on 1.32. Without DRAPartitionableDevices
     * it drops counters: then placements would not exclude each other, and
     * the GPUs go back to their MIG devices as they are. */
    json_t *sent = took ? json_loadb(o->applied.data, o->applied.len, 0, NULL) : NULL;
    bool taints_dropped = dra_has(sent, "devices", "taints") && !dra_has(took, "devices", "taints");
    bool counters_dropped = dra_has(sent, "sharedCounters", NULL) &&
                            !dra_has(took, "sharedCounters", NULL);
    json_decref(sent);
    if (dra_tainted(d) && taints_dropped) {
        d->pool.taints_dropped = true;
        log_warn("DRA: the API server drops device taints (its DRADeviceTaints feature gate is "
                 "off): faulty devices leave the ResourceSlice instead");
        dra_publish(d);
        return;
    }
    if (!d->pool.counters_dropped && counters_dropped) {
        d->pool.counters_dropped = true;
        log_warn("DRA: the API server drops counter sets (its DRAPartitionableDevices feature gate "
                 "is off): --dra-mig GPUs are published as the MIG devices they have");
        dra_publish(d);
        return;
    }
    struct dra_slice_in in;
    dra_slice_of(d, "", 0, NULL, &in);
    d->pool.published = dra_count(&in);
    dra_slice_in_free(&in);
    log_info("DRA: ResourceSlice published: %s; the pool: %u device(s) in %u slice(s), "
             "generation %llu", o->name, d->pool.published, d->pool.nslices, d->pool.generation);
}

static void dra_on_node(void *ctx, struct kube_watch *w)
{
    (void)w;
    dra_publish(ctx); /* the Node's UID may be there now */
}

/* Slice obj o's watch and sync. */
static void dra_slice_start(struct dra *d, struct dra_slice_obj *o)
{
    char collection[128], what[400];
    struct err e;
    snprintf(collection, sizeof collection, "/apis/" DRA_GROUP "/%s/resourceslices",
             dra_api_name(d->api.version));
    snprintf(what, sizeof what, "ResourceSlice %s", o->name);
    const struct kube_watch_spec ws = {collection, o->name, what};
    kube_watch_start(&o->watch, d->kc, &ws, &e);
    const struct kube_sync_spec ss = {.what = what, .rbac = "get, list, watch, patch and delete "
                                      "on resourceslices (deploy/dra/rbac.yaml)",
                                      .watch = o->watch, .next = dra_slice_next,
                                      .took = dra_slice_took, .ctx = o};
    kube_sync_start(&o->sync, d->kc, &ss, &e);
}

static void dra_slices_stop(struct dra *d, unsigned from, bool withdraw);

/* The pool's slices as the GPUs and the API make them now: those past the
 * count go (deleted from the server), new ones start. */
static void dra_slices_resize(struct dra *d)
{
    struct dra_slice_in in;
    dra_slice_of(d, "", 0, NULL, &in);
    unsigned n = dra_slices(&in), had = d->pool.nslices;
    if (n < had)
        dra_slices_stop(d, n, true);
    if (n > had) {
        d->pool.slices = xrealloc(d->pool.slices, n * sizeof *d->pool.slices);
        for (unsigned k = had; k < n; k++) {
            struct dra_slice_obj *o = xcalloc(1, sizeof *o);
            *o = (struct dra_slice_obj){.d = d, .index = k};
            dra_slice_name(&in, d->node, k, o->name, sizeof o->name);
            d->pool.slices[k] = o;
        }
        d->pool.nslices = n;
        for (unsigned k = had; k < n; k++)
            dra_slice_start(d, d->pool.slices[k]);
    }
    dra_slice_in_free(&in);
}

static void dra_deleted(void *ctx, const struct kube_answer *a);

/* Whether name is one of the slices this agent publishes. */
static bool dra_slice_ours(const struct dra *d, const char *name)
{
    for (unsigned k = 0; k < d->pool.nslices; k++)
        if (!strcmp(d->pool.slices[k]->name, name))
            return true;
    return false;
}

/* The node's slices of this driver on the server: those this agent does
 * not publish go. */
static void dra_listed(void *ctx, const struct kube_answer *a)
{
    struct dra *d = ctx;
    d->jobs.n--;
    json_t *list = a->status == 200 ? json_loads(a->body, 0, NULL) : NULL;
    json_t *items = json_object_get(list, "items"), *item;
    size_t i;
    json_array_foreach(items, i, item) {
        const char *name = json_string_value(json_object_get(json_object_get(item, "metadata"), "name"));
        if (!name || d->stopping || dra_slice_ours(d, name))
            continue;
        char path[512];
        snprintf(path, sizeof path, "/apis/" DRA_GROUP "/%s/resourceslices/%s",
                 dra_api_name(d->api.version), name);
        log_info("DRA: ResourceSlice %s is an earlier gpulet's, not published now: deleted", name);
        d->jobs.n++;
        kube_call(d->kc, &(struct kube_call_spec){.method = "DELETE", .path = path,
                                                  .done = dra_deleted, .ctx = d});
    }
    json_decref(list);
    dra_maybe_free(d);
}

static void dra_slices_sweep(struct dra *d)
{
    char path[512];
    snprintf(path, sizeof path, "/apis/" DRA_GROUP "/%s/resourceslices?fieldSelector="
             "spec.nodeName%%3D%s%%2Cspec.driver%%3D" DRA_DRIVER, dra_api_name(d->api.version), d->node);
    d->jobs.n++;
    kube_call(d->kc, &(struct kube_call_spec){.method = "GET", .path = path, .done = dra_listed,
                                              .ctx = d, .owner = d});
}

void dra_publish_start(struct dra *d)
{
    if (d->pool.nslices || d->stopping)
        return;
    dra_slices_resize(d);
    dra_slices_sweep(d);
    kube_watch_listen(d->node_watch, dra_on_node, d);
}

void dra_publish(struct dra *d)
{
    if (d->stopping || !d->pool.nslices)
        return;
    dra_slices_resize(d);
    for (unsigned k = 0; k < d->pool.nslices; k++)
        kube_sync_poke(d->pool.slices[k]->sync);
}

static void dra_deleted(void *ctx, const struct kube_answer *a)
{
    struct dra *d = ctx;
    char why[600] = "";
    if (a->status != 200 && a->status != 404)
        snprintf(why, sizeof why, "not deleted: %.500s (the kubelet removes it later)",
                 a->status ? "HTTP error" : a->error);
    if (why[0])
        log_info("DRA: ResourceSlice %s", why);
    d->jobs.n--;
    dra_maybe_free(d);
}

/* Stops keeping slices from on in step, and with withdraw deletes them
 * from the API server. */
static void dra_slices_stop(struct dra *d, unsigned from, bool withdraw)
{
    for (unsigned k = from; k < d->pool.nslices; k++) {
        struct dra_slice_obj *o = d->pool.slices[k];
        char path[512];
        snprintf(path, sizeof path, "/apis/" DRA_GROUP "/%s/resourceslices/%s",
                 dra_api_name(d->api.version), o->name);
        kube_sync_stop(o->sync);
        kube_watch_stop(o->watch);
        strbuf_free(&o->applied);
        free(o);
        if (!d->api.version || !withdraw)
            continue; /* nothing was ever published, or it stays */
        d->jobs.n++;
        /* No owner: the agent's stop does not cancel it; the client stays
         * until it is answered. */
        kube_call(d->kc, &(struct kube_call_spec){.method = "DELETE", .path = path,
                                                  .done = dra_deleted, .ctx = d});
    }
    if (from == 0 && d->pool.nslices)
        log_info(withdraw ? "DRA: ResourceSlices deleted (%u)"
                          : "DRA: ResourceSlices kept in the API server for the next gpulet (%u)",
                 d->pool.nslices);
    d->pool.nslices = from < d->pool.nslices ? from : d->pool.nslices;
}

void dra_unpublish(struct dra *d, bool withdraw)
{
    kube_watch_unlisten(d->node_watch, dra_on_node, d);
    dra_slices_stop(d, 0, withdraw);
    free(d->pool.slices);
    d->pool.slices = NULL;
}
