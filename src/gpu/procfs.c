/* The GPUs as the driver lists them in procfs, read in microseconds while
 * nvmlInit and NVML's first handle take 15 ms on an H200: enough for the
 * agent to register before NVML is up (docs/architecture.md). */
#include "gpu/procfs.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"

#define PROCFS_MAX_FILE 4096
#define PROCFS_MAX_GPUS 1024

/* "Key:   value" with any blanks around the value; NULL when line is not key. */
static const char *procfs_value(const char *line, const char *key, size_t *len)
{
    size_t k = strlen(key);
    if (strncmp(line, key, k) || line[k] != ':')
        return NULL;
    const char *v = line + k + 1;
    v += strspn(v, " \t");
    size_t n = strcspn(v, "\n");
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t' || v[n - 1] == '\r'))
        n--;
    *len = n;
    return v;
}

/* "0000:1b:00.0" as NVML writes bus ids: "00000000:1B:00.0". */
static int procfs_bus_id(const char *v, size_t len, char *out, size_t out_len)
{
    char text[32];
    unsigned domain, bus, dev, fn;
    char end;
    if (len >= sizeof text)
        return -1;
    memcpy(text, v, len);
    text[len] = '\0';
    if (sscanf(text, "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &end) != 4 || bus > 0xff ||
        dev > 0x1f || fn > 7)
        return -1;
    snprintf(out, out_len, "%08X:%02X:%02X.%X", domain, bus, dev, fn);
    return 0;
}

int gpu_procfs_parse(const char *source, const char *text, size_t len, struct gpu_info *g,
                     bool *excluded, struct err *e)
{
    memset(g, 0, sizeof *g);
    g->numa_node = g->cc_major = g->cc_minor = g->mig_mode = g->pci_class = g->brand = -1;
    g->architecture = "unknown";
    *excluded = false;
    bool have_uuid = false, have_minor = false, have_bus = false;
    char buf[PROCFS_MAX_FILE + 1];
    if (len > PROCFS_MAX_FILE)
        len = PROCFS_MAX_FILE;
    memcpy(buf, text, len);
    buf[len] = '\0';
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        size_t n;
        const char *v;
        if ((v = procfs_value(line, "GPU UUID", &n))) {
            if (n < 5 || n >= sizeof g->uuid || strncmp(v, "GPU-", 4) || memchr(v, ' ', n))
                return err_set(e, "%s: GPU UUID '%.*s' is not a GPU UUID", source, (int)(n < 64 ? n : 64), v);
            memcpy(g->uuid, v, n);
            g->uuid[n] = '\0';
            have_uuid = true;
        } else if ((v = procfs_value(line, "Device Minor", &n))) {
            char *end;
            errno = 0;
            unsigned long m = strtoul(v, &end, 10);
            if (end == v || (size_t)(end - v) != n || errno || m > 255)
                return err_set(e, "%s: Device Minor '%.*s' is not a number from 0 to 255", source,
                               (int)(n < 32 ? n : 32), v);
            g->minor = (unsigned)m;
            have_minor = true;
        } else if ((v = procfs_value(line, "Bus Location", &n))) {
            if (procfs_bus_id(v, n, g->pci_bus_id, sizeof g->pci_bus_id) < 0)
                return err_set(e, "%s: Bus Location '%.*s' is not a PCI address", source,
                               (int)(n < 32 ? n : 32), v);
            have_bus = true;
        } else if ((v = procfs_value(line, "Model", &n))) {
            snprintf(g->name, sizeof g->name, "%.*s", (int)n, v);
        } else if ((v = procfs_value(line, "GPU Excluded", &n))) {
            *excluded = n == 3 && !strncmp(v, "Yes", 3);
        }
    }
    if (!have_uuid || !have_minor || !have_bus)
        return err_set(e, "%s: no %s", source,
                       !have_uuid ? "GPU UUID" : !have_minor ? "Device Minor" : "Bus Location");
    return 0;
}

static int procfs_by_bus(const void *a, const void *b)
{
    return strcmp(((const struct gpu_info *)a)->pci_bus_id, ((const struct gpu_info *)b)->pci_bus_id);
}

/* Reads one GPU's information file; 1 when it is excluded, 0, or -1. */
static int procfs_read_one(const char *path, struct gpu_info *g, struct err *e)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(e, "%s: %s", path, strerror(errno));
    char text[PROCFS_MAX_FILE];
    size_t n = fread(text, 1, sizeof text, f);
    fclose(f);
    bool excluded;
    if (gpu_procfs_parse(path, text, n, g, &excluded, e) < 0)
        return -1;
    return excluded ? 1 : 0;
}

int gpu_procfs_read(const char *root, struct gpu_inventory *inv, struct err *e)
{
    memset(inv, 0, sizeof *inv);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/driver/nvidia/gpus", root);
    DIR *d = opendir(dir);
    if (!d)
        return err_set(e, "%s: %s", dir, strerror(errno));
    struct gpu_info *gpus = xcalloc(PROCFS_MAX_GPUS, sizeof *gpus);
    unsigned count = 0;
    int rc = 0;
    for (struct dirent *de; rc == 0 && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        if (count == PROCFS_MAX_GPUS) {
            rc = err_set(e, "%s: more than %d GPUs", dir, PROCFS_MAX_GPUS);
            break;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/%.255s/information", dir, de->d_name);
        int one = procfs_read_one(path, &gpus[count], e);
        if (one < 0)
            rc = -1;
        else if (one == 0)
            count++;
    }
    closedir(d);
    if (rc == 0 && count == 0)
        rc = err_set(e, "%s lists no GPU", dir);
    if (rc < 0) {
        free(gpus);
        return -1;
    }
    /* NVML numbers GPUs in PCI bus order: so do we, so that indexes agree. */
    qsort(gpus, count, sizeof *gpus, procfs_by_bus);
    inv->count = count;
    inv->gpus = xcalloc(count, sizeof *inv->gpus);
    memcpy(inv->gpus, gpus, count * sizeof *gpus);
    free(gpus);
    for (unsigned i = 0; i < count; i++)
        inv->gpus[i].index = i;
    inv->links = xcalloc((size_t)count * count, sizeof *inv->links);
    for (size_t i = 0; i < (size_t)count * count; i++)
        inv->links[i].pcie = -1;
    snprintf(inv->library, sizeof inv->library, "%s", dir);
    inv->cuda_version = -1;
    return 0;
}
