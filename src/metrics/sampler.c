/* The sampler: reads each GPU's fields from NVML on the sampler thread.
 * Cheap calls (clocks, temperature, power, utilization, memory: microseconds)
 * run for every GPU on every tick. Expensive ones (energy ~4 ms, PCIe replays
 * and field values ~140 us, GPM ~1.7 ms on an H200: docs/benchmarks.md) are
 * read for as many GPUs per tick as a small budget allows at their measured
 * cost, round robin, and keep their last value in between. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "metrics/internal.h"

#define SAMPLER_BUDGET_SHARE 0.002  /* of each interval, per expensive class */

const char *const metrics_nvml_names[] = {
    "nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetEncoderUtilization",
    "nvmlDeviceGetDecoderUtilization", "nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetTotalEccErrors",
    "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetTotalEnergyConsumption", "nvmlGpmSampleGet", "nvmlGpmMetricsGet",
    "nvmlDeviceGetHandleByUUID",
};
const unsigned metrics_nvml_count = sizeof metrics_nvml_names / sizeof *metrics_nvml_names;
enum { FN_CLOCK, FN_TEMP, FN_POWER, FN_UTIL, FN_ENC, FN_DEC, FN_MEM, FN_ECC, FN_REPLAY,
       FN_FIELDS, FN_ENERGY, FN_GPM_SAMPLE, FN_GPM_METRICS, FN_HANDLE };

static double sampler_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Classifies an NVML answer: true if the value is good. A lost GPU stops
 * the GPU's reading; unsupported features are not errors. */
struct sampler_gpu_ctx {
    struct metrics_sampler *s;
    unsigned gpu;
    bool lost;
};

static bool sampler_ok(struct sampler_gpu_ctx *c, nvmlReturn_t rc, int fn)
{
    if (rc == NVML_SUCCESS)
        return true;
    if (rc == NVML_ERROR_GPU_IS_LOST)
        c->lost = true;
    else if (rc != NVML_ERROR_NOT_SUPPORTED && rc != NVML_ERROR_FUNCTION_NOT_FOUND)
        c->s->nvml_errors[fn]++;
    return false;
}

static void sampler_set(struct metrics_gpu *g, unsigned k, double v, bool ok)
{
    g->have[k] = ok;
    if (ok)
        g->value[k] = v;
}

/* The cheap reads, every tick. */
static void sampler_cheap(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g)
{
    struct nvml *n = c->s->nvml;
    const struct collectors *col = c->s->col;
    bool util_read = false, mem_read = false;
    nvmlUtilization_t util = {0, 0};
    nvmlMemory_v2_t mem = {.version = nvmlMemory_v2};
    for (unsigned k = 0; k < col->count && !c->lost; k++) {
        const struct field *f = col->items[k].field;
        unsigned u = 0;
        unsigned long long ull = 0;
        bool ok;
        switch (f->src) {
        case SRC_CLOCK_SM:
        case SRC_CLOCK_MEM:
            ok = n->DeviceGetClockInfo &&
                 sampler_ok(c, n->DeviceGetClockInfo(h, f->src == SRC_CLOCK_SM ? NVML_CLOCK_SM : NVML_CLOCK_MEM, &u), FN_CLOCK);
            sampler_set(g, k, u, ok);
            break;
        case SRC_TEMP:
            ok = n->DeviceGetTemperature &&
                 sampler_ok(c, n->DeviceGetTemperature(h, NVML_TEMPERATURE_GPU, &u), FN_TEMP);
            sampler_set(g, k, u, ok);
            break;
        case SRC_POWER:
            ok = n->DeviceGetPowerUsage && sampler_ok(c, n->DeviceGetPowerUsage(h, &u), FN_POWER);
            sampler_set(g, k, u * 0.001, ok);
            break;
        case SRC_UTIL_GPU:
        case SRC_UTIL_MEM:
            if (!util_read)
                util_read = n->DeviceGetUtilizationRates &&
                            sampler_ok(c, n->DeviceGetUtilizationRates(h, &util), FN_UTIL);
            sampler_set(g, k, f->src == SRC_UTIL_GPU ? util.gpu : util.memory, util_read);
            break;
        case SRC_ENC_UTIL:
        case SRC_DEC_UTIL: {
            unsigned period;
            __typeof__(n->DeviceGetEncoderUtilization) fnp =
                f->src == SRC_ENC_UTIL ? n->DeviceGetEncoderUtilization : n->DeviceGetDecoderUtilization;
            ok = fnp && sampler_ok(c, fnp(h, &u, &period), f->src == SRC_ENC_UTIL ? FN_ENC : FN_DEC);
            sampler_set(g, k, u, ok);
            break;
        }
        case SRC_FB_FREE:
        case SRC_FB_USED:
        case SRC_FB_RESERVED:
            if (!mem_read)
                mem_read = n->DeviceGetMemoryInfoV2 &&
                           sampler_ok(c, n->DeviceGetMemoryInfoV2(h, &mem), FN_MEM);
            /* MiB rounded up, as nvidia-smi shows them (on an H200, 615.06 MiB
             * reserved shows as 616: docs/real-gpu.md). */
            sampler_set(g, k,
                        (double)(((f->src == SRC_FB_FREE ? mem.free : f->src == SRC_FB_USED ? mem.used
                                                                                            : mem.reserved) +
                                  (1ULL << 20) - 1) >> 20),
                        mem_read);
            break;
        case SRC_ECC:
            ok = n->DeviceGetTotalEccErrors &&
                 sampler_ok(c, n->DeviceGetTotalEccErrors(h, (nvmlMemoryErrorType_t)(f->param / 2),
                                                          (nvmlEccCounterType_t)(f->param % 2), &ull),
                            FN_ECC);
            sampler_set(g, k, (double)ull, ok);
            break;
        case SRC_VGPU_LICENSE: {
            /* Bare metal and passthrough have nothing to license: 0, as DCGM shows. */
            int mode = c->s->virt_mode[c->gpu];
            sampler_set(g, k, 0, mode == NVML_GPU_VIRTUALIZATION_MODE_NONE ||
                                     mode == NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH);
            break;
        }
        case SRC_XID:
            sampler_set(g, k, 0, true); /* the loop's last XID is filled in at render time */
            break;
        default:
            break; /* the expensive classes, and labels */
        }
    }
}

static void sampler_replay(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g)
{
    struct nvml *n = c->s->nvml;
    for (unsigned k = 0; k < c->s->col->count; k++) {
        if (c->s->col->items[k].field->src != SRC_PCIE_REPLAY)
            continue;
        unsigned v = 0;
        bool ok = n->DeviceGetPcieReplayCounter && sampler_ok(c, n->DeviceGetPcieReplayCounter(h, &v), FN_REPLAY);
        sampler_set(g, k, v, ok);
    }
}

static void sampler_energy(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g)
{
    struct nvml *n = c->s->nvml;
    for (unsigned k = 0; k < c->s->col->count; k++) {
        if (c->s->col->items[k].field->src != SRC_ENERGY)
            continue;
        unsigned long long v = 0;
        bool ok = n->DeviceGetTotalEnergyConsumption &&
                  sampler_ok(c, n->DeviceGetTotalEnergyConsumption(h, &v), FN_ENERGY);
        sampler_set(g, k, (double)v, ok);
    }
}

static double sampler_field_value(const nvmlFieldValue_t *v)
{
    switch (v->valueType) {
    case NVML_VALUE_TYPE_DOUBLE: return v->value.dVal;
    case NVML_VALUE_TYPE_UNSIGNED_INT: return v->value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: return (double)v->value.ulVal;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return (double)v->value.sllVal;
    case NVML_VALUE_TYPE_SIGNED_INT: return v->value.siVal;
    default: return (double)v->value.ullVal;
    }
}

/* All field-value fields in one nvmlDeviceGetFieldValues call. */
static void sampler_fields(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g)
{
    struct metrics_sampler *s = c->s;
    nvmlFieldValue_t v[COLLECTORS_MAX + 2];
    unsigned owner[COLLECTORS_MAX + 2], nv = 0;
    int nvl = -1;
    for (unsigned k = 0; k < s->col->count; k++) {
        const struct field *f = s->col->items[k].field;
        if (f->src == SRC_FIELD) {
            memset(&v[nv], 0, sizeof v[nv]);
            v[nv].fieldId = f->param;
            owner[nv++] = k;
        } else if (f->src == SRC_NVLINK_RATE) {
            nvl = (int)k;
        }
    }
    unsigned first_nvl = nv;
    if (nvl >= 0) {
        memset(&v[nv], 0, 2 * sizeof *v);
        v[nv++].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX;
        v[nv++].fieldId = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
    }
    if (!nv || !s->nvml->DeviceGetFieldValues)
        return;
    if (!sampler_ok(c, s->nvml->DeviceGetFieldValues(h, (int)nv, v), FN_FIELDS)) {
        for (unsigned i = 0; i < first_nvl; i++)
            g->have[owner[i]] = false;
        return;
    }
    for (unsigned i = 0; i < first_nvl; i++)
        sampler_set(g, owner[i], sampler_field_value(&v[i]), sampler_ok(c, v[i].nvmlReturn, FN_FIELDS));
    if (nvl < 0)
        return;
    /* DCGM publishes a rate: KiB moved since the last read, per second, / 1000. */
    bool ok = v[first_nvl].nvmlReturn == NVML_SUCCESS && v[first_nvl + 1].nvmlReturn == NVML_SUCCESS;
    double kib = ok ? sampler_field_value(&v[first_nvl]) + sampler_field_value(&v[first_nvl + 1]) : 0;
    double t = sampler_now_us() / 1e6, dt = t - s->nvl_t[c->gpu];
    bool have_rate = ok && s->nvl_t[c->gpu] > 0 && dt > 0 && kib >= s->nvl_kib[c->gpu];
    sampler_set(g, (unsigned)nvl, have_rate ? (kib - s->nvl_kib[c->gpu]) / dt / 1000.0 : 0, have_rate);
    s->nvl_kib[c->gpu] = kib;
    s->nvl_t[c->gpu] = ok ? t : 0;
}

/* GPM: a new sample each visit, metrics between it and the previous one. */
static void sampler_gpm(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g)
{
    struct metrics_sampler *s = c->s;
    struct nvml *n = s->nvml;
    unsigned i = c->gpu;
    if (s->gpm_state[i] < 0)
        return;
    int cur = s->gpm_cur[i];
    nvmlReturn_t rc = n->GpmSampleGet(h, s->gpm[i][cur]);
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND) {
        s->gpm_state[i] = -1; /* before Hopper: these series stay absent, never zero */
        return;
    }
    if (!sampler_ok(c, rc, FN_GPM_SAMPLE))
        return;
    if (s->gpm_state[i] == 1) {
        nvmlGpmMetricsGet_t *mg = &s->gpm_get;
        memset(mg, 0, sizeof *mg);
        mg->version = NVML_GPM_METRICS_GET_VERSION;
        mg->sample1 = s->gpm[i][1 - cur];
        mg->sample2 = s->gpm[i][cur];
        unsigned owner[COLLECTORS_MAX];
        for (unsigned k = 0; k < s->col->count; k++) {
            if (s->col->items[k].field->src == SRC_GPM) {
                owner[mg->numMetrics] = k;
                mg->metrics[mg->numMetrics++].metricId = s->col->items[k].field->param;
            }
        }
        bool ok = sampler_ok(c, n->GpmMetricsGet(mg), FN_GPM_METRICS);
        for (unsigned m = 0; m < mg->numMetrics; m++) {
            const struct field *f = s->col->items[owner[m]].field;
            sampler_set(g, owner[m], mg->metrics[m].value * (f->scale ? f->scale : 1),
                        ok && mg->metrics[m].nvmlReturn == NVML_SUCCESS);
        }
    }
    s->gpm_state[i] = 1;
    s->gpm_cur[i] = 1 - cur;
}

typedef void (*sampler_class_fn)(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g);

static bool sampler_class_needed(const struct metrics_sampler *s, enum metrics_class cls)
{
    for (unsigned k = 0; k < s->col->count; k++) {
        enum field_source src = s->col->items[k].field->src;
        if ((cls == CLASS_REPLAY && src == SRC_PCIE_REPLAY) || (cls == CLASS_ENERGY && src == SRC_ENERGY) ||
            (cls == CLASS_GPM && src == SRC_GPM) ||
            (cls == CLASS_FIELDS && (src == SRC_FIELD || src == SRC_NVLINK_RATE)))
            return true;
    }
    return false;
}

/* Reads one expensive class for as many GPUs as its budget allows. */
static void sampler_class(struct metrics_sampler *s, enum metrics_class cls, sampler_class_fn fn,
                          bool *lost)
{
    unsigned count = s->inv->count;
    if (!count || !sampler_class_needed(s, cls) || (cls == CLASS_GPM && !s->nvml->GpmSampleGet))
        return;
    struct metrics_class_state *st = &s->classes[cls];
    double budget = s->interval_ms * 1000.0 * SAMPLER_BUDGET_SHARE;
    /* Unmeasured yet: read every GPU once, and learn the cost from that. */
    unsigned k = st->cost_us > 0 ? (unsigned)(budget / st->cost_us) : count;
    if (k < 1)
        k = 1;
    if (k > count)
        k = count;
    for (unsigned j = 0; j < k; j++) {
        unsigned i = (st->cursor + j) % count;
        if (lost[i] || !s->handles[i])
            continue;
        struct sampler_gpu_ctx c = {s, i, false};
        double t0 = sampler_now_us();
        fn(&c, s->handles[i], &s->gpus[i]);
        double spent = sampler_now_us() - t0;
        st->cost_us = st->cost_us > 0 ? 0.8 * st->cost_us + 0.2 * spent : spent;
        lost[i] |= c.lost;
    }
    st->cursor = (st->cursor + k) % count;
}

double metrics_sample(struct metrics_sampler *s)
{
    double t0 = sampler_now_us();
    unsigned count = s->inv->count;
    bool lost[count ? count : 1];
    for (unsigned i = 0; i < count; i++) {
        struct metrics_gpu *g = &s->gpus[i];
        lost[i] = false;
        if (!g->up || !s->handles[i]) {
            /* Down last time: ask for the handle again, as a reset may change it. */
            nvmlDevice_t h = NULL;
            struct sampler_gpu_ctx c = {s, i, false};
            if (!s->nvml->DeviceGetHandleByUUID ||
                !sampler_ok(&c, s->nvml->DeviceGetHandleByUUID(s->inv->gpus[i].uuid, &h), FN_HANDLE)) {
                g->up = false;
                lost[i] = true;
                continue;
            }
            s->handles[i] = h;
        }
        struct sampler_gpu_ctx c = {s, i, false};
        sampler_cheap(&c, s->handles[i], g);
        lost[i] = c.lost;
    }
    sampler_class(s, CLASS_REPLAY, sampler_replay, lost);
    sampler_class(s, CLASS_FIELDS, sampler_fields, lost);
    sampler_class(s, CLASS_ENERGY, sampler_energy, lost);
    sampler_class(s, CLASS_GPM, sampler_gpm, lost);
    for (unsigned i = 0; i < count; i++) {
        s->gpus[i].up = !lost[i];
        if (lost[i])
            memset(s->gpus[i].have, 0, sizeof s->gpus[i].have); /* nothing stale survives */
    }
    return (sampler_now_us() - t0) / 1e6;
}

/* The label fields of a GPU: read once, they do not change while running. */
static void sampler_labels(struct metrics_sampler *s, unsigned i)
{
    struct nvml *n = s->nvml;
    nvmlDevice_t h = s->handles[i];
    for (unsigned k = 0; k < s->col->count; k++) {
        const struct field *f = s->col->items[k].field;
        if (f->src != SRC_LABEL)
            continue;
        char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "";
        nvmlBrandType_t brand;
        switch (f->param) {
        case LABEL_DRIVER: snprintf(buf, sizeof buf, "%s", s->inv->driver_version); break;
        case LABEL_NVML_VERSION: snprintf(buf, sizeof buf, "%s", s->inv->nvml_version); break;
        case LABEL_SERIAL:
            if (!h || !n->DeviceGetSerial || n->DeviceGetSerial(h, buf, sizeof buf) != NVML_SUCCESS)
                buf[0] = '\0';
            break;
        case LABEL_VBIOS:
            if (!h || !n->DeviceGetVbiosVersion ||
                n->DeviceGetVbiosVersion(h, buf, sizeof buf) != NVML_SUCCESS)
                buf[0] = '\0';
            break;
        case LABEL_BRAND:
            if (h && n->DeviceGetBrand && n->DeviceGetBrand(h, &brand) == NVML_SUCCESS)
                snprintf(buf, sizeof buf, "%s", brand == NVML_BRAND_NVIDIA ? "NVIDIA" : "Unknown");
            break;
        }
        s->labels[i * s->col->count + k] = strdup(buf);
    }
}

int metrics_sampler_init(struct metrics_sampler *s, struct nvml *n,
                         const struct gpu_inventory *inv, const struct collectors *col,
                         unsigned interval_ms, struct err *e)
{
    memset(s, 0, sizeof *s);
    s->nvml = n;
    s->inv = inv;
    s->col = col;
    s->interval_ms = interval_ms;
    unsigned count = inv->count ? inv->count : 1;
    s->handles = calloc(count, sizeof *s->handles);
    s->gpus = calloc(count, sizeof *s->gpus);
    s->labels = calloc((size_t)count * col->count + 1, sizeof *s->labels);
    s->virt_mode = calloc(count, sizeof *s->virt_mode);
    s->nvl_kib = calloc(count, sizeof *s->nvl_kib);
    s->nvl_t = calloc(count, sizeof *s->nvl_t);
    s->gpm = calloc(count, sizeof *s->gpm);
    s->gpm_state = calloc(count, sizeof *s->gpm_state);
    s->gpm_cur = calloc(count, sizeof *s->gpm_cur);
    if (!s->handles || !s->gpus || !s->labels || !s->virt_mode || !s->nvl_kib || !s->nvl_t ||
        !s->gpm || !s->gpm_state || !s->gpm_cur) {
        metrics_sampler_free(s);
        return err_set(e, "out of memory");
    }
    for (unsigned i = 0; i < inv->count; i++) {
        s->handles[i] = inv->gpus[i].lost ? NULL : inv->gpus[i].handle;
        s->gpus[i].up = s->handles[i] != NULL;
        nvmlGpuVirtualizationMode_t mode;
        s->virt_mode[i] = s->handles[i] && n->DeviceGetVirtualizationMode &&
                                  n->DeviceGetVirtualizationMode(s->handles[i], &mode) == NVML_SUCCESS
                              ? (int)mode : -1;
        bool gpm = n->GpmSampleAlloc && n->GpmSampleFree && n->GpmSampleGet && n->GpmMetricsGet &&
                   n->GpmSampleAlloc(&s->gpm[i][0]) == NVML_SUCCESS &&
                   n->GpmSampleAlloc(&s->gpm[i][1]) == NVML_SUCCESS;
        s->gpm_state[i] = gpm ? 0 : -1;
        sampler_labels(s, i);
    }
    return 0;
}

void metrics_sampler_free(struct metrics_sampler *s)
{
    for (unsigned i = 0; s->gpm && i < s->inv->count; i++)
        for (int j = 0; j < 2; j++)
            if (s->gpm[i][j])
                s->nvml->GpmSampleFree(s->gpm[i][j]);
    for (size_t k = 0; s->labels && k < (size_t)s->inv->count * s->col->count; k++)
        free(s->labels[k]);
    free(s->handles);
    free(s->gpus);
    free(s->labels);
    free(s->virt_mode);
    free(s->nvl_kib);
    free(s->nvl_t);
    free(s->gpm);
    free(s->gpm_state);
    free(s->gpm_cur);
    memset(s, 0, sizeof *s);
}
