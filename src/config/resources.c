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

/* What the handlers of one mapping's keys work on (ydoc_each's ctx). */
struct config_walk {
    struct config *c;
    struct config_shared *s;         /* the sharing entry being read */
    struct config_resource *r;       /* the resources.gpus entry being read */
    const char *where;               /* "sharing.mps.resources[0]", for messages */
};

static int config_gpus_pattern(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct config_resource *r = ((struct config_walk *)ctx)->r;
    const char *pattern;
    if (ydoc_scalar(d, v, "pattern", &pattern, e) < 0)
        return -1;
    if (!*pattern || strlen(pattern) >= sizeof r->pattern)
        return ydoc_error(d, v, e, "pattern must be 1 to %zu characters", sizeof r->pattern - 1);
    snprintf(r->pattern, sizeof r->pattern, "%s", pattern);
    return 0;
}

static int config_gpus_name(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct config_resource *r = ((struct config_walk *)ctx)->r;
    return config_resource_name(d, v, "name", r->name, sizeof r->name, e);
}

static int config_gpus(void *ctx, struct ydoc *d, yaml_node_t *gpus, struct err *e)
{
    static const struct ydoc_key keys[] = {
        {"pattern", config_gpus_pattern}, {"name", config_gpus_name}, {NULL, NULL}};
    struct config_walk *w = ctx;
    struct config *c = w->c;
    if (ydoc_empty(gpus))
        return 0;
    if (gpus->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, gpus, e, "resources.gpus must be a list of {pattern, name}");
    c->nresources = 0;
    for (yaml_node_item_t *it = gpus->data.sequence.items.start; it < gpus->data.sequence.items.top;
         it++) {
        yaml_node_t *item = ydoc_node(d, *it);
        if (item->type == YAML_MAPPING_NODE &&
            (!ydoc_get(d, item, "pattern") || !ydoc_get(d, item, "name")))
            return ydoc_error(d, item, e, "a resources.gpus entry needs pattern and name");
        if (c->nresources == CONFIG_MAX_RESOURCES)
            return ydoc_error(d, item, e, "at most %d resources.gpus entries", CONFIG_MAX_RESOURCES);
        w->r = &c->resources[c->nresources];
        if (ydoc_each(d, item, "a resources.gpus entry", keys, w, e) < 0)
            return -1;
        c->nresources++;
    }
    return 0;
}

static int config_resources_mig(void *ctx, struct ydoc *d, yaml_node_t *mig, struct err *e)
{
    (void)ctx;
    return ydoc_empty(mig) ? 0
                           : ydoc_error(d, mig, e, "resources.mig: MIG resources are not supported yet");
}

/* resources.gpus: [{pattern, name}]; resources.mig waits for the MIG strategies. */
int config_resources_section(void *ctx, struct ydoc *d, yaml_node_t *res, struct err *e)
{
    static const struct ydoc_key keys[] = {
        {"gpus", config_gpus}, {"mig", config_resources_mig}, {NULL, NULL}};
    struct config_walk w = {.c = ctx};
    return ydoc_empty(res) ? 0 : ydoc_each(d, res, "resources", keys, &w, e);
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

/* Each key of a sharing entry, its name in messages "<where>.<key>". */
static void config_key(const struct config_walk *w, const char *key, char *out, size_t len)
{
    snprintf(out, len, "%.120s.%s", w->where, key);
}

/* name or rename: a resource name, kept as nvidia.com/<name> in out. */
static int config_entry_resource(void *ctx, struct ydoc *d, yaml_node_t *v, const char *key,
                                 char *out, size_t len, struct err *e)
{
    char where[192], name[64];
    config_key(ctx, key, where, sizeof where);
    if (config_resource_name(d, v, where, name, sizeof name, e) < 0)
        return -1;
    snprintf(out, len, "nvidia.com/%s", name);
    return 0;
}

static int config_entry_name(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct config_shared *s = ((struct config_walk *)ctx)->s;
    return config_entry_resource(ctx, d, v, "name", s->name, sizeof s->name, e);
}

static int config_entry_rename(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct config_shared *s = ((struct config_walk *)ctx)->s;
    return config_entry_resource(ctx, d, v, "rename", s->rename, sizeof s->rename, e);
}

static int config_entry_replicas(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct config_walk *w = ctx;
    char key[192];
    const char *text;
    long replicas;
    config_key(w, "replicas", key, sizeof key);
    if (ydoc_scalar(d, v, key, &text, e) < 0)
        return -1;
    if (ydoc_int(d, v, key, 2, 1024, &replicas, e) < 0)
        return ydoc_error(d, v, e, "%s must be from 2 to 1024, not '%s'", key, text);
    w->s->replicas = (unsigned)replicas;
    return 0;
}

static int config_entry_devices(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct config_walk *w = ctx;
    char key[192];
    config_key(w, "devices", key, sizeof key);
    return config_shared_devices(d, v, key, w->s, e);
}

/* MPS's per-replica limits, gpulet's keys beside NVIDIA's: only in sharing.mps. */
static int config_mps_only(const struct config_walk *w, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    if (strncmp(w->where, "sharing.mps", 11))
        return ydoc_error(d, v, e, "%s: memoryLimit and activeThreadPercentage are MPS limits "
                                   "(sharing.mps)", w->where);
    return 0;
}

static int config_entry_memory(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct config_walk *w = ctx;
    char key[192];
    config_key(w, "memoryLimit", key, sizeof key);
    return config_mps_only(w, d, v, e) < 0 ? -1 : config_mib(d, v, key, &w->s->memory_limit_mib, e);
}

static int config_entry_threads(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct config_walk *w = ctx;
    char key[192];
    long p;
    config_key(w, "activeThreadPercentage", key, sizeof key);
    if (config_mps_only(w, d, v, e) < 0 || ydoc_int(d, v, key, 1, 100, &p, e) < 0)
        return -1;
    w->s->thread_percentage = (unsigned)p;
    return 0;
}

/* One resources entry of timeSlicing or mps. */
static int config_shared_entry(struct config_walk *w, struct ydoc *d, yaml_node_t *item,
                               struct err *e)
{
    static const struct ydoc_key keys[] = {
        {"name", config_entry_name}, {"rename", config_entry_rename},
        {"replicas", config_entry_replicas}, {"devices", config_entry_devices},
        {"memoryLimit", config_entry_memory}, {"activeThreadPercentage", config_entry_threads},
        {NULL, NULL}};
    struct config *c = w->c;
    if (item->type == YAML_MAPPING_NODE &&
        (!ydoc_get(d, item, "name") || !ydoc_get(d, item, "replicas")))
        return ydoc_error(d, item, e, "%s needs name and replicas", w->where);
    if (c->nshared == CONFIG_MAX_SHARED)
        return ydoc_error(d, item, e, "at most %d sharing resources", CONFIG_MAX_SHARED);
    w->s = &c->shared[c->nshared];
    memset(w->s, 0, sizeof *w->s);
    snprintf(w->s->devices, sizeof w->s->devices, "all");
    if (ydoc_each(d, item, w->where, keys, w, e) < 0)
        return -1;
    c->nshared++;
    return 0;
}

static int config_kind_rename(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    return ydoc_bool(d, v, "renameByDefault", &((struct config_walk *)ctx)->c->rename_by_default, e);
}

static int config_kind_fail(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    return ydoc_bool(d, v, "failRequestsGreaterThanOne",
                     &((struct config_walk *)ctx)->c->fail_requests_gt_one, e);
}

static int config_kind_resources(void *ctx, struct ydoc *d, yaml_node_t *res, struct err *e)
{
    struct config_walk *w = ctx;
    const char *kind = w->where;
    if (ydoc_empty(res) || res->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, res, e, "%s.resources must be a non-empty list of {name, replicas}",
                          kind);
    unsigned i = 0;
    for (yaml_node_item_t *it = res->data.sequence.items.start; it < res->data.sequence.items.top;
         it++, i++) {
        char item[128];
        snprintf(item, sizeof item, "%s.resources[%u]", kind, i);
        w->where = item;
        int rc = config_shared_entry(w, d, ydoc_node(d, *it), e);
        w->where = kind;
        if (rc < 0)
            return -1;
    }
    return 0;
}

const char *const config_sharing_keys[] = {"", "timeSlicing", "mps", NULL};

/* sharing.timeSlicing or sharing.mps: the first given; a second is refused. */
static int config_sharing_kind(struct config *c, struct ydoc *d, yaml_node_t *k,
                               enum gpu_sharing kind, struct err *e)
{
    static const struct ydoc_key keys[] = {
        {"renameByDefault", config_kind_rename}, {"failRequestsGreaterThanOne", config_kind_fail},
        {"resources", config_kind_resources}, {NULL, NULL}};
    if (ydoc_empty(k))
        return 0;
    if (c->sharing != GPU_SHARING_NONE)
        return ydoc_error(d, k, e, "sharing: time-slicing and MPS cannot both be configured");
    char where[96];
    snprintf(where, sizeof where, "sharing.%s", config_sharing_keys[kind]);
    c->sharing = kind;
    c->fail_requests_gt_one = kind == GPU_SHARING_MPS; /* NVIDIA's defaults differ by kind */
    struct config_walk w = {.c = c, .where = where};
    if (ydoc_each(d, k, where, keys, &w, e) < 0)
        return -1;
    if (!ydoc_get(d, k, "resources"))
        return ydoc_error(d, k, e, "%s.resources must be a non-empty list of {name, replicas}",
                          where);
    return 0;
}

static int config_time_slicing(void *ctx, struct ydoc *d, yaml_node_t *k, struct err *e)
{
    return config_sharing_kind(ctx, d, k, GPU_SHARING_TIME_SLICING, e);
}

static int config_mps(void *ctx, struct ydoc *d, yaml_node_t *k, struct err *e)
{
    return config_sharing_kind(ctx, d, k, GPU_SHARING_MPS, e);
}

int config_sharing_section(void *ctx, struct ydoc *d, yaml_node_t *n, struct err *e)
{
    static const struct ydoc_key keys[] = {
        {"timeSlicing", config_time_slicing}, {"mps", config_mps}, {NULL, NULL}};
    struct config *c = ctx;
    if (ydoc_empty(n))
        return 0;
    c->nshared = 0;
    c->sharing = GPU_SHARING_NONE;
    return ydoc_each(d, n, "sharing", keys, c, e);
}
