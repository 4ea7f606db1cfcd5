/* libFuzzer harness for DRA's fault rules and the kubelet's health stream:
 * any eviction list and any health record give at most DRA_MAX_TAINTS
 * taints, each with a key of gpulet's table, a value the API accepts as a
 * label value and a known effect; any device names and messages pack into
 * a NodeWatchResourcesResponse that reads back the same. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra/dra.h"
#include "drahealth.pb-c.h"

static bool label_value_ok(const char *v)
{
    size_t n = strlen(v);
    if (n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = v[i];
        bool alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        if (!alnum && ((c != '-' && c != '_' && c != '.') || i == 0 || i == n - 1))
            return false;
    }
    return true;
}

static void check_taints(const uint8_t *data, size_t size)
{
    const char *nl = memchr(data, '\n', size);
    size_t speclen = nl ? (size_t)(nl - (const char *)data) : size;
    char spec[256];
    snprintf(spec, sizeof spec, "%.*s", (int)(speclen < 255 ? speclen : 255), (const char *)data);
    struct health_faults evict;
    struct err e;
    if (gpu_health_faults_parse(&evict, "fuzz", spec, &e) < 0)
        memset(&evict, 0, sizeof evict);
    struct gpu_health h = {0};
    const uint8_t *rest = nl ? (const uint8_t *)nl + 1 : data + size;
    size_t left = (size_t)(data + size - rest);
    memcpy(&h, rest, left < sizeof h ? left : sizeof h);
    h.reason = (enum health_reason)((unsigned)h.reason % HEALTH_REASONS);
    h.detail[sizeof h.detail - 1] = '\0';
    struct dra_taint t[DRA_MAX_TAINTS];
    unsigned n = dra_taints(&h, &evict, t);
    if (n > DRA_MAX_TAINTS || (h.reason == HEALTH_OK && n) || (h.reason != HEALTH_OK && !n))
        __builtin_trap();
    for (unsigned k = 0; k < n; k++) {
        if (strncmp(t[k].key, DRA_DRIVER "/", strlen(DRA_DRIVER) + 1) && strncmp(t[k].key, "gpulet.io/", 10))
            __builtin_trap();
        if (!label_value_ok(t[k].value) ||
            (strcmp(t[k].effect, "NoSchedule") && strcmp(t[k].effect, "NoExecute")))
            __builtin_trap();
        char when[32];
        gpu_health_time(t[k].since_ms, when, sizeof when);
        if (strlen(when) >= sizeof when)
            __builtin_trap();
    }
}

static void check_health(const uint8_t *data, size_t size)
{
    struct dra_device_health devs[4];
    memset(devs, 0, sizeof devs);
    unsigned n = size ? data[0] % 5 : 0;
    size_t at = 1;
    for (unsigned k = 0; k < n; k++) {
        struct dra_device_health *d = &devs[k];
        d->pool = "node";
        size_t take = at < size ? (data[at] % 32) : 0;
        for (size_t j = 0; j < take && at + 1 + j < size; j++)
            d->name[j] = (char)(data[at + 1 + j] | 1); /* no NUL inside */
        at += take + 1;
        d->healthy = at < size && (data[at] & 1);
        snprintf(d->message, sizeof d->message, "%.*s", (int)(at < size ? (size - at) % 200 : 0),
                 at < size ? (const char *)data + at : "");
        d->updated = (long long)size;
    }
    size_t len;
    uint8_t *msg = dra_health_pack(devs, n, &len);
    V1alpha1__NodeWatchResourcesResponse *r = v1alpha1__node_watch_resources_response__unpack(NULL, len, msg);
    if (!r || r->n_devices != n)
        __builtin_trap();
    for (unsigned k = 0; k < n; k++)
        if (strcmp(r->devices[k]->device->device_name, devs[k].name) ||
            (r->devices[k]->health == V1ALPHA1__HEALTH_STATUS__HEALTHY) != devs[k].healthy ||
            strcmp(r->devices[k]->message, devs[k].message))
            __builtin_trap();
    v1alpha1__node_watch_resources_response__free_unpacked(r, NULL);
    free(msg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_taints(data, size);
    check_health(data, size);
    return 0;
}
