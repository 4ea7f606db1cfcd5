/* GPU Feature Discovery's MIG labels. single: the nvidia.com/gpu.* labels
 * describe the MIG devices (product "<model>-MIG-<profile>", their count,
 * memory, SMs, slices and engines). mixed: one set per profile present,
 * under nvidia.com/mig-<profile>.* ('+' made '.'). Time-slicing a MIG
 * resource shows in its replicas, sharing-strategy and -SHARED product, as
 * for whole GPUs. Adding a label is one row. */
#include "labels/labels.h"

#include <stdio.h>
#include <string.h>

struct mig_row {
    const char *suffix;
    unsigned long long (*value)(const struct gpu_mig *m);
};

static unsigned long long mig_memory(const struct gpu_mig *m) { return m->attr.memorySizeMB; }
static unsigned long long mig_sms(const struct gpu_mig *m) { return m->attr.multiprocessorCount; }
static unsigned long long mig_gi(const struct gpu_mig *m) { return m->attr.gpuInstanceSliceCount; }
static unsigned long long mig_ci(const struct gpu_mig *m) { return m->attr.computeInstanceSliceCount; }
static unsigned long long mig_ce(const struct gpu_mig *m) { return m->attr.sharedCopyEngineCount; }
static unsigned long long mig_dec(const struct gpu_mig *m) { return m->attr.sharedDecoderCount; }
static unsigned long long mig_enc(const struct gpu_mig *m) { return m->attr.sharedEncoderCount; }
static unsigned long long mig_jpeg(const struct gpu_mig *m) { return m->attr.sharedJpegCount; }
static unsigned long long mig_ofa(const struct gpu_mig *m) { return m->attr.sharedOfaCount; }

static const struct mig_row mig_rows[] = {
    {"memory", mig_memory},         {"multiprocessors", mig_sms},
    {"slices.gi", mig_gi},          {"slices.ci", mig_ci},
    {"engines.copy", mig_ce},       {"engines.decoder", mig_dec},
    {"engines.encoder", mig_enc},   {"engines.jpeg", mig_jpeg},
    {"engines.ofa", mig_ofa},
};

/* prefix.product, .count, .replicas, .sharing-strategy and the rows, for
 * the devices of m's profile; share is how they are advertised (NULL:
 * unshared). */
static void mig_set(struct label_set *out, const char *prefix, const struct gpu_info *g,
                    const struct gpu_mig *m, const struct gpu_share *share, unsigned count)
{
    char product[LABEL_VALUE_MAX], value[LABEL_VALUE_MAX * 2], key[LABEL_KEY_MAX];
    labels_sanitise(g->name, product, sizeof product);
    snprintf(value, sizeof value, "%s-MIG-%s", product, m->profile);
    labels_sanitise(value, product, sizeof product);
    labels_shared_product(product, share, value, sizeof value);
    snprintf(key, sizeof key, "%s.product", prefix);
    label_set_put(out, key, "%s", value);
    snprintf(key, sizeof key, "%s.count", prefix);
    label_set_put(out, key, "%u", count);
    snprintf(key, sizeof key, "%s.replicas", prefix);
    label_set_put(out, key, "%u", share && share->replicas ? share->replicas : 1);
    snprintf(key, sizeof key, "%s.sharing-strategy", prefix);
    label_set_put(out, key, "%s", labels_sharing_name(share));
    for (size_t r = 0; r < sizeof mig_rows / sizeof *mig_rows; r++) {
        snprintf(key, sizeof key, "%s.%s", prefix, mig_rows[r].suffix);
        label_set_put(out, key, "%llu", mig_rows[r].value(m));
    }
}

static bool mig_on(const struct gpu_info *g)
{
    return g->mig_mode == NVML_DEVICE_MIG_ENABLE;
}

/* How MIG device k of GPU i is advertised; NULL outside the agent's model. */
static const struct gpu_share *mig_share(const struct labels_input *in, unsigned i, unsigned k)
{
    return in->devs ? &in->devs[i].mig_share[k] : NULL;
}

/* The MIG devices of profile on the node. */
static unsigned mig_count(const struct gpu_inventory *inv, const char *profile)
{
    unsigned count = 0;
    for (unsigned j = 0; j < inv->count; j++)
        for (unsigned l = 0; mig_on(&inv->gpus[j]) && l < inv->gpus[j].nmig; l++)
            count += !strcmp(inv->gpus[j].mig[l].profile, profile);
    return count;
}

void labels_mig(const struct labels_input *in, struct label_set *out)
{
    const struct gpu_inventory *inv = in->inv;
    int strategy = in->cfg->mig_strategy;
    unsigned mig_gpus = 0, devices = 0;
    for (unsigned i = 0; i < inv->count; i++) {
        mig_gpus += mig_on(&inv->gpus[i]);
        devices += mig_on(&inv->gpus[i]) ? inv->gpus[i].nmig : 0;
    }
    if (strategy == CONFIG_MIG_NONE || !mig_gpus)
        return;
    if (strategy == CONFIG_MIG_SINGLE) {
        /* The agent serves single only when every device has one profile. */
        for (unsigned i = 0; i < inv->count; i++)
            if (inv->gpus[i].nmig) {
                mig_set(out, "nvidia.com/gpu", &inv->gpus[i], &inv->gpus[i].mig[0],
                        mig_share(in, i, 0), devices);
                return;
            }
        return;
    }
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        for (unsigned k = 0; mig_on(g) && k < g->nmig; k++) {
            char prefix[64], key[LABEL_KEY_MAX];
            snprintf(prefix, sizeof prefix, "nvidia.com/mig-%.32s", g->mig[k].profile);
            for (char *c = prefix; *c; c++)
                if (*c == '+')
                    *c = '.';
            snprintf(key, sizeof key, "%s.count", prefix);
            if (!label_set_get(out, key)) /* the profile's first device */
                mig_set(out, prefix, g, &g->mig[k], mig_share(in, i, k),
                        mig_count(inv, g->mig[k].profile));
        }
    }
}
