/* libFuzzer harness for the device plugin's request handlers: any bytes as
 * an AllocateRequest or PreferredAllocationRequest give a response or a
 * gRPC error with a reason, never a crash or leak. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grpc/grpc.h"
#include "plugin/internal.h"

static struct nvml nv;
static struct gpu_inventory inv;
static struct config cfg;
static struct plugin p;

static void fuzz_setup(void)
{
    struct err e;
    setenv("GPULET_SIM_CONTROL", "off", 1);
    setenv("GPULET_SIM_SCENARIO", "a100-2x4", 1);
    if (nvml_open(&nv, getenv("GPULET_SIM_LIB"), &e) < 0 || nvml_init(&nv, &e) < 0 ||
        gpu_inventory_build(&nv, &inv, &e) < 0)
        abort();
    cfg.list_strategy = CONFIG_LIST_ENVVAR | CONFIG_LIST_VOLUME_MOUNTS | CONFIG_LIST_CDI_CRI |
                        CONFIG_LIST_CDI_ANNOTATIONS;
    cfg.pass_device_specs = true;
    cfg.id_strategy = CONFIG_ID_INDEX; /* short IDs: "0".."7", easy for the fuzzer to hit */
    strcpy(cfg.dev_root, "/");
    strcpy(cfg.cdi_prefix, "cdi.k8s.io/");
    p.cfg = &cfg;
    p.inv = &inv;
    p.records = gpu_devices_new(&inv, 0); /* the agent's record of each GPU, all healthy */
    static struct plugin_resource *res;
    unsigned nres;
    if (plugin_resources(&cfg, &inv, &res, &nres, &e) < 0)
        abort();
    p.res = &res[0];
    plugin_build_devices(&p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!p.devs)
        fuzz_setup();
    if (size == 0)
        return 0;
    uint8_t *out = NULL;
    size_t out_len = 0;
    struct err e = {.msg = ""};
    int st = data[0] & 1 ? plugin_allocate(&p, data + 1, size - 1, &out, &out_len, &e)
                         : plugin_preferred(&p, data + 1, size - 1, &out, &out_len, &e);
    if ((st == GRPC_OK) != (out != NULL) || (st != GRPC_OK && !e.msg[0]))
        __builtin_trap();
    free(out);
    return 0;
}
