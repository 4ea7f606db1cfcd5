/* The node's labels: GPU Feature Discovery's catalogue, the `accelerator`
 * label and gpulet's own, computed from the device model (docs/labels.md).
 * A label set is a plain value: whoever builds one owns it. */
#ifndef GPULET_LABELS_H
#define GPULET_LABELS_H

#include <stdbool.h>

#include "config/config.h"
#include "gpu/device.h"
#include "gpu/inventory.h"
#include "util/strbuf.h"

#define LABEL_KEY_MAX 128     /* gpulet's keys are far below Kubernetes' 317 */
#define LABEL_VALUE_MAX 64    /* Kubernetes allows 63 characters */
#define LABELS_OWN_PREFIX "gpulet.io/"

struct label {
    char key[LABEL_KEY_MAX];
    char value[LABEL_VALUE_MAX];
};

struct label_set {
    struct label *items;      /* sorted by key once built */
    unsigned count, cap;
};

/* What the labels are computed from. */
struct labels_input {
    const struct gpu_inventory *inv;
    const struct gpu_device *devs;  /* health per GPU; NULL counts every GPU healthy */
    const struct config *cfg;
    const char *machine;            /* the DMI product name; NULL when it could not be read */
    long long now_s;                /* for nvidia.com/gfd.timestamp, when the config asks */
    const char *mig_config_state;   /* the MIG manager's nvidia.com/mig.config.state; NULL: none */
};

/* Computes the node's labels into out (emptied first), sorted by key. */
void labels_build(const struct labels_input *in, struct label_set *out);

/* GFD's MIG labels for the single and mixed strategies (mig.c), over what
 * labels_build set. */
void labels_mig(const struct labels_input *in, struct label_set *out);

/* GFD's product value of a device: name, with -SHARED when it is replicated
 * under its own resource name (share NULL: unshared). */
void labels_shared_product(const char *name, const struct gpu_share *share, char *out,
                           size_t len);

/* "none", "time-slicing" or "mps" (share NULL: none). */
const char *labels_sharing_name(const struct gpu_share *share);

/* Reads the machine type (DMI product name) file; NULL with e filled when
 * it cannot be read, *absent set when there is none (a VM or a container
 * often has none: no fault). The caller frees the string. */
char *labels_read_machine(const char *path, bool *absent, struct err *e);

/* The GKE accelerator name of a product ("nvidia-h100-80gb"), from a table
 * of GKE's names, else a slug of the product name. */
void labels_accelerator(const char *product, unsigned long long memory_bytes, char *out,
                        size_t len);

/* GFD's sanitising of a name for a label value: characters other than
 * [A-Za-z0-9-_. ] dropped, runs of spaces made one '-'; then cut to a
 * valid Kubernetes label value. */
void labels_sanitise(const char *in, char *out, size_t len);

/* --- label sets ---------------------------------------------------------------- */

/* Sets key to the formatted value, replacing an earlier value. */
void label_set_put(struct label_set *s, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The value of key, or NULL. */
const char *label_set_get(const struct label_set *s, const char *key);

/* Sorts by key (labels_build does). */
void label_set_sort(struct label_set *s);

/* Same keys and values (both sorted). */
bool label_set_equal(const struct label_set *a, const struct label_set *b);

/* Copies src into dst (emptied first). */
void label_set_copy(struct label_set *dst, const struct label_set *src);

void label_set_clear(struct label_set *s);
void label_set_free(struct label_set *s);

/* key=value lines, as the NFD local feature file holds them. */
void label_set_text(const struct label_set *s, struct strbuf *out);

/* One JSON object of the labels. */
void label_set_json(const struct label_set *s, struct strbuf *out);

#endif
