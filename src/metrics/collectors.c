#include "metrics/collectors.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/xmalloc.h"

/* dcgm-exporter's default counters, in its order. */
static const char default_csv[] =
    "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock frequency (in MHz).\n"
    "DCGM_FI_DEV_MEM_CLOCK, gauge, Memory clock frequency (in MHz).\n"
    "DCGM_FI_DEV_MEMORY_TEMP, gauge, Memory temperature (in C).\n"
    "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
    "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, counter, Total energy consumption since boot (in mJ).\n"
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER, counter, Total number of PCIe retries.\n"
    "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
    "DCGM_FI_DEV_MEM_COPY_UTIL, gauge, Memory utilization (in %).\n"
    "DCGM_FI_DEV_ENC_UTIL, gauge, Encoder utilization (in %).\n"
    "DCGM_FI_DEV_DEC_UTIL, gauge, Decoder utilization (in %).\n"
    "DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.\n"
    "DCGM_FI_DEV_FB_FREE, gauge, Framebuffer memory free (in MiB).\n"
    "DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
    "DCGM_FI_DEV_FB_RESERVED, gauge, Framebuffer memory reserved (in MiB).\n"
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, counter, Total number of NVLink bandwidth counters for all lanes.\n"
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS, gauge, vGPU License status\n"
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for uncorrectable errors\n"
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, counter, Number of remapped rows for correctable errors\n"
    "DCGM_FI_DEV_ROW_REMAP_FAILURE, gauge, Whether remapping of rows has failed\n"
    "DCGM_FI_DRIVER_VERSION, label, Driver Version\n"
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE, gauge, Ratio of time the graphics engine is active.\n"
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, gauge, Ratio of cycles the tensor (HMMA) pipe is active.\n"
    "DCGM_FI_PROF_DRAM_ACTIVE, gauge, Ratio of cycles the device memory interface is active "
    "sending or receiving data.\n"
    "DCGM_FI_PROF_PCIE_TX_BYTES, gauge, The rate of data transmitted over the PCIe bus - "
    "including both protocol headers and data payloads - in bytes per second.\n"
    "DCGM_FI_PROF_PCIE_RX_BYTES, gauge, The rate of data received over the PCIe bus - "
    "including both protocol headers and data payloads - in bytes per second.\n";

void metrics_collectors_default(struct collectors *c)
{
    struct err e;
    if (metrics_collectors_parse(c, "default counters", default_csv, sizeof default_csv - 1, &e) < 0)
        abort(); /* the built-in list is tested: it cannot fail */
}

static char *collectors_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

static int collectors_line(struct collectors *c, char *line, const char *source, unsigned lineno,
                           struct err *e)
{
    char *hash = strchr(line, '#');
    if (hash)
        *hash = '\0';
    char *text = collectors_trim(line);
    if (!*text)
        return 0;
    char *c1 = strchr(text, ',');
    char *c2 = c1 ? strchr(c1 + 1, ',') : NULL;
    if (!c1 || !c2)
        return err_set(e, "%s:%u: expected 'FIELD, type, help', got '%.80s'", source, lineno, text);
    *c1 = *c2 = '\0';
    char *name = collectors_trim(text), *type = collectors_trim(c1 + 1), *help = collectors_trim(c2 + 1);
    static const char *const types[] = {"gauge", "counter", "histogram", "summary", "label", NULL};
    int t = 0;
    while (types[t] && strcmp(types[t], type))
        t++;
    if (!types[t])
        return err_set(e, "%s:%u: %s: unknown type '%s' (gauge, counter, histogram, summary, label)",
                       source, lineno, name, type);
    if (metrics_field_exporter_only(name)) {
        log_warn("%s:%u: %s is computed by dcgm-exporter itself; gpulet offers "
                 "gpulet_xid_errors_total and gpulet_gpu_health instead (skipped)", source, lineno, name);
        c->skipped++;
        return 0;
    }
    const struct field *f = metrics_field_find(name);
    if (!f)
        return err_set(e, "%s:%u: unknown field '%s'", source, lineno, name);
    if ((f->src == SRC_LABEL) != !strcmp(type, "label"))
        return err_set(e, "%s:%u: %s must be declared as %s", source, lineno, name,
                       f->src == SRC_LABEL ? "label" : "a metric type, not label");
    for (unsigned i = 0; i < c->count; i++)
        if (c->items[i].field == f)
            return err_set(e, "%s:%u: %s is listed twice", source, lineno, name);
    if (c->count == COLLECTORS_MAX)
        return err_set(e, "%s:%u: more than %d fields", source, lineno, COLLECTORS_MAX);
    struct collector *it = &c->items[c->count++];
    it->field = f;
    snprintf(it->type, sizeof it->type, "%s", type);
    snprintf(it->help, sizeof it->help, "%s", *help ? help : f->help);
    return 0;
}

int metrics_collectors_parse(struct collectors *c, const char *source, const char *text, size_t len,
                     struct err *e)
{
    memset(c, 0, sizeof *c);
    unsigned lineno = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t end = pos;
        while (end < len && text[end] != '\n')
            end++;
        char line[1024];
        lineno++;
        if (end - pos >= sizeof line)
            return err_set(e, "%s:%u: line longer than %zu characters", source, lineno,
                           sizeof line - 1);
        memcpy(line, text + pos, end - pos);
        line[end - pos] = '\0';
        if (memchr(line, '\0', end - pos))
            return err_set(e, "%s:%u: a NUL byte in the line", source, lineno);
        if (collectors_line(c, line, source, lineno, e) < 0)
            return -1;
        pos = end + 1;
    }
    if (c->count == 0)
        return err_set(e, "%s: no fields enabled", source);
    return 0;
}

int metrics_collectors_load(struct collectors *c, const char *path, struct err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return err_set(e, "%s: %s", path, strerror(errno));
    char *buf = xmalloc(1 << 20);
    size_t n = fread(buf, 1, 1 << 20, f);
    int big = !feof(f);
    fclose(f);
    int rc = big ? err_set(e, "%s: larger than 1 MiB", path) : metrics_collectors_parse(c, path, buf, n, e);
    free(buf);
    return rc;
}
