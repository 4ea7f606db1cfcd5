/* The node's ResourceSlice on the API server, kept in step by kube/sync.c:
 * the slice is watched (once the API's version is known) and applied by
 * server-side apply (one request creates or replaces it) only where the
 * server's differs from the one built from the agent's records. A slice
 * the same as the server's sends nothing, and keeps its pool generation: a
 * new generation makes the scheduler drop and read the pool again. So a
 * restarted agent whose GPUs did not change writes nothing, and a slice
 * deleted by another (the kubelet does so when a driver's socket goes) is
 * applied again as soon as the watch says so. At stop the slice is
 * deleted. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

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
    return (d->api == DRA_API_V1 || d->api == DRA_API_V1BETA2) && !d->taints_dropped;
}

void dra_slice_of(const struct dra *d, const char *uid, unsigned long long generation,
                  struct health_faults *evict, struct dra_slice_in *in)
{
    struct err e;
    if (evict && health_faults_parse(evict, "--dra-evict-on", d->cfg->dra_evict_on, &e) < 0)
        memset(evict, 0, sizeof *evict); /* checked with the configuration */
    *in = (struct dra_slice_in){d->cfg, d->inv, d->devs, d->node, uid, generation, d->api,
                                (const char(*)[32])d->pcie_roots, dra_tainted(d), evict, d->held,
                                d->api == DRA_API_V1 || d->api == DRA_API_V1BETA2};
}

static void dra_build(const struct dra *d, const char *uid, unsigned long long generation,
                      struct strbuf *out)
{
    struct health_faults evict;
    struct dra_slice_in in;
    dra_slice_of(d, uid, generation, &evict, &in);
    dra_slice_json(&in, out);
}

/* Whether a slice (JSON) has a device with taints. */
static bool dra_has_taints(const char *json, size_t len)
{
    json_t *s = json_loadb(json, len, 0, NULL);
    json_t *devs = json_object_get(json_object_get(s, "spec"), "devices"), *dev;
    size_t i;
    bool found = false;
    json_array_foreach(devs, i, dev)
        found = found || json_object_get(dev, "taints");
    json_decref(s);
    return found;
}

/* Whether the server's slice (text) is ours as built now at its generation:
 * the one last applied, or one whose every field we set it holds (after a
 * restart). */
static bool dra_slice_holds(struct dra *d, const char *uid, const char *json, size_t len)
{
    json_t *have = json_loadb(json, len, 0, NULL);
    unsigned long long g = dra_generation(have);
    struct strbuf now = {0};
    dra_build(d, uid, g, &now);
    bool same = g == d->generation && now.len == d->applied.len &&
                !memcmp(now.data, d->applied.data, now.len);
    if (!same) {
        json_t *want = json_loadb(now.data, now.len, 0, NULL);
        same = dra_json_within(json_object_get(want, "spec"), json_object_get(have, "spec"));
        json_decref(want);
    }
    if (same && g > d->generation)
        d->generation = g; /* a restart: the server's generation goes on */
    strbuf_free(&now);
    json_decref(have);
    return same;
}

static int dra_slice_next(void *ctx, const char *json, size_t len, struct kube_write *w,
                          struct err *e)
{
    (void)e;
    struct dra *d = ctx;
    size_t nlen;
    const char *node = kube_watch_object(d->node_watch, &nlen);
    json_t *n = node ? json_loadb(node, nlen, 0, NULL) : NULL;
    const char *uid = json_string_value(json_object_get(json_object_get(n, "metadata"), "uid"));
    char owner[64] = "";
    snprintf(owner, sizeof owner, "%s", uid ? uid : "");
    json_decref(n);
    if (!owner[0]) /* the Node's watch pokes when it has it */
        return 0;
    if (d->held_call && !d->held) /* the GPUs pods hold are being read: it pokes */
        return 0;
    if (json && dra_slice_holds(d, owner, json, len))
        return 0;
    if (!json && d->applied.len)
        log_warn("DRA: the ResourceSlice was deleted (the kubelet does so when a driver's socket "
                 "goes); publishing it again");
    if (json) {
        json_t *have = json_loadb(json, len, 0, NULL);
        unsigned long long g = dra_generation(have);
        json_decref(have);
        if (g > d->generation)
            d->generation = g;
    }
    d->generation++;
    strbuf_free(&d->applied);
    dra_build(d, owner, d->generation, &d->applied);
    strbuf_append(&w->body, d->applied.data, d->applied.len);
    char name[320];
    dra_slice_name(d->node, name, sizeof name);
    w->method = "PATCH";
    snprintf(w->path, sizeof w->path, "/apis/" DRA_GROUP "/%s/resourceslices/%s"
             "?fieldManager=gpulet&force=true", dra_api_name(d->api), name);
    w->content_type = "application/apply-patch+yaml";
    return 0;
}

static void dra_slice_took(void *ctx, const struct kube_answer *a)
{
    struct dra *d = ctx;
    /* A server whose DRADeviceTaints gate is off drops the field without a
     * word: then a faulty device would look healthy to the scheduler. It
     * leaves the slice instead, as on 1.32. */
    if (a && a->len && dra_tainted(d) && dra_has_taints(d->applied.data, d->applied.len) &&
        !dra_has_taints(a->body, a->len)) {
        d->taints_dropped = true;
        log_warn("DRA: the API server drops device taints (its DRADeviceTaints feature gate is "
                 "off): faulty devices leave the ResourceSlice instead");
        dra_publish(d);
        return;
    }
    struct dra_slice_in in;
    dra_slice_of(d, "", 0, NULL, &in);
    d->published = dra_count(&in);
    log_info("DRA: ResourceSlice published: %u device(s), pool generation %llu", d->published,
             d->generation);
}

static void dra_on_node(void *ctx, struct kube_watch *w)
{
    (void)w;
    dra_publish(ctx); /* the Node's UID may be there now */
}

void dra_publish_start(struct dra *d)
{
    if (d->slice_sync || d->stopping)
        return;
    char name[320], collection[128], what[400];
    struct err e;
    dra_slice_name(d->node, name, sizeof name);
    snprintf(collection, sizeof collection, "/apis/" DRA_GROUP "/%s/resourceslices",
             dra_api_name(d->api));
    snprintf(what, sizeof what, "ResourceSlice %s", name);
    const struct kube_watch_spec ws = {collection, name, what};
    kube_watch_start(&d->slice_watch, d->kc, &ws, &e);
    const struct kube_sync_spec ss = {.what = what, .rbac = "get, list, watch, patch and delete "
                                      "on resourceslices (deploy/dra/rbac.yaml)",
                                      .watch = d->slice_watch, .next = dra_slice_next,
                                      .took = dra_slice_took, .ctx = d};
    kube_sync_start(&d->slice_sync, d->kc, &ss, &e);
    kube_watch_listen(d->node_watch, dra_on_node, d);
}

void dra_publish(struct dra *d)
{
    if (!d->stopping)
        kube_sync_poke(d->slice_sync);
}

static void dra_deleted(void *ctx, const struct kube_answer *a)
{
    struct dra *d = ctx;
    char why[600] = "";
    if (a->status != 200 && a->status != 404)
        snprintf(why, sizeof why, "not deleted: %.500s (the kubelet removes it later)",
                 a->status ? "HTTP error" : a->error);
    if (a->status && !why[0])
        log_info("DRA: ResourceSlice deleted");
    else
        log_info("DRA: ResourceSlice %s%s", why, a->status ? "" : "");
    d->jobs--;
    dra_maybe_free(d);
}

void dra_unpublish(struct dra *d)
{
    kube_watch_unlisten(d->node_watch, dra_on_node, d);
    kube_sync_stop(d->slice_sync);
    kube_watch_stop(d->slice_watch);
    d->slice_sync = NULL;
    d->slice_watch = NULL;
    if (!d->api)
        return; /* nothing was ever published */
    char name[320], path[512];
    dra_slice_name(d->node, name, sizeof name);
    snprintf(path, sizeof path, "/apis/" DRA_GROUP "/%s/resourceslices/%s", dra_api_name(d->api),
             name);
    d->jobs++;
    /* No owner: the agent's stop does not cancel it; the client stays
     * until it is answered. */
    kube_call(d->kc, &(struct kube_call_spec){.method = "DELETE", .path = path,
                                              .done = dra_deleted, .ctx = d});
}
