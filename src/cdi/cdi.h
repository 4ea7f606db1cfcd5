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
#include "util/writer.h"

#define CDI_VERSION "0.5.0"          /* the lowest that has deviceNodes' hostPath */
#define CDI_KIND "nvidia.com/gpu"     /* its devices: CDI_KIND "=<index|UUID|all>" */
#define CDI_SPEC_FILE "nvidia.com-gpu.json"

/* Appends the spec's text, JSON or YAML, to out. */
int cdi_spec_text(const struct gpu_inventory *inv, const struct driver *drv,
                  const struct config *cfg, bool yaml, struct strbuf *out, struct err *e);

/* The writer (util/writer.h) of the spec dir/name (CDI_SPEC_FILE, or a DRA
 * claim's): its temporary file has a name CDI loaders skip, the directory
 * is made where missing, and a file that holds the text already is left as
 * it is (a runtime watching the directory sees no change). */
struct writer *cdi_spec_writer(uv_loop_t *loop, const char *dir, const char *name);

#endif
