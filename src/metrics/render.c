/* The Prometheus text format (0.0.4), with dcgm-exporter's names and label
 * order: gpu, UUID, pci_bus_id, device, modelName, Hostname, then label
 * fields sorted by name, then container, err_code, err_msg, namespace, pod. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/health.h"
#include "metrics/internal.h"

void metrics_escape(struct strbuf *out, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            strbuf_printf(out, "\\%c", *s);
        else if (*s == '\n')
            strbuf_puts(out, "\\n");
        else
            strbuf_append(out, s, 1);
    }
}

static void render_label(struct strbuf *out, const char *name, const char *value, bool first)
{
    strbuf_printf(out, "%s%s=\"", first ? "" : ",", name);
    metrics_escape(out, value);
    strbuf_puts(out, "\"");
}

/* Sorts label fields by name, as dcgm-exporter prints them. */
static int render_cmp(const void *a, const void *b, void *ctx)
{
    const struct collectors *c = ctx;
    return strcmp(c->items[*(const unsigned *)a].field->name, c->items[*(const unsigned *)b].field->name);
}

/* The identity labels of GPU i (and of its GPU instance, where mig is not
 * NULL), label fields included, without the closing brace. */
static void render_identity_of(struct strbuf *out, const struct metrics_frame *f, unsigned i,
                               const struct gpu_mig *mig, const unsigned *labels, unsigned nlabels)
{
    const struct gpu_info *g = &f->inv->gpus[i];
    char idx[16], dev[24];
    snprintf(idx, sizeof idx, "%u", g->index);
    snprintf(dev, sizeof dev, "nvidia%u", g->index);
    strbuf_puts(out, "{");
    render_label(out, "gpu", idx, true);
    render_label(out, "UUID", g->uuid, false);
    render_label(out, "pci_bus_id", g->pci_bus_id, false);
    render_label(out, "device", dev, false);
    render_label(out, "modelName", g->name, false);
    if (mig) {
        char gi[16];
        snprintf(gi, sizeof gi, "%u", mig->gi);
        render_label(out, "GPU_I_PROFILE", mig->profile, false);
        render_label(out, "GPU_I_ID", gi, false);
    }
    render_label(out, "Hostname", f->hostname, false);
    for (unsigned k = 0; k < nlabels; k++) {
        const char *v = f->label_values[i * f->collectors->count + labels[k]];
        if (v)
            render_label(out, f->collectors->items[labels[k]].field->name, v, false);
    }
}

static void render_value(struct strbuf *out, double v, bool is_double)
{
    if (is_double)
        strbuf_printf(out, " %.6f\n", v);
    else
        strbuf_printf(out, " %.0f\n", v);
}

/* The GPU's identity labels: the same text on every series of every
 * sample, so rendered once (once its label fields are read) and copied. */
static void render_identity(struct strbuf *out, const struct metrics_frame *f, unsigned i,
                            const unsigned *labels, unsigned nlabels)
{
    struct strbuf *cache = f->identity ? &f->identity[2 * i + (nlabels ? 0 : 1)] : NULL;
    if (cache && cache->len) {
        strbuf_append(out, cache->data, cache->len);
        return;
    }
    size_t at = out->len;
    render_identity_of(out, f, i, NULL, labels, nlabels);
    bool read = !nlabels || f->label_values[i * f->collectors->count + labels[0]];
    if (cache && read)
        strbuf_append(cache, out->data + at, out->len - at);
}

/* Per GPU instance rows of the framebuffer families, after the GPU's. */
static void render_mig(struct strbuf *out, const struct metrics_frame *f, const struct field *field,
                       unsigned i, const unsigned *labels, unsigned nlabels)
{
    if (field->src != SRC_FB_USED && field->src != SRC_FB_FREE)
        return;
    const struct metrics_device *d = &f->state->dev[i];
    const struct metrics_gpu *g = &f->gpus[i];
    for (unsigned k = 0; k < d->nmig; k++) {
        if (!g->mig_have[k])
            continue;
        size_t at = (size_t)i * GPU_MIG_MAX + k;
        strbuf_puts(out, field->name);
        render_identity_of(out, f, i, &d->mig[k], labels, nlabels);
        if (f->state->mig_owned[at]) {
            const struct metrics_owner *o = &f->state->mig_owner[at];
            render_label(out, "container", o->container, false);
            render_label(out, "namespace", o->ns, false);
            render_label(out, "pod", o->pod, false);
        }
        strbuf_puts(out, "}");
        render_value(out, field->src == SRC_FB_USED ? g->mig_used[k] : g->mig_free[k], false);
    }
}

static void render_pod(struct strbuf *out, const struct metrics_frame *f, unsigned i,
                       const char *xid_code, const char *xid_msg)
{
    const struct metrics_state *s = f->state;
    bool owned = s->owned[i];
    if (owned)
        render_label(out, "container", s->owner[i].container, false);
    if (xid_code) {
        render_label(out, "err_code", xid_code, false);
        render_label(out, "err_msg", xid_msg, false);
    }
    if (owned) {
        render_label(out, "namespace", s->owner[i].ns, false);
        render_label(out, "pod", s->owner[i].pod, false);
    }
}

static void render_fields(struct strbuf *out, const struct metrics_frame *f, const unsigned *labels,
                          unsigned nlabels)
{
    const struct collectors *c = f->collectors;
    for (unsigned k = 0; k < c->count; k++) {
        const struct collector *col = &c->items[k];
        if (col->field->src == SRC_LABEL)
            continue;
        strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", col->field->name, col->help,
                      col->field->name, col->type);
        bool known = col->field->src == SRC_XID; /* the agent's, whether the GPU answers or not */
        for (unsigned i = 0; i < f->inv->count; i++) {
            const struct metrics_gpu *g = &f->gpus[i];
            if (!known && (!g->up || !g->have[k]))
                continue; /* no stale value: a GPU that did not answer has no series */
            strbuf_puts(out, col->field->name);
            render_identity(out, f, i, labels, nlabels);
            if (col->field->src == SRC_XID) {
                char code[16];
                unsigned xid = (unsigned)g->value[k];
                snprintf(code, sizeof code, "%u", xid);
                render_pod(out, f, i, code, metrics_field_xid_message(xid));
            } else {
                render_pod(out, f, i, NULL, NULL);
            }
            strbuf_puts(out, "}");
            render_value(out, g->value[k], col->field->is_double);
            render_mig(out, f, col->field, i, labels, nlabels);
        }
    }
}

/* gpulet's own families, one row each: a name, its type and help, and
 * the function that writes its samples. */
typedef void (*render_rows_fn)(struct strbuf *out, const struct metrics_frame *f);

/* Per GPU: up, health and the rest come from the agent's one record of the
 * GPU (metrics' copy), so they cannot disagree. */
static void rows_up(struct strbuf *out, const struct metrics_frame *f)
{
    for (unsigned i = 0; i < f->inv->count; i++) {
        enum health_reason r = f->state->dev[i].health;
        strbuf_puts(out, "gpulet_gpu_up");
        render_identity(out, f, i, NULL, 0);
        strbuf_printf(out, "} %d\n", r == HEALTH_LOST || r == HEALTH_HUNG ? 0 : 1);
    }
}

/* The GPU's row, then one per MIG device (GPU_I_ID, GPU_I_PROFILE), as
 * the framebuffer families have them: a fault in one GPU instance is that
 * instance's. */
static void rows_health(struct strbuf *out, const struct metrics_frame *f)
{
    for (unsigned i = 0; i < f->inv->count; i++) {
        const struct metrics_device *d = &f->state->dev[i];
        for (int k = -1; k < (int)d->nmig; k++) {
            enum health_reason r = k < 0 ? d->health : d->mig_health[k];
            strbuf_puts(out, "gpulet_gpu_health");
            if (k < 0)
                render_identity(out, f, i, NULL, 0);
            else
                render_identity_of(out, f, i, &d->mig[k], NULL, 0);
            render_label(out, "reason", r == HEALTH_OK ? "" : gpu_health_reason_name(r), false);
            strbuf_printf(out, "} %d\n", r == HEALTH_OK ? 1 : 0);
        }
    }
}

static void rows_last_sample(struct strbuf *out, const struct metrics_frame *f)
{
    for (unsigned i = 0; i < f->inv->count; i++) {
        strbuf_puts(out, "gpulet_gpu_last_sample_timestamp_seconds");
        render_identity(out, f, i, NULL, 0);
        strbuf_printf(out, "} %.3f\n", f->gpus[i].sampled_at);
    }
}

static void rows_resource(struct strbuf *out, const struct metrics_frame *f)
{
    for (unsigned i = 0; i < f->inv->count; i++) {
        const struct metrics_device *d = &f->state->dev[i];
        for (int k = -1; k < (int)d->nmig; k++) {
            const char *res = k < 0 ? d->resource : d->mig_resource[k];
            if (!res[0])
                continue;
            strbuf_puts(out, "gpulet_gpu_resource");
            render_identity_of(out, f, i, k < 0 ? NULL : &d->mig[k], NULL, 0);
            render_label(out, "resource", res, false);
            strbuf_puts(out, "} 1\n");
        }
    }
}

static void rows_xids(struct strbuf *out, const struct metrics_frame *f)
{
    for (unsigned i = 0; i < f->inv->count; i++) {
        const struct gpu_xid_count *x = f->state->dev[i].xids;
        for (unsigned k = 0; k < GPU_DEVICE_MAX_XIDS && x[k].count; k++) {
            char xid[16];
            snprintf(xid, sizeof xid, "%u", x[k].xid);
            strbuf_puts(out, "gpulet_xid_errors_total");
            render_identity(out, f, i, NULL, 0);
            render_label(out, "xid", xid, false);
            strbuf_printf(out, "} %llu\n", x[k].count);
        }
    }
}

static void rows_allocation(struct strbuf *out, const struct metrics_frame *f)
{
    const struct metrics_state *s = f->state;
    for (unsigned k = 0; k < s->nshares; k++) {
        strbuf_puts(out, "gpulet_gpu_allocation{");
        render_label(out, "UUID", f->inv->gpus[s->shares[k].gpu].uuid, true);
        render_label(out, "pod", s->shares[k].owner.pod, false);
        render_label(out, "namespace", s->shares[k].owner.ns, false);
        render_label(out, "container", s->shares[k].owner.container, false);
        strbuf_puts(out, "} 1\n");
    }
}

static void rows_sample_duration(struct strbuf *out, const struct metrics_frame *f)
{
    strbuf_printf(out, "gpulet_sample_duration_seconds %.6f\n", f->sample_seconds);
}

static void rows_nvml_errors(struct strbuf *out, const struct metrics_frame *f)
{
    for (unsigned k = 0; k < FN_COUNT; k++)
        if (f->nvml_errors[k])
            strbuf_printf(out, "gpulet_nvml_errors_total{function=\"%s\"} %llu\n",
                          metrics_nvml_names[k], f->nvml_errors[k]);
}

static void rows_scrapes(struct strbuf *out, const struct metrics_frame *f)
{
    strbuf_printf(out, "gpulet_scrapes_total %llu\n", f->state->scrapes);
}

static void rows_podres_errors(struct strbuf *out, const struct metrics_frame *f)
{
    strbuf_printf(out, "gpulet_podresources_errors_total %llu\n", f->state->podres_errors);
}

static void rows_podres_ok(struct strbuf *out, const struct metrics_frame *f)
{
    strbuf_printf(out, "gpulet_podresources_last_success_timestamp_seconds %.3f\n",
                  f->state->podres_last_ok);
}

static void rows_reload_ok(struct strbuf *out, const struct metrics_frame *f)
{
    strbuf_printf(out, "gpulet_config_last_reload_successful %d\n", f->state->config.last_ok ? 1 : 0);
}

static void rows_reload_time(struct strbuf *out, const struct metrics_frame *f)
{
    strbuf_printf(out, "gpulet_config_last_reload_success_timestamp_seconds %.3f\n",
                  f->state->config.last_ok_time);
}

static void rows_reload_failures(struct strbuf *out, const struct metrics_frame *f)
{
    strbuf_printf(out, "gpulet_config_reload_failures_total %llu\n", f->state->config.failures);
}

static void rows_config(struct strbuf *out, const struct metrics_frame *f)
{
    strbuf_puts(out, "gpulet_config_info{");
    render_label(out, "config", f->state->config.name, true);
    strbuf_puts(out, "} 1\n");
}

static void rows_api_requests(struct strbuf *out, const struct metrics_frame *f)
{
    for (unsigned i = 0; i < f->state->napi; i++) {
        const struct kube_request_row *r = &f->state->api[i];
        char code[16];
        snprintf(code, sizeof code, "%ld", r->code);
        strbuf_puts(out, "gpulet_api_requests_total{");
        render_label(out, "method", r->method, true);
        render_label(out, "resource", r->resource, false);
        render_label(out, "code", r->code ? code : "<error>", false);
        strbuf_printf(out, "} %llu\n", r->count);
    }
}

/* One histogram per method and resource: its rows of every code summed. */
static void rows_api_latency(struct strbuf *out, const struct metrics_frame *f)
{
    const struct kube_request_row *rows = f->state->api;
    for (unsigned i = 0; i < f->state->napi; i++) {
        bool seen = false;
        for (unsigned j = 0; j < i && !seen; j++)
            seen = !strcmp(rows[j].method, rows[i].method) && !strcmp(rows[j].resource, rows[i].resource);
        if (seen)
            continue;
        unsigned long long bucket[KUBE_LATENCY_BUCKETS] = {0}, timed = 0;
        double sum = 0;
        for (unsigned j = i; j < f->state->napi; j++) {
            if (strcmp(rows[j].method, rows[i].method) || strcmp(rows[j].resource, rows[i].resource))
                continue;
            for (unsigned b = 0; b < KUBE_LATENCY_BUCKETS; b++)
                bucket[b] += rows[j].bucket[b];
            timed += rows[j].timed;
            sum += rows[j].seconds;
        }
        if (!timed)
            continue; /* streams only */
        unsigned long long upto = 0;
        for (unsigned b = 0; b <= KUBE_LATENCY_BUCKETS; b++) {
            char le[32];
            if (b < KUBE_LATENCY_BUCKETS) {
                upto += bucket[b];
                snprintf(le, sizeof le, "%g", kube_latency_bounds[b]);
            } else {
                upto = timed;
                snprintf(le, sizeof le, "+Inf");
            }
            strbuf_puts(out, "gpulet_api_request_duration_seconds_bucket{");
            render_label(out, "method", rows[i].method, true);
            render_label(out, "resource", rows[i].resource, false);
            render_label(out, "le", le, false);
            strbuf_printf(out, "} %llu\n", upto);
        }
        const char *suffix[] = {"sum", "count"};
        for (unsigned k = 0; k < 2; k++) {
            strbuf_printf(out, "gpulet_api_request_duration_seconds_%s{", suffix[k]);
            render_label(out, "method", rows[i].method, true);
            render_label(out, "resource", rows[i].resource, false);
            if (k)
                strbuf_printf(out, "} %llu\n", timed);
            else
                strbuf_printf(out, "} %.6f\n", sum);
        }
    }
}

static void rows_loop_lag(struct strbuf *out, const struct metrics_frame *f)
{
    strbuf_printf(out, "gpulet_loop_lag_seconds %.6f\n", f->state->loop_lag);
}

static const struct {
    const char *name, *type, *help;
    render_rows_fn rows;
} render_gpulet_families[] = {
    {"gpulet_gpu_up", "gauge", "0 while NVML cannot reach the GPU (lost, or hung), else 1.",
     rows_up},
    {"gpulet_gpu_health", "gauge",
     "1 if the GPU (or, with GPU_I_ID, its MIG device) is healthy (advertised to the kubelet); "
     "reason says why not.", rows_health},
    {"gpulet_gpu_last_sample_timestamp_seconds", "gauge",
     "When the GPU's metrics were last read (0: never); its DCGM series are served only while "
     "this is at most two intervals old.", rows_last_sample},
    {"gpulet_gpu_resource", "gauge",
     "The extended resource the GPU, or its MIG device, is advertised under (1).", rows_resource},
    {"gpulet_xid_errors_total", "counter", "XID errors seen on the GPU since gpulet started.",
     rows_xids},
    {"gpulet_gpu_allocation", "gauge", "A pod's container holding a share of a shared GPU.",
     rows_allocation},
    {"gpulet_sample_duration_seconds", "gauge",
     "How long the last round of NVML samples (all GPUs, in parallel) took.", rows_sample_duration},
    {"gpulet_nvml_errors_total", "counter",
     "NVML calls that failed while sampling, by function (not counting unsupported features).",
     rows_nvml_errors},
    {"gpulet_scrapes_total", "counter", "Scrapes of /metrics served (as of this sample).",
     rows_scrapes},
    {"gpulet_podresources_errors_total", "counter", "Failed PodResources List calls.",
     rows_podres_errors},
    {"gpulet_podresources_last_success_timestamp_seconds", "gauge",
     "When the pod labels were last refreshed.", rows_podres_ok},
    {"gpulet_config_last_reload_successful", "gauge",
     "Whether the last configuration change (SIGHUP, the node's config label, its ConfigMap) was "
     "applied.", rows_reload_ok},
    {"gpulet_config_last_reload_success_timestamp_seconds", "gauge",
     "When the running configuration was applied.", rows_reload_time},
    {"gpulet_config_reload_failures_total", "counter",
     "Configuration changes refused (the running configuration was kept).", rows_reload_failures},
    {"gpulet_config_info", "gauge", "The named config in use (empty: none).", rows_config},
    {"gpulet_loop_lag_seconds", "gauge",
     "How late the agent's event loop ran a timer due every 250 ms, the worst of the last 10 s: "
     "how long anything it serves (gRPC, HTTP, the API server) waited for it.", rows_loop_lag},
    {"gpulet_api_requests_total", "counter",
     "Requests gpulet made to the API server, by HTTP method, resource and code (<error>: no "
     "answer), as client-go's rest_client_requests_total counts them.", rows_api_requests},
    {"gpulet_api_request_duration_seconds", "histogram",
     "How long the API server took to answer gpulet's requests (watches' streams not timed).",
     rows_api_latency},
};

static void render_gpulet(struct strbuf *out, const struct metrics_frame *f)
{
    for (size_t k = 0; k < sizeof render_gpulet_families / sizeof *render_gpulet_families; k++) {
        strbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", render_gpulet_families[k].name,
                      render_gpulet_families[k].help, render_gpulet_families[k].name,
                      render_gpulet_families[k].type);
        render_gpulet_families[k].rows(out, f);
    }
}

/* Per-container usage of each GPU: one row per family (adding one is a row). */
static double usage_memory(const struct metrics_usage *u) { return (double)u->memory; }
static double usage_sm(const struct metrics_usage *u) { return u->sm >= 100 ? 1.0 : u->sm / 100.0; }
static double usage_processes(const struct metrics_usage *u) { return u->processes; }

static const struct {
    const char *name, *help;
    double (*value)(const struct metrics_usage *u);
    bool is_double;
} render_usage_families[] = {
    {"gpulet_container_gpu_memory_used_bytes",
     "GPU memory used by the container's processes on this GPU, in bytes.", usage_memory, false},
    {"gpulet_container_gpu_utilization_ratio",
     "SM utilization of the container's processes on this GPU since the last sample (0-1).",
     usage_sm, true},
    {"gpulet_container_gpu_processes", "The container's processes on this GPU.", usage_processes,
     false},
};

/* Processes outside any pod gpulet can name carry no pod labels. */
static void render_containers(struct strbuf *out, const struct metrics_frame *f)
{
    const struct metrics_procs *p = f->procs;
    if (!p || !p->on)
        return;
    for (unsigned k = 0; k < sizeof render_usage_families / sizeof *render_usage_families; k++) {
        const char *name = render_usage_families[k].name;
        strbuf_printf(out, "# HELP %s %s\n# TYPE %s gauge\n", name, render_usage_families[k].help,
                      name);
        for (unsigned j = 0; j < p->nusage; j++) {
            const struct metrics_usage *u = &p->usage[j];
            strbuf_puts(out, name);
            render_identity(out, f, u->gpu, NULL, 0);
            if (u->owner.pod[0]) {
                render_label(out, "container", u->owner.container, false);
                render_label(out, "namespace", u->owner.ns, false);
                render_label(out, "pod", u->owner.pod, false);
            }
            strbuf_puts(out, "}");
            render_value(out, render_usage_families[k].value(u), render_usage_families[k].is_double);
        }
    }
    strbuf_printf(out, "# HELP gpulet_process_sample_duration_seconds How long the last read of "
                       "the GPUs' processes took.\n"
                       "# TYPE gpulet_process_sample_duration_seconds gauge\n"
                       "gpulet_process_sample_duration_seconds %.6f\n", p->seconds);
}

void metrics_render(struct strbuf *out, const struct metrics_frame *f)
{
    const struct collectors *c = f->collectors;
    unsigned labels[COLLECTORS_MAX], nlabels = 0;
    for (unsigned k = 0; k < c->count; k++)
        if (c->items[k].field->src == SRC_LABEL)
            labels[nlabels++] = k;
    qsort_r(labels, nlabels, sizeof *labels, render_cmp, (void *)c);
    render_fields(out, f, labels, nlabels);
    render_gpulet(out, f);
    render_containers(out, f);
}
