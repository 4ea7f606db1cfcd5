/* A claim shared through MPS (GpuConfig sharing.strategy MPS) gets an MPS
 * control daemon of its own, for its devices only, with the claim's limits
 * as the daemon's defaults, as NVIDIA's driver does; its containers reach
 * it through a CDI device of the claim (the pipe directory and the shared
 * /dev/shm). The daemon is gpulet's (src/mps), as for a shared resource. */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "mps/mps.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define DRA_MPS_PIPE "/tmp/nvidia-mps"   /* where a container finds the pipe: MPS's default */

struct dra_mps {
    struct dra *d;
    char uid[64];
    char name[80];                       /* its directory under --mps-root: claim-<uid> */
    struct mps_daemon *daemon;
    bool up;
};

bool dra_prepared_mps(const struct dra_prepared *p)
{
    for (unsigned k = 0; k < p->count; k++)
        if (p->devs[k].strategy == GPU_SHARING_MPS)
            return true;
    return false;
}

static struct dra_mps **dra_mps_find(const struct dra *d, const char *uid)
{
    for (unsigned i = 0; i < d->nmps; i++)
        if (!strcmp(d->mps[i]->uid, uid))
            return &d->mps[i];
    return NULL;
}

static void dra_mps_state(void *ctx, bool up)
{
    struct dra_mps *m = ctx;
    m->up = up;
    dra_prepare_wake(m->d); /* up or down: the prepares waiting for it answer */
}

static void dra_mps_spec_name(const char *uid, char *out, size_t len)
{
    snprintf(out, len, DRA_DRIVER "-claim_%s.json", uid);
}

/* The claim's CDI device: what its containers need to reach the daemon. */
static int dra_mps_spec(struct dra *d, const struct dra_mps *m, struct err *e)
{
    json_t *mounts = jsonx_ok(json_array());
    struct config_mps_dirs dirs;
    config_mps_dirs(d->cfg, m->name, &dirs);
    const char *paths[][2] = {{dirs.pipe, DRA_MPS_PIPE}, {dirs.shm, "/dev/shm"}};
    for (size_t i = 0; i < 2; i++) {
        json_t *mt = jsonx_ok(json_object()), *opts = jsonx_ok(json_array());
        jsonx_set(mt, "hostPath", jsonx_ok(json_string(paths[i][0])));
        jsonx_set(mt, "containerPath", jsonx_ok(json_string(paths[i][1])));
        jsonx_append(opts, jsonx_ok(json_string("rbind")));
        jsonx_append(opts, jsonx_ok(json_string("rw")));
        jsonx_set(mt, "options", opts);
        jsonx_append(mounts, mt);
    }
    json_t *env = jsonx_ok(json_array()), *edits = jsonx_ok(json_object());
    jsonx_append(env, jsonx_ok(json_string("CUDA_MPS_PIPE_DIRECTORY=" DRA_MPS_PIPE)));
    jsonx_set(edits, "env", env);
    jsonx_set(edits, "mounts", mounts);
    json_t *dev = jsonx_ok(json_object()), *devs = jsonx_ok(json_array());
    jsonx_set(dev, "name", jsonx_ok(json_string(m->uid)));
    jsonx_set(dev, "containerEdits", edits);
    jsonx_append(devs, dev);
    json_t *spec = jsonx_ok(json_object());
    jsonx_set(spec, "cdiVersion", jsonx_ok(json_string(CDI_VERSION)));
    jsonx_set(spec, "kind", jsonx_ok(json_string(DRA_CLAIM_CDI_KIND)));
    jsonx_set(spec, "devices", devs);
    struct strbuf text = {0};
    jsonx_dump(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER, &text);
    json_decref(spec);
    char name[160];
    dra_mps_spec_name(m->uid, name, sizeof name);
    bool written;
    int rc = cdi_spec_write(d->cfg->cdi_spec_dir, name, &text, &written, e);
    strbuf_free(&text);
    return rc;
}

/* What the claim's daemon serves: its MPS devices, each a whole GPU. */
static int dra_mps_spec_of(const struct dra_prepared *p, struct mps_spec *spec, struct err *e)
{
    memset(spec, 0, sizeof *spec);
    snprintf(spec->name, sizeof spec->name, "claim-%s", p->uid);
    spec->thread_percentage = p->thread_percentage ? p->thread_percentage : 100;
    for (unsigned k = 0; k < p->count; k++) {
        if (p->devs[k].strategy != GPU_SHARING_MPS)
            continue;
        if (strncmp(p->devs[k].uuid, "GPU-", 4))
            return err_set(e, "MPS: device %s (%s) is not a whole GPU", p->devs[k].device,
                           p->devs[k].uuid);
        snprintf(spec->uuids[spec->ngpus], sizeof spec->uuids[0], "%s", p->devs[k].uuid);
        spec->memory_mib[spec->ngpus++] = p->devs[k].pinned_mib;
    }
    return 0;
}

int dra_mps_start(struct dra *d, const struct dra_prepared *p, struct err *e)
{
    if (!dra_prepared_mps(p) || dra_mps_find(d, p->uid))
        return 0;
    char control[CONFIG_PATH_MAX];
    struct dra_mps *m = xcalloc(1, sizeof *m);
    m->d = d;
    snprintf(m->uid, sizeof m->uid, "%s", p->uid);
    struct mps_hooks hooks = {.on_state = dra_mps_state, .ctx = m};
    struct mps_spec spec;
    if (dra_mps_spec_of(p, &spec, e) == 0)
        snprintf(m->name, sizeof m->name, "%s", spec.name);
    if (!m->name[0] || mps_find_control(d->cfg, control, sizeof control, e) < 0 ||
        dra_mps_spec(d, m, e) < 0 ||
        mps_start(&m->daemon, d->loop, d->cfg, &spec, control, &hooks, e) < 0) {
        free(m);
        return -1;
    }
    d->mps = xrealloc(d->mps, (d->nmps + 1) * sizeof *d->mps);
    d->mps[d->nmps++] = m;
    return 0;
}

bool dra_mps_ready(const struct dra *d, const char *uid)
{
    struct dra_mps **m = dra_mps_find(d, uid);
    return !m || (*m)->up;
}

/* Stops a claim's daemon; unprepared, its directory and CDI spec go too.
 * At gpulet's stop they stay: a container of the claim that restarts
 * meanwhile still finds its CDI device, and the daemon started again
 * (from the checkpoint) serves the directory the containers mounted. */
static void dra_mps_end(struct dra *d, struct dra_mps **at, bool unprepared)
{
    struct dra_mps *m = *at;
    *at = d->mps[--d->nmps];
    mps_stop(m->daemon, unprepared); /* the daemon reads no more of m once stopping */
    if (unprepared) {
        char path[CONFIG_PATH_MAX + 192], name[160];
        dra_mps_spec_name(m->uid, name, sizeof name);
        snprintf(path, sizeof path, "%s/%s", d->cfg->cdi_spec_dir, name);
        unlink(path);
    }
    free(m);
}

void dra_mps_stop(struct dra *d, const char *uid)
{
    struct dra_mps **at = dra_mps_find(d, uid);
    if (at)
        dra_mps_end(d, at, true);
}

void dra_mps_stop_all(struct dra *d)
{
    while (d->nmps)
        dra_mps_end(d, &d->mps[0], false);
    free(d->mps);
    d->mps = NULL;
}
