/* libFuzzer harness for what DRA's prepare reads from the API server: a
 * ResourceClaim (its allocation, its opaque GpuConfig, its reservedFor,
 * then mapped to a simulated node's devices),
 * a Pod (the containers using a claim) and a discovery answer (does a
 * version of resource.k8s.io serve ResourceSlices). Any bytes give an answer or
 * one error message, never a crash or leak, and never more than there is
 * room for. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra/internal.h"
#include "nvml/nvml.h"

/* A driver over the simulator's h200-mig-mixed (whole GPUs and MIG
 * devices; GPULET_SIM_LIB, as fuzz/run.sh sets it), for mapping claims to
 * the node's devices. */
static struct dra *fuzz_driver(void)
{
    static struct dra d;
    static struct config cfg;
    static struct gpu_inventory inv;
    static struct nvml n;
    static int ready;
    if (!ready) {
        struct err e;
        setenv("GPULET_SIM_CONTROL", "off", 1);
        setenv("GPULET_SIM_SCENARIO", "h200-mig-mixed", 1);
        if (nvml_open(&n, getenv("GPULET_SIM_LIB"), &e) < 0 || nvml_init(&n, &e) < 0 ||
            gpu_inventory_build(&n, &inv, &e) < 0)
            abort();
        cfg.dra = CONFIG_DRA_ALL;
        strcpy(cfg.dra_gpus, "*");
        strcpy(cfg.dra_shares, "3"); /* a whole GPU published for shares */
        strcpy(cfg.dra_mig, "2");    /* a MIG GPU's placements: its seven 1g adopted, no room */
        d.api.version = DRA_API_V1;
        d.cfg = &cfg;
        d.inv = &inv;
        struct gpu_device *devs = gpu_devices_new(&inv, 0);
        devs[1].mig_health[2].reason = HEALTH_XID; /* an unhealthy MIG device to refuse */
        d.devs = devs;
        strcpy(d.node, "n1");
        ready = 1;
    }
    return &d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dra_allocation a;
    struct err e;
    e.msg[0] = '\0';
    if (dra_claim_parse((const char *)data, size, &a, &e) < 0) {
        if (!e.msg[0])
            __builtin_trap();
    } else if (a.count > DRA_MAX_RESULTS || !a.uid[0] || a.nconfigs > DRA_MAX_CONFIGS) {
        __builtin_trap();
    } else {
        for (unsigned i = 0; i < a.count; i++)
            if (a.results[i].config >= (int)a.nconfigs || a.results[i].share_compute > 100 ||
                (!a.results[i].share_id[0] && (a.results[i].share_bytes || a.results[i].share_compute)))
                __builtin_trap();
        for (unsigned i = 0; i < a.nconfigs; i++)
            if (a.configs[i].nlimits > DRA_MAX_LIMITS || a.configs[i].thread_percentage > 100 ||
                a.configs[i].timeslice > 3)
                __builtin_trap();
        /* Mapped to the node's devices: all of them, or one reason why not. */
        struct dra_prepared *p = malloc(sizeof *p);
        char why[512] = "";
        if (!p)
            return 0;
        if (dra_map(fuzz_driver(), a.uid, "ns", "name", &a, p, why, sizeof why)) {
            if (p->count != a.count)
                __builtin_trap();
            for (unsigned k = 0; k < p->count; k++)
                if ((strncmp(p->devs[k].uuid, "GPU-", 4) && strncmp(p->devs[k].uuid, "MIG-", 4) &&
                     !p->devs[k].placement) ||
                    (p->devs[k].share_id[0] && p->devs[k].strategy != GPU_SHARING_MPS))
                    __builtin_trap();
        } else if (!why[0]) {
            __builtin_trap();
        }
        dra_prepared_free(p);
        free(p);
    }
    /* A device name: a placement of the node's, or none. */
    char name[128];
    struct dra_placement pl;
    struct dra_slice_in in;
    snprintf(name, sizeof name, "%.*s", (int)(size < 127 ? size : 127), (const char *)data);
    dra_slice_of(fuzz_driver(), "", 0, NULL, &in);
    if (dra_placement_find(&in, name, &pl) &&
        (pl.gpu != 2 || pl.start + pl.profile->size > GPU_MIG_SLICES))
        __builtin_trap();
    dra_slice_in_free(&in);
    (void)dra_api_serves_slices((const char *)data, size);
    char pods[4][128];
    if (dra_claim_pods((const char *)data, size, "u", pods, 4) > 4)
        __builtin_trap();
    struct dra_consumer c[4];
    if (dra_pod_consumers((const char *)data, size, "claim", c, 1, 4) > 4)
        __builtin_trap();
    return 0;
}
