#include "gpu/render.h"

#include <stdio.h>

#include "util/json.h"

#define MIB (1024ULL * 1024ULL)

const char *gpu_render_health(const struct gpu_info *g, const struct gpu_health *h)
{
    if (g->lost)
        return "Lost";
    if (h && h->reason != HEALTH_OK)
        return "Unhealthy";
    return g->problem[0] ? "Degraded" : "Healthy";
}

void gpu_render_table(const struct gpu_inventory *inv, const struct gpu_health *health,
                      struct strbuf *out)
{
    strbuf_printf(out, "%-5s %-40s %-24s %10s %-16s %4s %s\n", "INDEX", "UUID", "PRODUCT",
                  "MEMORY", "BUS ID", "NUMA", "HEALTH");
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        char numa[16] = "-", mem[32] = "-";
        if (g->numa_node >= 0)
            snprintf(numa, sizeof numa, "%d", g->numa_node);
        if (g->memory_total)
            snprintf(mem, sizeof mem, "%llu MiB", g->memory_total / MIB);
        const struct gpu_health *h = health ? &health[i] : NULL;
        strbuf_printf(out, "%-5u %-40s %-24s %10s %-16s %4s %s", g->index,
                      g->uuid[0] ? g->uuid : "-", g->name[0] ? g->name : "-", mem,
                      g->pci_bus_id[0] ? g->pci_bus_id : "-", numa, gpu_render_health(g, h));
        if (h && h->reason != HEALTH_OK)
            strbuf_printf(out, " (%s)", h->detail);
        strbuf_puts(out, "\n");
    }
    strbuf_printf(out, "%u GPU%s, driver %s, CUDA %d.%d\n", inv->count, inv->count == 1 ? "" : "s",
                  inv->driver_version[0] ? inv->driver_version : "unknown",
                  inv->cuda_version / 1000, inv->cuda_version % 1000 / 10);
}

static void render_int_or_null(struct strbuf *out, const char *key, int v)
{
    if (v < 0)
        strbuf_printf(out, ",\"%s\":null", key);
    else
        strbuf_printf(out, ",\"%s\":%d", key, v);
}

static void render_gpu_json(const struct gpu_inventory *inv, const struct gpu_health *health,
                            unsigned i, struct strbuf *out)
{
    const struct gpu_info *g = &inv->gpus[i];
    const struct gpu_health *h = health ? &health[i] : NULL;
    strbuf_printf(out, "{\"index\":%u,\"minor\":%u,\"uuid\":", g->index, g->minor);
    json_string(out, g->uuid);
    strbuf_puts(out, ",\"name\":");
    json_string(out, g->name);
    strbuf_printf(out, ",\"memory_total_mib\":%llu,\"pci_bus_id\":", g->memory_total / MIB);
    json_string(out, g->pci_bus_id);
    render_int_or_null(out, "numa_node", g->numa_node);
    if (g->cc_major >= 0)
        strbuf_printf(out, ",\"compute_capability\":\"%d.%d\"", g->cc_major, g->cc_minor);
    else
        strbuf_puts(out, ",\"compute_capability\":null");
    strbuf_printf(out, ",\"architecture\":\"%s\",\"mig_mode\":%s,\"health\":\"%s\"",
                  g->architecture,
                  g->mig_mode < 0 ? "null" : g->mig_mode ? "\"enabled\"" : "\"disabled\"",
                  gpu_render_health(g, h));
    if (h && h->reason != HEALTH_OK) {
        strbuf_puts(out, ",\"health_reason\":");
        json_string(out, h->detail);
    }
    if (g->problem[0]) {
        strbuf_puts(out, ",\"problem\":");
        json_string(out, g->problem);
    }
    strbuf_puts(out, ",\"links\":[");
    for (unsigned j = 0, first = 1; j < inv->count; j++) {
        if (j == i)
            continue;
        const struct gpu_link *l = gpu_inventory_link(inv, i, j);
        strbuf_printf(out, "%s{\"peer\":%u,\"nvlinks\":%u,\"pcie\":\"%s\"}", first ? "" : ",", j,
                      l->nvlinks, gpu_topology_level_name(l->pcie));
        first = 0;
    }
    strbuf_puts(out, "]}");
}

void gpu_render_json(const struct gpu_inventory *inv, const struct gpu_health *health,
                     struct strbuf *out)
{
    strbuf_puts(out, "{\"driver_version\":");
    json_string(out, inv->driver_version);
    strbuf_puts(out, ",\"nvml_version\":");
    json_string(out, inv->nvml_version);
    if (inv->cuda_version >= 0)
        strbuf_printf(out, ",\"cuda_driver_version\":\"%d.%d\"", inv->cuda_version / 1000,
                      inv->cuda_version % 1000 / 10);
    else
        strbuf_puts(out, ",\"cuda_driver_version\":null");
    strbuf_puts(out, ",\"nvml_library\":");
    json_string(out, inv->library);
    strbuf_printf(out, ",\"count\":%u,\"gpus\":[", inv->count);
    for (unsigned i = 0; i < inv->count; i++) {
        if (i)
            strbuf_puts(out, ",");
        render_gpu_json(inv, health, i, out);
    }
    strbuf_puts(out, "]}\n");
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
