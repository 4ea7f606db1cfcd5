/* The config file's sections about what is advertised: resources.gpus
 * (one resource per model) and sharing (time-slicing or MPS replicas).
 * Checked here as far as the file alone allows; whether the GPUs they name
 * exist is checked against the inventory (src/plugin/resources.c). */
#include "config/internal.h"
#include "util/quantity.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A resource name as NVIDIA's config takes it: "h100" or "nvidia.com/h100";
 * the part after nvidia.com/ a DNS label of at most 63 characters. */
static bool config_resource_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 63 || !isalnum((unsigned char)name[0]) || !isalnum((unsigned char)name[n - 1]))
        return false;
    for (const char *p = name; *p; p++)
        if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-' || *p == '.'))
            return false;
    return true;
}

/* name without nvidia.com/ into out, checked. */
static int config_resource_name(struct ydoc *d, yaml_node_t *n, const char *key, char *out,
                                size_t len, struct err *e)
{
    const char *name;
    if (ydoc_scalar(d, n, key, &name, e) < 0)
        return -1;
    if (!strncmp(name, "nvidia.com/", 11))
        name += 11;
    if (!config_resource_name_ok(name))
        return ydoc_error(d, n, e, "resource name '%s' is not valid: lower-case letters, "
                                   "digits, '-' and '.', at most 63, as in nvidia.com/h100", name);
    snprintf(out, len, "%s", name);
    return 0;
}

/* resources.gpus: [{pattern, name}]; resources.mig waits for the MIG strategies. */
int config_resources_section(struct config *c, struct ydoc *d, yaml_node_t *res, struct err *e)
{
    static const char *const keys[] = {"gpus", "mig", NULL};
    static const char *const item_keys[] = {"pattern", "name", NULL};
    if (ydoc_empty(res))
        return 0;
    if (ydoc_check_keys(d, res, "resources", keys, e) < 0)
        return -1;
    yaml_node_t *mig = ydoc_get(d, res, "mig"), *gpus = ydoc_get(d, res, "gpus");
    if (mig && !ydoc_empty(mig))
        return ydoc_error(d, mig, e, "resources.mig: MIG resources are not supported yet");
    if (!gpus || ydoc_empty(gpus))
        return 0;
    if (gpus->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, gpus, e, "resources.gpus must be a list of {pattern, name}");
    c->nresources = 0;
    for (yaml_node_item_t *it = gpus->data.sequence.items.start; it < gpus->data.sequence.items.top;
         it++) {
        yaml_node_t *item = ydoc_node(d, *it), *pn, *nn;
        const char *pattern;
        if (ydoc_check_keys(d, item, "a resources.gpus entry", item_keys, e) < 0)
            return -1;
        if (!(pn = ydoc_get(d, item, "pattern")) || !(nn = ydoc_get(d, item, "name")))
            return ydoc_error(d, item, e, "a resources.gpus entry needs pattern and name");
        if (c->nresources == CONFIG_MAX_RESOURCES)
            return ydoc_error(d, item, e, "at most %d resources.gpus entries", CONFIG_MAX_RESOURCES);
        struct config_resource *r = &c->resources[c->nresources];
        if (ydoc_scalar(d, pn, "pattern", &pattern, e) < 0 ||
            config_resource_name(d, nn, "name", r->name, sizeof r->name, e) < 0)
            return -1;
        if (!*pattern || strlen(pattern) >= sizeof r->pattern)
            return ydoc_error(d, pn, e, "pattern must be 1 to %zu characters", sizeof r->pattern - 1);
        snprintf(r->pattern, sizeof r->pattern, "%s", pattern);
        c->nresources++;
    }
    return 0;
}

/* devices: all, a count, or a list of GPU indexes and UUIDs, kept as text. */
static int config_shared_devices(struct ydoc *d, yaml_node_t *n, const char *where,
                                 struct config_shared *s, struct err *e)
{
    if (n->type == YAML_SCALAR_NODE) {
        const char *v;
        long count;
        if (ydoc_scalar(d, n, where, &v, e) < 0)
            return -1;
        if (strcmp(v, "all") && ydoc_int(d, n, where, 1, 1024, &count, e) < 0)
            return ydoc_error(d, n, e, "%s must be all, a count, or a list of GPU indexes or "
                                       "UUIDs, not '%s'", where, v);
        snprintf(s->devices, sizeof s->devices, "%s", v);
        return 0;
    }
    if (n->type != YAML_SEQUENCE_NODE || ydoc_empty(n))
        return ydoc_error(d, n, e, "%s must be all, a count, or a non-empty list of GPU indexes "
                                   "or UUIDs", where);
    size_t used = 0;
    s->devices[0] = '\0';
    s->devices_listed = true;
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *item = ydoc_node(d, *it);
        const char *v;
        if (ydoc_scalar(d, item, where, &v, e) < 0)
            return -1;
        if (!*v || strchr(v, ',') || used + strlen(v) + 2 > sizeof s->devices)
            return ydoc_error(d, item, e, "%s: '%s' is not a GPU index or UUID (or the list is "
                                          "too long)", where, v);
        used += (size_t)snprintf(s->devices + used, sizeof s->devices - used, "%s%s",
                                 used ? "," : "", v);
    }
    return 0;
}

/* A memory size: a Kubernetes quantity, as NVIDIA's config has them
 * ("8Gi" is 8192 MiB, "8G" 10^9 bytes eight times, a plain number bytes). */
static int config_mib(struct ydoc *d, yaml_node_t *n, const char *key, unsigned long long *out,
                      struct err *e)
{
    const char *v;
    if (ydoc_scalar(d, n, key, &v, e) < 0)
        return -1;
    if (!(*out = quantity_mib(v)) || *out > (1ULL << 30))
        return ydoc_error(d, n, e, "%s must be a size of at least 1Mi such as 8Gi or 8192Mi, "
                                   "not '%s'", key, v);
    return 0;
}

/* MPS's per-replica limits, gpulet's keys beside NVIDIA's: only in sharing.mps. */
static int config_mps_limits(struct ydoc *d, yaml_node_t *item, const char *where,
                             struct config_shared *s, struct err *e)
{
    yaml_node_t *mem = ydoc_get(d, item, "memoryLimit"), *pct = ydoc_get(d, item, "activeThreadPercentage");
    char key[192];
    if ((mem || pct) && strncmp(where, "sharing.mps", 11))
        return ydoc_error(d, mem ? mem : pct, e, "%s: memoryLimit and activeThreadPercentage "
                                                 "are MPS limits (sharing.mps)", where);
    snprintf(key, sizeof key, "%.120s.memoryLimit", where);
    if (mem && config_mib(d, mem, key, &s->memory_limit_mib, e) < 0)
        return -1;
    long p;
    snprintf(key, sizeof key, "%.120s.activeThreadPercentage", where);
    if (pct && ydoc_int(d, pct, key, 1, 100, &p, e) < 0)
        return -1;
    s->thread_percentage = pct ? (unsigned)p : 0;
    return 0;
}

/* One resources entry of timeSlicing or mps. */
static int config_shared_entry(struct config *c, struct ydoc *d, yaml_node_t *item,
                               const char *where, struct err *e)
{
    static const char *const keys[] = {"name", "rename", "replicas", "devices", "memoryLimit",
                                       "activeThreadPercentage", NULL};
    if (ydoc_check_keys(d, item, where, keys, e) < 0)
        return -1;
    if (c->nshared == CONFIG_MAX_SHARED)
        return ydoc_error(d, item, e, "at most %d sharing resources", CONFIG_MAX_SHARED);
    struct config_shared *s = &c->shared[c->nshared];
    memset(s, 0, sizeof *s);
    yaml_node_t *n = ydoc_get(d, item, "name"), *r = ydoc_get(d, item, "replicas");
    char key[192], name[64];
    if (!n || !r)
        return ydoc_error(d, item, e, "%s needs name and replicas", where);
    snprintf(key, sizeof key, "%.120s.name", where);
    if (config_resource_name(d, n, key, name, sizeof name, e) < 0)
        return -1;
    snprintf(s->name, sizeof s->name, "nvidia.com/%s", name);
    long replicas;
    snprintf(key, sizeof key, "%.120s.replicas", where);
    const char *text;
    if (ydoc_scalar(d, r, key, &text, e) < 0)
        return -1;
    if (ydoc_int(d, r, key, 2, 1024, &replicas, e) < 0)
        return ydoc_error(d, r, e, "%s must be from 2 to 1024, not '%s'", key, text);
    s->replicas = (unsigned)replicas;
    if ((n = ydoc_get(d, item, "rename"))) {
        snprintf(key, sizeof key, "%.120s.rename", where);
        if (config_resource_name(d, n, key, name, sizeof name, e) < 0)
            return -1;
        snprintf(s->rename, sizeof s->rename, "nvidia.com/%s", name);
    }
    snprintf(s->devices, sizeof s->devices, "all");
    snprintf(key, sizeof key, "%.120s.devices", where);
    if ((n = ydoc_get(d, item, "devices")) && config_shared_devices(d, n, key, s, e) < 0)
        return -1;
    if (config_mps_limits(d, item, where, s, e) < 0)
        return -1;
    c->nshared++;
    return 0;
}

/* sharing.timeSlicing or sharing.mps. */
static int config_sharing_kind(struct config *c, struct ydoc *d, yaml_node_t *k, const char *kind,
                               struct err *e)
{
    static const char *const keys[] = {"renameByDefault", "failRequestsGreaterThanOne",
                                       "resources", NULL};
    char where[96];
    snprintf(where, sizeof where, "sharing.%s", kind);
    if (ydoc_check_keys(d, k, where, keys, e) < 0)
        return -1;
    yaml_node_t *n;
    if ((n = ydoc_get(d, k, "renameByDefault")) &&
        ydoc_bool(d, n, "renameByDefault", &c->rename_by_default, e) < 0)
        return -1;
    if ((n = ydoc_get(d, k, "failRequestsGreaterThanOne")) &&
        ydoc_bool(d, n, "failRequestsGreaterThanOne", &c->fail_requests_gt_one, e) < 0)
        return -1;
    yaml_node_t *res = ydoc_get(d, k, "resources");
    if (!res || ydoc_empty(res) || res->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, res ? res : k, e, "%s.resources must be a non-empty list of "
                                               "{name, replicas}", where);
    unsigned i = 0;
    for (yaml_node_item_t *it = res->data.sequence.items.start; it < res->data.sequence.items.top;
         it++, i++) {
        char item[128];
        snprintf(item, sizeof item, "%s.resources[%u]", where, i);
        if (config_shared_entry(c, d, ydoc_node(d, *it), item, e) < 0)
            return -1;
    }
    return 0;
}

const char *const config_sharing_keys[] = {"", "timeSlicing", "mps", NULL};

int config_sharing_section(struct config *c, struct ydoc *d, yaml_node_t *n, struct err *e)
{
    if (ydoc_empty(n))
        return 0;
    if (ydoc_check_keys(d, n, "sharing", config_sharing_keys + 1, e) < 0)
        return -1;
    yaml_node_t *ts = ydoc_get(d, n, config_sharing_keys[GPU_SHARING_TIME_SLICING]);
    yaml_node_t *mps = ydoc_get(d, n, config_sharing_keys[GPU_SHARING_MPS]);
    bool has_ts = ts && !ydoc_empty(ts), has_mps = mps && !ydoc_empty(mps);
    if (has_ts && has_mps)
        return ydoc_error(d, mps, e, "sharing: time-slicing and MPS cannot both be configured");
    c->nshared = 0;
    c->sharing = GPU_SHARING_NONE;
    if (has_ts) {
        c->fail_requests_gt_one = false; /* NVIDIA's defaults differ by kind */
        c->sharing = GPU_SHARING_TIME_SLICING;
        return config_sharing_kind(c, d, ts, config_sharing_keys[c->sharing], e);
    }
    if (has_mps) {
        c->fail_requests_gt_one = true;
        c->sharing = GPU_SHARING_MPS;
        return config_sharing_kind(c, d, mps, config_sharing_keys[c->sharing], e);
    }
    return 0;
}
