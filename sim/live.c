/* The live model: values that move plausibly with time. Each GPU's load
 * follows its own slow wave; memory, temperature, power and clocks follow
 * the load, and the energy counter integrates power. A pinned field (gpulet
 * sim set) overrides the model until set back to auto. */
#include "sim.h"

static double live_clamp(double v, double lo, double hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* A smooth periodic wave in [-1, 1] of x turns: a triangle through
 * smoothstep, close to a sine and without libm, so the simulator library
 * needs only the C library (and the image carries no libm for it). */
static double live_wave(double x)
{
    double u = x - (double)(long long)x;
    if (u < 0)
        u += 1.0;
    double tri = u < 0.5 ? 2.0 * u : 2.0 - 2.0 * u; /* 0 → 1 → 0 */
    return 2.0 * tri * tri * (3.0 - 2.0 * tri) - 1.0;
}

static double live_util(const struct nvmlDevice_st *g, double t)
{
    return live_clamp(50.0 + 45.0 * live_wave(t / g->period + g->phase / 6.283185307179586), 0.0,
                      100.0);
}

static double live_model(struct nvmlDevice_st *g, enum sim_field f, double util)
{
    const struct sim_product *p = g->desc.product;
    switch (f) {
    case SIM_UTIL_GPU: return util;
    case SIM_UTIL_MEM: return util * 0.6;
    case SIM_MEM_USED:
        return (double)(p->memory_mib - p->reserved_mib) * (0.05 + 0.75 * util / 100.0);
    case SIM_TEMP: return 32.0 + 0.45 * util;
    case SIM_POWER:
        return p->power_idle_w + (p->power_max_w - p->power_idle_w) * 0.9 * util / 100.0;
    case SIM_CLOCK_SM: return util >= 1.0 ? p->sm_clock_max : p->sm_clock_idle;
    case SIM_CLOCK_MEM: return p->mem_clock;
    case SIM_FIELD_COUNT: break;
    }
    return 0;
}

double sim_live_value(struct nvmlDevice_st *g, enum sim_field f)
{
    if (g->pinned[f])
        return g->pin[f];
    double util = g->pinned[SIM_UTIL_GPU] ? g->pin[SIM_UTIL_GPU] : live_util(g, sim_now());
    return live_model(g, f, util);
}

unsigned long long sim_live_energy(struct nvmlDevice_st *g)
{
    double t = sim_now();
    if (t > g->energy_t) {
        /* Power at the end of the step times its length: exact enough at
         * the sampling rates that read it, and never decreasing. */
        g->energy_mj += sim_live_value(g, SIM_POWER) * (t - g->energy_t) * 1000.0;
        g->energy_t = t;
    }
    return (unsigned long long)g->energy_mj;
}

unsigned long long sim_live_nvlink(struct nvmlDevice_st *g)
{
    double t = sim_now();
    if (t > g->nvlink_t) {
        /* Busy GPUs move data over NVLink: up to 20 GiB/s each way at full load. */
        g->nvlink_kib += sim_live_value(g, SIM_UTIL_GPU) / 100.0 * 20.0 * 1048576.0 * (t - g->nvlink_t);
        g->nvlink_t = t;
    }
    return (unsigned long long)g->nvlink_kib;
}

void sim_live_reset(struct nvmlDevice_st *g, bool first_boot)
{
    unsigned i = g->desc.index;
    if (first_boot) {
        /* A node that has been up a few hours, each GPU a bit differently. */
        g->energy_mj = (double)g->desc.product->power_idle_w * 3600.0 * 1000.0 * (2 + i % 3);
        g->energy_t = g->nvlink_t = sim_now();
        g->period = 90.0 + 17.0 * (i % 5);
        g->phase = 0.7 * i;
        g->ecc_aggregate[0] = 0;
        g->ecc_aggregate[1] = 0;
        for (int f = 0; f < SIM_FIELD_COUNT; f++)
            g->pinned[f] = false;
    }
    g->lost = false;
    g->hung = false;
    /* A reset applies what waited for it. */
    g->pages_pending = g->rows_pending = false;
    if (g->mig_pending) {
        g->desc.mig_enabled = !g->desc.mig_enabled;
        sim_state.mig_changed = true;
    }
    g->mig_pending = false;
    g->ecc_volatile[0] = g->ecc_volatile[1] = 0;
    g->pcie_replays = 0;
}
