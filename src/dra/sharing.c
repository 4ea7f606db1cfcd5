/* A claim's opaque configuration for this driver, in NVIDIA's shape
 * (resource.nvidia.com/v1beta1 GpuConfig and MigDeviceConfig: sharing with
 * strategy TimeSlicing or MPS), read into struct dra_sharing. Pure and
 * fuzzed with the claim (claim.c). */
#include "dra/dra.h"
#include "util/quantity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DRA_CONFIG_API "resource.nvidia.com/v1beta1"

/* A quantity as JSON: a string, or a plain number of bytes. */
static unsigned long long dra_json_mib(json_t *v)
{
    if (json_is_integer(v))
        return json_integer_value(v) >= 1048576 ? (unsigned long long)json_integer_value(v) >> 20 : 0;
    return quantity_mib(json_string_value(v));
}

static int dra_mps_config(json_t *mps, struct dra_sharing *s, struct err *e)
{
    if (!mps)
        return 0;
    if (!json_is_object(mps))
        return err_set(e, "sharing.mpsConfig is not an object");
    json_t *pct = json_object_get(mps, "defaultActiveThreadPercentage");
    if (pct) {
        if (!json_is_integer(pct) || json_integer_value(pct) < 1 || json_integer_value(pct) > 100)
            return err_set(e, "sharing.mpsConfig.defaultActiveThreadPercentage must be 1 to 100");
        s->thread_percentage = (unsigned)json_integer_value(pct);
    }
    json_t *mem = json_object_get(mps, "defaultPinnedDeviceMemoryLimit");
    if (mem && !(s->pinned_mib = dra_json_mib(mem)))
        return err_set(e, "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit must be a quantity of "
                          "at least 1Mi, such as 10Gi");
    json_t *per = json_object_get(mps, "defaultPerDevicePinnedMemoryLimit"), *v;
    if (per && !json_is_object(per))
        return err_set(e, "sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit is not a map");
    const char *key;
    json_object_foreach(per, key, v) {
        if (s->nlimits == DRA_MAX_LIMITS)
            return err_set(e, "sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit: more than %d "
                              "devices", DRA_MAX_LIMITS);
        struct dra_limit *l = &s->limits[s->nlimits];
        if (strlen(key) >= sizeof l->device || !(l->mib = dra_json_mib(v)))
            return err_set(e, "sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[%.64s] must be "
                              "a quantity of at least 1Mi, keyed by a device's index or UUID", key);
        snprintf(l->device, sizeof l->device, "%s", key);
        s->nlimits++;
    }
    return 0;
}

/* sharing.timeSlicingConfig: the interval NVIDIA's nvidia-smi
 * compute-policy --set-timeslice takes (0 Default to 3 Long). Whether it
 * can be applied (the claim must hold the GPU alone) is decided at
 * prepare. */
static int dra_timeslicing_config(json_t *ts, struct dra_sharing *s, struct err *e)
{
    static const char *const intervals[] = {"Default", "Short", "Medium", "Long"};
    if (!ts)
        return 0;
    const char *interval = json_string_value(json_object_get(ts, "interval"));
    if (!json_is_object(ts) || (json_object_get(ts, "interval") && !interval))
        return err_set(e, "sharing.timeSlicingConfig.interval must be a string");
    for (unsigned i = 0; interval && i < sizeof intervals / sizeof *intervals; i++)
        if (!strcmp(interval, intervals[i]))
            s->timeslice = i;
    if (!interval || s->timeslice || !strcmp(interval, "Default"))
        return 0;
    return err_set(e, "sharing.timeSlicingConfig.interval must be Default, Short, Medium or Long, "
                      "not '%.64s'", interval);
}

int dra_sharing_parse(json_t *params, struct dra_sharing *s, struct err *e)
{
    memset(s, 0, sizeof *s);
    const char *api = json_string_value(json_object_get(params, "apiVersion"));
    const char *kind = json_string_value(json_object_get(params, "kind"));
    if (!json_is_object(params))
        return err_set(e, "parameters is not an object");
    if (!api || strcmp(api, DRA_CONFIG_API))
        return err_set(e, "apiVersion must be " DRA_CONFIG_API ", not '%.64s'", api ? api : "");
    if (!kind || (strcmp(kind, "GpuConfig") && strcmp(kind, "MigDeviceConfig")))
        return err_set(e, "kind '%.64s' is not one gpulet knows (GpuConfig, MigDeviceConfig)",
                       kind ? kind : "");
    s->mig = !strcmp(kind, "MigDeviceConfig");
    json_t *sharing = json_object_get(params, "sharing");
    if (!sharing)
        return 0; /* a claim's devices are its own: nothing to set */
    const char *strategy = json_string_value(json_object_get(sharing, "strategy"));
    json_t *ts = json_object_get(sharing, "timeSlicingConfig");
    json_t *mps = json_object_get(sharing, "mpsConfig");
    if (!strategy)
        return err_set(e, "sharing.strategy is missing (TimeSlicing or MPS)");
    if (!strcmp(strategy, "TimeSlicing")) {
        if (mps)
            return err_set(e, "sharing.mpsConfig does not go with strategy TimeSlicing");
        if (s->mig)
            return err_set(e, "MigDeviceConfig takes strategy MPS only, not TimeSlicing");
        s->strategy = GPU_SHARING_TIME_SLICING;
        return dra_timeslicing_config(ts, s, e);
    }
    if (!strcmp(strategy, "MPS")) {
        if (ts)
            return err_set(e, "sharing.timeSlicingConfig does not go with strategy MPS");
        s->strategy = GPU_SHARING_MPS;
        return dra_mps_config(mps, s, e);
    }
    return err_set(e, "sharing.strategy must be TimeSlicing or MPS, not '%.64s'", strategy);
}
