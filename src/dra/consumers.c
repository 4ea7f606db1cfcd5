/* Which containers use a claim, for metrics' pod labels: the kubelet of
 * 1.32 does not say through PodResources (its DRA fields are behind a
 * gate), so the claim's status.reservedFor names the pods and each pod's
 * spec names the containers. Pure and fuzzed. */
#include "dra/dra.h"

#include <stdio.h>
#include <string.h>

int dra_claim_pods(const char *json, size_t len, const char *uid, char (*pods)[128], unsigned max)
{
    json_t *root = json_loadb(json, len, 0, NULL);
    const char *its = json_string_value(json_object_get(json_object_get(root, "metadata"), "uid"));
    if (!its || strcmp(its, uid)) {
        json_decref(root);
        return -1;
    }
    json_t *reserved = json_object_get(json_object_get(root, "status"), "reservedFor"), *r;
    int n = 0;
    size_t i;
    json_array_foreach(reserved, i, r) {
        const char *resource = json_string_value(json_object_get(r, "resource"));
        const char *name = json_string_value(json_object_get(r, "name"));
        if ((unsigned)n == max || !resource || strcmp(resource, "pods") || !name || strlen(name) >= 128)
            continue;
        snprintf(pods[n++], 128, "%s", name);
    }
    json_decref(root);
    return n;
}

/* Whether the pod calls the claim local: a resourceClaims entry names it,
 * or (from a template) its resourceClaimStatuses entry does. */
static bool dra_pod_local(json_t *pod, const char *local, const char *claim)
{
    const char *keys[][2] = {{"spec", "resourceClaims"}, {"status", "resourceClaimStatuses"}};
    for (size_t k = 0; k < 2; k++) {
        json_t *list = json_object_get(json_object_get(pod, keys[k][0]), keys[k][1]), *c;
        size_t i;
        json_array_foreach(list, i, c) {
            const char *name = json_string_value(json_object_get(c, "name"));
            const char *real = json_string_value(json_object_get(c, "resourceClaimName"));
            if (name && real && !strcmp(name, local) && !strcmp(real, claim))
                return true;
        }
    }
    return false;
}

/* Whether a container's resources.claims names the claim. */
static bool dra_container_uses(json_t *pod, json_t *container, const char *claim)
{
    json_t *claims = json_object_get(json_object_get(container, "resources"), "claims"), *c;
    size_t i;
    json_array_foreach(claims, i, c) {
        const char *local = json_string_value(json_object_get(c, "name"));
        if (local && dra_pod_local(pod, local, claim))
            return true;
    }
    return false;
}

unsigned dra_pod_consumers(const char *json, size_t len, const char *claim,
                           struct dra_consumer *out, unsigned n, unsigned max)
{
    json_t *pod = json_loadb(json, len, 0, NULL);
    json_t *meta = json_object_get(pod, "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    static const char *const lists[] = {"initContainers", "containers"};
    for (size_t l = 0; name && ns && l < 2; l++) {
        json_t *cs = json_object_get(json_object_get(pod, "spec"), lists[l]), *c;
        size_t i;
        json_array_foreach(cs, i, c) {
            const char *cname = json_string_value(json_object_get(c, "name"));
            if (n == max || !cname || !dra_container_uses(pod, c, claim))
                continue;
            snprintf(out[n].pod, sizeof out[n].pod, "%s", name);
            snprintf(out[n].ns, sizeof out[n].ns, "%s", ns);
            snprintf(out[n].container, sizeof out[n].container, "%s", cname);
            n++;
        }
    }
    json_decref(pod);
    return n;
}
