/* The sampler: reads each GPU's fields from NVML, each GPU on its own lane
 * (gpu/lane.h), the sampler thread handing out the samples and taking them
 * back. Cheap calls (clocks, temperature, power, utilization, memory:
 * microseconds) run for every GPU on every tick. Expensive ones (energy
 * ~4 ms, PCIe replays and field values ~140 us, GPM ~1.7 ms on an H200:
 * docs/benchmarks.md) are read for as many GPUs per tick as a small budget
 * allows at their measured cost, round robin, and keep their last value in
 * between. A GPU whose sample does not come back (a hung GPU) is left to
 * its lane: the others' series stay fresh, and its own are not served. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/health.h"
#include "metrics/internal.h"
#include "util/xmalloc.h"

#define SAMPLER_BUDGET_SHARE 0.002  /* of each interval, per expensive class */

#define METRICS_FN_NAME(e, name) name,
const char *const metrics_nvml_names[FN_COUNT] = {METRICS_NVML_CALLS(METRICS_FN_NAME)};
#undef METRICS_FN_NAME

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
    unsigned long long *errors;      /* the GPU's own counts (per enum metrics_nvml_call) */
};

static bool sampler_ok(struct sampler_gpu_ctx *c, nvmlReturn_t rc, int fn)
{
    if (rc == NVML_SUCCESS)
        return true;
    if (rc == NVML_ERROR_GPU_IS_LOST)
        c->lost = true;
    else if (rc != NVML_ERROR_NOT_SUPPORTED && rc != NVML_ERROR_FUNCTION_NOT_FOUND)
        c->errors[fn]++;
    return false;
}

static void sampler_set(struct metrics_gpu *g, unsigned k, double v, bool ok)
{
    g->have[k] = ok;
    if (ok)
        g->value[k] = v;
}

/* The cheap reads of one GPU at one tick. Calls that serve several fields
 * (utilization, memory) are made once and kept here for the others. */
struct sampler_cheap_ctx {
    struct sampler_gpu_ctx *c;
    nvmlDevice_t h;
    int util_read, mem_read;         /* 0 not yet, 1 read, -1 failed */
    nvmlUtilization_t util;
    nvmlMemory_v2_t mem;
};

/* A cheap field's reader: true with *v set, or false where there is no value. */
typedef bool (*sampler_reader)(struct sampler_cheap_ctx *x, const struct field *f, double *v);

static bool read_clock(struct sampler_cheap_ctx *x, const struct field *f, double *v)
{
    struct nvml *n = x->c->s->nvml;
    unsigned u;
    nvmlClockType_t t = f->src == SRC_CLOCK_SM ? NVML_CLOCK_SM : NVML_CLOCK_MEM;
    return n->DeviceGetClockInfo && sampler_ok(x->c, NVML_CALL(n, DeviceGetClockInfo, x->h, t, &u), FN_CLOCK) &&
           (*v = u, true);
}

static bool read_temp(struct sampler_cheap_ctx *x, const struct field *f, double *v)
{
    (void)f;
    struct nvml *n = x->c->s->nvml;
    unsigned u;
    return n->DeviceGetTemperature &&
           sampler_ok(x->c, NVML_CALL(n, DeviceGetTemperature, x->h, NVML_TEMPERATURE_GPU, &u), FN_TEMP) &&
           (*v = u, true);
}

static bool read_power(struct sampler_cheap_ctx *x, const struct field *f, double *v)
{
    (void)f;
    struct nvml *n = x->c->s->nvml;
    unsigned mw;
    return n->DeviceGetPowerUsage && sampler_ok(x->c, NVML_CALL(n, DeviceGetPowerUsage, x->h, &mw), FN_POWER) &&
           (*v = mw * 0.001, true);
}

static bool read_util(struct sampler_cheap_ctx *x, const struct field *f, double *v)
{
    struct nvml *n = x->c->s->nvml;
    if (!x->util_read)
        x->util_read = n->DeviceGetUtilizationRates &&
                               sampler_ok(x->c, NVML_CALL(n, DeviceGetUtilizationRates, x->h, &x->util), FN_UTIL)
                           ? 1 : -1;
    *v = f->src == SRC_UTIL_GPU ? x->util.gpu : x->util.memory;
    return x->util_read > 0;
}

static bool read_codec(struct sampler_cheap_ctx *x, const struct field *f, double *v)
{
    struct nvml *n = x->c->s->nvml;
    unsigned u, period;
    nvmlReturn_t rc = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (f->src == SRC_ENC_UTIL && n->DeviceGetEncoderUtilization)
        rc = NVML_CALL(n, DeviceGetEncoderUtilization, x->h, &u, &period);
    else if (f->src == SRC_DEC_UTIL && n->DeviceGetDecoderUtilization)
        rc = NVML_CALL(n, DeviceGetDecoderUtilization, x->h, &u, &period);
    return sampler_ok(x->c, rc, f->src == SRC_ENC_UTIL ? FN_ENC : FN_DEC) && (*v = u, true);
}

static bool read_memory(struct sampler_cheap_ctx *x, const struct field *f, double *v)
{
    struct nvml *n = x->c->s->nvml;
    if (!x->mem_read) {
        x->mem.version = nvmlMemory_v2;
        x->mem_read = n->DeviceGetMemoryInfoV2 &&
                              sampler_ok(x->c, NVML_CALL(n, DeviceGetMemoryInfoV2, x->h, &x->mem), FN_MEM)
                          ? 1 : -1;
    }
    unsigned long long bytes = f->src == SRC_FB_FREE ? x->mem.free
                               : f->src == SRC_FB_USED ? x->mem.used : x->mem.reserved;
    /* MiB rounded up, as nvidia-smi shows them (on an H200, 615.06 MiB
     * reserved shows as 616: docs/real-gpu.md). */
    *v = (double)((bytes + (1ULL << 20) - 1) >> 20);
    return x->mem_read > 0;
}

static bool read_ecc(struct sampler_cheap_ctx *x, const struct field *f, double *v)
{
    struct nvml *n = x->c->s->nvml;
    unsigned long long count;
    return n->DeviceGetTotalEccErrors &&
           sampler_ok(x->c, NVML_CALL(n, DeviceGetTotalEccErrors, x->h, (nvmlMemoryErrorType_t)(f->param / 2),
                                                       (nvmlEccCounterType_t)(f->param % 2), &count),
                      FN_ECC) &&
           (*v = (double)count, true);
}

static bool read_vgpu_license(struct sampler_cheap_ctx *x, const struct field *f, double *v)
{
    (void)f;
    /* Bare metal and passthrough have nothing to license: 0, as DCGM shows. */
    int mode = x->c->s->g[x->c->gpu].virt_mode;
    *v = 0;
    return mode == NVML_GPU_VIRTUALIZATION_MODE_NONE || mode == NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH;
}

static bool read_xid(struct sampler_cheap_ctx *x, const struct field *f, double *v)
{
    (void)x;
    (void)f;
    *v = 0; /* the agent's last XID is filled in at render time */
    return true;
}

/* One row per cheap source; the expensive classes and labels have none. */
static const sampler_reader sampler_cheap_readers[] = {
    [SRC_CLOCK_SM] = read_clock,    [SRC_CLOCK_MEM] = read_clock,
    [SRC_TEMP] = read_temp,         [SRC_POWER] = read_power,
    [SRC_UTIL_GPU] = read_util,     [SRC_UTIL_MEM] = read_util,
    [SRC_ENC_UTIL] = read_codec,    [SRC_DEC_UTIL] = read_codec,
    [SRC_FB_FREE] = read_memory,    [SRC_FB_USED] = read_memory,
    [SRC_FB_RESERVED] = read_memory, [SRC_ECC] = read_ecc,
    [SRC_VGPU_LICENSE] = read_vgpu_license, [SRC_XID] = read_xid,
    [SRC_LABEL] = NULL,
};

/* The cheap reads, every tick. */
static void sampler_cheap(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g)
{
    const struct collectors *col = c->s->col;
    struct sampler_cheap_ctx x = {.c = c, .h = h};
    for (unsigned k = 0; k < col->count && !c->lost; k++) {
        const struct field *f = col->items[k].field;
        sampler_reader read = sampler_cheap_readers[f->src];
        double v = 0;
        if (read) {
            bool ok = read(&x, f, &v);
            sampler_set(g, k, v, ok);
        }
    }
}

/* A counter read once per GPU, into every collector of its source. */
static void sampler_counter(struct sampler_gpu_ctx *c, struct metrics_gpu *g,
                            enum field_source src, double v, bool ok)
{
    for (unsigned k = 0; k < c->s->col->count; k++)
        if (c->s->col->items[k].field->src == src)
            sampler_set(g, k, v, ok);
}

static void sampler_replay(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g)
{
    struct nvml *n = c->s->nvml;
    unsigned v = 0;
    bool ok = n->DeviceGetPcieReplayCounter &&
              sampler_ok(c, NVML_CALL(n, DeviceGetPcieReplayCounter, h, &v), FN_REPLAY);
    sampler_counter(c, g, SRC_PCIE_REPLAY, v, ok);
}

static void sampler_energy(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g)
{
    struct nvml *n = c->s->nvml;
    unsigned long long v = 0;
    bool ok = n->DeviceGetTotalEnergyConsumption &&
              sampler_ok(c, NVML_CALL(n, DeviceGetTotalEnergyConsumption, h, &v), FN_ENERGY);
    sampler_counter(c, g, SRC_ENERGY, (double)v, ok);
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
    if (!sampler_ok(c, NVML_CALL(s->nvml, DeviceGetFieldValues, h, (int)nv, v), FN_FIELDS)) {
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
    struct sampler_gpu *sg = &s->g[c->gpu];
    double t = sampler_now_us() / 1e6, dt = t - sg->nvl_t;
    bool have_rate = ok && sg->nvl_t > 0 && dt > 0 && kib >= sg->nvl_kib;
    sampler_set(g, (unsigned)nvl, have_rate ? (kib - sg->nvl_kib) / dt / 1000.0 : 0, have_rate);
    sg->nvl_kib = kib;
    sg->nvl_t = ok ? t : 0;
}

/* GPM: a new sample each visit, metrics between it and the previous one. */
static void sampler_gpm(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g)
{
    struct metrics_sampler *s = c->s;
    struct nvml *n = s->nvml;
    struct sampler_gpu *sg = &s->g[c->gpu];
    if (sg->gpm_state < 0)
        return;
    int cur = sg->gpm_cur;
    nvmlReturn_t rc = NVML_CALL(n, GpmSampleGet, h, sg->gpm[cur]);
    if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_FUNCTION_NOT_FOUND) {
        sg->gpm_state = -1; /* before Hopper: these series stay absent, never zero */
        return;
    }
    if (!sampler_ok(c, rc, FN_GPM_SAMPLE))
        return;
    if (sg->gpm_state == 1) {
        nvmlGpmMetricsGet_t get, *mg = &get; /* 8 KiB, on the lane's stack */
        memset(mg, 0, sizeof *mg);
        mg->version = NVML_GPM_METRICS_GET_VERSION;
        mg->sample1 = sg->gpm[1 - cur];
        mg->sample2 = sg->gpm[cur];
        unsigned owner[COLLECTORS_MAX];
        for (unsigned k = 0; k < s->col->count; k++) {
            if (s->col->items[k].field->src == SRC_GPM) {
                owner[mg->numMetrics] = k;
                mg->metrics[mg->numMetrics++].metricId = s->col->items[k].field->param;
            }
        }
        bool ok = sampler_ok(c, NVML_CALL(n, GpmMetricsGet, mg), FN_GPM_METRICS);
        for (unsigned m = 0; m < mg->numMetrics; m++) {
            const struct field *f = s->col->items[owner[m]].field;
            sampler_set(g, owner[m], mg->metrics[m].value * (f->scale ? f->scale : 1),
                        ok && mg->metrics[m].nvmlReturn == NVML_SUCCESS);
        }
    }
    sg->gpm_state = 1;
    sg->gpm_cur = 1 - cur;
}

typedef void (*sampler_class_fn)(struct sampler_gpu_ctx *c, nvmlDevice_t h, struct metrics_gpu *g);

/* The expensive classes, one row each: which sources need them, how each is read. */
static const struct {
    enum field_source src, also;     /* also: a second source it serves (or the first again) */
    sampler_class_fn read;
} sampler_classes[CLASS_COUNT] = {
    [CLASS_REPLAY] = {SRC_PCIE_REPLAY, SRC_PCIE_REPLAY, sampler_replay},
    [CLASS_FIELDS] = {SRC_FIELD, SRC_NVLINK_RATE, sampler_fields},
    [CLASS_ENERGY] = {SRC_ENERGY, SRC_ENERGY, sampler_energy},
    [CLASS_GPM] = {SRC_GPM, SRC_GPM, sampler_gpm},
};

static bool sampler_class_needed(const struct metrics_sampler *s, enum metrics_class cls)
{
    if (cls == CLASS_GPM && !s->nvml->GpmSampleGet)
        return false;
    for (unsigned k = 0; k < s->col->count; k++) {
        enum field_source src = s->col->items[k].field->src;
        if (src == sampler_classes[cls].src || src == sampler_classes[cls].also)
            return true;
    }
    return false;
}

/* Each MIG device's framebuffer, through its own handle (dcgm-exporter's
 * per-GPU-instance FB series). */
static void sampler_mig(struct sampler_gpu_ctx *c, const struct metrics_device *d,
                        struct metrics_gpu *g)
{
    struct nvml *n = c->s->nvml;
    memset(g->mig_have, 0, sizeof g->mig_have);
    for (unsigned k = 0; !c->lost && k < d->nmig; k++) {
        nvmlMemory_t mem;
        if (!n->DeviceGetMemoryInfo ||
            NVML_CALL(n, DeviceGetMemoryInfo, d->mig[k].handle, &mem) != NVML_SUCCESS)
            continue;
        g->mig_used[k] = (double)(mem.used >> 20);
        g->mig_free[k] = (double)(mem.free >> 20);
        g->mig_have[k] = true;
    }
}

/* The label fields of a GPU: read once, they do not change while running. */
static void sampler_labels(struct metrics_sampler *s, unsigned i, nvmlDevice_t h)
{
    struct nvml *n = s->nvml;
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
            if (!n->DeviceGetSerial || NVML_CALL(n, DeviceGetSerial, h, buf, sizeof buf) != NVML_SUCCESS)
                buf[0] = '\0';
            break;
        case LABEL_VBIOS:
            if (!n->DeviceGetVbiosVersion ||
                NVML_CALL(n, DeviceGetVbiosVersion, h, buf, sizeof buf) != NVML_SUCCESS)
                buf[0] = '\0';
            break;
        case LABEL_BRAND:
            if (n->DeviceGetBrand && NVML_CALL(n, DeviceGetBrand, h, &brand) == NVML_SUCCESS)
                snprintf(buf, sizeof buf, "%s", brand == NVML_BRAND_NVIDIA ? "NVIDIA" : "Unknown");
            break;
        }
        s->labels[i * s->col->count + k] = xstrdup(buf);
    }
}

/* What a GPU's first sample reads once: its labels, its virtualization
 * mode, and GPM buffers where NVML has GPM. */
static void sampler_first(struct metrics_sampler *s, struct sampler_gpu *g, nvmlDevice_t h)
{
    struct nvml *n = s->nvml;
    sampler_labels(s, g->gpu, h);
    nvmlGpuVirtualizationMode_t mode;
    g->virt_mode = n->DeviceGetVirtualizationMode &&
                           NVML_CALL(n, DeviceGetVirtualizationMode, h, &mode) == NVML_SUCCESS
                       ? (int)mode : -1;
    bool gpm = n->GpmSampleAlloc && n->GpmSampleFree && n->GpmSampleGet && n->GpmMetricsGet &&
               NVML_CALL(n, GpmSampleAlloc, &g->gpm[0]) == NVML_SUCCESS &&
               NVML_CALL(n, GpmSampleAlloc, &g->gpm[1]) == NVML_SUCCESS;
    g->gpm_state = gpm ? 0 : -1;
    g->ready = true;
}

/* On the GPU's lane: one sample, into the GPU's own state only. */
static void sampler_run(struct gpu_lane_job *job)
{
    struct sampler_gpu *g = (struct sampler_gpu *)job;
    struct metrics_sampler *s = g->s;
    struct metrics_gpu *r = &s->gpus[g->gpu];
    nvmlDevice_t h = g->dev.handle;
    if (!g->ready)
        sampler_first(s, g, h);
    struct sampler_gpu_ctx c = {s, g->gpu, false, g->errors};
    sampler_cheap(&c, h, r);
    for (unsigned cls = 0; cls < CLASS_COUNT; cls++) {
        g->spent_us[cls] = 0;
        if (!(g->classes & (1u << cls)) || c.lost)
            continue;
        double t0 = sampler_now_us();
        sampler_classes[cls].read(&c, h, r);
        g->spent_us[cls] = sampler_now_us() - t0;
    }
    sampler_mig(&c, &g->dev, r);
    if (s->procs.on && !c.lost && s->nvml->DeviceGetComputeRunningProcesses)
        metrics_procs_read(&g->procs, s->nvml, h, g->errors);
    else
        g->procs.ninfo = -1;
    g->lost = c.lost;
    if (c.lost)
        memset(r->have, 0, sizeof r->have); /* nothing stale survives */
    r->sampled_at = (double)time(NULL);
    g->done = sampler_now_us() / 1e6;
}

/* Takes GPU i's sample back once its lane is done: its costs and error
 * counts join the sampler's. True if one came back. */
static bool sampler_take(struct metrics_sampler *s, unsigned i)
{
    struct sampler_gpu *g = &s->g[i];
    if (!g->posted || gpu_lane_job_busy(&g->job))
        return false;
    g->posted = false;
    s->shown[i] = s->gpus[i];
    if (g->ready && !g->labeled) {
        size_t n = s->col->count;
        memcpy(&s->shown_labels[i * n], &s->labels[i * n], n * sizeof *s->shown_labels);
        g->labeled = true;
    }
    for (unsigned cls = 0; cls < CLASS_COUNT; cls++) {
        struct metrics_class_state *st = &s->classes[cls];
        double spent = g->spent_us[cls];
        if (spent > 0)
            st->cost_us = st->cost_us > 0 ? 0.8 * st->cost_us + 0.2 * spent : spent;
    }
    for (unsigned k = 0; k < FN_COUNT; k++)
        s->nvml_errors[k] += g->errors[k];
    memset(g->errors, 0, sizeof g->errors);
    return true;
}

/* Which GPUs read each expensive class this round: as many as its budget
 * allows at its measured cost (all, while unmeasured), round robin over
 * the GPUs that get a sample. */
static void sampler_schedule(struct metrics_sampler *s, const bool *post)
{
    unsigned count = s->inv->count, want = 0;
    for (unsigned i = 0; i < count; i++) {
        s->g[i].classes = 0;
        want += post[i];
    }
    if (!want)
        return;
    double budget = s->interval_ms * 1000.0 * SAMPLER_BUDGET_SHARE;
    for (unsigned cls = 0; cls < CLASS_COUNT; cls++) {
        struct metrics_class_state *st = &s->classes[cls];
        if (!sampler_class_needed(s, (enum metrics_class)cls))
            continue;
        unsigned k = st->cost_us > 0 ? (unsigned)(budget / st->cost_us) : count;
        k = k < 1 ? 1 : k > want ? want : k;
        unsigned i = st->cursor;
        for (unsigned given = 0, seen = 0; given < k && seen < count; seen++, i = (i + 1) % count) {
            if (post[i]) {
                s->g[i].classes |= 1u << cls;
                given++;
            }
        }
        st->cursor = i;
    }
}

double metrics_sample(struct metrics_sampler *s, const struct metrics_device *devs,
                      uint64_t deadline)
{
    uint64_t t0 = uv_hrtime();
    unsigned count = s->inv->count;
    bool fresh[count ? count : 1], post[count ? count : 1];
    for (unsigned i = 0; i < count; i++) {
        fresh[i] = sampler_take(s, i); /* came back late, after the last round */
        /* The agent's handle: after a reset it finds the new one, not us. */
        post[i] = !s->g[i].posted && devs[i].handle;
    }
    sampler_schedule(s, post);
    for (unsigned i = 0; i < count; i++) {
        if (!post[i])
            continue;
        s->g[i].dev = devs[i];
        s->g[i].posted = gpu_lanes_post(s->lanes, i, &s->g[i].job);
    }
    for (unsigned i = 0; i < count; i++) {
        if (post[i] && s->g[i].posted)
            gpu_lanes_wait(s->lanes, i, &s->g[i].job, deadline);
        fresh[i] |= sampler_take(s, i);
    }
    metrics_procs_sample(s, fresh);
    /* A GPU's series are served while its last sample is at most two
     * intervals old, and it is neither lost nor hung. */
    double now = sampler_now_us() / 1e6, stale = 2.0 * s->interval_ms / 1000.0;
    for (unsigned i = 0; i < count; i++) {
        const struct sampler_gpu *g = &s->g[i];
        s->shown[i].up = !g->posted && g->done > 0 && now - g->done <= stale && !g->lost &&
                        devs[i].handle && devs[i].health != HEALTH_HUNG;
    }
    return (double)(uv_hrtime() - t0) / 1e9;
}

void metrics_sampler_init(struct metrics_sampler *s, struct nvml *n, struct gpu_lanes *lanes,
                          const struct gpu_inventory *inv, const struct collectors *col,
                          unsigned interval_ms)
{
    memset(s, 0, sizeof *s);
    s->nvml = n;
    s->lanes = lanes;
    s->inv = inv;
    s->col = col;
    s->interval_ms = interval_ms;
    s->g = xcalloc(inv->count + 1, sizeof *s->g);
    s->gpus = xcalloc(inv->count + 1, sizeof *s->gpus);
    s->labels = xcalloc((size_t)inv->count * col->count + 1, sizeof *s->labels);
    s->identity = xcalloc(2 * (size_t)inv->count + 1, sizeof *s->identity);
    s->shown = xcalloc(inv->count + 1, sizeof *s->shown);
    s->shown_labels = xcalloc((size_t)inv->count * col->count + 1, sizeof *s->shown_labels);
    for (unsigned i = 0; i < inv->count; i++) {
        struct sampler_gpu *g = &s->g[i];
        g->job.run = sampler_run;
        g->s = s;
        g->gpu = i;
        g->virt_mode = -1;
        g->gpm_state = -1;
    }
}

bool metrics_sampler_free(struct metrics_sampler *s)
{
    for (unsigned i = 0; s->g && i < s->inv->count; i++)
        if (gpu_lane_job_busy(&s->g[i].job))
            return false;
    for (unsigned i = 0; s->g && i < s->inv->count; i++) {
        for (int j = 0; j < 2; j++)
            if (s->g[i].gpm[j])
                s->nvml->GpmSampleFree(s->g[i].gpm[j]);
        metrics_procs_gpu_free(&s->g[i].procs);
    }
    for (size_t k = 0; s->labels && k < (size_t)s->inv->count * s->col->count; k++)
        free(s->labels[k]);
    metrics_procs_free(&s->procs);
    for (size_t k = 0; s->identity && k < 2 * (size_t)s->inv->count; k++)
        strbuf_free(&s->identity[k]);
    free(s->identity);
    free(s->g);
    free(s->gpus);
    free(s->labels);
    free(s->shown);
    free(s->shown_labels);
    memset(s, 0, sizeof *s);
    return true;
}
