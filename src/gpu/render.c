#include "gpu/render.h"

#include <stdlib.h>
#include <stdio.h>

#include "util/jsonx.h"

#define MIB (1024ULL * 1024ULL)

const char *gpu_render_health(const struct gpu_info *g, const struct gpu_health *h)
{
    if (g->lost)
        return "Lost";
    if (h && h->reason != HEALTH_OK)
        return "Unhealthy";
    return g->problem[0] ? "Degraded" : "Healthy";
}

/* The wide table's extra columns: minor number, compute capability,
 * architecture, MIG mode. */
static void render_wide(const struct gpu_info *g, struct strbuf *out)
{
    static const char *const mig[] = {"Disabled", "Enabled"};
    char cc[16] = "-";
    if (g->cc_major >= 0)
        snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
    strbuf_printf(out, " %5u %4s %-12s %-8s", g->minor, cc, g->architecture ? g->architecture : "-",
                  g->mig_mode == 0 || g->mig_mode == 1 ? mig[g->mig_mode] : "N/A");
}

/* " (cause since T)" for an unhealthy record. */
static void render_why(const struct gpu_health *h, struct strbuf *out)
{
    char why[200];
    if (!h || h->reason == HEALTH_OK)
        return;
    gpu_health_describe(h, why, sizeof why);
    strbuf_printf(out, " (%s)", why);
}

void gpu_render_table(const struct gpu_inventory *inv, const struct gpu_device *devs, bool wide,
                      struct strbuf *out)
{
    strbuf_printf(out, "%-5s %-40s %-24s %10s %-16s %4s", "INDEX", "UUID", "PRODUCT", "MEMORY",
                  "BUS ID", "NUMA");
    if (wide)
        strbuf_printf(out, " %5s %4s %-12s %-8s", "MINOR", "CC", "ARCH", "MIG");
    strbuf_puts(out, " HEALTH\n");
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        char numa[16] = "-", mem[32] = "-";
        if (g->numa_node >= 0)
            snprintf(numa, sizeof numa, "%d", g->numa_node);
        if (g->memory_total)
            snprintf(mem, sizeof mem, "%llu MiB", g->memory_total / MIB);
        const struct gpu_health *h = devs ? &devs[i].health : NULL;
        strbuf_printf(out, "%-5u %-40s %-24s %10s %-16s %4s", g->index, g->uuid[0] ? g->uuid : "-",
                      g->name[0] ? g->name : "-", mem, g->pci_bus_id[0] ? g->pci_bus_id : "-", numa);
        if (wide)
            render_wide(g, out);
        strbuf_printf(out, " %s", gpu_render_health(g, h));
        render_why(h, out);
        strbuf_puts(out, "\n");
        /* MIG devices under their GPU: index i:k, as nvidia-smi -L and NVIDIA's index IDs. */
        for (unsigned k = 0; k < g->nmig; k++) {
            const struct gpu_mig *m = &g->mig[k];
            char idx[16], mmem[32];
            snprintf(idx, sizeof idx, "%u:%u", g->index, k);
            snprintf(mmem, sizeof mmem, "%llu MiB", m->attr.memorySizeMB);
            const struct gpu_health *mh = devs ? &devs[i].mig_health[k] : NULL;
            strbuf_printf(out, "%-5s %-40s MIG %-20s %10s GI %u CI %u", idx, m->uuid, m->profile,
                          mmem, m->gi, m->ci);
            if (mh)
                strbuf_printf(out, " %s", mh->reason == HEALTH_OK ? "Healthy" : "Unhealthy");
            render_why(mh, out);
            strbuf_puts(out, "\n");
        }
    }
    strbuf_printf(out, "%u GPU%s, driver %s, CUDA %d.%d\n", inv->count, inv->count == 1 ? "" : "s",
                  inv->driver_version[0] ? inv->driver_version : "unknown",
                  inv->cuda_version / 1000, inv->cuda_version % 1000 / 10);
}

static json_t *render_int_or_null(int v)
{
    return v < 0 ? json_null() : json_integer(v);
}

/* "health" and, when unhealthy, "health_reason" of a record into o. */
static void render_health_json(json_t *o, const char *state, const struct gpu_health *h)
{
    jsonx_set(o, "health", json_string(state));
    if (h && h->reason != HEALTH_OK) {
        char why[200];
        gpu_health_describe(h, why, sizeof why);
        jsonx_set(o, "health_reason", json_string(why));
    }
}

static json_t *render_gpu_json(const struct gpu_inventory *inv, const struct gpu_device *devs,
                               unsigned i)
{
    const struct gpu_info *g = &inv->gpus[i];
    const struct gpu_health *h = devs ? &devs[i].health : NULL;
    json_t *o = jsonx_ok(json_object());
    jsonx_set(o, "index", json_integer(g->index));
    jsonx_set(o, "minor", json_integer(g->minor));
    jsonx_set(o, "uuid", json_string(g->uuid));
    jsonx_set(o, "name", json_string(g->name));
    jsonx_set(o, "memory_total_mib", json_integer((json_int_t)(g->memory_total / MIB)));
    jsonx_set(o, "pci_bus_id", json_string(g->pci_bus_id));
    jsonx_set(o, "numa_node", render_int_or_null(g->numa_node));
    jsonx_set(o, "compute_capability",
               g->cc_major >= 0 ? json_sprintf("%d.%d", g->cc_major, g->cc_minor) : json_null());
    jsonx_set(o, "architecture", json_string(g->architecture));
    jsonx_set(o, "mig_mode", g->mig_mode < 0 ? json_null()
                              : json_string(g->mig_mode ? "enabled" : "disabled"));
    render_health_json(o, gpu_render_health(g, h), h);
    if (g->mig_mode == NVML_DEVICE_MIG_ENABLE) {
        json_t *migs = jsonx_ok(json_array());
        for (unsigned k = 0; k < g->nmig; k++) {
            const struct gpu_mig *m = &g->mig[k];
            json_t *x = jsonx_ok(json_object());
            jsonx_set(x, "uuid", json_string(m->uuid));
            jsonx_set(x, "profile", json_string(m->profile));
            jsonx_set(x, "gpu_instance_id", json_integer(m->gi));
            jsonx_set(x, "compute_instance_id", json_integer(m->ci));
            jsonx_set(x, "memory_mib", json_integer((json_int_t)m->attr.memorySizeMB));
            jsonx_set(x, "multiprocessors", json_integer(m->attr.multiprocessorCount));
            if (devs) {
                const struct gpu_health *mh = &devs[i].mig_health[k];
                render_health_json(x, mh->reason == HEALTH_OK ? "Healthy" : "Unhealthy", mh);
            }
            jsonx_append(migs, x);
        }
        jsonx_set(o, "mig_devices", migs);
    }
    if (g->problem[0])
        jsonx_set(o, "problem", json_string(g->problem));
    json_t *links = jsonx_ok(json_array());
    for (unsigned j = 0; j < inv->count; j++) {
        if (j == i)
            continue;
        const struct gpu_link *l = gpu_inventory_link(inv, i, j);
        json_t *link = jsonx_ok(json_object());
        jsonx_set(link, "peer", json_integer(j));
        jsonx_set(link, "nvlinks", json_integer(l->nvlinks));
        jsonx_set(link, "pcie", json_string(gpu_topology_level_name(l->pcie)));
        jsonx_append(links, link);
    }
    jsonx_set(o, "links", links);
    return o;
}

void gpu_render_json(const struct gpu_inventory *inv, const struct gpu_device *devs,
                     struct strbuf *out)
{
    json_t *o = jsonx_ok(json_object());
    jsonx_set(o, "driver_version", json_string(inv->driver_version));
    jsonx_set(o, "nvml_version", json_string(inv->nvml_version));
    jsonx_set(o, "cuda_driver_version",
               inv->cuda_version >= 0 ? json_sprintf("%d.%d", inv->cuda_version / 1000,
                                                     inv->cuda_version % 1000 / 10)
                                      : json_null());
    jsonx_set(o, "nvml_library", json_string(inv->library));
    jsonx_set(o, "count", json_integer(inv->count));
    json_t *gpus = jsonx_ok(json_array());
    for (unsigned i = 0; i < inv->count; i++)
        jsonx_append(gpus, render_gpu_json(inv, devs, i));
    jsonx_set(o, "gpus", gpus);
    jsonx_dump(o, JSON_COMPACT | JSON_PRESERVE_ORDER, out);
    json_decref(o);
    strbuf_puts(out, "\n");
}

void gpu_render_topology(const struct gpu_inventory *inv, struct strbuf *out)
{
    strbuf_puts(out, "      ");
    for (unsigned j = 0; j < inv->count; j++)
        strbuf_printf(out, "GPU%-4u", j);
    strbuf_puts(out, "NUMA\n");
    for (unsigned i = 0; i < inv->count; i++) {
        strbuf_printf(out, "GPU%-3u", i);
        for (unsigned j = 0; j < inv->count; j++) {
            const struct gpu_link *l = gpu_inventory_link(inv, i, j);
            char cell[16];
            if (i != j && l->nvlinks)
                snprintf(cell, sizeof cell, "NV%u", l->nvlinks);
            else
                snprintf(cell, sizeof cell, "%s", gpu_topology_level_name(l->pcie));
            strbuf_printf(out, "%-7s", cell);
        }
        if (inv->gpus[i].numa_node >= 0)
            strbuf_printf(out, "%d\n", inv->gpus[i].numa_node);
        else
            strbuf_puts(out, "N/A\n");
    }
}
