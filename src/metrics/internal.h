/* Shared between the files of src/metrics; not a public interface. */
#ifndef GPULET_METRICS_INTERNAL_H
#define GPULET_METRICS_INTERNAL_H

#include "metrics/collectors.h"
#include "metrics/metrics.h"
#include "util/strbuf.h"

#define METRICS_MAX_XIDS 16          /* distinct XIDs counted per GPU */
#define METRICS_POD_FIELD 128

/* A pod's container holding a GPU, from PodResources. */
struct metrics_owner {
    char pod[METRICS_POD_FIELD], ns[METRICS_POD_FIELD], container[METRICS_POD_FIELD];
};

/* One sharer of a shared GPU (device IDs like UUID::N). */
struct metrics_share {
    unsigned gpu;
    struct metrics_owner owner;
};

/* What the loop knows and the sampler renders: copied under the lock. */
struct metrics_state {
    unsigned count;                  /* GPUs */
    unsigned *last_xid;              /* per GPU, 0 = none */
    unsigned (*xids)[METRICS_MAX_XIDS][2]; /* per GPU: (xid, count) pairs */
    int *health;                     /* per GPU: enum health_reason */
    bool *owned;                     /* per GPU: exactly one, unshared owner */
    struct metrics_owner *owner;     /* per GPU, where owned */
    struct metrics_share *shares;
    unsigned nshares;
    unsigned long long scrapes;      /* /metrics answered; rendered at the next sample */
    unsigned long long podres_errors;
    double podres_last_ok;           /* wall seconds of the last good List; 0 never */
};

/* One GPU's reading: value per collector, and whether it has one. */
struct metrics_gpu {
    bool up;                         /* NVML answered at this sample */
    double value[COLLECTORS_MAX];
    bool have[COLLECTORS_MAX];
};

/* Everything one rendering needs. */
struct metrics_frame {
    const struct collectors *collectors;
    const struct gpu_inventory *inv;
    const char *hostname;
    const char *const *label_values; /* per GPU per collector: label text or NULL */
    const struct metrics_gpu *gpus;
    const struct metrics_state *state;
    double sample_seconds;
    const unsigned long long *nvml_errors; /* per NVML function, see metrics_nvml_names */
    const char *const *nvml_names;
    unsigned nnvml;
};

/* Expensive NVML calls, each read for as many GPUs per tick as its budget
 * allows at its measured cost, round robin; cheap calls run every tick. */
enum metrics_class { CLASS_REPLAY, CLASS_FIELDS, CLASS_ENERGY, CLASS_GPM, CLASS_COUNT };

struct metrics_class_state {
    double cost_us;                  /* moving average of one call (per GPU) */
    unsigned cursor;                 /* next GPU in the round */
};

/* The sampler thread's own state: nothing here is touched by the loop. */
struct metrics_sampler {
    struct nvml *nvml;
    const struct gpu_inventory *inv;
    const struct collectors *col;
    unsigned interval_ms;
    nvmlDevice_t *handles;           /* own copies: the loop may swap the inventory's */
    struct metrics_gpu *gpus;
    char **labels;                   /* per GPU per collector: label value or NULL */
    int *virt_mode;                  /* per GPU, -1 unknown */
    struct metrics_class_state classes[CLASS_COUNT];
    double *nvl_kib, *nvl_t;         /* last NVLink counter and when, per GPU */
    nvmlGpmSample_t (*gpm)[2];       /* two sample buffers per GPU */
    int *gpm_state;                  /* per GPU: -1 unsupported, 0 no sample yet, 1 have one */
    int *gpm_cur;
    nvmlGpmMetricsGet_t gpm_get;     /* 8 KiB of request, reused for every GPU */
    unsigned long long nvml_errors[24];
};

/* Names of the NVML functions whose failures are counted, by index. */
extern const char *const metrics_nvml_names[];
extern const unsigned metrics_nvml_count;

/* Prepares the sampler (reads the static labels once). */
int metrics_sampler_init(struct metrics_sampler *s, struct nvml *n,
                         const struct gpu_inventory *inv, const struct collectors *col,
                         unsigned interval_ms, struct err *e);

/* Reads every GPU once; returns how long it took, in seconds. */
double metrics_sample(struct metrics_sampler *s);

/* Frees the sampler's memory and GPM buffers. */
void metrics_sampler_free(struct metrics_sampler *s);

/* Renders the whole /metrics text but gpulet_scrapes_total. */
void metrics_render(struct strbuf *out, const struct metrics_frame *f);

/* Appends a label value escaped for the text format. */
void metrics_escape(struct strbuf *out, const char *s);

/* Allocates the per-GPU arrays of a state; frees them. */
int metrics_state_alloc(struct metrics_state *s, unsigned count);
void metrics_state_free(struct metrics_state *s);

/* Copies src into dst (both allocated for the same count). */
void metrics_state_copy(struct metrics_state *dst, const struct metrics_state *src);

/* Decodes a PodResources ListPodResourcesResponse into owners and shares of
 * the inventory's GPUs (by UUID, or by index where IDs are indexes). */
int metrics_pods_decode(struct metrics_state *s, const struct gpu_inventory *inv,
                        const uint8_t *msg, size_t len);

#endif
