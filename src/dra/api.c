/* Which version of resource.k8s.io the API server speaks, asked once
 * through the agent's client (newest first), and again with backoff while
 * it cannot be told; the slice and the prepares wait for it. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/backoff.h"
#include "util/log.h"
#include "util/xmalloc.h"


bool dra_api_serves_slices(const char *json, size_t len)
{
    json_t *list = json_loadb(json ? json : "", len, 0, NULL), *r;
    size_t i;
    bool found = false;
    json_array_foreach(json_object_get(list, "resources"), i, r) {
        const char *name = json_string_value(json_object_get(r, "name"));
        found = found || (name && !strcmp(name, "resourceslices"));
    }
    json_decref(list);
    return found;
}

static void dra_api_ask(struct dra *d, enum dra_api api);

static void dra_api_again(uv_timer_t *t)
{
    dra_api_ask(t->data, DRA_API_V1);
}

static void dra_api_failed(struct dra *d, const char *why)
{
    unsigned wait = backoff_next(&d->api.backoff_ms, KUBE_RETRY_MIN_MS, KUBE_RETRY_MAX_MS);
    if (strcmp(why, d->api.error))
        log_warn("DRA: %s; asking again with backoff", why);
    snprintf(d->api.error, sizeof d->api.error, "%s", why);
    uv_timer_start(&d->api.retry, dra_api_again, wait, 0);
    dra_job_api(d); /* the prepares waiting get the reason */
}

struct dra_api_ask {
    struct dra *d;
    enum dra_api api;
};

static void dra_api_answer(void *ctx, const struct kube_answer *a)
{
    struct dra_api_ask q = *(struct dra_api_ask *)ctx;
    free(ctx);
    struct dra *d = q.d;
    d->jobs.n--;
    if (d->stopping) {
        dra_maybe_free(d);
        return;
    }
    char why[sizeof d->api.error];
    if (a->status == 200 && dra_api_serves_slices(a->body, a->len)) {
        d->api.version = q.api;
        d->api.error[0] = '\0';
        d->api.backoff_ms = 0;
        dra_publish_start(d);
        dra_job_api(d);
        return;
    }
    /* Newest first: 1.34+ serves v1 (and from 1.35 warns that v1beta1
     * goes in 1.38); 1.33 v1beta2; 1.32 only v1beta1. A version can be
     * served with other resources only (1.36's v1beta2: DeviceTaintRule). */
    if ((a->status == 200 || a->status == 404) && q.api < DRA_API_V1BETA1) {
        dra_api_ask(d, q.api + 1);
        return;
    }
    if (!a->status)
        snprintf(why, sizeof why, "%.500s", a->error);
    else if (a->status != 200 && a->status != 404)
        snprintf(why, sizeof why, "GET /apis/" DRA_GROUP "/%s: HTTP %ld", dra_api_name(q.api),
                 a->status);
    else
        snprintf(why, sizeof why, "the API server serves no ResourceSlices in " DRA_GROUP
                 " v1, v1beta2 or v1beta1: DRA needs Kubernetes 1.32 or later (1.32 and 1.33 "
                 "with the DynamicResourceAllocation gate and the beta API on)");
    dra_api_failed(d, why);
}

static void dra_api_ask(struct dra *d, enum dra_api api)
{
    char path[64];
    snprintf(path, sizeof path, "/apis/" DRA_GROUP "/%s", dra_api_name(api));
    struct dra_api_ask *q = xmalloc(sizeof *q);
    *q = (struct dra_api_ask){d, api};
    d->jobs.n++;
    kube_call(d->kc, &(struct kube_call_spec){.method = "GET", .path = path,
                                              .done = dra_api_answer, .ctx = q, .owner = d});
}

void dra_api_search(struct dra *d)
{
    dra_api_ask(d, DRA_API_V1);
}
