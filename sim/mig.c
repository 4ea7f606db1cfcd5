/* MIG profiles of the MIG-capable models, and laying MIG devices out on a
 * GPU. The H200's table is what its driver (580.159.04) answers with MIG
 * disabled (docs/real-gpu.md); the others are NVIDIA's MIG user guide
 * (profiles, fractions, engines, placements) with the sizes in MiB that
 * nvidia-smi mig -lgip prints. Placements are in memory units, eight per
 * GPU: a 1g profile has seven starts of size 1, the whole GPU one of 8. */
#include "scenario.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* NVML_GPU_INSTANCE_PROFILE_* */
enum { P_1 = 0, P_2 = 1, P_3 = 2, P_4 = 3, P_7 = 4, P_1_REV1 = 7, P_1_REV2 = 9 };
#define STARTS_1 0x7fu       /* 0-6 */
#define STARTS_2 0x55u       /* 0, 2, 4, 6 */
#define STARTS_2_OF_3 0x15u  /* 0, 2, 4 */
#define STARTS_4 0x11u       /* 0, 4 */

/* name, index, id, slices, instances, SMs, CE, DEC, ENC, JPEG, OFA, MiB, size, starts */
const struct sim_mig_profile sim_mig_a100_40gb[] = {
    {"1g.5gb", P_1, 19, 1, 7, 14, 1, 0, 0, 0, 0, 4864, 1, STARTS_1},
    {"1g.5gb+me", P_1_REV1, 20, 1, 1, 14, 1, 1, 0, 1, 1, 4864, 1, STARTS_1},
    {"1g.10gb", P_1_REV2, 15, 1, 4, 14, 1, 1, 0, 0, 0, 9984, 2, STARTS_2},
    {"2g.10gb", P_2, 14, 2, 3, 28, 2, 1, 0, 0, 0, 9984, 2, STARTS_2_OF_3},
    {"3g.20gb", P_3, 9, 3, 2, 42, 3, 2, 0, 0, 0, 20096, 4, STARTS_4},
    {"4g.20gb", P_4, 5, 4, 1, 56, 4, 2, 0, 0, 0, 20096, 4, 0x1},
    {"7g.40gb", P_7, 0, 7, 1, 98, 7, 5, 0, 1, 1, 40192, 8, 0x1},
    {NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

const struct sim_mig_profile sim_mig_a100_80gb[] = {
    {"1g.10gb", P_1, 19, 1, 7, 14, 1, 0, 0, 0, 0, 9728, 1, STARTS_1},
    {"1g.10gb+me", P_1_REV1, 20, 1, 1, 14, 1, 1, 0, 1, 1, 9728, 1, STARTS_1},
    {"1g.20gb", P_1_REV2, 15, 1, 4, 14, 1, 1, 0, 0, 0, 19968, 2, STARTS_2},
    {"2g.20gb", P_2, 14, 2, 3, 28, 2, 1, 0, 0, 0, 19968, 2, STARTS_2_OF_3},
    {"3g.40gb", P_3, 9, 3, 2, 42, 3, 2, 0, 0, 0, 40192, 4, STARTS_4},
    {"4g.40gb", P_4, 5, 4, 1, 56, 4, 2, 0, 0, 0, 40192, 4, 0x1},
    {"7g.80gb", P_7, 0, 7, 1, 98, 7, 5, 0, 1, 1, 80384, 8, 0x1},
    {NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

/* Hopper: 132 SMs; a 1g instance 16, 1g with two memory units 26.
 * Checked against the real H100 80GB HBM3 (tests/realgpu/data/h100-mig-disabled.json). */
const struct sim_mig_profile sim_mig_h100_80gb[] = {
    {"1g.10gb", P_1, 19, 1, 7, 16, 1, 1, 0, 1, 0, 9984, 1, STARTS_1},
    {"1g.10gb+me", P_1_REV1, 20, 1, 1, 16, 1, 1, 0, 1, 1, 9984, 1, STARTS_1},
    {"1g.20gb", P_1_REV2, 15, 1, 4, 26, 1, 1, 0, 1, 0, 20096, 2, STARTS_2},
    {"2g.20gb", P_2, 14, 2, 3, 32, 2, 2, 0, 2, 0, 20096, 2, STARTS_2_OF_3},
    {"3g.40gb", P_3, 9, 3, 2, 60, 3, 3, 0, 3, 0, 40448, 4, STARTS_4},
    {"4g.40gb", P_4, 5, 4, 1, 64, 4, 4, 0, 4, 0, 40448, 4, 0x1},
    {"7g.80gb", P_7, 0, 7, 1, 132, 8, 7, 0, 7, 1, 81152, 8, 0x1},
    {NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

/* Checked against the real H200 (tests/realgpu/data/h200-mig-disabled.json). */
const struct sim_mig_profile sim_mig_h200[] = {
    {"1g.18gb", P_1, 19, 1, 7, 16, 1, 1, 0, 1, 0, 16384, 1, STARTS_1},
    {"1g.18gb+me", P_1_REV1, 20, 1, 1, 16, 1, 1, 0, 1, 1, 16384, 1, STARTS_1},
    {"1g.35gb", P_1_REV2, 15, 1, 4, 26, 1, 1, 0, 1, 0, 33280, 2, STARTS_2},
    {"2g.35gb", P_2, 14, 2, 3, 32, 2, 2, 0, 2, 0, 33280, 2, STARTS_2_OF_3},
    {"3g.71gb", P_3, 9, 3, 2, 60, 3, 3, 0, 3, 0, 71424, 4, STARTS_4},
    {"4g.71gb", P_4, 5, 4, 1, 64, 4, 4, 0, 4, 0, 71424, 4, 0x1},
    {"7g.141gb", P_7, 0, 7, 1, 132, 8, 7, 0, 7, 1, 143360, 8, 0x1},
    {NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

/* GH200 480GB (96 GB HBM3): the names mig-parted's default config lists
 * for it; memory sizes scaled from the H100 80GB's, not read off a card. */
const struct sim_mig_profile sim_mig_gh200[] = {
    {"1g.12gb", P_1, 19, 1, 7, 16, 1, 1, 0, 1, 0, 11904, 1, STARTS_1},
    {"1g.12gb+me", P_1_REV1, 20, 1, 1, 16, 1, 1, 0, 1, 1, 11904, 1, STARTS_1},
    {"1g.24gb", P_1_REV2, 15, 1, 4, 26, 1, 1, 0, 1, 0, 23936, 2, STARTS_2},
    {"2g.24gb", P_2, 14, 2, 3, 32, 2, 2, 0, 2, 0, 23936, 2, STARTS_2_OF_3},
    {"3g.48gb", P_3, 9, 3, 2, 60, 3, 3, 0, 3, 0, 48128, 4, STARTS_4},
    {"4g.48gb", P_4, 5, 4, 1, 64, 4, 4, 0, 4, 0, 48128, 4, 0x1},
    {"7g.96gb", P_7, 0, 7, 1, 132, 8, 7, 0, 7, 1, 96768, 8, 0x1},
    {NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
};

const struct sim_mig_profile *sim_mig_profile_find(const struct sim_product *p, const char *name)
{
    for (const struct sim_mig_profile *m = p->mig; m && m->name; m++)
        if (!strcmp(m->name, name))
            return m;
    return NULL;
}

/* Larger placements first, then the order asked. */
static int mig_cmp(const void *a, const void *b)
{
    const struct sim_mig_device *x = a, *y = b;
    if (x->profile->size != y->profile->size)
        return x->profile->size > y->profile->size ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

void sim_mig_uuid(const char *gpu_uuid, unsigned generation, unsigned gi, char *out, size_t len)
{
    unsigned long long h = 1469598103934665603ull;
    h = (h ^ (gi * 31u + generation * 977u)) * 1099511628211ull;
    for (const char *c = gpu_uuid; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ull;
    unsigned long long h2 = (h ^ 0x9e3779b97f4a7c15ull) * 1099511628211ull;
    snprintf(out, len, "MIG-%08llx-%04llx-%04llx-%04llx-%012llx", h >> 32, (h >> 16) & 0xffff,
             (h & 0x0fff) | 0x5000, (h2 >> 48 & 0x3fff) | 0x8000, h2 & 0xffffffffffffull);
}

/* Places devices [i, n) in the memory units left free by used: each at its
 * profile's first start that lets the rest fit too (backtracking, as the
 * first free placement can strand a later profile). */
static bool mig_place(struct sim_mig_device *d, unsigned n, unsigned i, unsigned used)
{
    if (i == n)
        return true;
    const struct sim_mig_profile *m = d[i].profile;
    unsigned mask = (1u << m->size) - 1;
    for (unsigned start = 0; start < SIM_MIG_UNITS; start++) {
        if (!(m->starts >> start & 1) || used & mask << start)
            continue;
        d[i].start = start;
        if (mig_place(d, n, i + 1, used | mask << start))
            return true;
    }
    return false;
}

int sim_mig_layout(struct sim_gpu *g, const char *const *names, unsigned n, char *why, size_t len)
{
    const struct sim_product *p = g->product;
    struct sim_mig_device next[SIM_MIG_MAX];
    unsigned slices = 0, per_profile[16] = {0};
    if (n > SIM_MIG_MAX)
        return snprintf(why, len, "%u MIG devices asked for; a GPU holds at most %d", n,
                        SIM_MIG_MAX), -1;
    for (unsigned i = 0; i < n; i++) {
        const struct sim_mig_profile *m = sim_mig_profile_find(p, names[i]);
        if (!m) {
            char known[256] = "";
            size_t k = 0;
            for (const struct sim_mig_profile *x = p->mig; x && x->name; x++)
                k += (size_t)snprintf(known + k, k < sizeof known ? sizeof known - k : 0, "%s%s",
                                      k ? ", " : "", x->name);
            return snprintf(why, len, "%s has no MIG profile '%s' (%s: %s)", p->key, names[i],
                            p->mig ? "its profiles" : "it has none", p->mig ? known : "not MIG-capable"),
                   -1;
        }
        if (++per_profile[m - p->mig] > m->instances)
            return snprintf(why, len, "%s allows %u instance(s) of %s, not %u", p->key,
                            m->instances, m->name, per_profile[m - p->mig]), -1;
        slices += m->slices;
        next[i] = (struct sim_mig_device){m, i, 0, 0, g->mig_generation + 1, false};
        /* start holds the order for now */
    }
    if (slices > 7)
        return snprintf(why, len, "the profiles take %u compute slices; a GPU has 7", slices), -1;
    qsort(next, n, sizeof *next, mig_cmp);
    if (!mig_place(next, n, 0, 0))
        return snprintf(why, len, "the profiles do not fit together: no placement of each "
                        "leaves room for the rest"), -1;
    for (unsigned i = 0; i < n; i++)
        next[i].gi = i + 1;
    memcpy(g->mig, next, n * sizeof *next);
    g->nmig = n;
    g->mig_generation++;
    return 0;
}

const char *sim_mig_room(const struct sim_gpu *g, const struct sim_mig_profile *m, unsigned start)
{
    if (start >= SIM_MIG_UNITS || !(m->starts >> start & 1))
        return "the profile has no placement starting there";
    unsigned used = 0, slices = m->slices, same = 1;
    for (unsigned k = 0; k < g->nmig; k++) {
        const struct sim_mig_device *x = &g->mig[k];
        used |= ((1u << x->profile->size) - 1) << x->start;
        slices += x->profile->slices;
        same += x->profile == m;
    }
    if (g->nmig == SIM_MIG_MAX)
        return "the GPU holds its most GPU instances";
    if (used & ((1u << m->size) - 1) << start)
        return "its memory slices are another GPU instance's";
    if (same > m->instances || slices > 7)
        return "no compute slices or instances of the profile left";
    return NULL;
}
