/* What the DRA driver reads from the API server, on a worker thread: one
 * GET with any failure as one message (the worker jobs of prepare.c and
 * publish.c), and which version of resource.k8s.io to speak. */
#include "dra/internal.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

int dra_get(const struct dra *d, const char *path, struct kube_response *r, char *error,
            size_t len)
{
    struct err e;
    if (kube_request(&d->creds, "GET", path, NULL, NULL, r, NULL, &e) < 0)
        snprintf(error, len, "%s", e.msg);
    else if (r->status != 200)
        snprintf(error, len, "GET %.400s: HTTP %ld", path, r->status);
    else
        return 0;
    return -1;
}

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

enum dra_api dra_api_discover(const struct dra *d, char *error, size_t len)
{
    /* Newest first: 1.34+ serves v1 (and from 1.35 warns that v1beta1
     * goes in 1.38); 1.33 v1beta2; 1.32 only v1beta1. A version can be
     * served with other resources only (1.36's v1beta2: DeviceTaintRule). */
    for (enum dra_api api = DRA_API_V1; api <= DRA_API_V1BETA1; api++) {
        char path[64];
        snprintf(path, sizeof path, "/apis/" DRA_GROUP "/%s", dra_api_name(api));
        struct kube_response r = {0};
        struct err e;
        int rc = kube_request(&d->creds, "GET", path, NULL, NULL, &r, NULL, &e);
        bool found = rc == 0 && r.status == 200 && dra_api_serves_slices(r.body.data, r.body.len);
        long status = r.status;
        kube_response_free(&r);
        if (rc < 0) {
            snprintf(error, len, "%s", e.msg);
            return DRA_API_NONE;
        }
        if (found)
            return api;
        if (status != 200 && status != 404) {
            snprintf(error, len, "GET %s: HTTP %ld", path, status);
            return DRA_API_NONE;
        }
    }
    snprintf(error, len, "the API server serves no ResourceSlices in " DRA_GROUP
                         " v1, v1beta2 or v1beta1: DRA needs Kubernetes 1.32 or later (1.32 and "
                         "1.33 with the DynamicResourceAllocation gate and the beta API on)");
    return DRA_API_NONE;
}
