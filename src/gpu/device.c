#include "gpu/device.h"

#include "util/xmalloc.h"

const char *const gpu_sharing_names[] = {"none", "time-slicing", "mps", NULL};

struct gpu_device *gpu_devices_new(const struct gpu_inventory *inv, double now_ms)
{
    struct gpu_device *d = xcalloc(inv->count, sizeof *d);
    for (unsigned i = 0; i < inv->count; i++) {
        d[i].info = &inv->gpus[i];
        d[i].handle = inv->gpus[i].lost ? NULL : inv->gpus[i].handle;
        if (inv->gpus[i].lost)
            gpu_health_on_lost(&d[i].health, now_ms);
    }
    return d;
}

const struct gpu_health *gpu_device_health(const struct gpu_device *d, int k)
{
    return k < 0 || d->health.reason != HEALTH_OK ? &d->health : &d->mig_health[k];
}

const char *gpu_device_unhealthy(const struct gpu_device *d, int k)
{
    const struct gpu_health *h = gpu_device_health(d, k);
    return h->reason != HEALTH_OK ? h->detail : NULL;
}

bool gpu_device_healthy(const struct gpu_device *d, int k)
{
    return !gpu_device_unhealthy(d, k);
}

void gpu_device_count_xid(struct gpu_device *d, unsigned xid)
{
    unsigned k = 0;
    while (k < GPU_DEVICE_MAX_XIDS - 1 && d->xids[k].count && d->xids[k].xid != xid)
        k++;
    if (d->xids[k].xid != xid)
        d->xids[k] = (struct gpu_xid_count){xid, 0};
    d->xids[k].count++;
    d->last_xid = xid;
}

bool gpu_device_set_handle(struct gpu_device *d, nvmlDevice_t handle)
{
    if (d->handle == handle)
        return false;
    d->handle = handle;
    d->generation++;
    return true;
}
