/* The driver's own list of GPUs (/proc/driver/nvidia/gpus/<bus>/information):
 * UUIDs, minor numbers, PCI bus ids and model names, readable before NVML
 * is initialized. */
#ifndef GPULET_PROCFS_H
#define GPULET_PROCFS_H

#include <stdbool.h>
#include <stddef.h>

#include "gpu/inventory.h"

/* The GPUs listed under <root>/driver/nvidia/gpus, excluded ones left out,
 * in NVML's order (by PCI bus id): an inventory with IDs, minor numbers,
 * bus ids and names, no handles. -1 when there is no such directory, it
 * lists no GPU, or an entry cannot be read or parsed (e names the file and
 * what is wrong). */
int gpu_procfs_read(const char *root, struct gpu_inventory *inv, struct err *e);

/* Parses one information file's text (source names it in errors). */
int gpu_procfs_parse(const char *source, const char *text, size_t len, struct gpu_info *g,
                     bool *excluded, struct err *e);

#endif
