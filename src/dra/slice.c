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
    if (mig)
        snprintf(out, len, "gpu-%u-mig-%u-%u", g->minor, g->mig[mig - 1].gi, g->mig[mig - 1].ci);
    else
        snprintf(out, len, "gpu-%u", g->minor);
}

unsigned dra_migs(const struct gpu_info *g)
{
    return g->mig_mode == NVML_DEVICE_MIG_ENABLE ? g->nmig : 0;
}

void dra_slice_name(const char *node, char *out, size_t len)
{
    snprintf(out, len, "%s-" DRA_DRIVER, node);
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

static json_t *dra_string(const char *s)
{
    json_t *v = jsonx_ok(json_object());
    jsonx_set(v, "string", jsonx_ok(json_string(s)));
    return v;
}

static json_t *dra_version(const char *s)
{
    char sem[64];
    dra_semver(s, sem, sizeof sem);
    json_t *v = jsonx_ok(json_object());
    jsonx_set(v, "version", jsonx_ok(json_string(sem)));
    return v;
}

/* NVIDIA's architecture names are capitalised: "Hopper". */
static void dra_arch(const char *arch, char *out, size_t len)
{
    snprintf(out, len, "%s", arch && arch[0] ? arch : "unknown");
    out[0] = (char)toupper((unsigned char)out[0]);
}

/* Device mig of GPU g (0: the GPU whole): NVIDIA's attributes, and for a
 * MIG device its own (type mig, its UUID, its parent's, its profile). */
static json_t *dra_device(const struct gpu_inventory *inv, const struct gpu_info *g, unsigned mig)
{
    char name[64], arch[32], cc[32], cuda[32];
    dra_device_name(g, mig, name, sizeof name);
    dra_arch(g->architecture, arch, sizeof arch);
    snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
    snprintf(cuda, sizeof cuda, "%d.%d", inv->cuda_version / 1000, inv->cuda_version % 1000 / 10);
    const struct gpu_mig *m = mig ? &g->mig[mig - 1] : NULL;
    json_t *attrs = jsonx_ok(json_object());
    jsonx_set(attrs, "type", dra_string(m ? "mig" : "gpu"));
    jsonx_set(attrs, "uuid", dra_string(m ? m->uuid : g->uuid));
    if (m) {
        jsonx_set(attrs, "parentUUID", dra_string(g->uuid));
        jsonx_set(attrs, "profile", dra_string(m->profile));
    }
    jsonx_set(attrs, "productName", dra_string(g->name));
    jsonx_set(attrs, "architecture", dra_string(arch));
    if (g->cc_major >= 0)
        jsonx_set(attrs, "cudaComputeCapability", dra_version(cc));
    jsonx_set(attrs, "driverVersion", dra_version(inv->driver_version));
    if (inv->cuda_version > 0)
        jsonx_set(attrs, "cudaDriverVersion", dra_version(cuda));
    char memory[32];
    snprintf(memory, sizeof memory, "%lluMi",
             m ? m->attr.memorySizeMB : g->memory_total / (1024 * 1024));
    json_t *capacity = jsonx_ok(json_object());
    json_t *mem = jsonx_ok(json_object());
    jsonx_set(mem, "value", jsonx_ok(json_string(memory)));
    jsonx_set(capacity, "memory", mem);
    if (m) {
        char sms[16];
        snprintf(sms, sizeof sms, "%u", m->attr.multiprocessorCount);
        json_t *mp = jsonx_ok(json_object());
        jsonx_set(mp, "value", jsonx_ok(json_string(sms)));
        jsonx_set(capacity, "multiprocessors", mp);
    }
    json_t *basic = jsonx_ok(json_object());
    jsonx_set(basic, "attributes", attrs);
    jsonx_set(basic, "capacity", capacity);
    json_t *dev = jsonx_ok(json_object());
    jsonx_set(dev, "name", jsonx_ok(json_string(name)));
    jsonx_set(dev, "basic", basic);
    return dev;
}

bool dra_publishes(const struct config *cfg, const struct gpu_inventory *inv,
                   const struct gpu_device *devs, unsigned i, unsigned mig)
{
    const struct gpu_info *g = &inv->gpus[i];
    if (!config_dra_takes(cfg, g) || devs[i].health.reason != HEALTH_OK || !g->name[0])
        return false;
    /* A GPU in MIG mode is its MIG devices: CUDA cannot use it whole. */
    if (mig)
        return mig <= dra_migs(g) && devs[i].mig_health[mig - 1].reason == HEALTH_OK;
    return !dra_migs(g) && g->mig_mode != NVML_DEVICE_MIG_ENABLE;
}

unsigned dra_count(const struct config *cfg, const struct gpu_inventory *inv,
                   const struct gpu_device *devs)
{
    unsigned n = 0;
    for (unsigned i = 0; i < inv->count; i++)
        for (unsigned k = 0; k <= GPU_MIG_MAX; k++)
            n += dra_publishes(cfg, inv, devs, i, k);
    return n;
}

void dra_slice_json(const struct config *cfg, const struct gpu_inventory *inv,
                    const struct gpu_device *devs, const char *node, const char *node_uid,
                    unsigned long long generation, struct strbuf *out)
{
    char name[320];
    dra_slice_name(node, name, sizeof name);
    json_t *owner = jsonx_ok(json_object());
    jsonx_set(owner, "apiVersion", jsonx_ok(json_string("v1")));
    jsonx_set(owner, "kind", jsonx_ok(json_string("Node")));
    jsonx_set(owner, "name", jsonx_ok(json_string(node)));
    jsonx_set(owner, "uid", jsonx_ok(json_string(node_uid)));
    jsonx_set(owner, "controller", json_true());
    json_t *owners = jsonx_ok(json_array());
    jsonx_append(owners, owner);
    json_t *meta = jsonx_ok(json_object());
    jsonx_set(meta, "name", jsonx_ok(json_string(name)));
    jsonx_set(meta, "ownerReferences", owners);
    json_t *devices = jsonx_ok(json_array());
    for (unsigned i = 0; i < inv->count; i++)
        for (unsigned k = 0; k <= GPU_MIG_MAX; k++)
            if (dra_publishes(cfg, inv, devs, i, k))
                jsonx_append(devices, dra_device(inv, &inv->gpus[i], k));
    json_t *pool = jsonx_ok(json_object());
    jsonx_set(pool, "name", jsonx_ok(json_string(node)));
    jsonx_set(pool, "generation", jsonx_ok(json_integer((json_int_t)generation)));
    jsonx_set(pool, "resourceSliceCount", jsonx_ok(json_integer(1)));
    json_t *spec = jsonx_ok(json_object());
    jsonx_set(spec, "driver", jsonx_ok(json_string(DRA_DRIVER)));
    jsonx_set(spec, "nodeName", jsonx_ok(json_string(node)));
    jsonx_set(spec, "pool", pool);
    jsonx_set(spec, "devices", devices);
    json_t *slice = jsonx_ok(json_object());
    jsonx_set(slice, "apiVersion", jsonx_ok(json_string("resource.k8s.io/v1beta1")));
    jsonx_set(slice, "kind", jsonx_ok(json_string("ResourceSlice")));
    jsonx_set(slice, "metadata", meta);
    jsonx_set(slice, "spec", spec);
    jsonx_dump(slice, JSON_COMPACT | JSON_SORT_KEYS, out);
    json_decref(slice);
}
