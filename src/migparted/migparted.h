/* The MIG layouts of NVIDIA's mig-parted config file (`version: v1`,
 * `mig-configs:`), which the GPU Operator's MIG manager applies by the
 * node label nvidia.com/mig.config (docs/mig.md): parsed with mig-parted's
 * rules (config.c), an entry chosen per GPU as its apply walks them, and a
 * layout compared and ordered as it creates one (layout.c). Pure: no NVML,
 * no I/O but the file's reading; fuzzed (fuzz_migparted). */
#ifndef GPULET_MIGPARTED_H
#define GPULET_MIGPARTED_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

#define MIGPARTED_PROFILES 32           /* distinct profiles in one entry's mig-devices */
#define MIGPARTED_DEVICES 64            /* GPU indexes in one entry's devices */
#define MIGPARTED_FILTERS 16            /* PCI device IDs in one entry's device-filter */
#define MIGPARTED_INSTANCES 64          /* MIG devices one GPU can hold, with room */

/* A MIG profile as mig-parted names it: [<C>c.]<G>g.<GB>gb[+attr[.attr]]
 * or [...]-attr ("1g.10gb", "1c.3g.40gb", "1g.10gb+me", "1g.24gb-me").
 * c is g where the name leaves it out (a compute instance spanning its
 * GPU instance). */
struct migparted_profile {
    unsigned c, g, gb;
    char attrs[32];                     /* "me", "me.all", "gfx"; "" for none */
    bool negative;                      /* '-': attributes the profile lacks */
};

/* "1g.10gb" -> profile; -1 naming what is wrong. */
int migparted_profile_parse(const char *name, struct migparted_profile *out, struct err *e);
bool migparted_profile_same(const struct migparted_profile *a, const struct migparted_profile *b);
/* mig-parted's name of it back ("1c.3g.40gb" only where c differs from g). */
void migparted_profile_name(const struct migparted_profile *p, char *out, size_t len);

struct migparted_count {
    char name[32];                      /* as the file spells it */
    struct migparted_profile profile;
    unsigned count;
};

/* One item of a named config: which GPUs, and their layout. */
struct migparted_entry {
    bool all;                           /* devices: all */
    unsigned devices[MIGPARTED_DEVICES], ndevices;
    unsigned filters[MIGPARTED_FILTERS], nfilters; /* PCI device IDs (0x233010DE); none: any */
    bool mig_enabled;
    struct migparted_count counts[MIGPARTED_PROFILES];
    unsigned ncounts;
    unsigned line;                      /* where it is, for messages */
};

struct migparted_config {
    char name[128];
    struct migparted_entry *entries;
    unsigned nentries;
};

struct migparted_file {
    char source[256];
    struct migparted_config *configs;
    unsigned nconfigs;
};

/* Parses a mig-parted config file's text as mig-parted does (a missing or
 * unknown version, an unknown field, a config without entries, devices
 * that are neither `all` nor indexes, mig-devices without mig-enabled, a
 * bad profile name or count: each an error naming source:line:column). */
int migparted_parse(struct migparted_file *f, const char *source, const char *text, size_t len,
                    struct err *e);
int migparted_load(struct migparted_file *f, const char *path, struct err *e); /* blocking */
void migparted_free(struct migparted_file *f);

/* The named config, or NULL. */
const struct migparted_config *migparted_find(const struct migparted_file *f, const char *name);

/* The entry that decides GPU index (PCI device ID pci_id): mig-parted's
 * apply walks the entries in order and applies each to every GPU it
 * matches, so the last match wins; NULL where none matches (the GPU is
 * left as it is). */
const struct migparted_entry *migparted_entry_for(const struct migparted_config *c, unsigned index,
                                                  unsigned pci_id);

/* A GPU's MIG devices, as profiles: what it has, or what an entry asks
 * for, flattened in the order mig-parted creates them (more GPU slices
 * first, then more compute slices, then by attributes). */
struct migparted_layout {
    struct migparted_profile items[MIGPARTED_INSTANCES];
    unsigned n;
};
int migparted_layout_of(const struct migparted_entry *entry, struct migparted_layout *out,
                        struct err *e);
void migparted_layout_sort(struct migparted_layout *l);
/* The same profiles, as many of each, whatever the order. */
bool migparted_layout_same(const struct migparted_layout *a, const struct migparted_layout *b);

/* The status socket's "mig-config" line, "STATE<tab>CONFIG<tab>REASON" or
 * "off" (state.c), split in place; a part it lacks is "". */
void migparted_state_split(char *line, char **state, char **config, char **reason);

#endif
