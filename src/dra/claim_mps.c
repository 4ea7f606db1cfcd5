/* A claim shared through MPS (GpuConfig sharing.strategy MPS) gets an MPS
 * control daemon of its own, for its devices only, with the claim's limits
 * as the daemon's defaults, as NVIDIA's driver does; its containers reach
 * it through a CDI device of the claim (the pipe directory and the shared
 * /dev/shm). The daemon is gpulet's (src/mps), as for a shared resource.
 *
 * A share of a GPU (consumable capacity) uses its GPU's one daemon, shared
 * by every share of the GPU, started with the first and stopped after the
 * last; the claim's CDI device sets its containers' own limits, what the
 * share consumed (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, and
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE where it consumed compute), which the
 * MPS server enforces (docs/real-gpu.md). */
#include "dra/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "mps/mps.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define DRA_MPS_PIPE "/tmp/nvidia-mps"   /* where a container finds the pipe: MPS's default */

struct dra_mps {
    struct dra *d;
    char key[112];                       /* the claim's UID, or share-<GPU UUID> */
    char name[112];                      /* its directory under --mps-root: claim-<uid>, or the key */
    struct mps_daemon *daemon;
    bool up;
};

static void dra_mps_spec_name(const char *uid, char *out, size_t len)
{
    snprintf(out, len, DRA_DRIVER "-claim_%s.json", uid);
}

/* A claim's CDI spec's one writer. */
struct dra_spec {
    char uid[64];
    struct writer *w;
};

/* The writers of claims no longer prepared whose writes have ended go. */
static void dra_specs_trim(struct dra *d)
{
    for (unsigned i = 0; i < d->claims.nspecs;) {
        struct dra_spec *s = &d->claims.specs[i];
        if (!d->stopping && (dra_prepared_find(d, s->uid) || writer_busy(s->w))) {
            i++;
            continue;
        }
        writer_close(s->w); /* freed once its writes have ended */
        *s = d->claims.specs[--d->claims.nspecs];
    }
}

/* Claim uid's spec's writer, made the first time. */
static struct writer *dra_spec_writer(struct dra *d, const char *uid)
{
    dra_specs_trim(d);
    for (unsigned i = 0; i < d->claims.nspecs; i++)
        if (!strcmp(d->claims.specs[i].uid, uid))
            return d->claims.specs[i].w;
    char name[160];
    dra_mps_spec_name(uid, name, sizeof name);
    d->claims.specs = xrealloc(d->claims.specs, (d->claims.nspecs + 1) * sizeof *d->claims.specs);
    struct dra_spec *s = &d->claims.specs[d->claims.nspecs++];
    snprintf(s->uid, sizeof s->uid, "%s", uid);
    s->w = cdi_spec_writer(d->loop, d->cfg->cdi_spec_dir, name);
    return s->w;
}

bool dra_prepared_mps(const struct dra_prepared *p)
{
    for (unsigned k = 0; k < p->count; k++)
        if (p->devs[k].strategy == GPU_SHARING_MPS)
            return true;
    return false;
}

const struct dra_prepared_device *dra_prepared_share(const struct dra_prepared *p)
{
    for (unsigned k = 0; k < p->count; k++)
        if (p->devs[k].share_id[0])
            return &p->devs[k];
    return NULL;
}

/* The daemon p's containers use: its GPU's for a share, else its own. */
static void dra_mps_key(const struct dra_prepared *p, char *out, size_t len)
{
    const struct dra_prepared_device *share = dra_prepared_share(p);
    if (share)
        snprintf(out, len, "share-%.72s", share->uuid); /* a UUID: 40; fits an mps_spec name */
    else
        snprintf(out, len, "%s", p->uid);
}

static struct dra_mps **dra_mps_find(const struct dra *d, const char *key)
{
    for (unsigned i = 0; i < d->claims.nmps; i++)
        if (!strcmp(d->claims.mps[i]->key, key))
            return &d->claims.mps[i];
    return NULL;
}

static void dra_mps_state(void *ctx, bool up)
{
    struct dra_mps *m = ctx;
    m->up = up;
    dra_prepare_wake(m->d); /* up or down: the prepares waiting for it answer */
    dra_health_send(m->d);  /* its claims' devices, in the pods' status */
}

/* The claim's CDI device (mps_client: what its containers need to reach
 * the daemon, and a share's limits: what it consumed of its GPU, the sum
 * where the claim has several shares of it); written on the worker pool,
 * j's answer (if any) waiting for it. Its removal at unprepare comes
 * after: the kubelet unprepares only a claim whose prepare it has had
 * answered. */
static void dra_mps_spec(struct dra *d, const struct dra_prepared *p, const struct dra_mps *m,
                         struct dra_job *j)
{
    unsigned long long mib = 0;
    unsigned compute = 0;
    for (unsigned k = 0; k < p->count; k++)
        if (p->devs[k].share_id[0]) {
            mib += p->devs[k].pinned_mib;
            compute += p->devs[k].share_compute;
        }
    char pinned[32];
    snprintf(pinned, sizeof pinned, "0=%lluM", mib);
    struct cdi_edits edits;
    mps_client(d->cfg, m->name, DRA_MPS_PIPE, compute, mib ? pinned : NULL, &edits);
    struct strbuf text = {0};
    cdi_edits_spec(DRA_CLAIM_CDI_KIND, p->uid, &edits, &text);
    struct writer *w = dra_spec_writer(d, p->uid);
    writer_put(w, &text);
    if (j)
        dra_job_wait(j, w);
}

/* What the claim's daemon serves: its MPS devices, each a whole GPU; a
 * share's GPU's daemon, that GPU with no default limit (each share's
 * client has its own). */
static int dra_mps_spec_of(const struct dra_prepared *p, struct mps_spec *spec, struct err *e)
{
    memset(spec, 0, sizeof *spec);
    const struct dra_prepared_device *share = dra_prepared_share(p);
    if (share) {
        dra_mps_key(p, spec->name, sizeof spec->name); /* the key is its name */
        spec->thread_percentage = 100;
        spec->ngpus = 1;
        snprintf(spec->uuids[0], sizeof spec->uuids[0], "%s", share->uuid);
        return 0;
    }
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

int dra_mps_start(struct dra *d, const struct dra_prepared *p, struct dra_job *j, struct err *e)
{
    if (!dra_prepared_mps(p))
        return 0;
    char key[112];
    dra_mps_key(p, key, sizeof key);
    struct dra_mps **have = dra_mps_find(d, key);
    if (have) { /* a share's GPU's daemon runs: the claim's CDI device is its own */
        if (dra_prepared_share(p))
            dra_mps_spec(d, p, *have, j);
        return 0;
    }
    char control[CONFIG_PATH_MAX];
    struct dra_mps *m = xcalloc(1, sizeof *m);
    m->d = d;
    snprintf(m->key, sizeof m->key, "%s", key);
    struct mps_hooks hooks = {.on_state = dra_mps_state, .ctx = m};
    struct mps_spec spec;
    if (dra_mps_spec_of(p, &spec, e) == 0)
        snprintf(m->name, sizeof m->name, "%s", spec.name);
    if (!m->name[0] || mps_find_control(d->cfg, control, sizeof control, e) < 0 ||
        mps_start(&m->daemon, d->loop, d->cfg, &spec, control, &hooks, e) < 0) {
        free(m);
        return -1;
    }
    dra_mps_spec(d, p, m, j);
    d->claims.mps = xrealloc(d->claims.mps, (d->claims.nmps + 1) * sizeof *d->claims.mps);
    d->claims.mps[d->claims.nmps++] = m;
    return 0;
}

bool dra_mps_ready(const struct dra *d, const char *uid)
{
    const struct dra_prepared *p = dra_prepared_find(d, uid);
    char key[112];
    if (p)
        dra_mps_key(p, key, sizeof key);
    else
        snprintf(key, sizeof key, "%s", uid);
    struct dra_mps **m = dra_mps_find(d, key);
    return !m || (*m)->up;
}

/* Unprepared, a claim's daemon ends, and its directory and CDI spec go
 * too. At gpulet's stop they stay, and the daemon runs on with its
 * clients: the next gpulet adopts it (from the checkpoint), and a
 * container of the claim that restarts meanwhile still finds it. */
static void dra_mps_end(struct dra *d, struct dra_mps **at, bool unprepared)
{
    struct dra_mps *m = *at;
    *at = d->claims.mps[--d->claims.nmps];
    /* the daemon reads no more of m once stopping */
    mps_stop(m->daemon, unprepared ? MPS_END : MPS_LEAVE, unprepared);
    free(m);
}

/* Whether another prepared claim than uid uses the daemon key. */
static bool dra_mps_used(const struct dra *d, const char *key, const char *uid)
{
    for (unsigned i = 0; i < d->claims.n; i++) {
        char k[112];
        dra_mps_key(&d->claims.prepared[i], k, sizeof k);
        if (strcmp(d->claims.prepared[i].uid, uid) && dra_prepared_mps(&d->claims.prepared[i]) && !strcmp(k, key))
            return true;
    }
    return false;
}

void dra_mps_stop(struct dra *d, const char *uid)
{
    const struct dra_prepared *p = dra_prepared_find(d, uid);
    if (!p || !dra_prepared_mps(p))
        return;
    char key[112];
    dra_mps_key(p, key, sizeof key);
    writer_remove(dra_spec_writer(d, uid)); /* the claim's CDI device, after its writes */
    struct dra_mps **at = dra_mps_find(d, key);
    if (at && !dra_mps_used(d, key, uid)) /* a share's GPU's daemon: after its last share */
        dra_mps_end(d, at, true);
}

void dra_mps_sweep(struct dra *d)
{
    const char *keep[d->claims.nmps + 1];
    for (unsigned i = 0; i < d->claims.nmps; i++)
        keep[i] = d->claims.mps[i]->name;
    char control[CONFIG_PATH_MAX] = "";
    struct err e;
    mps_find_control(d->cfg, control, sizeof control, &e); /* without it: SIGTERM */
    mps_sweep(d->loop, d->cfg, control, MPS_OWNER_DRA, keep, d->claims.nmps);
}

void dra_mps_stop_all(struct dra *d)
{
    while (d->claims.nmps)
        dra_mps_end(d, &d->claims.mps[0], false);
    free(d->claims.mps);
    d->claims.mps = NULL;
    dra_specs_trim(d); /* d->stopping: all, each once its writes have ended */
    free(d->claims.specs);
    d->claims.specs = NULL;
}
