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

/* A device's own container edits, beyond the driver's: environment and
 * mounts (a DRA claim's way to its MPS daemon, mps_client). */
#define CDI_EDITS_MAX 4
struct cdi_edits {
    char env[CDI_EDITS_MAX][1024];   /* "NAME=value": a pinned limit per GPU of up to 64 fits */
    unsigned nenv;
    struct {
        char host[CONFIG_PATH_MAX + 128];
        char container[CONFIG_PATH_MAX + 64];
    } mounts[CDI_EDITS_MAX];                          /* bound read-write */
    unsigned nmounts;
};

/* Adds "name=value" to e's environment. */
void cdi_edits_env(struct cdi_edits *e, const char *name, const char *value);
/* Adds a read-write bind mount of host at container to e. */
void cdi_edits_mount(struct cdi_edits *e, const char *host, const char *container);

/* Appends the JSON spec of one device, kind=name, with edits e. */
void cdi_edits_spec(const char *kind, const char *name, const struct cdi_edits *e, struct strbuf *out);

/* The writer (util/writer.h) of the spec dir/name (CDI_SPEC_FILE, or a DRA
 * claim's): its temporary file has a name CDI loaders skip, the directory
 * is made where missing, and a file that holds the text already is left as
 * it is (a runtime watching the directory sees no change). */
struct writer *cdi_spec_writer(uv_loop_t *loop, const char *dir, const char *name);

#endif
