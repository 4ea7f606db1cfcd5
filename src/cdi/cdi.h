/* CDI specs (the Container Device Interface): the node's GPUs as kind
 * nvidia.com/gpu, devices by index, by UUID and "all", with the driver's
 * files as common container edits and no hook, so a CDI runtime (containerd
 * >= 1.7, CRI-O, podman) needs nothing of NVIDIA's (docs/containers.md). */
#ifndef GPULET_CDI_H
#define GPULET_CDI_H

#include <stdbool.h>

#include "config/config.h"
#include "driver/driver.h"
#include "gpu/inventory.h"
#include "util/err.h"
#include "util/strbuf.h"

#define CDI_VERSION "0.5.0"          /* the lowest that has deviceNodes' hostPath */
#define CDI_KIND "nvidia.com/gpu"     /* its devices: CDI_KIND "=<index|UUID|all>" */
#define CDI_SPEC_FILE "nvidia.com-gpu.json"

/* Appends the spec's text, JSON or YAML, to out. */
int cdi_spec_text(const struct gpu_inventory *inv, const struct driver *drv,
                  const struct config *cfg, bool yaml, struct strbuf *out, struct err *e);

/* Writes text to dir/name (CDI_SPEC_FILE, or a DRA claim's) atomically (a
 * temporary file renamed over it), unless the file already holds it:
 * *written says which. */
int cdi_spec_write(const char *dir, const char *name, const struct strbuf *text, bool *written,
                   struct err *e);

#endif
