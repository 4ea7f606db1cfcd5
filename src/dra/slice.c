/* The node's ResourceSlice: one device per GPU DRA serves, named and described with
 * the attributes NVIDIA's DRA driver publishes, so that DeviceClasses and
 * claims written for it select gpulet's devices unchanged. */
#include "dra/dra.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonx.h"

void dra_device_name(const struct gpu_info *g, unsigned mig, char *out, size_t len)
{
    if (!mig) {
        snprintf(out, len, "gpu-%u", g->minor);
        return;
    }
    const struct gpu_mig *m = &g->mig[mig - 1];
    char profile[32];
    dra_profile_label(m->profile, profile, sizeof profile);
    snprintf(out, len, "gpu-%u-mig-%s-%u-%u", g->minor, profile, m->gi_profile, m->placement_start);
}

unsigned dra_migs(const struct gpu_info *g)
{
    return g->mig_mode == NVML_DEVICE_MIG_ENABLE ? g->nmig : 0;
}

/* GPU index of the n-th GPU dra_partitions. */
static unsigned dra_nth_partitioned(const struct dra_slice_in *in, unsigned n)
{
    unsigned i = 0;
    for (; i < in->inv->count; i++)
        if (dra_partitions(in, i) && !n--)
            break;
    return i;
}

static unsigned dra_counter_slices(const struct dra_slice_in *in)
{
    unsigned p = dra_partitioned(in);
    return (p + DRA_COUNTER_SETS_PER_SLICE - 1) / DRA_COUNTER_SETS_PER_SLICE;
}

unsigned dra_slices(const struct dra_slice_in *in)
{
    unsigned p = dra_partitioned(in);
    return 1 + (p ? dra_counter_slices(in) + p : 0);
}

void dra_slice_name(const struct dra_slice_in *in, const char *node, unsigned s, char *out,
                    size_t len)
{
    unsigned c = s && in ? dra_counter_slices(in) : 0;
    if (!s)
        snprintf(out, len, "%s-" DRA_DRIVER, node);
    else if (s == 1 && c)
        snprintf(out, len, "%s-" DRA_DRIVER "-counters", node);
    else if (s <= c)
        snprintf(out, len, "%s-" DRA_DRIVER "-counters-%u", node, s - 1);
    else
        snprintf(out, len, "%s-" DRA_DRIVER "-gpu-%u", node,
                 in->inv->gpus[dra_nth_partitioned(in, s - c - 1)].minor);
}

/* The API versions, newest first: the group's path of each. */
static const char *const dra_api_names[] = {
    [DRA_API_NONE] = "", [DRA_API_V1] = "v1", [DRA_API_V1BETA2] = "v1beta2",
    [DRA_API_V1BETA1] = "v1beta1",
};

const char *dra_api_name(enum dra_api api)
{
    return api <= DRA_API_V1BETA1 ? dra_api_names[api] : "";
}

/* A version attribute must be semantic: "580.159.04" is 580.159.4, "13.0" 13.0.0. */
static void dra_semver(const char *in, char *out, size_t len)
{
    unsigned long part[3] = {0, 0, 0};
    const char *p = in;
    for (int i = 0; i < 3 && *p; i++) {
        char *end;
        part[i] = strtoul(p, &end, 10);
        p = *end == '.' ? end + 1 : end + strlen(end);
    }
    snprintf(out, len, "%lu.%lu.%lu", part[0], part[1], part[2]);
}

static void dra_attr(json_t *attrs, const char *name, const char *type, json_t *value)
{
    json_t *v = jsonx_ok(json_object());
    jsonx_set(v, type, value);
    jsonx_set(attrs, name, v);
}

static void dra_attr_string(json_t *attrs, const char *name, const char *s)
{
    dra_attr(attrs, name, "string", jsonx_ok(json_string(s)));
}

static void dra_attr_int(json_t *attrs, const char *name, long long i)
{
    dra_attr(attrs, name, "int", jsonx_ok(json_integer(i)));
}

static void dra_attr_version(json_t *attrs, const char *name, const char *s)
{
    char sem[64];
    dra_semver(s, sem, sizeof sem);
    dra_attr(attrs, name, "version", jsonx_ok(json_string(sem)));
}

static void dra_capacity(json_t *capacity, const char *name, const char *value)
{
    json_t *v = jsonx_ok(json_object());
    jsonx_set(v, "value", jsonx_ok(json_string(value)));
    jsonx_set(capacity, name, v);
}

static void dra_capacity_count(json_t *capacity, const char *name, unsigned long long n)
{
    char v[32];
    snprintf(v, sizeof v, "%llu", n);
    dra_capacity(capacity, name, v);
}

/* Bytes as Kubernetes writes a binary quantity: the largest suffix that
 * divides them ("81559Mi"), as the API server would store them. */
static void dra_capacity_bytes(json_t *capacity, const char *name, unsigned long long bytes)
{
    static const char *const suffix[] = {"", "Ki", "Mi", "Gi", "Ti"};
    unsigned k = 0;
    while (k < 4 && bytes && bytes % 1024 == 0)
        bytes /= 1024, k++;
    char v[32];
    snprintf(v, sizeof v, "%llu%s", bytes, suffix[k]);
    dra_capacity(capacity, name, v);
}

/* NVIDIA's architecture names (go-nvlib's): "Hopper", "Ada Lovelace". */
static void dra_arch(const char *arch, char *out, size_t len)
{
    if (arch && !strcmp(arch, "ada-lovelace")) {
        snprintf(out, len, "Ada Lovelace");
        return;
    }
    snprintf(out, len, "%s", arch && arch[0] ? arch : "unknown");
    out[0] = (char)toupper((unsigned char)out[0]);
}

/* NVIDIA's brand names (go-nvlib's), by nvmlBrandType_t. */
static const char *dra_brand(int brand)
{
    static const char *const names[] = {
        "Unknown", "Quadro", "Tesla", "NVS", "Grid", "GeForce", "Titan", "NvidiaVApps",
        "NvidiaVPC", "NvidiaVCS", "NvidiaVWS", "NvidiaCloudGaming", "QuadroRTX", "NvidiaRTX",
        "Nvidia", "GeForceRTX", "TitanRTX",
    };
    return brand >= 0 && (size_t)brand < sizeof names / sizeof *names ? names[brand] : "Unknown";
}

/* The PCI address as Kubernetes' standard attribute has it: lower case,
 * a domain of four digits ("0000:1b:00.0", not NVML's "00000000:1B:00.0"). */
void dra_pci_bus_id(const char *nvml, char *out, size_t len)
{
    const char *p = strlen(nvml) > 12 && !strncmp(nvml, "0000", 4) ? nvml + 4 : nvml;
    size_t n = 0;
    for (; *p && n + 1 < len; p++)
        out[n++] = (char)tolower((unsigned char)*p);
    out[n] = '\0';
}

/* What a MIG device and its GPU share: the GPU's product, versions and place. */
static void dra_common_attrs(json_t *attrs, const struct dra_slice_in *in, unsigned i)
{
    const struct gpu_info *g = &in->inv->gpus[i];
    char arch[32], cc[32], cuda[32], bus[32];
    dra_arch(g->architecture, arch, sizeof arch);
    dra_attr_string(attrs, "productName", g->name);
    dra_attr_string(attrs, "brand", dra_brand(g->brand));
    dra_attr_string(attrs, "architecture", arch);
    if (g->cc_major >= 0) {
        snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
        dra_attr_version(attrs, "cudaComputeCapability", cc);
    }
    dra_attr_version(attrs, "driverVersion", in->inv->driver_version);
    if (in->inv->cuda_version > 0) {
        snprintf(cuda, sizeof cuda, "%d.%d", in->inv->cuda_version / 1000,
                 in->inv->cuda_version % 1000 / 10);
        dra_attr_version(attrs, "cudaDriverVersion", cuda);
    }
    if (g->pci_bus_id[0]) {
        dra_pci_bus_id(g->pci_bus_id, bus, sizeof bus);
        dra_attr_string(attrs, DRA_STANDARD "pciBusID", bus);
    }
    if (in->pcie_roots && in->pcie_roots[i][0])
        dra_attr_string(attrs, DRA_STANDARD "pcieRoot", in->pcie_roots[i]);
    if (g->numa_node >= 0)
        dra_attr_int(attrs, "numa", g->numa_node);
}

unsigned long long dra_share_default(unsigned long long total)
{
    return total / DRA_SHARE_STEP * DRA_SHARE_STEP;
}

/* A capacity claims consume in shares: what one consumes when it names
 * none (def), and the range and step of what it may name. */
static void dra_capacity_policy(json_t *capacity, const char *name, const char *def,
                                const char *min, const char *max, const char *step)
{
    json_t *range = jsonx_ok(json_object()), *policy = jsonx_ok(json_object());
    jsonx_set(range, "min", jsonx_ok(json_string(min)));
    if (max)
        jsonx_set(range, "max", jsonx_ok(json_string(max)));
    jsonx_set(range, "step", jsonx_ok(json_string(step)));
    jsonx_set(policy, "default", jsonx_ok(json_string(def)));
    jsonx_set(policy, "validRange", range);
    jsonx_set(json_object_get(capacity, name), "requestPolicy", policy);
}

/* A GPU for shares: its memory in whole GiB from 1Gi (a claim that names
 * none takes it all), and its SMs in percent (one that names none takes no
 * share of them: its MPS client is not capped). */
static void dra_gpu_shares(json_t *capacity, const struct gpu_info *g)
{
    char def[32];
    snprintf(def, sizeof def, "%lluGi", dra_share_default(g->memory_total) / DRA_SHARE_STEP);
    dra_capacity_policy(capacity, "memory", def, "1Gi", NULL, "1Gi");
    dra_capacity_count(capacity, DRA_SHARE_COMPUTE, 100);
    dra_capacity_policy(capacity, DRA_SHARE_COMPUTE, "0", "0", "100", "1");
}

/* GPU i whole: NVIDIA's attributes, and index and minor, which NVIDIA's
 * driver dropped in v25.8 while its quickstart still selects on them. */
static void dra_gpu(json_t *attrs, json_t *capacity, const struct dra_slice_in *in, unsigned i)
{
    const struct gpu_info *g = &in->inv->gpus[i];
    dra_attr_string(attrs, "type", "gpu");
    dra_attr_string(attrs, "uuid", g->uuid);
    dra_attr_int(attrs, "index", g->index);
    dra_attr_int(attrs, "minor", g->minor);
    dra_common_attrs(attrs, in, i);
    dra_capacity_bytes(capacity, "memory", g->memory_total);
    if (in->consumable && config_dra_shares(in->cfg, g) && g->memory_total >= 2 * DRA_SHARE_STEP)
        dra_gpu_shares(capacity, g);
}

/* MIG device mig of GPU i: its own UUID, its parent's, its profile, and
 * its GPU instance's engines and memory slices as capacities. */
static void dra_mig(json_t *attrs, json_t *capacity, const struct dra_slice_in *in, unsigned i,
                    unsigned mig)
{
    const struct gpu_info *g = &in->inv->gpus[i];
    const struct gpu_mig *m = &g->mig[mig - 1];
    dra_attr_string(attrs, "type", "mig");
    dra_attr_string(attrs, "uuid", m->uuid);
    dra_attr_string(attrs, "parentUUID", g->uuid);
    dra_attr_string(attrs, "profile", m->profile);
    dra_common_attrs(attrs, in, i);
    dra_capacity_count(capacity, "multiprocessors", m->attr.multiprocessorCount);
    dra_capacity_count(capacity, "copyEngines", m->attr.sharedCopyEngineCount);
    dra_capacity_count(capacity, "decoders", m->attr.sharedDecoderCount);
    dra_capacity_count(capacity, "encoders", m->attr.sharedEncoderCount);
    dra_capacity_count(capacity, "jpegEngines", m->attr.sharedJpegCount);
    dra_capacity_count(capacity, "ofaEngines", m->attr.sharedOfaCount);
    dra_capacity_bytes(capacity, "memory", m->attr.memorySizeMB << 20);
    for (unsigned s = m->placement_start; s < m->placement_start + m->placement_size; s++) {
        char name[32];
        snprintf(name, sizeof name, "memorySlice%u", s);
        dra_capacity(capacity, name, "1");
    }
}

/* A faulty device's taints, each with the time its fault began. */
static json_t *dra_device_taints(const struct dra_slice_in *in, unsigned i, unsigned mig)
{
    struct dra_taint t[DRA_MAX_TAINTS + 1];
    unsigned n = dra_taints(gpu_device_health(&in->devs[i], (int)mig - 1), in->evict, t);
    if (in->held && in->held[DRA_AT(i, mig)]) /* not a fault: nothing to evict, no time */
        t[n++] = (struct dra_taint){.key = DRA_TAINT_HELD, .effect = "NoSchedule"};
    if (!n)
        return NULL;
    json_t *list = jsonx_ok(json_array());
    for (unsigned k = 0; k < n; k++) {
        json_t *o = jsonx_ok(json_object());
        char when[32];
        jsonx_set(o, "key", jsonx_ok(json_string(t[k].key)));
        if (t[k].value[0])
            jsonx_set(o, "value", jsonx_ok(json_string(t[k].value)));
        jsonx_set(o, "effect", jsonx_ok(json_string(t[k].effect)));
        gpu_health_time(t[k].since_ms, when, sizeof when);
        if (when[0])
            jsonx_set(o, "timeAdded", jsonx_ok(json_string(when)));
        jsonx_append(list, o);
    }
    return list;
}

/* One device of the slice: attributes and capacities at the top in v1 and
 * v1beta2, under "basic" in v1beta1. */
static json_t *dra_device(const struct dra_slice_in *in, unsigned i, unsigned mig)
{
    char name[96];
    dra_device_name(&in->inv->gpus[i], mig, name, sizeof name);
    json_t *attrs = jsonx_ok(json_object()), *capacity = jsonx_ok(json_object());
    if (mig)
        dra_mig(attrs, capacity, in, i, mig);
    else
        dra_gpu(attrs, capacity, in, i);
    json_t *body = jsonx_ok(json_object());
    jsonx_set(body, "attributes", attrs);
    jsonx_set(body, "capacity", capacity);
    if (json_object_get(json_object_get(capacity, "memory"), "requestPolicy"))
        jsonx_set(body, "allowMultipleAllocations", json_true());
    json_t *taints = in->tainted ? dra_device_taints(in, i, mig) : NULL;
    if (taints)
        jsonx_set(body, "taints", taints);
    json_t *dev = body;
    if (in->api == DRA_API_V1BETA1) {
        dev = jsonx_ok(json_object());
        jsonx_set(dev, "basic", body);
    }
    jsonx_set(dev, "name", jsonx_ok(json_string(name)));
    return dev;
}

bool dra_publishes(const struct dra_slice_in *in, unsigned i, unsigned mig)
{
    const struct gpu_info *g = &in->inv->gpus[i];
    if (!config_dra_takes(in->cfg, g) || !g->name[0] || dra_partitions(in, i))
        return false;
    if (!in->tainted && (!gpu_device_healthy(&in->devs[i], (int)mig - 1) ||
                         (in->held && in->held[DRA_AT(i, mig)])))
        return false;
    /* A GPU in MIG mode is its MIG devices: CUDA cannot use it whole. */
    if (mig)
        return mig <= dra_migs(g);
    return !dra_migs(g) && g->mig_mode != NVML_DEVICE_MIG_ENABLE;
}

/* A placement's device is in its GPU's slice: it can be had (no MIG
 * device another made in its way) and, where faulty devices cannot stay
 * tainted, healthy. *mig: 1 + the index of the MIG device there, else 0. */
static bool dra_placement_published(const struct dra_slice_in *in, const struct dra_placement *pl,
                                    unsigned *mig)
{
    int k;
    if (!dra_placement_open(in, pl, &k))
        return false;
    *mig = (unsigned)(k + 1);
    return in->tainted || gpu_device_healthy(&in->devs[pl->gpu], k);
}

unsigned dra_count(const struct dra_slice_in *in)
{
    unsigned n = 0, mig;
    for (unsigned i = 0; i < in->inv->count; i++) {
        for (unsigned k = 0; k <= GPU_MIG_MAX; k++)
            n += dra_publishes(in, i, k);
        struct dra_placement pl;
        for (unsigned p = 0; dra_partitions(in, i) && dra_placement_at(&in->inv->gpus[i], p, &pl); p++) {
            pl.gpu = i;
            n += dra_placement_published(in, &pl, &mig);
        }
    }
    return n;
}

static json_t *dra_counters_json(const struct dra_counter *c, unsigned n)
{
    json_t *o = jsonx_ok(json_object());
    for (unsigned k = 0; k < n; k++) {
        if (c[k].bytes)
            dra_capacity_bytes(o, c[k].name, c[k].value);
        else
            dra_capacity_count(o, c[k].name, c[k].value);
    }
    return o;
}

/* A placement: a MIG device as NVIDIA's dynamic MIG describes it (no UUID:
 * it is made when allocated), consuming its counters from its GPU's set. */
static json_t *dra_placement_device(const struct dra_slice_in *in, const struct dra_placement *pl,
                                    unsigned mig)
{
    const struct gpu_info *g = &in->inv->gpus[pl->gpu];
    const nvmlGpuInstanceProfileInfo_t *p = &pl->profile->info;
    char name[96], set[48];
    json_t *attrs = jsonx_ok(json_object()), *capacity = jsonx_ok(json_object());
    dra_attr_string(attrs, "type", "mig");
    dra_attr_string(attrs, "parentUUID", g->uuid);
    dra_attr_string(attrs, "profile", pl->profile->name);
    dra_common_attrs(attrs, in, pl->gpu);
    dra_capacity_count(capacity, "multiprocessors", p->multiprocessorCount);
    dra_capacity_count(capacity, "copyEngines", p->copyEngineCount);
    dra_capacity_count(capacity, "decoders", p->decoderCount);
    dra_capacity_count(capacity, "encoders", p->encoderCount);
    dra_capacity_count(capacity, "jpegEngines", p->jpegCount);
    dra_capacity_count(capacity, "ofaEngines", p->ofaCount);
    dra_capacity_bytes(capacity, "memory", p->memorySizeMB << 20);
    struct dra_counter c[DRA_MAX_COUNTERS];
    unsigned n = dra_counters(g, pl->profile, pl->start, c);
    json_t *use = jsonx_ok(json_object()), *uses = jsonx_ok(json_array());
    dra_counter_set_name(g, set, sizeof set);
    jsonx_set(use, "counterSet", jsonx_ok(json_string(set)));
    jsonx_set(use, "counters", dra_counters_json(c, n));
    jsonx_append(uses, use);
    json_t *dev = jsonx_ok(json_object());
    dra_placement_name(g, pl->profile, pl->start, name, sizeof name);
    jsonx_set(dev, "name", jsonx_ok(json_string(name)));
    jsonx_set(dev, "attributes", attrs);
    jsonx_set(dev, "capacity", capacity);
    jsonx_set(dev, "consumesCounters", uses);
    json_t *taints = in->tainted ? dra_device_taints(in, pl->gpu, mig) : NULL;
    if (taints)
        jsonx_set(dev, "taints", taints);
    return dev;
}

/* Slice s's contents into spec: devices, or counter sets. */
static void dra_slice_contents(const struct dra_slice_in *in, unsigned s, json_t *spec)
{
    unsigned c = dra_partitioned(in) ? dra_counter_slices(in) : 0;
    json_t *list = jsonx_ok(json_array());
    if (!s) {
        for (unsigned i = 0; i < in->inv->count; i++)
            for (unsigned k = 0; k <= GPU_MIG_MAX; k++)
                if (dra_publishes(in, i, k))
                    jsonx_append(list, dra_device(in, i, k));
        jsonx_set(spec, "devices", list);
        return;
    }
    if (s <= c) {
        for (unsigned n = (s - 1) * DRA_COUNTER_SETS_PER_SLICE;
             n < s * DRA_COUNTER_SETS_PER_SLICE && n < dra_partitioned(in); n++) {
            const struct gpu_info *g = &in->inv->gpus[dra_nth_partitioned(in, n)];
            struct dra_counter ct[DRA_MAX_COUNTERS];
            char name[48];
            dra_counter_set_name(g, name, sizeof name);
            json_t *set = jsonx_ok(json_object());
            jsonx_set(set, "name", jsonx_ok(json_string(name)));
            jsonx_set(set, "counters", dra_counters_json(ct, dra_counters(g, NULL, 0, ct)));
            jsonx_append(list, set);
        }
        jsonx_set(spec, "sharedCounters", list);
        return;
    }
    unsigned i = dra_nth_partitioned(in, s - c - 1), mig;
    struct dra_placement pl;
    for (unsigned p = 0; dra_placement_at(&in->inv->gpus[i], p, &pl); p++) {
        pl.gpu = i;
        if (dra_placement_published(in, &pl, &mig))
            jsonx_append(list, dra_placement_device(in, &pl, mig));
    }
    jsonx_set(spec, "devices", list);
}

json_t *dra_slice_object(const struct dra_slice_in *in, unsigned s)
{
    const char *node = in->node;
    char name[320];
    dra_slice_name(in, node, s, name, sizeof name);
    json_t *owner = jsonx_ok(json_object());
    jsonx_set(owner, "apiVersion", jsonx_ok(json_string("v1")));
    jsonx_set(owner, "kind", jsonx_ok(json_string("Node")));
    jsonx_set(owner, "name", jsonx_ok(json_string(node)));
    jsonx_set(owner, "uid", jsonx_ok(json_string(in->node_uid)));
    jsonx_set(owner, "controller", json_true());
    json_t *owners = jsonx_ok(json_array());
    jsonx_append(owners, owner);
    json_t *meta = jsonx_ok(json_object());
    jsonx_set(meta, "name", jsonx_ok(json_string(name)));
    jsonx_set(meta, "ownerReferences", owners);
    json_t *pool = jsonx_ok(json_object());
    jsonx_set(pool, "name", jsonx_ok(json_string(node)));
    jsonx_set(pool, "generation", jsonx_ok(json_integer((json_int_t)in->generation)));
    jsonx_set(pool, "resourceSliceCount", jsonx_ok(json_integer(dra_slices(in))));
    json_t *spec = jsonx_ok(json_object());
    jsonx_set(spec, "driver", jsonx_ok(json_string(DRA_DRIVER)));
    jsonx_set(spec, "nodeName", jsonx_ok(json_string(node)));
    jsonx_set(spec, "pool", pool);
    dra_slice_contents(in, s, spec);
    json_t *slice = jsonx_ok(json_object());
    char api[64];
    snprintf(api, sizeof api, DRA_GROUP "/%s", dra_api_name(in->api));
    jsonx_set(slice, "apiVersion", jsonx_ok(json_string(api)));
    jsonx_set(slice, "kind", jsonx_ok(json_string("ResourceSlice")));
    jsonx_set(slice, "metadata", meta);
    jsonx_set(slice, "spec", spec);
    return slice;
}

void dra_slice_generation(json_t *slice, unsigned long long generation)
{
    json_t *pool = json_object_get(json_object_get(slice, "spec"), "pool");
    jsonx_set(pool, "generation", jsonx_ok(json_integer((json_int_t)generation)));
}

void dra_slice_json(const struct dra_slice_in *in, unsigned s, struct strbuf *out)
{
    json_t *slice = dra_slice_object(in, s);
    jsonx_dump(slice, JSON_COMPACT | JSON_SORT_KEYS, out);
    json_decref(slice);
}
