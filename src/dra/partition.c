/* MIG devices made per claim (KEP-4815, partitionable devices): a GPU of
 * --dra-mig is published as its counters (what the GPU has: memory, SMs,
 * engines, compute slices, each memory slice once) and one device per
 * placement of each of its profiles, consuming what a MIG device there
 * takes. The scheduler picks placements whose counters fit together; the
 * prepare makes that MIG device (claim_mig.c). Names are NVIDIA's dynamic
 * MIG's: gpu-<minor>-mig-<profile>-<profile ID>-<start>, the counter set
 * gpu-<minor>-counter-set. Pure: no I/O, fuzzed (fuzz_partition). */
#include "dra/dra.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool dra_partitions(const struct dra_slice_in *in, unsigned i)
{
    return in->partitionable && config_dra_mig(in->cfg, &in->inv->gpus[i]) &&
           in->inv->gpus[i].nmig_profiles;
}

unsigned dra_partitioned(const struct dra_slice_in *in)
{
    unsigned n = 0;
    for (unsigned i = 0; i < in->inv->count; i++)
        n += dra_partitions(in, i);
    return n;
}

void dra_counter_set_name(const struct gpu_info *g, char *out, size_t len)
{
    snprintf(out, len, "gpu-%u-counter-set", g->minor);
}

static void dra_counter(struct dra_counter *c, const char *name, unsigned long long value,
                        bool bytes)
{
    snprintf(c->name, sizeof c->name, "%s", name);
    c->value = value;
    c->bytes = bytes;
}

/* What profile p takes of its GPU, memory slices apart. */
static unsigned dra_profile_counters(const nvmlGpuInstanceProfileInfo_t *p, struct dra_counter *out)
{
    dra_counter(&out[0], "memory", p->memorySizeMB << 20, true);
    dra_counter(&out[1], "multiprocessors", p->multiprocessorCount, false);
    dra_counter(&out[2], "compute-slices", p->sliceCount, false);
    dra_counter(&out[3], "copy-engines", p->copyEngineCount, false);
    dra_counter(&out[4], "decoders", p->decoderCount, false);
    dra_counter(&out[5], "encoders", p->encoderCount, false);
    dra_counter(&out[6], "jpeg-engines", p->jpegCount, false);
    dra_counter(&out[7], "ofa-engines", p->ofaCount, false);
    return 8;
}

unsigned dra_counters(const struct gpu_info *g, const struct gpu_mig_profile *p, unsigned start,
                      struct dra_counter *out)
{
    unsigned n = 0, first = start, end = 0;
    if (p) {
        n = dra_profile_counters(&p->info, out);
        end = start + p->size;
    } else {
        /* The GPU whole: each dimension's most, which its largest
         * profile takes (a 7g instance is the GPU). */
        struct dra_counter c[DRA_MAX_COUNTERS] = {0};
        first = 0;
        for (unsigned k = 0; k < g->nmig_profiles; k++) {
            const struct gpu_mig_profile *q = &g->mig_profiles[k];
            n = dra_profile_counters(&q->info, c);
            for (unsigned j = 0; j < n; j++)
                if (!k || c[j].value > out[j].value)
                    out[j] = c[j];
            for (unsigned s = 0; s < GPU_MIG_SLICES; s++)
                if (q->starts >> s & 1 && s + q->size > end)
                    end = s + q->size;
        }
    }
    for (unsigned s = first; s < end && s < GPU_MIG_SLICES; s++) {
        char name[24];
        snprintf(name, sizeof name, "memory-slice-%u", s);
        dra_counter(&out[n++], name, 1, false);
    }
    return n;
}

/* NVIDIA's MIG profile in a device name: "1g.10gb+me" is 1g10gb-me
 * (dots dropped, then what a DNS label cannot hold made a dash). */
void dra_profile_label(const char *profile, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = profile; *p && n + 1 < len; p++) {
        char c = *p >= 'A' && *p <= 'Z' ? (char)(*p - 'A' + 'a') : *p;
        if (c == '.')
            continue;
        out[n++] = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ? c : '-';
    }
    while (n && out[n - 1] == '-')
        n--;
    out[n] = '\0';
}

void dra_placement_name(const struct gpu_info *g, const struct gpu_mig_profile *p, unsigned start,
                        char *out, size_t len)
{
    char label[32];
    dra_profile_label(p->name, label, sizeof label);
    snprintf(out, len, "gpu-%u-mig-%s-%u-%u", g->minor, label, p->info.id, start);
}

bool dra_placement_at(const struct gpu_info *g, unsigned n, struct dra_placement *out)
{
    for (unsigned k = 0; k < g->nmig_profiles; k++)
        for (unsigned s = 0; s < GPU_MIG_SLICES; s++)
            if (g->mig_profiles[k].starts >> s & 1 && !n--) {
                *out = (struct dra_placement){0, &g->mig_profiles[k], s};
                return true;
            }
    return false;
}

bool dra_placement_find(const struct dra_slice_in *in, const char *name, struct dra_placement *out)
{
    unsigned minor;
    int at = 0;
    if (sscanf(name, "gpu-%u-mig-%n", &minor, &at) != 1 || !at)
        return false;
    for (unsigned i = 0; i < in->inv->count; i++) {
        const struct gpu_info *g = &in->inv->gpus[i];
        if (g->minor != minor || !dra_partitions(in, i))
            continue;
        for (unsigned n = 0; dra_placement_at(g, n, out); n++) {
            char want[96];
            dra_placement_name(g, out->profile, out->start, want, sizeof want);
            if (!strcmp(want, name)) {
                out->gpu = i;
                return true;
            }
        }
    }
    return false;
}

bool dra_made(const struct dra_slice_in *in, const char *uuid)
{
    for (unsigned k = 0; k < in->nmade; k++)
        if (!strcmp(in->made[k], uuid))
            return true;
    return false;
}

bool dra_placement_open(const struct dra_slice_in *in, const struct dra_placement *pl, int *mig)
{
    const struct gpu_info *g = &in->inv->gpus[pl->gpu];
    unsigned lo = pl->start, hi = pl->start + pl->profile->size;
    *mig = -1;
    for (unsigned k = 0; k < g->nmig; k++) {
        const struct gpu_mig *m = &g->mig[k];
        unsigned mlo = m->placement_start, mhi = m->placement_start + m->placement_size;
        bool exact = m->gi_profile == pl->profile->info.id && mlo == lo && m->placement_size;
        if (exact)
            *mig = (int)k;
        /* One another made (mig-parted, an operator) holds its slices:
         * the scheduler must not pick what overlaps it. Exactly there,
         * a claim adopts it. */
        if (!exact && !dra_made(in, m->uuid) && (!m->placement_size || (mlo < hi && lo < mhi)))
            return false;
    }
    return true;
}
