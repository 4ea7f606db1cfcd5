/* GPU Feature Discovery's MIG labels. single: the nvidia.com/gpu.* labels
 * describe the MIG devices (product "<model>-MIG-<profile>", their count,
 * memory, SMs, slices and engines). mixed: one set per profile present,
 * under nvidia.com/mig-<profile>.* ('+' made '.'), and nvidia.com/gpu.*
 * for the GPUs without MIG. Adding a label is one row. */
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

/* prefix.product, .count, .replicas and the rows, for profile's devices. */
static void mig_set(struct label_set *out, const char *prefix, const struct gpu_info *g,
                    const struct gpu_mig *m, unsigned count)
{
    char product[LABEL_VALUE_MAX], value[LABEL_VALUE_MAX * 2], key[LABEL_KEY_MAX];
    labels_sanitise(g->name, product, sizeof product);
    snprintf(value, sizeof value, "%s-MIG-%s", product, m->profile);
    labels_sanitise(value, product, sizeof product);
    snprintf(key, sizeof key, "%s.product", prefix);
    label_set_put(out, key, "%s", product);
    snprintf(key, sizeof key, "%s.count", prefix);
    label_set_put(out, key, "%u", count);
    snprintf(key, sizeof key, "%s.replicas", prefix);
    label_set_put(out, key, "1");
    for (size_t r = 0; r < sizeof mig_rows / sizeof *mig_rows; r++) {
        snprintf(key, sizeof key, "%s.%s", prefix, mig_rows[r].suffix);
        label_set_put(out, key, "%llu", mig_rows[r].value(m));
    }
}

void labels_mig(const struct labels_input *in, struct label_set *out)
{
    const struct gpu_inventory *inv = in->inv;
    int strategy = in->cfg->mig_strategy;
    unsigned mig_gpus = 0, whole = 0, devices = 0;
    for (unsigned i = 0; i < inv->count; i++) {
        bool mig = inv->gpus[i].mig_mode == NVML_DEVICE_MIG_ENABLE;
        mig_gpus += mig;
        whole += !mig;
        devices += mig ? inv->gpus[i].nmig : 0;
    }
    if (strategy == CONFIG_MIG_NONE || !mig_gpus)
        return;
    if (strategy == CONFIG_MIG_SINGLE) {
        /* The agent serves single only when every device has one profile. */
        for (unsigned i = 0; i < inv->count; i++)
            if (inv->gpus[i].nmig) {
                mig_set(out, "nvidia.com/gpu", &inv->gpus[i], &inv->gpus[i].mig[0], devices);
                return;
            }
        return;
    }
    label_set_put(out, "nvidia.com/gpu.count", "%u", whole);
    if (!whole)
        label_set_put(out, "nvidia.com/gpu.replicas", "0");
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        for (unsigned k = 0; g->mig_mode == NVML_DEVICE_MIG_ENABLE && k < g->nmig; k++) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "nvidia.com/mig-%.32s", g->mig[k].profile);
            for (char *c = prefix; *c; c++)
                if (*c == '+')
                    *c = '.';
            char key[LABEL_KEY_MAX];
            snprintf(key, sizeof key, "%s.count", prefix);
            if (label_set_get(out, key))
                continue; /* this profile is done */
            unsigned count = 0;
            for (unsigned j = 0; j < inv->count; j++)
                for (unsigned l = 0; inv->gpus[j].mig_mode == NVML_DEVICE_MIG_ENABLE &&
                                     l < inv->gpus[j].nmig; l++)
                    count += !strcmp(inv->gpus[j].mig[l].profile, g->mig[k].profile);
            mig_set(out, prefix, g, &g->mig[k], count);
            snprintf(key, sizeof key, "%s.sharing-strategy", prefix);
            label_set_put(out, key, "none");
        }
    }
}
