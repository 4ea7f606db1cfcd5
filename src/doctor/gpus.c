/* The GPUs through NVML: it initialises and every GPU answers; then what
 * the driver says of each (pending retirements and remaps, uncorrected
 * ECC, persistence, the fabric, MIG). Every NVML call is named in the step
 * first, so a call that hangs is named when the check runs out of time. */
#include "doctor/internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "gpu/lane.h"
#include "util/strbuf.h"
#include "util/xmalloc.h"

/* Which library: the simulator or --nvml where given, else the driver's
 * under the root (on the host: the linker's search). */
static int gpus_start(struct doctor *d, struct err *e)
{
    const struct config *c = d->o->cfg;
    char read_root[CONFIG_PATH_MAX * 2], lib[CONFIG_PATH_MAX * 3];
    const char *path = c->nvml_path[0] ? c->nvml_path : NULL;
    doctor_path(d, read_root, sizeof read_root, c->driver_root, NULL);
    if (!path && !c->simulate[0] && strcmp(d->o->root, "/") &&
        driver_find_library(read_root, "libnvidia-ml.so.1", lib, sizeof lib) == 0)
        path = lib;
    doctor_step(d, "loading NVML and nvmlInit");
    return nvml_start(&d->nvml, c->simulate[0] ? c->simulate : NULL, path, e);
}

/* One GPU, read on its own lane and timed: its IDs, and a live value (the
 * temperature, which the driver asks the GPU for). */
struct gpus_job {
    struct gpu_lane_job job;         /* first: the lane hands it back */
    struct nvml *n;
    struct gpu_info g;
    char why[128];                   /* "" or what failed */
    double ms;                       /* how long it took */
};

static void gpus_run(struct gpu_lane_job *job)
{
    struct gpus_job *j = (struct gpus_job *)job;
    struct nvml *n = j->n;
    struct gpu_info *g = &j->g;
    double t0 = nvml_clock_ms();
    nvmlReturn_t rc = NVML_CALL(n, DeviceGetHandleByIndex, g->index, &g->handle);
    if (rc == NVML_SUCCESS)
        rc = NVML_CALL(n, DeviceGetUUID, g->handle, g->uuid, sizeof g->uuid);
    if (rc == NVML_SUCCESS)
        rc = NVML_CALL(n, DeviceGetName, g->handle, g->name, sizeof g->name);
    nvmlPciInfo_t pci;
    if (rc == NVML_SUCCESS && (rc = NVML_CALL(n, DeviceGetPciInfo, g->handle, &pci)) == NVML_SUCCESS)
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%s", pci.busId);
    if (rc == NVML_SUCCESS)
        rc = NVML_CALL(n, DeviceGetMinorNumber, g->handle, &g->minor);
    unsigned temp;
    if (rc == NVML_SUCCESS && n->DeviceGetTemperature)
        NVML_CALL(n, DeviceGetTemperature, g->handle, NVML_TEMPERATURE_GPU, &temp);
    g->lost = rc == NVML_ERROR_GPU_IS_LOST;
    if (rc != NVML_SUCCESS)
        snprintf(j->why, sizeof j->why, "%s", nvml_strerror(n, rc));
    j->ms = nvml_clock_ms() - t0;
}

/* Every GPU at once, each on its lane, within most of the check's time: a
 * GPU that has not answered by then is hung, named with the call it is in,
 * and left out of the later checks; the others are read all the same. */
static void gpus_read(struct doctor *d, struct strbuf *bad, unsigned *failed, unsigned *lost,
                      double *slowest)
{
    struct gpu_inventory *inv = &d->inv;
    struct err e;
    if (gpu_lanes_start(&d->lanes, inv->count, &e) < 0) {
        strbuf_printf(bad, "%s", e.msg);
        *failed = inv->count;
        return;
    }
    d->gpu_jobs = xcalloc(inv->count, sizeof *d->gpu_jobs);
    for (unsigned i = 0; i < inv->count; i++) {
        struct gpus_job *j = &d->gpu_jobs[i];
        j->job.run = gpus_run;
        j->n = &d->nvml;
        j->g.index = inv->gpus[i].index = i;
        gpu_lanes_post(d->lanes, i, &j->job);
    }
    double bound_s = d->o->timeout_ms * 0.75 / 1000.0;
    uint64_t deadline = uv_hrtime() + (uint64_t)(bound_s * 1e9);
    for (unsigned i = 0; i < inv->count; i++) {
        struct gpus_job *j = &d->gpu_jobs[i];
        if (!gpu_lanes_wait(d->lanes, i, &j->job, deadline)) {
            const char *call;
            gpu_lanes_busy(d->lanes, i, &call);
            strbuf_printf(bad, "%sGPU %u: hung (no answer in %.1f s, in %s)", bad->len ? "; " : "",
                          i, bound_s, call ? call : "an NVML call");
            ++*failed;
            continue;
        }
        inv->gpus[i] = j->g;
        if (j->ms > *slowest)
            *slowest = j->ms;
        if (j->why[0]) {
            strbuf_printf(bad, "%sGPU %u: %s", bad->len ? "; " : "", i, j->why);
            ++*failed;
            *lost += j->g.lost;
        }
    }
}

void doctor_nvml(struct doctor *d, struct doctor_result *r)
{
    struct err e;
    /* The simulated GPUs and their faults are the agent's process's: a
     * simulator of doctor's own would be another node. */
    if (d->simulated && doctor_agent_view(d)) {
        /* NVML answers for every GPU but the lost ones (XID 79, GPU_IS_LOST). */
        struct strbuf lost = {0};
        for (unsigned i = 0; i < d->agent_n; i++)
            if (d->agent_gpus[i].mig < 0 && d->agent_gpus[i].health.reason == HEALTH_LOST)
                strbuf_printf(&lost, "%s%u", lost.len ? ", " : "", d->agent_gpus[i].index);
        if (lost.len)
            doctor_set(r, DOCTOR_FAIL, "a lost GPU answers again only after a reset (gpulet sim "
                       "recover on a simulated node)", "the agent at %s serves %u simulated GPU(s) "
                       "(--simulate %s), and NVML has lost GPU %s", d->agent_socket,
                       d->agent_ngpus, d->o->cfg->simulate, lost.data);
        else
            doctor_set(r, DOCTOR_PASS, NULL, "the agent at %s serves %u simulated GPU(s) "
                       "(--simulate %s); doctor asks it rather than open a simulator of its own",
                       d->agent_socket, d->agent_ngpus, d->o->cfg->simulate);
        strbuf_free(&lost);
        return;
    }
    if (gpus_start(d, &e) < 0) {
        bool mismatch = strstr(e.msg, "mismatch") != NULL;
        doctor_set(r, DOCTOR_FAIL, mismatch ? "reboot the node (or reload the nvidia modules) so "
                   "that the module is the installed driver's" : "see the kernel module and "
                   "driver library checks above", "%s", e.msg);
        return;
    }
    struct nvml *n = &d->nvml;
    struct gpu_inventory *inv = &d->inv;
    doctor_step(d, "nvmlSystemGetDriverVersion");
    n->SystemGetDriverVersion(inv->driver_version, sizeof inv->driver_version);
    snprintf(inv->library, sizeof inv->library, "%s", n->path);
    unsigned count = 0;
    doctor_step(d, "nvmlDeviceGetCount");
    nvmlReturn_t rc = n->DeviceGetCount(&count);
    if (rc != NVML_SUCCESS || count == 0) {
        doctor_set(r, DOCTOR_FAIL, "check the GPUs are on the PCI bus (lspci -d 10de:) and not "
                   "excluded (NVreg_ExcludedGpus)", "NVML %s sees no GPU%s%s", inv->driver_version,
                   rc ? ": " : "", rc ? nvml_strerror(n, rc) : "");
        d->nvml_ok = true;
        return;
    }
    inv->gpus = xcalloc(count, sizeof *inv->gpus);
    inv->count = count;
    struct strbuf bad = {0};
    unsigned failed = 0, lost = 0;
    double slowest = 0;
    doctor_step(d, "reading each GPU on a thread of its own");
    gpus_read(d, &bad, &failed, &lost, &slowest);
    d->nvml_ok = true;
    if (d->kernel_version[0] && strcmp(d->kernel_version, inv->driver_version))
        doctor_set(r, DOCTOR_FAIL, "reboot the node so that the kernel module is the installed "
                   "driver's", "NVML reports driver %s, the kernel module is %s",
                   inv->driver_version, d->kernel_version);
    else if (bad.len)
        doctor_set(r, DOCTOR_FAIL, lost ? "a GPU fell off the bus: drain the node and reboot it "
                   "(a reset rarely brings it back)" : "drain the node, reset the GPU "
                   "(nvidia-smi -r -i N) or reboot", "%u of %u GPUs do not answer: %s",
                   failed, count, bad.data);
    else
        doctor_set(r, DOCTOR_PASS, NULL, "NVML from %s, driver %s: %u GPU(s) answer (%s), the "
                   "slowest in %.1f ms", n->path, inv->driver_version, count, inv->gpus[0].name,
                   slowest);
    strbuf_free(&bad);
}

/* GPUs NVML gave a handle for. */
static bool gpus_usable(const struct doctor *d, unsigned i)
{
    return d->inv.gpus[i].handle && !d->inv.gpus[i].lost;
}

static bool gpus_skip(struct doctor *d, struct doctor_result *r)
{
    if (d->nvml_ok && d->inv.count)
        return false;
    if (d->simulated && d->agent_ngpus)
        doctor_set(r, DOCTOR_SKIP, NULL, "the simulated GPUs are the agent's: gpulet list shows "
                   "them as it has them");
    else
        doctor_set(r, DOCTOR_SKIP, NULL, "not run: NVML did not start or sees no GPU");
    return true;
}

/* Adds one GPU's finding to a check's message; the worst finding's fix is
 * the check's. */
struct gpus_findings {
    struct strbuf msg;
    enum doctor_status worst;
    const char *fix;
};

static void gpus_found(struct gpus_findings *f, enum doctor_status s, const char *fix,
                       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void gpus_found(struct gpus_findings *f, enum doctor_status s, const char *fix,
                       const char *fmt, ...)
{
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    strbuf_printf(&f->msg, "%s%s", f->msg.len ? "; " : "", line);
    if (s > f->worst) {
        f->worst = s;
        f->fix = fix;
    }
}

/* What the running agent says of its GPUs: a GPU it has unhealthy fails
 * here as it fails in `gpulet health`, whatever the driver's counters say. */
static void gpus_agent_health(struct doctor *d, struct gpus_findings *f)
{
    if (!doctor_agent_view(d))
        return;
    struct strbuf bad = {0};
    doctor_agent_unhealthy(d, &bad);
    if (bad.len)
        gpus_found(f, DOCTOR_FAIL, "the agent serves no new pods on it until it recovers: see "
                   "gpulet health, and docs/health.md for what each fault needs",
                   "the agent at %s has %s", d->agent_socket, bad.data);
    strbuf_free(&bad);
}

void doctor_gpu_health(struct doctor *d, struct doctor_result *r)
{
    struct gpus_findings f = {{0}, DOCTOR_PASS, NULL};
    if (d->simulated && doctor_agent_view(d)) {
        gpus_agent_health(d, &f);
        if (f.worst == DOCTOR_PASS)
            doctor_set(r, DOCTOR_PASS, NULL, "the agent at %s has its %u GPU(s) healthy",
                       d->agent_socket, d->agent_ngpus);
        else
            doctor_set(r, f.worst, f.fix, "%s", f.msg.data);
        strbuf_free(&f.msg);
        return;
    }
    if (gpus_skip(d, r))
        return;
    static const char *const reset = "drain the node and reset the GPU (nvidia-smi -r -i N) to "
                                     "apply the pending remap or retirement";
    struct nvml *n = &d->nvml;
    for (unsigned i = 0; i < d->inv.count; i++) {
        if (!gpus_usable(d, i))
            continue;
        nvmlDevice_t h = d->inv.gpus[i].handle;
        nvmlEnableState_t pending;
        unsigned corr, unc, remap_pending, remap_failed;
        unsigned long long ecc;
        doctor_step(d, "GPU %u: nvmlDeviceGetRemappedRows", i);
        if (n->DeviceGetRemappedRows &&
            n->DeviceGetRemappedRows(h, &corr, &unc, &remap_pending, &remap_failed) == NVML_SUCCESS) {
            if (remap_failed)
                gpus_found(&f, DOCTOR_FAIL, "a failed row remap means the GPU needs replacing: "
                           "drain the node and return the GPU", "GPU %u: a row remap failed", i);
            else if (remap_pending)
                gpus_found(&f, DOCTOR_WARN, reset, "GPU %u: a row remap waits for a reset", i);
        }
        doctor_step(d, "GPU %u: nvmlDeviceGetRetiredPagesPendingStatus", i);
        if (n->DeviceGetRetiredPagesPendingStatus &&
            n->DeviceGetRetiredPagesPendingStatus(h, &pending) == NVML_SUCCESS &&
            pending == NVML_FEATURE_ENABLED)
            gpus_found(&f, DOCTOR_WARN, reset, "GPU %u: a page retirement waits for a reset", i);
        doctor_step(d, "GPU %u: nvmlDeviceGetTotalEccErrors", i);
        if (n->DeviceGetTotalEccErrors &&
            n->DeviceGetTotalEccErrors(h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC,
                                       &ecc) == NVML_SUCCESS && ecc)
            gpus_found(&f, DOCTOR_FAIL, "drain the node and reset the GPU; replace it if the "
                       "errors come back", "GPU %u: %llu uncorrected ECC error(s) since its last "
                       "reset", i, ecc);
    }
    gpus_agent_health(d, &f);
    if (f.worst == DOCTOR_PASS)
        doctor_set(r, DOCTOR_PASS, NULL, "no pending retirement or remap, no uncorrected ECC "
                   "error, on %u GPU(s)%s%s%s", d->inv.count, d->agent_ngpus ? "; the agent at " : "",
                   d->agent_ngpus ? d->agent_socket : "", d->agent_ngpus ? " has them healthy" : "");
    else
        doctor_set(r, f.worst, f.fix, "%s", f.msg.data);
    strbuf_free(&f.msg);
}

/* "0, 1, 5" into out. */
static void gpus_list(struct strbuf *out, const bool *which, unsigned count)
{
    for (unsigned i = 0; i < count; i++)
        if (which[i])
            strbuf_printf(out, "%s%u", out->len ? ", " : "", i);
}

void doctor_persistence(struct doctor *d, struct doctor_result *r)
{
    if (gpus_skip(d, r))
        return;
    bool *off = xcalloc(d->inv.count, sizeof *off);
    unsigned answered = 0, noff = 0;
    for (unsigned i = 0; i < d->inv.count; i++) {
        nvmlEnableState_t mode;
        doctor_step(d, "GPU %u: nvmlDeviceGetPersistenceMode", i);
        if (!gpus_usable(d, i) || !d->nvml.DeviceGetPersistenceMode ||
            d->nvml.DeviceGetPersistenceMode(d->inv.gpus[i].handle, &mode) != NVML_SUCCESS)
            continue;
        answered++;
        noff += off[i] = mode == NVML_FEATURE_DISABLED;
    }
    struct strbuf list = {0};
    gpus_list(&list, off, d->inv.count);
    if (!answered)
        doctor_set(r, DOCTOR_SKIP, NULL, "NVML does not report persistence mode here");
    else if (noff)
        doctor_set(r, DOCTOR_WARN, "run the persistence daemon: systemctl enable --now "
                   "nvidia-persistenced", "persistence mode is off on GPU(s) %s: the driver "
                   "tears the GPU down between jobs, and each start pays for bringing it up",
                   list.data);
    else
        doctor_set(r, DOCTOR_PASS, NULL, "persistence mode is on on %u GPU(s)", answered);
    strbuf_free(&list);
    free(off);
}

void doctor_fabric(struct doctor *d, struct doctor_result *r)
{
    if (gpus_skip(d, r))
        return;
    struct strbuf bad = {0};
    unsigned on_fabric = 0;
    static const char *const states[] = {"not supported", "not started", "in progress", "completed"};
    for (unsigned i = 0; i < d->inv.count; i++) {
        nvmlGpuFabricInfo_t f;
        doctor_step(d, "GPU %u: nvmlDeviceGetGpuFabricInfo", i);
        if (!gpus_usable(d, i) || !d->nvml.DeviceGetGpuFabricInfo ||
            d->nvml.DeviceGetGpuFabricInfo(d->inv.gpus[i].handle, &f) != NVML_SUCCESS ||
            f.state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED)
            continue;
        on_fabric++;
        if (f.state != NVML_GPU_FABRIC_STATE_COMPLETED)
            strbuf_printf(&bad, "%sGPU %u: registration %s", bad.len ? "; " : "", i,
                          f.state < 4 ? states[f.state] : "unknown");
        else if (f.status != NVML_SUCCESS)
            strbuf_printf(&bad, "%sGPU %u: registration failed: %s", bad.len ? "; " : "", i,
                          nvml_strerror(&d->nvml, (nvmlReturn_t)f.status));
    }
    if (!on_fabric)
        doctor_set(r, DOCTOR_SKIP, NULL, "no GPU on an NVSwitch fabric");
    else if (bad.len)
        doctor_set(r, DOCTOR_FAIL, "start the fabric manager, of the driver's version: "
                   "systemctl enable --now nvidia-fabricmanager; its log says why it stopped",
                   "the fabric manager has not registered every GPU: %s (CUDA fails on them)",
                   bad.data);
    else
        doctor_set(r, DOCTOR_PASS, NULL, "%u GPU(s) registered in the NVSwitch fabric", on_fabric);
    strbuf_free(&bad);
}

void doctor_mig(struct doctor *d, struct doctor_result *r)
{
    if (gpus_skip(d, r))
        return;
    const struct config *c = d->o->cfg;
    bool *on = xcalloc(d->inv.count, sizeof *on), *pending = xcalloc(d->inv.count, sizeof *pending);
    bool *off = xcalloc(d->inv.count, sizeof *off);
    unsigned capable = 0, non = 0, npending = 0, noff = 0;
    for (unsigned i = 0; i < d->inv.count; i++) {
        unsigned cur, next;
        doctor_step(d, "GPU %u: nvmlDeviceGetMigMode", i);
        if (!gpus_usable(d, i) || !d->nvml.DeviceGetMigMode ||
            d->nvml.DeviceGetMigMode(d->inv.gpus[i].handle, &cur, &next) != NVML_SUCCESS)
            continue;
        capable++;
        /* The device plugin's MIG GPUs need a strategy; DRA's are their
         * MIG devices whatever it says. A --dra-mig GPU needs MIG on. */
        struct gpu_info as_mig = d->inv.gpus[i];
        as_mig.mig_mode = NVML_DEVICE_MIG_ENABLE;
        non += on[i] = cur == NVML_DEVICE_MIG_ENABLE && !config_dra_takes(c, &d->inv.gpus[i]);
        noff += off[i] = cur != NVML_DEVICE_MIG_ENABLE && config_dra_mig(c, &as_mig);
        npending += pending[i] = cur != next;
    }
    struct strbuf a = {0}, b = {0}, o = {0};
    gpus_list(&a, pending, d->inv.count);
    gpus_list(&b, on, d->inv.count);
    gpus_list(&o, off, d->inv.count);
    if (!capable)
        doctor_set(r, DOCTOR_SKIP, NULL, "no MIG-capable GPU");
    else if (npending)
        doctor_set(r, DOCTOR_WARN, "reset the GPU with no process on it (nvidia-smi -r -i N), or "
                   "reboot, to apply it", "a MIG mode change waits for a reset on GPU(s) %s",
                   a.data);
    else if (noff)
        doctor_set(r, DOCTOR_WARN, "enable MIG on them (nvidia-smi -i N -mig 1, then a reset), or "
                   "leave them out of --dra-mig", "--dra-mig lists GPU(s) %s, whose MIG mode is off: "
                   "they are published whole, and no MIG device is made per claim", o.data);
    else if (non && c->mig_strategy == CONFIG_MIG_NONE)
        doctor_set(r, DOCTOR_WARN, "use --mig-strategy mixed (or single), or disable MIG on them",
                   "MIG is on on GPU(s) %s with --mig-strategy none: they are advertised whole, "
                   "and CUDA in a container sees no device on them", b.data);
    else
        doctor_set(r, DOCTOR_PASS, NULL, "MIG is %s on %u capable GPU(s), no change pending",
                   non ? "on on some" : "off", capable);
    strbuf_free(&a);
    strbuf_free(&b);
    strbuf_free(&o);
    free(on);
    free(off);
    free(pending);
}
