/* A ResourceClaim's allocation, as the kubelet leaves it to the driver to
 * read: status.allocation.devices.results, this driver's entries. */
#include "dra/dra.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "util/quantity.h"

static int dra_claim_copy(json_t *obj, const char *key, char *out, size_t len)
{
    const char *s = json_string_value(json_object_get(obj, key));
    if (!s || strlen(s) >= len)
        return -1;
    memcpy(out, s, strlen(s) + 1);
    return 0;
}

/* A result's share of its device (consumable capacity): its shareID and
 * what it consumed; -1 for a share of what gpulet cannot take (a consumed
 * quantity that is not one, or out of range). */
static int dra_claim_share(json_t *r, struct dra_result *x)
{
    json_t *id = json_object_get(r, "shareID");
    if (!id)
        return 0;
    if (dra_claim_copy(r, "shareID", x->share_id, sizeof x->share_id) < 0 || !x->share_id[0])
        return -1;
    json_t *used = json_object_get(r, "consumedCapacity");
    const char *mem = json_string_value(json_object_get(used, "memory"));
    const char *compute = json_string_value(json_object_get(used, DRA_SHARE_COMPUTE));
    long double v;
    if (mem) {
        if (!quantity_parse(mem, &v) || v < 1 || v > 1e15L)
            return -1;
        x->share_bytes = (unsigned long long)v;
    }
    if (compute) {
        if (!quantity_parse(compute, &v) || v < 0 || v > 100)
            return -1;
        x->share_compute = (unsigned)v;
    }
    return 0;
}

/* Whether a config entry's requests name request (none named: all). */
static bool dra_config_applies(json_t *entry, const char *request)
{
    json_t *reqs = json_object_get(entry, "requests"), *r;
    size_t i;
    if (!json_array_size(reqs))
        return true;
    json_array_foreach(reqs, i, r)
        if (json_is_string(r) && !strcmp(json_string_value(r), request))
            return true;
    return false;
}

/* status.allocation.devices.config: this driver's opaque entries, the
 * class's first, each result given the last that names its request. */
static int dra_claim_configs(json_t *configs, struct dra_allocation *a, struct err *e)
{
    static const char *const sources[] = {"FromClass", "FromClaim"};
    for (size_t s = 0; s < 2; s++) {
        size_t i;
        json_t *c;
        json_array_foreach(configs, i, c) {
            json_t *opaque = json_object_get(c, "opaque");
            const char *source = json_string_value(json_object_get(c, "source"));
            const char *driver = json_string_value(json_object_get(opaque, "driver"));
            if (!driver || strcmp(driver, DRA_DRIVER) || !source || strcmp(source, sources[s]))
                continue;
            if (a->nconfigs == DRA_MAX_CONFIGS)
                return err_set(e, "ResourceClaim %s: more than %d configurations for " DRA_DRIVER,
                               a->uid, DRA_MAX_CONFIGS);
            struct err why;
            if (dra_sharing_parse(json_object_get(opaque, "parameters"), &a->configs[a->nconfigs],
                                  &why) < 0)
                return err_set(e, "ResourceClaim %s: config %zu (%s): %s", a->uid, i, source, why.msg);
            for (unsigned k = 0; k < a->count; k++)
                if (dra_config_applies(c, a->results[k].request))
                    a->results[k].config = (int)a->nconfigs;
            a->nconfigs++;
        }
    }
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
    json_t *devices =
        json_object_get(json_object_get(json_object_get(root, "status"), "allocation"), "devices");
    json_t *results = json_object_get(devices, "results");
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
            x->config = -1;
            if (dra_claim_share(r, x) < 0) {
                rc = err_set(e, "ResourceClaim %s: result %zu: a share (shareID) whose consumed "
                             "memory or compute is no quantity gpulet can take", a->uid, i);
                break;
            }
            a->count++;
        }
        if (rc == 0)
            rc = dra_claim_configs(json_object_get(devices, "config"), a, e);
    }
    json_decref(root);
    return rc;
}
