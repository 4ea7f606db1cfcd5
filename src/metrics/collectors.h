/* Which fields /metrics carries: dcgm-exporter's default counters, or a
 * collectors file in its CSV format ("FIELD, type, help"). */
#ifndef GPULET_COLLECTORS_H
#define GPULET_COLLECTORS_H

#include "metrics/fields.h"
#include "util/err.h"

#define COLLECTORS_MAX 64

/* One enabled field, with the type and help the file gave it. */
struct collector {
    const struct field *field;
    char type[16];
    char help[256];
};

struct collectors {
    struct collector items[COLLECTORS_MAX];
    unsigned count;
    unsigned skipped;        /* DCGM_EXP_* lines: dcgm-exporter's own, not produced */
};

/* dcgm-exporter's default counters (its etc/default-counters.csv set). */
void metrics_collectors_default(struct collectors *c);

/* Parses collectors CSV text; errors name source and line. */
int metrics_collectors_parse(struct collectors *c, const char *source, const char *text, size_t len,
                     struct err *e);

/* Reads and parses a collectors file. */
int metrics_collectors_load(struct collectors *c, const char *path, struct err *e);

#endif
