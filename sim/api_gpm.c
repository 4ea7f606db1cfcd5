/* GPM, the GPU performance monitoring counters of Hopper and newer: a sample
 * records the device and when; metrics between two samples follow the live
 * model's load. Older parts answer NOT_SUPPORTED, as the real library does. */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

struct nvmlGpmSample_st {
    struct nvmlDevice_st *gpu;   /* NULL until nvmlGpmSampleGet fills it */
    double t;
};

SIM_API nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample)
{
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    if (!gpmSample)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    *gpmSample = calloc(1, sizeof **gpmSample);
    return sim_leave(*gpmSample ? NVML_SUCCESS : NVML_ERROR_MEMORY);
}

SIM_API nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample)
{
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    if (!gpmSample)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    free(gpmSample);
    return sim_leave(NVML_SUCCESS);
}

SIM_API nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample)
{
    SIM_ENTER_DEVICE(device, gpmSample);
    if (device->desc.product->arch < NVML_DEVICE_ARCH_HOPPER)
        return sim_leave(NVML_ERROR_NOT_SUPPORTED);
    gpmSample->gpu = device;
    gpmSample->t = sim_now();
    return sim_leave(NVML_SUCCESS);
}

/* A metric between two samples of one GPU: percentages of the load, PCIe in MiB/s. */
static nvmlReturn_t gpm_metric(struct nvmlDevice_st *g, unsigned id, double *value)
{
    double util = sim_live_value(g, SIM_UTIL_GPU), mem = sim_live_value(g, SIM_UTIL_MEM);
    switch (id) {
    case 1: *value = util; break;               /* graphics/compute engine active */
    case 2: *value = util * 0.9; break;         /* SM active */
    case 3: *value = util * 0.5; break;         /* SM occupancy */
    case 5: *value = util * 0.4; break;         /* any tensor pipe */
    case 10: *value = mem; break;               /* DRAM bandwidth */
    case 11: *value = util * 0.1; break;        /* FP64 */
    case 12: *value = util * 0.3; break;        /* FP32 */
    case 13: *value = util * 0.2; break;        /* FP16 */
    case 20: case 21: *value = util * 50.0; break; /* PCIe TX/RX, MiB/s */
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

SIM_API nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *m)
{
    nvmlReturn_t rc = sim_enter();
    if (rc)
        return rc;
    if (!m || !m->sample1 || !m->sample2 || m->numMetrics > NVML_GPM_METRIC_MAX)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (m->version != NVML_GPM_METRICS_GET_VERSION)
        return sim_leave(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    struct nvmlDevice_st *g = m->sample1->gpu;
    if (!g || g != m->sample2->gpu || m->sample2->t <= m->sample1->t)
        return sim_leave(NVML_ERROR_INVALID_ARGUMENT);
    if (g->lost)
        return sim_leave(NVML_ERROR_GPU_IS_LOST);
    for (unsigned i = 0; i < m->numMetrics; i++) {
        memset(&m->metrics[i].metricInfo, 0, sizeof m->metrics[i].metricInfo);
        m->metrics[i].nvmlReturn = gpm_metric(g, m->metrics[i].metricId, &m->metrics[i].value);
    }
    return sim_leave(NVML_SUCCESS);
}
