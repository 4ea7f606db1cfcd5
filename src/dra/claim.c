/* A ResourceClaim's allocation, as the kubelet leaves it to the driver to
 * read: status.allocation.devices.results, this driver's entries. */
#include "dra/dra.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

static int dra_claim_copy(json_t *obj, const char *key, char *out, size_t len)
{
    const char *s = json_string_value(json_object_get(obj, key));
    if (!s || strlen(s) >= len)
        return -1;
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

int dra_claim_parse(const char *json, size_t len, struct dra_allocation *a, struct err *e)
{
    memset(a, 0, sizeof *a);
    json_error_t je;
    json_t *root = json_loadb(json, len, 0, &je);
    if (!root)
        return err_set(e, "ResourceClaim: not JSON (%s, line %d)", je.text, je.line);
    int rc = -1;
    json_t *meta = json_object_get(root, "metadata");
    json_t *results = json_object_get(
        json_object_get(json_object_get(json_object_get(root, "status"), "allocation"), "devices"),
        "results");
    const char *kind = json_string_value(json_object_get(root, "kind"));
    if (!json_is_object(root) || !kind || strcmp(kind, "ResourceClaim")) {
        err_set(e, "not a ResourceClaim");
    } else if (dra_claim_copy(meta, "uid", a->uid, sizeof a->uid) < 0 || !a->uid[0]) {
        err_set(e, "ResourceClaim without metadata.uid");
    } else if (!json_is_array(results)) {
        err_set(e, "ResourceClaim %s is not allocated (no status.allocation.devices.results)",
                a->uid);
    } else {
        rc = 0;
        size_t i;
        json_t *r;
        json_array_foreach(results, i, r) {
            const char *driver = json_string_value(json_object_get(r, "driver"));
            if (!driver || strcmp(driver, DRA_DRIVER))
                continue;
            if (a->count == DRA_MAX_RESULTS) {
                rc = err_set(e, "ResourceClaim %s: more than %d devices of " DRA_DRIVER, a->uid,
                             DRA_MAX_RESULTS);
                break;
            }
            struct dra_result *x = &a->results[a->count];
            if (dra_claim_copy(r, "request", x->request, sizeof x->request) < 0 ||
                dra_claim_copy(r, "pool", x->pool, sizeof x->pool) < 0 ||
                dra_claim_copy(r, "device", x->device, sizeof x->device) < 0) {
                rc = err_set(e, "ResourceClaim %s: result %zu lacks request, pool or device", a->uid, i);
                break;
            }
            a->count++;
        }
    }
    json_decref(root);
    return rc;
}
