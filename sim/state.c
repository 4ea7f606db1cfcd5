/* The MIG state carried from one process to the next (GPULET_SIM_STATE):
 * MIG state lives in the process that holds the simulator, as the real
 * driver's lives in the kernel. A tool that works in many short processes,
 * as NVIDIA's nvidia-mig-parted does (an NVML session per step), needs it
 * kept between them: with GPULET_SIM_STATE=FILE, the first init after the
 * scenario reads FILE where it exists, and each last shutdown writes it.
 *
 * One line per GPU, then one per GPU instance:
 *   gpu INDEX mig on|off pending 0|1 generation N
 *   instance INDEX PROFILE START GI CI UUID_GEN BARE
 * A file that does not fit the scenario fails the init, naming the line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static int state_bad(const char *path, unsigned line, const char *why)
{
    fprintf(stderr, "gpulet simulator: GPULET_SIM_STATE %s:%u: %s\n", path, line, why);
    return -1;
}

/* One instance line, onto its GPU (whose instances it replaces on first). */
static int state_instance(char *rest, bool *cleared, const char *path, unsigned line)
{
    unsigned index, start, gi, ci, gen, bare;
    char profile[32];
    if (sscanf(rest, "%u %31s %u %u %u %u %u", &index, profile, &start, &gi, &ci, &gen, &bare) != 7)
        return state_bad(path, line, "expected: instance INDEX PROFILE START GI CI UUID_GEN BARE");
    if (index >= sim_state.sc.count)
        return state_bad(path, line, "no such GPU in the scenario");
    struct sim_gpu *g = &sim_state.gpus[index].desc;
    const struct sim_mig_profile *p = sim_mig_profile_find(g->product, profile);
    if (!p)
        return state_bad(path, line, "the GPU has no such MIG profile");
    if (!cleared[index])
        g->nmig = 0;
    cleared[index] = true;
    if (g->nmig == SIM_MIG_MAX || !gi || gi > SIM_MIG_MAX)
        return state_bad(path, line, "too many GPU instances, or a GPU instance ID out of 1-14");
    g->mig[g->nmig++] = (struct sim_mig_device){p, start, gi, ci, gen, bare != 0};
    return 0;
}

int sim_state_restore(void)
{
    const char *path = getenv("GPULET_SIM_STATE");
    if (!path || !*path)
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : state_bad(path, 0, strerror(errno));
    bool cleared[SIM_MAX_GPUS] = {false};
    char buf[256];
    unsigned line = 0;
    int rc = 0;
    while (rc == 0 && fgets(buf, sizeof buf, f)) {
        line++;
        unsigned index, pending, gen;
        char mode[8];
        if (buf[0] == '#' || buf[0] == '\n')
            continue;
        if (!strncmp(buf, "instance ", 9)) {
            rc = state_instance(buf + 9, cleared, path, line);
        } else if (sscanf(buf, "gpu %u mig %7s pending %u generation %u", &index, mode, &pending,
                          &gen) == 4 && index < sim_state.sc.count) {
            struct nvmlDevice_st *d = &sim_state.gpus[index];
            d->desc.mig_enabled = !strcmp(mode, "on");
            d->mig_pending = pending != 0;
            d->desc.mig_generation = gen;
            if (!cleared[index])
                d->desc.nmig = 0;
            cleared[index] = true;
        } else {
            rc = state_bad(path, line, "expected: gpu INDEX mig on|off pending 0|1 generation N");
        }
    }
    fclose(f);
    return rc;
}

void sim_state_save(void)
{
    const char *path = getenv("GPULET_SIM_STATE");
    if (!path || !*path || !sim_state.loaded)
        return;
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "gpulet simulator: GPULET_SIM_STATE %s: %s\n", tmp, strerror(errno));
        return;
    }
    fprintf(f, "# gpulet simulator: MIG state of scenario %s\n", sim_state.sc.name);
    for (unsigned i = 0; i < sim_state.sc.count; i++) {
        const struct nvmlDevice_st *d = &sim_state.gpus[i];
        fprintf(f, "gpu %u mig %s pending %d generation %u\n", i, d->desc.mig_enabled ? "on" : "off",
                d->mig_pending, d->desc.mig_generation);
        for (unsigned k = 0; k < d->desc.nmig; k++) {
            const struct sim_mig_device *m = &d->desc.mig[k];
            fprintf(f, "instance %u %s %u %u %u %u %d\n", i, m->profile->name, m->start, m->gi, m->ci,
                    m->uuid_gen, m->bare);
        }
    }
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        fprintf(stderr, "gpulet simulator: GPULET_SIM_STATE %s: %s\n", path, strerror(errno));
}
