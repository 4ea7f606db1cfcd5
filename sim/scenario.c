/* Scenario YAML: see docs/simulator.md for the format. Every error names
 * the source, line and column of the value at fault. */
#include "scenario.h"

#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/ydoc.h"

#define SCENARIO_DEFAULT_DRIVER "580.159.04"
#define SCENARIO_DEFAULT_CUDA 13000

/* Where each GPU's explicit settings came from, for errors found later. */
struct scenario_src {
    yaml_node_t *uuid[SIM_MAX_GPUS];
    yaml_node_t *bus[SIM_MAX_GPUS];
    bool numa_set[SIM_MAX_GPUS];
};

/* The product keys, "h100-sxm, h200, ...", for error messages. */
static const char *scenario_product_keys(char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; sim_products[i] && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", sim_products[i]->key);
    return buf;
}

/* The preset names, "dgx-h100, hgx-h200, ...", for error messages. */
static const char *scenario_preset_list(char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (size_t i = 0; sim_preset_names[i] && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", sim_preset_names[i]);
    return buf;
}

static uint64_t scenario_mix(uint64_t x)
{
    /* splitmix64: a stable, well-spread hash for generated identities. */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t scenario_hash(const char *s, uint64_t seed)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

/* Generates a UUID (unless the scenario gave one) and a serial number. */
static void scenario_identity(struct scenario *sc, struct sim_gpu *g, uint64_t seed, bool keep_uuid)
{
    uint64_t a = scenario_mix(scenario_hash(sc->name, seed) + g->index);
    uint64_t b = scenario_mix(a);
    /* Same shape as a real UUID: GPU-8-4-4-4-12 lower-case hex. */
    if (!keep_uuid)
        snprintf(g->uuid, sizeof g->uuid, "GPU-%08x-%04x-%04x-%04x-%012llx", (unsigned)(a >> 32),
             (unsigned)(a >> 16) & 0xffff, (unsigned)a & 0xffff, (unsigned)(b >> 48),
             (unsigned long long)(b & 0xffffffffffffULL));
    snprintf(g->serial, sizeof g->serial, "165%010llu",
             (unsigned long long)(b % 10000000000ULL));
}

static int scenario_parse_uuid(struct ydoc *d, yaml_node_t *n, char *out, struct err *e)
{
    const char *s = NULL;
    if (ydoc_scalar(d, n, "uuid", &s, e) < 0)
        return -1;
    static const char shape[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    bool ok = strlen(s) == sizeof shape - 1;
    for (size_t i = 0; ok && shape[i]; i++)
        ok = shape[i] == 'x' ? isxdigit((unsigned char)s[i]) != 0 : s[i] == shape[i];
    if (!ok)
        return ydoc_error(d, n, e, "uuid '%s' is not of the form %s", s, shape);
    strcpy(out, s);
    return 0;
}

static int scenario_parse_bus(struct ydoc *d, yaml_node_t *n, struct sim_gpu *g, struct err *e)
{
    const char *s = NULL;
    if (ydoc_scalar(d, n, "pci_bus_id", &s, e) < 0)
        return -1;
    unsigned dom, bus, dev, fn;
    int used = 0;
    if (sscanf(s, "%x:%x:%x.%x%n", &dom, &bus, &dev, &fn, &used) != 4 || s[used] != '\0' ||
        bus > 0xff || dev > 0x1f || fn != 0)
        return ydoc_error(d, n, e, "pci_bus_id '%s' is not DOMAIN:BUS:DEVICE.0 in hex", s);
    g->domain = dom;
    g->bus = bus;
    g->device = dev;
    return 0;
}

/* processes: [{pid, memory_mib, sm}] running on one GPU from the start. */
static int scenario_parse_procs(struct ydoc *d, yaml_node_t *n, const struct sim_product *p,
                                struct sim_gpu *g, struct err *e)
{
    static const char *const keys[] = {"pid", "memory_mib", "sm", NULL};
    if (n->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, n, e, "processes must be a list of {pid, memory_mib, sm}");
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top; it++) {
        yaml_node_t *item = ydoc_node(d, *it), *v;
        if (ydoc_check_keys(d, item, "a process", keys, e) < 0)
            return -1;
        if (g->nprocs == SIM_SCENARIO_PROCS)
            return ydoc_error(d, item, e, "at most %d processes per GPU", SIM_SCENARIO_PROCS);
        long pid, mem = 0, sm = 0;
        if (!(v = ydoc_get(d, item, "pid")))
            return ydoc_error(d, item, e, "a process needs a pid");
        if (ydoc_int(d, v, "pid", 1, 4194304, &pid, e) < 0)
            return -1;
        if ((v = ydoc_get(d, item, "memory_mib")) &&
            ydoc_int(d, v, "memory_mib", 0, (long)p->memory_mib, &mem, e) < 0)
            return -1;
        if ((v = ydoc_get(d, item, "sm")) && ydoc_int(d, v, "sm", 0, 100, &sm, e) < 0)
            return -1;
        for (unsigned k = 0; k < g->nprocs; k++)
            if (g->procs[k].pid == (unsigned)pid)
                return ydoc_error(d, item, e, "pid %ld is listed twice", pid);
        g->procs[g->nprocs++] = (struct sim_proc){(unsigned)pid, (unsigned long long)mem,
                                                  (unsigned)sm};
    }
    return 0;
}

/* mig_devices: [1g.10gb, 3g.40gb, ...]: the MIG devices each GPU of the
 * entry has (one GPU instance with one compute instance spanning it). */
static int scenario_parse_mig(struct ydoc *d, yaml_node_t *n, bool mig, const char **out,
                              unsigned *count, struct err *e)
{
    if (!mig)
        return ydoc_error(d, n, e, "mig_devices needs mig: true");
    if (n->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, n, e, "mig_devices must be a list of MIG profiles (1g.10gb, ...)");
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++) {
        if (*count >= SIM_MIG_MAX)
            return ydoc_error(d, n, e, "mig_devices: a GPU holds at most %d MIG devices",
                              SIM_MIG_MAX);
        if (ydoc_scalar(d, ydoc_node(d, *it), "a MIG profile", &out[(*count)++], e) < 0)
            return -1;
    }
    return 0;
}

static int scenario_parse_group(struct ydoc *d, yaml_node_t *n, struct scenario *sc,
                                struct scenario_src *src, struct err *e)
{
    static const char *const keys[] = {"product", "count", "uuid", "pci_bus_id", "numa_node",
                                       "mig", "mig_pending", "mig_devices", "processes", NULL};
    if (ydoc_check_keys(d, n, "a gpus entry", keys, e) < 0)
        return -1;
    char known[128];
    yaml_node_t *pn = ydoc_get(d, n, "product");
    if (!pn)
        return ydoc_error(d, n, e, "gpus entry needs a product (one of %s)",
                          scenario_product_keys(known, sizeof known));
    const char *key = NULL;
    if (ydoc_scalar(d, pn, "product", &key, e) < 0)
        return -1;
    const struct sim_product *p = sim_product_find(key);
    if (!p)
        return ydoc_error(d, pn, e, "unknown product '%s' (known: %s)", key,
                          scenario_product_keys(known, sizeof known));
    long count = 1;
    yaml_node_t *cn = ydoc_get(d, n, "count");
    if (cn && ydoc_int(d, cn, "count", 1, SIM_MAX_GPUS, &count, e) < 0)
        return -1;
    if (sc->count + (unsigned long)count > SIM_MAX_GPUS)
        return ydoc_error(d, cn ? cn : n, e, "more than %d GPUs in total", SIM_MAX_GPUS);
    yaml_node_t *un = ydoc_get(d, n, "uuid"), *bn = ydoc_get(d, n, "pci_bus_id");
    yaml_node_t *procs = ydoc_get(d, n, "processes");
    if (count > 1 && (un || bn || procs))
        return ydoc_error(d, un ? un : bn ? bn : procs, e,
                          "uuid, pci_bus_id and processes need count: 1");
    long numa = -1;
    yaml_node_t *nn = ydoc_get(d, n, "numa_node");
    if (nn && ydoc_int(d, nn, "numa_node", 0, 63, &numa, e) < 0)
        return -1;
    bool mig = false;
    yaml_node_t *mn = ydoc_get(d, n, "mig");
    if (mn && ydoc_bool(d, mn, "mig", &mig, e) < 0)
        return -1;
    if (mig && !p->mig_capable)
        return ydoc_error(d, mn, e, "product %s does not support MIG", p->key);
    bool pending = false;
    yaml_node_t *pn2 = ydoc_get(d, n, "mig_pending");
    if (pn2 && ydoc_bool(d, pn2, "mig_pending", &pending, e) < 0)
        return -1;
    if (pending && !p->mig_capable)
        return ydoc_error(d, pn2, e, "product %s does not support MIG", p->key);
    const char *profiles[SIM_MIG_MAX + 1];
    unsigned nprofiles = 0;
    yaml_node_t *dn = ydoc_get(d, n, "mig_devices");
    if (dn && scenario_parse_mig(d, dn, mig, profiles, &nprofiles, e) < 0)
        return -1;
    for (long i = 0; i < count; i++) {
        struct sim_gpu *g = &sc->gpus[sc->count];
        memset(g, 0, sizeof *g);
        g->index = g->minor = sc->count;
        g->product = p;
        g->mig_enabled = mig;
        g->mig_pending = pending;
        g->numa_node = (int)numa;
        src->numa_set[sc->count] = numa >= 0;
        if (un && scenario_parse_uuid(d, un, g->uuid, e) < 0)
            return -1;
        if (bn && scenario_parse_bus(d, bn, g, e) < 0)
            return -1;
        if (procs && scenario_parse_procs(d, procs, p, g, e) < 0)
            return -1;
        char why[256];
        if (dn && sim_mig_layout(g, profiles, nprofiles, why, sizeof why) < 0)
            return ydoc_error(d, dn, e, "mig_devices: %s", why);
        src->uuid[sc->count] = un;
        src->bus[sc->count] = bn;
        sc->count++;
    }
    return 0;
}

static int scenario_parse_gpus(struct ydoc *d, yaml_node_t *n, struct scenario *sc,
                               struct scenario_src *src, struct err *e)
{
    if (!n)
        return ydoc_error(d, NULL, e, "missing 'gpus': the list of simulated GPUs");
    if (n->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, n, e, "gpus must be a list of {product, count, ...} entries");
    for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
         it++)
        if (scenario_parse_group(d, ydoc_node(d, *it), sc, src, e) < 0)
            return -1;
    return 0; /* an empty list is a node with the driver and no GPUs */
}

/* Spreads GPUs over NUMA nodes and PCIe switches in index order, and gives
 * every GPU without an explicit one a bus id, UUID and serial. */
static void scenario_layout(struct scenario *sc, const struct scenario_src *src, long numa_nodes,
                            long per_switch, uint64_t seed)
{
    unsigned step = sc->count <= 16 ? 0x0c : 3;
    for (unsigned i = 0; i < sc->count; i++) {
        struct sim_gpu *g = &sc->gpus[i];
        if (!src->numa_set[i])
            g->numa_node = (int)((long)i * numa_nodes / (long)sc->count);
        g->pcie_switch = per_switch ? (int)(i / (unsigned)per_switch) : -1;
        if (!src->bus[i])
            g->bus = 0x18 + i * step;
        scenario_identity(sc, g, seed, src->uuid[i] != NULL);
    }
}

static int scenario_check_unique(struct ydoc *d, struct scenario *sc,
                                 const struct scenario_src *src, struct err *e)
{
    for (unsigned i = 0; i < sc->count; i++) {
        for (unsigned j = 0; j < i; j++) {
            const struct sim_gpu *a = &sc->gpus[i], *b = &sc->gpus[j];
            if (src->uuid[i] && !strcmp(a->uuid, b->uuid))
                return ydoc_error(d, src->uuid[i], e, "uuid %s is used twice", a->uuid);
            if (a->domain == b->domain && a->bus == b->bus && a->device == b->device)
                return ydoc_error(d, src->bus[i] ? src->bus[i] : src->bus[j], e,
                                  "GPUs %u and %u have the same pci_bus_id", j, i);
        }
    }
    return 0;
}

/* NVSwitch fabric: every NVLink of every GPU goes to the switches. */
static int scenario_nvswitch(struct ydoc *d, yaml_node_t *n, struct scenario *sc, struct err *e)
{
    for (unsigned i = 0; i < sc->count; i++) {
        struct sim_gpu *g = &sc->gpus[i];
        if (!g->product->nvlinks)
            return ydoc_error(d, n, e, "GPU %u (%s) has no NVLink", i, g->product->key);
        g->nlinks = g->product->nvlinks;
        for (unsigned k = 0; k < g->nlinks; k++)
            g->links[k] = (struct sim_link){NVML_NVLINK_DEVICE_TYPE_SWITCH, -1};
    }
    return 0;
}

static int scenario_island(struct ydoc *d, yaml_node_t *isl, struct scenario *sc, int *owner,
                           int island_no, struct err *e)
{
    if (!isl || isl->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, isl, e, "each NVLink island must be a list of GPU indexes");
    int members[SIM_MAX_GPUS];
    unsigned size = 0;
    for (yaml_node_item_t *it = isl->data.sequence.items.start;
         it < isl->data.sequence.items.top; it++) {
        yaml_node_t *m = ydoc_node(d, *it);
        long idx;
        if (ydoc_int(d, m, "an island member", 0, (long)sc->count - 1, &idx, e) < 0)
            return -1;
        if (owner[idx] >= 0)
            return ydoc_error(d, m, e, "GPU %ld is in two NVLink islands", idx);
        if (!sc->gpus[idx].product->nvlinks)
            return ydoc_error(d, m, e, "GPU %ld (%s) has no NVLink", idx,
                              sc->gpus[idx].product->key);
        owner[idx] = island_no;
        members[size++] = (int)idx;
    }
    if (size < 2)
        return ydoc_error(d, isl, e, "an NVLink island needs at least two GPUs");
    for (unsigned a = 0; a < size; a++) {
        struct sim_gpu *g = &sc->gpus[members[a]];
        unsigned per_peer = g->product->nvlinks / (size - 1);
        if (per_peer == 0)
            return ydoc_error(d, isl, e, "island of %u GPUs is larger than %s's %u NVLinks allow",
                              size, g->product->key, g->product->nvlinks);
        for (unsigned b = 0; b < size; b++) {
            if (a == b)
                continue;
            for (unsigned k = 0; k < per_peer; k++)
                g->links[g->nlinks++] = (struct sim_link){NVML_NVLINK_DEVICE_TYPE_GPU, members[b]};
        }
    }
    return 0;
}

static int scenario_nvlink(struct ydoc *d, yaml_node_t *root, struct scenario *sc, struct err *e)
{
    yaml_node_t *n = ydoc_get(d, root, "nvlink"), *isl = ydoc_get(d, root, "nvlink_islands");
    const char *mode = "none";
    if (n && ydoc_scalar(d, n, "nvlink", &mode, e) < 0)
        return -1;
    if (isl && strcmp(mode, "islands"))
        return ydoc_error(d, isl, e, "nvlink_islands needs nvlink: islands");
    if (!strcmp(mode, "none"))
        return 0;
    if (!strcmp(mode, "nvswitch"))
        return scenario_nvswitch(d, n, sc, e);
    if (strcmp(mode, "islands"))
        return ydoc_error(d, n, e, "nvlink must be none, nvswitch or islands, not '%s'", mode);
    if (!isl || isl->type != YAML_SEQUENCE_NODE)
        return ydoc_error(d, isl ? isl : n, e,
                          "nvlink: islands needs nvlink_islands: a list of GPU index lists");
    int owner[SIM_MAX_GPUS];
    memset(owner, -1, sizeof owner);
    int no = 0;
    for (yaml_node_item_t *it = isl->data.sequence.items.start;
         it < isl->data.sequence.items.top; it++)
        if (scenario_island(d, ydoc_node(d, *it), sc, owner, no++, e) < 0)
            return -1;
    return 0;
}

static int scenario_versions(struct ydoc *d, yaml_node_t *root, struct scenario *sc,
                             struct err *e)
{
    snprintf(sc->driver_version, sizeof sc->driver_version, "%s", SCENARIO_DEFAULT_DRIVER);
    sc->cuda_version = SCENARIO_DEFAULT_CUDA;
    yaml_node_t *n = ydoc_get(d, root, "driver_version");
    const char *s = NULL;
    if (n) {
        if (ydoc_scalar(d, n, "driver_version", &s, e) < 0)
            return -1;
        if (!*s || strlen(s) >= sizeof sc->driver_version || strspn(s, "0123456789.") != strlen(s))
            return ydoc_error(d, n, e, "driver_version '%s' is not like 580.159.04", s);
        strcpy(sc->driver_version, s);
    }
    if ((n = ydoc_get(d, root, "cuda_version"))) {
        unsigned major, minor;
        int used = 0;
        if (ydoc_scalar(d, n, "cuda_version", &s, e) < 0)
            return -1;
        if (sscanf(s, "%u.%u%n", &major, &minor, &used) != 2 || s[used] || major > 99 ||
            minor > 9)
            return ydoc_error(d, n, e, "cuda_version '%s' is not like 13.0", s);
        sc->cuda_version = (int)(major * 1000 + minor * 10);
    }
    return 0;
}

/* fabric: {cluster_uuid: UUID, clique_id: N}: the node's GPUs are in one
 * NVLink clique of a multi-node fabric (GB200 NVL72 and the like). */
static int scenario_fabric(struct ydoc *d, yaml_node_t *n, struct scenario *sc, struct err *e)
{
    static const char *const keys[] = {"cluster_uuid", "clique_id", NULL};
    if (ydoc_check_keys(d, n, "fabric", keys, e) < 0)
        return -1;
    yaml_node_t *u = ydoc_get(d, n, "cluster_uuid"), *c = ydoc_get(d, n, "clique_id");
    if (!u || !c)
        return ydoc_error(d, n, e, "fabric needs cluster_uuid and clique_id");
    const char *s;
    long clique;
    if (ydoc_scalar(d, u, "cluster_uuid", &s, e) < 0 ||
        ydoc_int(d, c, "clique_id", 0, 0x7fffffff, &clique, e) < 0)
        return -1;
    unsigned nbytes = 0;
    for (const char *p = s; *p && nbytes <= NVML_GPU_FABRIC_UUID_LEN; p++) {
        if (*p == '-')
            continue;
        unsigned v;
        if (nbytes == NVML_GPU_FABRIC_UUID_LEN || sscanf(p, "%2x", &v) != 1 ||
            !isxdigit((unsigned char)p[0]) || !isxdigit((unsigned char)p[1]))
            return ydoc_error(d, u, e, "cluster_uuid '%s' is not a UUID", s);
        sc->cluster_uuid[nbytes++] = (unsigned char)v;
        p++;
    }
    if (nbytes != NVML_GPU_FABRIC_UUID_LEN)
        return ydoc_error(d, u, e, "cluster_uuid '%s' is not a UUID", s);
    sc->fabric = true;
    sc->clique_id = (unsigned)clique;
    return 0;
}

static int scenario_build(struct ydoc *d, struct scenario *sc, struct err *e)
{
    static const char *const keys[] = {"name", "driver_version", "cuda_version", "numa_nodes",
                                       "gpus_per_pcie_switch", "nvlink", "nvlink_islands",
                                       "gpus", "seed", "fabric", NULL};
    yaml_node_t *root = ydoc_root(d);
    if (!root)
        return ydoc_error(d, NULL, e, "empty scenario");
    if (ydoc_check_keys(d, root, "the scenario", keys, e) < 0)
        return -1;
    yaml_node_t *n = ydoc_get(d, root, "name");
    const char *s = NULL;
    if (n) {
        if (ydoc_scalar(d, n, "name", &s, e) < 0)
            return -1;
        snprintf(sc->name, sizeof sc->name, "%s", s);
    }
    if (scenario_versions(d, root, sc, e) < 0)
        return -1;
    if ((n = ydoc_get(d, root, "fabric")) && scenario_fabric(d, n, sc, e) < 0)
        return -1;
    long numa_nodes = 1, per_switch = 1, seed = 0;
    if ((n = ydoc_get(d, root, "numa_nodes")) && ydoc_int(d, n, "numa_nodes", 1, 64, &numa_nodes, e) < 0)
        return -1;
    if ((n = ydoc_get(d, root, "gpus_per_pcie_switch")) &&
        ydoc_int(d, n, "gpus_per_pcie_switch", 0, SIM_MAX_GPUS, &per_switch, e) < 0)
        return -1;
    if ((n = ydoc_get(d, root, "seed")) && ydoc_int(d, n, "seed", 0, 1L << 30, &seed, e) < 0)
        return -1;
    struct scenario_src src;
    memset(&src, 0, sizeof src);
    if (scenario_parse_gpus(d, ydoc_get(d, root, "gpus"), sc, &src, e) < 0)
        return -1;
    scenario_layout(sc, &src, numa_nodes, per_switch, (uint64_t)seed);
    if (scenario_check_unique(d, sc, &src, e) < 0)
        return -1;
    return scenario_nvlink(d, root, sc, e);
}

int scenario_parse(const char *source, const char *text, size_t len, struct scenario *sc,
                   struct err *e)
{
    memset(sc, 0, sizeof *sc);
    /* A long source name is cut: the name is for logs and `sim ping`. */
    snprintf(sc->name, sizeof sc->name, "%.*s", (int)sizeof sc->name - 1, source);
    struct ydoc d;
    if (ydoc_load(&d, source, text, len, e) < 0)
        return -1;
    int rc = scenario_build(&d, sc, e);
    ydoc_free(&d);
    return rc;
}

int scenario_load(const char *spec, struct scenario *sc, struct err *e)
{
    const char *text = sim_preset_text(spec);
    if (text) {
        char source[96];
        snprintf(source, sizeof source, "preset %s", spec);
        return scenario_parse(source, text, strlen(text), sc, e);
    }
    /* Anything that is not a preset name must be a file. */
    char known[160];
    if (!strchr(spec, '/') && !strchr(spec, '.') && access(spec, F_OK) != 0)
        return err_usage(e, "unknown simulator preset '%s' (presets: %s; or give a scenario file)",
                       spec, scenario_preset_list(known, sizeof known));
    struct ydoc d;
    memset(sc, 0, sizeof *sc);
    if (ydoc_load_file(&d, spec, e) < 0)
        return -1;
    const char *base = strrchr(spec, '/');
    snprintf(sc->name, sizeof sc->name, "%s", base ? base + 1 : spec);
    int rc = scenario_build(&d, sc, e);
    ydoc_free(&d);
    return rc;
}

int scenario_check(const char *spec, struct err *e)
{
    struct scenario *sc = malloc(sizeof *sc); /* large: kept off the caller's stack */
    if (!sc)
        return err_set(e, "out of memory checking scenario %s", spec);
    int rc = scenario_load(spec, sc, e);
    free(sc);
    return rc;
}
