/* Text renderings of the inventory: the `gpulet list` table, JSON, and an
 * nvidia-smi-topo-style interconnect matrix. */
#ifndef GPULET_RENDER_H
#define GPULET_RENDER_H

#include "gpu/device.h"
#include "gpu/health.h"
#include "gpu/inventory.h"
#include "util/strbuf.h"

/* One row per GPU: index, UUID, product, memory, bus id, NUMA node (wide:
 * minor number, compute capability, architecture, MIG mode), health; then
 * one per MIG device, with its own health. devs (one per GPU) are the
 * running agent's records, or NULL without one. */
void gpu_render_table(const struct gpu_inventory *inv, const struct gpu_device *devs, bool wide,
                      struct strbuf *out);

/* The whole inventory, topology and health included, as one JSON object. */
void gpu_render_json(const struct gpu_inventory *inv, const struct gpu_device *devs,
                     struct strbuf *out);

/* The GPU-to-GPU matrix: X, NV<n>, or the PCIe level (PIX, NODE, SYS...). */
void gpu_render_topology(const struct gpu_inventory *inv, struct strbuf *out);

/* "Lost" or "Degraded" from what NVML said while reading the GPU, else the
 * agent's "Unhealthy" (h may be NULL), else "Healthy". */
const char *gpu_render_health(const struct gpu_info *g, const struct gpu_health *h);

#endif
