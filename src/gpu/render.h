/* Text renderings of the inventory: the `gpulet list` table, JSON, and an
 * nvidia-smi-topo-style interconnect matrix. */
#ifndef GPULET_RENDER_H
#define GPULET_RENDER_H

#include "gpu/inventory.h"
#include "util/strbuf.h"

/* One row per GPU: index, UUID, product, memory, bus id, NUMA node, health. */
void gpu_render_table(const struct gpu_inventory *inv, struct strbuf *out);

/* The whole inventory, topology included, as one JSON object. */
void gpu_render_json(const struct gpu_inventory *inv, struct strbuf *out);

/* The GPU-to-GPU matrix: X, NV<n>, or the PCIe level (PIX, NODE, SYS...). */
void gpu_render_topology(const struct gpu_inventory *inv, struct strbuf *out);

/* "Healthy", "Lost" or "Degraded": what NVML said while reading the GPU. */
const char *gpu_render_health(const struct gpu_info *g);

#endif
