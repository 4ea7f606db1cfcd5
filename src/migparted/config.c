/* mig-parted's config file, parsed with its rules (api/spec/v1/spec.go:
 * Spec and MigConfigSpec), and the entry that decides each GPU. */
#include "migparted/migparted.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/xmalloc.h"
#include "util/ydoc.h"

/* --- one entry: devices, device-filter, mig-enabled, mig-devices ----------------------- */

static int entry_devices(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct migparted_entry *en = ctx;
    if (v->type == YAML_SCALAR_NODE) {
        const char *s = (const char *)v->data.scalar.value;
        if (strcmp(s, "all"))
            return ydoc_error(d, v, e, "devices must be 'all' or a list of GPU indexes, not '%s'", s);
        en->all = true;
        return 0;
    }
    if (v->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, v, e, "devices must be 'all' or a list of GPU indexes");
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
        long index;
        if (en->ndevices == MIGPARTED_DEVICES)
            return ydoc_error(d, v, e, "devices lists more than %d GPUs", MIGPARTED_DEVICES);
        if (ydoc_int(d, ydoc_node(d, *it), "a GPU index in devices", 0, 1023, &index, e) < 0)
            return -1;
        en->devices[en->ndevices++] = (unsigned)index;
    }
    return 0;
}

/* A PCI device ID as mig-parted writes it: 0x233010DE (device, vendor). */
static int entry_filter_one(struct migparted_entry *en, struct ydoc *d, yaml_node_t *v,
                            struct err *e)
{
    const char *s;
    if (ydoc_scalar(d, v, "a PCI device ID in device-filter", &s, e) < 0)
        return -1;
    char *end;
    errno = 0;
    unsigned long id = strtoul(s, &end, 16);
    if (strncmp(s, "0x", 2) && strncmp(s, "0X", 2))
        end = (char *)s; /* mig-parted wants the 0x */
    if (end == s || *end || errno || id > 0xffffffffUL)
        return ydoc_error(d, v, e, "device-filter: '%s' is not a PCI device ID such as 0x233010DE", s);
    if (en->nfilters == MIGPARTED_FILTERS)
        return ydoc_error(d, v, e, "device-filter lists more than %d IDs", MIGPARTED_FILTERS);
    en->filters[en->nfilters++] = (unsigned)id;
    return 0;
}

static int entry_filter(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct migparted_entry *en = ctx;
    if (v->type != YAML_SEQUENCE_NODE)
        return entry_filter_one(en, d, v, e);
    for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++)
        if (entry_filter_one(en, d, ydoc_node(d, *it), e) < 0)
            return -1;
    return 0;
}

static int entry_enabled(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct migparted_entry *en = ctx;
    return ydoc_bool(d, v, "mig-enabled", &en->mig_enabled, e);
}

static int entry_counts(void *ctx, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    struct migparted_entry *en = ctx;
    en->ncounts = 0;
    if (ydoc_empty(v))
        return 0;
    if (v->type != YAML_MAPPING_NODE)
        return ydoc_error(d, v, e, "mig-devices must map profile names to counts");
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = ydoc_node(d, p->key);
        const char *name;
        long count;
        if (ydoc_scalar(d, k, "a MIG profile name", &name, e) < 0)
            return -1;
        if (en->ncounts == MIGPARTED_PROFILES)
            return ydoc_error(d, k, e, "mig-devices names more than %d profiles", MIGPARTED_PROFILES);
        struct migparted_count *c = &en->counts[en->ncounts];
        struct err why;
        if (strlen(name) >= sizeof c->name || migparted_profile_parse(name, &c->profile, &why) < 0)
            return ydoc_error(d, k, e, "mig-devices: '%s' is not a MIG profile: %s", name,
                              strlen(name) >= sizeof c->name ? "too long" : why.msg);
        if (ydoc_int(d, ydoc_node(d, p->value), "a count in mig-devices", 0, MIGPARTED_INSTANCES,
                     &count, e) < 0)
            return -1;
        snprintf(c->name, sizeof c->name, "%s", name);
        c->count = (unsigned)count;
        en->ncounts++;
    }
    return 0;
}

static const struct ydoc_key entry_keys[] = {
    {"devices", entry_devices},
    {"device-filter", entry_filter},
    {"mig-enabled", entry_enabled},
    {"mig-devices", entry_counts},
    {NULL, NULL},
};

static int entry_parse(struct ydoc *d, yaml_node_t *n, struct migparted_entry *en, struct err *e)
{
    memset(en, 0, sizeof *en);
    en->line = (unsigned)n->start_mark.line + 1;
    if (ydoc_each(d, n, "an entry of a MIG config", entry_keys, en, e) < 0)
        return -1;
    if (!ydoc_get(d, n, "devices"))
        return ydoc_error(d, n, e, "missing required field: devices");
    if (!ydoc_get(d, n, "mig-enabled"))
        return ydoc_error(d, n, e, "missing required field: mig-enabled");
    yaml_node_t *counts = ydoc_get(d, n, "mig-devices");
    if (en->mig_enabled && !counts)
        return ydoc_error(d, n, e, "missing required field 'mig-devices' when 'mig-enabled' is true");
    unsigned total = 0;
    for (unsigned i = 0; i < en->ncounts; i++)
        total += en->counts[i].count;
    if (!en->mig_enabled && total)
        return ydoc_error(d, counts, e, "MIG devices included when 'mig-enabled' is false");
    if (total > MIGPARTED_INSTANCES)
        return ydoc_error(d, counts, e, "%u MIG devices: more than a GPU can hold", total);
    return 0;
}

/* --- the file ---------------------------------------------------------------------------- */

static int file_configs(struct migparted_file *f, struct ydoc *d, yaml_node_t *v, struct err *e)
{
    if (v->type != YAML_MAPPING_NODE || ydoc_empty(v))
        return ydoc_error(d, v, e, "at least one entry in 'mig-configs' is required");
    size_t n = (size_t)(v->data.mapping.pairs.top - v->data.mapping.pairs.start);
    f->configs = xcalloc(n, sizeof *f->configs);
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        yaml_node_t *k = ydoc_node(d, p->key), *list = ydoc_node(d, p->value);
        const char *name;
        if (ydoc_scalar(d, k, "a MIG config's name", &name, e) < 0)
            return -1;
        struct migparted_config *c = &f->configs[f->nconfigs];
        if (strlen(name) >= sizeof c->name)
            return ydoc_error(d, k, e, "the MIG config name '%.40s...' is too long", name);
        snprintf(c->name, sizeof c->name, "%s", name);
        f->nconfigs++;
        if (!list || list->type != YAML_SEQUENCE_NODE || ydoc_empty(list))
            return ydoc_error(d, list ? list : k, e, "at least one entry in '%s' is required", name);
        size_t m = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
        c->entries = xcalloc(m, sizeof *c->entries);
        for (yaml_node_item_t *it = list->data.sequence.items.start; it < list->data.sequence.items.top;
             it++)
            if (entry_parse(d, ydoc_node(d, *it), &c->entries[c->nentries++], e) < 0)
                return -1;
    }
    return 0;
}

int migparted_parse(struct migparted_file *f, const char *source, const char *text, size_t len,
                    struct err *e)
{
    memset(f, 0, sizeof *f);
    snprintf(f->source, sizeof f->source, "%s", source);
    struct ydoc d;
    if (ydoc_load(&d, source, text, len, e) < 0)
        return -1;
    static const char *const keys[] = {"version", "mig-configs", NULL};
    yaml_node_t *root = ydoc_root(&d), *version, *configs;
    const char *v = NULL;
    int rc = -1;
    if (!root || ydoc_empty(root))
        err_set(e, "%s: empty: a mig-parted config needs 'version: v1' and 'mig-configs'", source);
    else if (ydoc_check_keys(&d, root, "a mig-parted config", keys, e) < 0)
        ;
    else if (!(version = ydoc_get(&d, root, "version")))
        ydoc_error(&d, root, e, "unable to parse with missing 'version' field");
    else if (ydoc_scalar(&d, version, "version", &v, e) < 0)
        ;
    else if (strcmp(v, "v1"))
        ydoc_error(&d, version, e, "unknown version: %s (mig-parted reads v1)", v);
    else if (!(configs = ydoc_get(&d, root, "mig-configs")))
        ydoc_error(&d, root, e, "at least one entry in 'mig-configs' is required");
    else
        rc = file_configs(f, &d, configs, e);
    ydoc_free(&d);
    if (rc < 0)
        migparted_free(f);
    return rc;
}

int migparted_load(struct migparted_file *f, const char *path, struct err *e)
{
    memset(f, 0, sizeof *f);
    FILE *in = fopen(path, "rb");
    if (!in)
        return err_set(e, "MIG config file %s: %s", path, strerror(errno));
    char *text = xmalloc((4u << 20) + 1);
    size_t n = fread(text, 1, 4u << 20, in);
    bool big = n == 4u << 20 && fgetc(in) != EOF;
    fclose(in);
    int rc = big ? err_set(e, "MIG config file %s: larger than 4 MiB", path)
                 : migparted_parse(f, path, text, n, e);
    free(text);
    return rc;
}

void migparted_free(struct migparted_file *f)
{
    for (unsigned i = 0; i < f->nconfigs; i++)
        free(f->configs[i].entries);
    free(f->configs);
    f->configs = NULL;
    f->nconfigs = 0;
}

const struct migparted_config *migparted_find(const struct migparted_file *f, const char *name)
{
    for (unsigned i = 0; i < f->nconfigs; i++)
        if (!strcmp(f->configs[i].name, name))
            return &f->configs[i];
    return NULL;
}

static bool entry_matches(const struct migparted_entry *en, unsigned index, unsigned pci_id)
{
    bool filter = !en->nfilters;
    for (unsigned i = 0; i < en->nfilters; i++)
        filter |= en->filters[i] == pci_id;
    bool device = en->all;
    for (unsigned i = 0; i < en->ndevices; i++)
        device |= en->devices[i] == index;
    return filter && device;
}

const struct migparted_entry *migparted_entry_for(const struct migparted_config *c, unsigned index,
                                                  unsigned pci_id)
{
    const struct migparted_entry *last = NULL;
    for (unsigned i = 0; c && i < c->nentries; i++)
        if (entry_matches(&c->entries[i], index, pci_id))
            last = &c->entries[i];
    return last;
}
