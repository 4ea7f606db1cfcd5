/* The label catalogue: GPU Feature Discovery's keys and values for the same
 * node, then what gpulet adds (docs/labels.md). Every per-GPU label is
 * published node-wide only when all GPUs agree on it; each model also gets
 * labels of its own under gpulet.io/. */
#include "labels/labels.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

#define MIB (1024ULL * 1024)

char *labels_read_machine(const char *path, bool *absent, struct err *e)
{
    FILE *f = fopen(path, "r");
    *absent = !f && errno == ENOENT;
    if (!f) {
        err_set(e, "machine type file %s: %s", path, strerror(errno));
        return NULL;
    }
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        err_set(e, "machine type file %s: read error", path);
        return NULL;
    }
    buf[n] = '\0';
    return xstrdup(buf);
}

/* GFD's family names by compute capability. */
static const char *labels_family(int major, int minor)
{
    switch (major) {
    case 1: return "tesla";
    case 2: return "fermi";
    case 3: return "kepler";
    case 5: return "maxwell";
    case 6: return "pascal";
    case 7: return minor < 5 ? "volta" : "turing";
    case 8: return minor < 9 ? "ampere" : "ada-lovelace";
    case 9: return "hopper";
    case 10: case 12: return "blackwell";
    case 13: return "rubin";
    default: return "undefined";
    }
}

/* The driver and CUDA version labels, old keys and new. */
static void labels_versions(const struct gpu_inventory *inv, struct label_set *out)
{
    char parts[3][32] = {{0}};
    int n = 0;
    const char *v = inv->driver_version;
    if (*v) {
        n = sscanf(v, "%31[0-9].%31[0-9].%31[0-9]", parts[0], parts[1], parts[2]);
        if (n >= 2) {
            label_set_put(out, "nvidia.com/cuda.driver.major", "%s", parts[0]);
            label_set_put(out, "nvidia.com/cuda.driver.minor", "%s", parts[1]);
            label_set_put(out, "nvidia.com/cuda.driver.rev", "%s", parts[2]);
            label_set_put(out, "nvidia.com/cuda.driver-version.major", "%s", parts[0]);
            label_set_put(out, "nvidia.com/cuda.driver-version.minor", "%s", parts[1]);
            label_set_put(out, "nvidia.com/cuda.driver-version.revision", "%s", parts[2]);
            label_set_put(out, "nvidia.com/cuda.driver-version.full", "%s", v);
        }
    }
    if (inv->cuda_version > 0) {
        int major = inv->cuda_version / 1000, minor = inv->cuda_version % 1000 / 10;
        label_set_put(out, "nvidia.com/cuda.runtime.major", "%d", major);
        label_set_put(out, "nvidia.com/cuda.runtime.minor", "%d", minor);
        label_set_put(out, "nvidia.com/cuda.runtime-version.major", "%d", major);
        label_set_put(out, "nvidia.com/cuda.runtime-version.minor", "%d", minor);
        label_set_put(out, "nvidia.com/cuda.runtime-version.full", "%d.%d", major, minor);
    }
}

/* A GPU whose identity NVML could not read (lost at start) says nothing
 * about the model labels. */
static bool labels_known(const struct gpu_info *g)
{
    return g->name[0] != '\0';
}

/* One per-GPU fact as a string, for the all-agree rule. d is the GPU's
 * record, NULL outside the agent's model (a whole, unshared GPU). */
typedef void (*labels_fact_fn)(const struct gpu_info *g, const struct gpu_device *d, char *out,
                               size_t len);

/* GFD: -SHARED when the GPU is replicated under its own resource name. */
static void fact_product(const struct gpu_info *g, const struct gpu_device *d, char *out,
                         size_t len)
{
    char name[LABEL_VALUE_MAX];
    labels_sanitise(g->name, name, sizeof name);
    labels_shared_product(name, d ? &d->share : NULL, out, len);
}

static void fact_model(const struct gpu_info *g, const struct gpu_device *d, char *out, size_t len)
{
    (void)d;
    fact_product(g, NULL, out, len);
}

static void fact_replicas(const struct gpu_info *g, const struct gpu_device *d, char *out,
                          size_t len)
{
    (void)g;
    snprintf(out, len, "%u", d && d->share.replicas ? d->share.replicas : 1);
}

static void fact_sharing(const struct gpu_info *g, const struct gpu_device *d, char *out,
                         size_t len)
{
    (void)g;
    snprintf(out, len, "%s", labels_sharing_name(d ? &d->share : NULL));
}

static void fact_memory(const struct gpu_info *g, const struct gpu_device *d, char *out, size_t len)
{
    (void)d;
    if (g->memory_total)
        snprintf(out, len, "%llu", g->memory_total / MIB);
}

static void fact_family(const struct gpu_info *g, const struct gpu_device *d, char *out, size_t len)
{
    (void)d;
    if (g->cc_major > 0)
        snprintf(out, len, "%s", labels_family(g->cc_major, g->cc_minor));
}

static void fact_cc_major(const struct gpu_info *g, const struct gpu_device *d, char *out,
                          size_t len)
{
    (void)d;
    if (g->cc_major > 0)
        snprintf(out, len, "%d", g->cc_major);
}

static void fact_cc_minor(const struct gpu_info *g, const struct gpu_device *d, char *out,
                          size_t len)
{
    (void)d;
    if (g->cc_major > 0)
        snprintf(out, len, "%d", g->cc_minor);
}

static void fact_accelerator(const struct gpu_info *g, const struct gpu_device *d, char *out,
                             size_t len)
{
    (void)d;
    labels_accelerator(g->name, g->memory_total, out, len);
}

/* GFD labels a GPU in MIG mode without its sharing: its model, replicas 0. */
static bool labels_mig_parent(const struct gpu_info *g)
{
    return g->mig_mode == NVML_DEVICE_MIG_ENABLE;
}

/* Sets key when every GPU whose identity is known (with whole_only, every
 * such GPU not in MIG mode) gives the same non-empty value. */
static void labels_agreed_among(const struct labels_input *in, const char *key, labels_fact_fn fn,
                                bool whole_only, struct label_set *out)
{
    const struct gpu_inventory *inv = in->inv;
    char first[LABEL_VALUE_MAX] = "", v[LABEL_VALUE_MAX];
    for (unsigned i = 0; i < inv->count; i++) {
        if (!labels_known(&inv->gpus[i]) || (whole_only && labels_mig_parent(&inv->gpus[i])))
            continue;
        v[0] = '\0';
        fn(&inv->gpus[i], in->devs ? &in->devs[i] : NULL, v, sizeof v);
        if (!v[0] || (first[0] && strcmp(first, v)))
            return;
        snprintf(first, sizeof first, "%s", v);
    }
    if (first[0])
        label_set_put(out, key, "%s", first);
}

static void labels_agreed(const struct labels_input *in, const char *key, labels_fact_fn fn,
                          struct label_set *out)
{
    labels_agreed_among(in, key, fn, false, out);
}

/* gpu.product, .replicas and .sharing-strategy: from the GPUs not in MIG
 * mode where there are any (GFD's full GPUs override their MIG parents);
 * on a node of MIG parents only, the model with replicas 0. */
static void labels_sharing(const struct labels_input *in, struct label_set *out)
{
    bool whole = false;
    for (unsigned i = 0; i < in->inv->count; i++)
        whole |= labels_known(&in->inv->gpus[i]) && !labels_mig_parent(&in->inv->gpus[i]);
    if (whole) {
        labels_agreed_among(in, "nvidia.com/gpu.product", fact_product, true, out);
        labels_agreed_among(in, "nvidia.com/gpu.replicas", fact_replicas, true, out);
        labels_agreed_among(in, "nvidia.com/gpu.sharing-strategy", fact_sharing, true, out);
        return;
    }
    labels_agreed(in, "nvidia.com/gpu.product", fact_model, out);
    label_set_put(out, "nvidia.com/gpu.replicas", "0");
    label_set_put(out, "nvidia.com/gpu.sharing-strategy", "none");
}

/* GFD: compute or graphics when every GPU has that PCI class. */
static const char *labels_mode(const struct gpu_inventory *inv)
{
    int cls = -2;
    for (unsigned i = 0; i < inv->count; i++) {
        int c = inv->gpus[i].pci_class;
        if (cls != -2 && c != cls)
            return "unknown";
        cls = c;
    }
    return cls == 0x0302 ? "compute" : cls == 0x0300 ? "graphics" : "unknown";
}

/* GFD: the fabric clique, only when all fabric-attached GPUs share one. */
static void labels_clique(const struct gpu_inventory *inv, struct label_set *out)
{
    const char *clique = NULL;
    for (unsigned i = 0; i < inv->count; i++) {
        const char *c = inv->gpus[i].clique;
        if (!c[0])
            continue;
        if (clique && strcmp(clique, c))
            return;
        clique = c;
    }
    if (clique)
        label_set_put(out, "nvidia.com/gpu.clique", "%s", clique);
}

/* gpulet.io/gpu.<model>.count and .memory for each model on the node. */
static void labels_models(const struct gpu_inventory *inv, struct label_set *out)
{
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        if (!labels_known(g))
            continue;
        char model[64], key[LABEL_KEY_MAX];
        labels_accelerator(g->name, g->memory_total, model, 52);
        snprintf(key, sizeof key, LABELS_OWN_PREFIX "gpu.%s.count", model);
        const char *had = label_set_get(out, key);
        label_set_put(out, key, "%ld", had ? strtol(had, NULL, 10) + 1 : 1);
        snprintf(key, sizeof key, LABELS_OWN_PREFIX "gpu.%s.memory", model);
        if (g->memory_total)
            label_set_put(out, key, "%llu", g->memory_total / MIB);
    }
}

void labels_build(const struct labels_input *in, struct label_set *out)
{
    const struct gpu_inventory *inv = in->inv;
    const struct config *cfg = in->cfg;
    label_set_clear(out);
    /* GFD labels nothing on a node without GPUs. */
    if (inv->count == 0)
        return;
    char v[LABEL_VALUE_MAX];
    labels_sanitise(in->machine ? in->machine : "unknown", v, sizeof v);
    label_set_put(out, "nvidia.com/gpu.machine", "%s", v[0] ? v : "unknown");
    labels_versions(inv, out);
    bool mig_capable = false;
    for (unsigned i = 0; i < inv->count; i++)
        mig_capable |= inv->gpus[i].mig_mode >= 0;
    label_set_put(out, "nvidia.com/mig.capable", "%s", mig_capable ? "true" : "false");
    if (in->mig_config_state) /* the GPU Operator's MIG manager's word, gpulet's now */
        label_set_put(out, "nvidia.com/mig.config.state", "%s", in->mig_config_state);
    if (cfg->mig_strategy == CONFIG_MIG_SINGLE)
        label_set_put(out, "nvidia.com/mig.strategy", "single");
    else if (cfg->mig_strategy == CONFIG_MIG_MIXED)
        label_set_put(out, "nvidia.com/mig.strategy", "mixed");
    /* GFD: true exactly when MPS sharing is configured (it refuses MIG GPUs). */
    label_set_put(out, "nvidia.com/mps.capable", "%s",
                  cfg->sharing == GPU_SHARING_MPS && cfg->nshared ? "true" : "false");
    label_set_put(out, "nvidia.com/gpu.count", "%u", inv->count);
    labels_sharing(in, out);
    labels_agreed(in, "nvidia.com/gpu.memory", fact_memory, out);
    labels_agreed(in, "nvidia.com/gpu.family", fact_family, out);
    labels_agreed(in, "nvidia.com/gpu.compute.major", fact_cc_major, out);
    labels_agreed(in, "nvidia.com/gpu.compute.minor", fact_cc_minor, out);
    label_set_put(out, "nvidia.com/gpu.mode", "%s", labels_mode(inv));
    labels_clique(inv, out);
    if (!cfg->no_timestamp)
        label_set_put(out, "nvidia.com/gfd.timestamp", "%lld", in->now_s);
    /* Beyond GFD. */
    label_set_put(out, "nvidia.com/gpu.present", "true");
    if (cfg->accelerator_label[0])
        labels_agreed(in, cfg->accelerator_label, fact_accelerator, out);
    unsigned healthy = 0;
    for (unsigned i = 0; i < inv->count; i++)
        healthy += !in->devs || in->devs[i].health.reason == HEALTH_OK;
    label_set_put(out, LABELS_OWN_PREFIX "gpu.healthy", "%u", healthy);
    /* A fault in one GPU instance leaves its GPU counted: the MIG devices
     * count apart, where there are any. */
    unsigned migs = 0, migs_healthy = 0;
    for (unsigned i = 0; i < inv->count; i++)
        for (unsigned k = 0; inv->gpus[i].mig_mode == NVML_DEVICE_MIG_ENABLE && k < inv->gpus[i].nmig; k++) {
            migs++;
            migs_healthy += !in->devs || gpu_device_healthy(&in->devs[i], (int)k);
        }
    if (migs)
        label_set_put(out, LABELS_OWN_PREFIX "mig.healthy", "%u", migs_healthy);
    /* How many GPUs are claimed through DRA (docs/dra.md), not counted. */
    if (cfg->dra != CONFIG_DRA_OFF) {
        unsigned dra = 0;
        for (unsigned i = 0; i < inv->count; i++)
            dra += config_dra_takes(cfg, &inv->gpus[i]);
        label_set_put(out, LABELS_OWN_PREFIX "dra.gpus", "%u", dra);
    }
    labels_models(inv, out);
    labels_mig(in, out);
    label_set_sort(out);
}
