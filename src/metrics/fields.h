/* The dcgm-exporter fields gpulet can produce: name, default type and help,
 * and where the value comes from in NVML (docs/metrics.md). */
#ifndef GPULET_FIELDS_H
#define GPULET_FIELDS_H

#include <stdbool.h>

/* Where a field's value comes from. */
enum field_source {
    SRC_CLOCK_SM, SRC_CLOCK_MEM, SRC_TEMP, SRC_POWER, SRC_ENERGY, SRC_PCIE_REPLAY,
    SRC_UTIL_GPU, SRC_UTIL_MEM, SRC_ENC_UTIL, SRC_DEC_UTIL, SRC_XID,
    SRC_FB_FREE, SRC_FB_USED, SRC_FB_RESERVED,
    SRC_FIELD,          /* nvmlDeviceGetFieldValues(param) */
    SRC_NVLINK_RATE,    /* rate of NVLink data TX+RX counters (fields 138, 139) */
    SRC_VGPU_LICENSE,
    SRC_ECC,            /* nvmlDeviceGetTotalEccErrors; param = error type * 2 + counter type */
    SRC_GPM,            /* NVML GPM metric id in param; scale applied */
    SRC_LABEL,          /* a label on every series, not a series */
};

/* Identity fields used as labels, by param of SRC_LABEL. */
enum field_label { LABEL_DRIVER, LABEL_NVML_VERSION, LABEL_SERIAL, LABEL_VBIOS, LABEL_BRAND };

struct field {
    const char *name;        /* the dcgm-exporter name, e.g. DCGM_FI_DEV_GPU_TEMP */
    const char *type;        /* default Prometheus type */
    const char *help;        /* default help text */
    enum field_source src;
    unsigned param;
    double scale;            /* multiplies the raw value (0 means 1) */
    bool is_double;          /* printed with six decimals, as DCGM prints doubles */
};

/* The field named name, or NULL. */
const struct field *metrics_field_find(const char *name);

/* Every field, in table order; n gets the count. */
const struct field *metrics_field_all(unsigned *n);

/* dcgm-exporter's own computed series (DCGM_EXP_*): known, not produced. */
bool metrics_field_exporter_only(const char *name);

/* A short description of an XID for err_msg ("Unknown Error" if none). */
const char *metrics_field_xid_message(unsigned xid);

#endif
