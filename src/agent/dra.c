/* The agent's side of DRA (src/dra): with --dra all the driver publishes
 * the GPUs and prepares claims, and no device plugin serves them. */
#include "agent/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"
#include "util/xmalloc.h"

struct agent_holders {
    struct metrics_holder *h;
    unsigned n;
};

static void agent_dra_holder(void *ctx, const char *uuid, const struct dra_consumer *c)
{
    struct agent_holders *x = ctx;
    x->h = xrealloc(x->h, (x->n + 1) * sizeof *x->h);
    struct metrics_holder *h = &x->h[x->n++];
    snprintf(h->uuid, sizeof h->uuid, "%s", uuid);
    snprintf(h->pod, sizeof h->pod, "%s", c->pod);
    snprintf(h->ns, sizeof h->ns, "%s", c->ns);
    snprintf(h->container, sizeof h->container, "%s", c->container);
}

void agent_dra_holders(struct agent *a)
{
    struct agent_holders x = {0};
    dra_holders(a->dra, agent_dra_holder, &x);
    metrics_on_claims(a->metrics, x.h, x.n);
    free(x.h);
}

/* The settings a reload must compare. */
static bool agent_dra_same(const struct config *a, const struct config *b)
{
    return a->dra == b->dra && !strcmp(a->kubelet_registry_dir, b->kubelet_registry_dir) &&
           !strcmp(a->dra_plugin_dir, b->dra_plugin_dir) && !strcmp(a->dra_mig, b->dra_mig);
}

static void agent_dra_on_claims(void *ctx)
{
    agent_dra_holders(ctx);
    agent_pods_soon(ctx, false); /* the claims' containers, as PodResources says */
}

static struct writer *agent_dra_on_mig(void *ctx, unsigned gpu, const struct gpu_info *seen)
{
    return agent_mig_take(ctx, gpu, seen);
}

/* DRA could not start, or not take its claims: an agent that cannot serve
 * the GPUs it was told DRA serves would run and serve nothing, so it stops,
 * saying why; after a reload, the GPUs wait for the next. */
static void agent_dra_failed(struct agent *a, const struct err *e)
{
    agent_dra_stop(a, DRA_STOP_KEEP);
    if (!a->dra_reload) {
        log_error("DRA: %s", e->msg);
        a->exit_code = 1;
        uv_stop(&a->loop);
    } else {
        log_error("DRA: %s; the GPUs are not served until the next reload", e->msg);
    }
}

static void agent_dra_on_failed(void *ctx, const struct err *e)
{
    agent_dra_failed(ctx, e);
}

/* The checkpoint's claims, read, to the driver that waits for them. */
static void agent_dra_claims(struct agent *a)
{
    struct err e;
    int rc = dra_claims_in(a->dra, &a->dra_loaded, &e);
    dra_loaded_free(&a->dra_loaded); /* what it did not take */
    a->dra_read_done = false;        /* a later start reads it again */
    if (rc < 0)
        agent_dra_failed(a, &e);
    else
        agent_dra_holders(a);
}

static void agent_dra_begin(struct agent *a)
{
    struct err e;
    struct dra_hooks hooks = {.on_claims = agent_dra_on_claims, .on_mig = agent_dra_on_mig,
                              .on_failed = agent_dra_on_failed, .ctx = a};
    struct dra_gpus gpus = {&a->nvml, a->lanes};
    if (dra_start(&a->dra, &a->loop, &a->cfg, &a->inv, a->devs, &gpus, a->kube, a->node, &hooks,
                  NULL, &e) < 0) {
        agent_dra_failed(a, &e);
        return;
    }
    agent_pods_soon(a, true); /* which GPUs pods of a device plugin still hold */
    if (a->dra_read_done)
        agent_dra_claims(a);
    else
        a->dra_waiting = true; /* the read brings them */
}

static void agent_dra_read_work(uv_work_t *w)
{
    struct agent *a = w->data;
    dra_checkpoint_read(a->dra_path, &a->dra_loaded);
}

static void agent_dra_read_done(uv_work_t *w, int status)
{
    struct agent *a = w->data;
    a->dra_reading = false;
    a->dra_read_done = true;
    if (status == UV_ECANCELED || a->stopping) {
        dra_loaded_free(&a->dra_loaded);
        return;
    }
    if (a->dra_waiting) {
        a->dra_waiting = false;
        agent_dra_claims(a);
    }
}

void agent_dra_read(struct agent *a)
{
    if (a->cfg.dra != CONFIG_DRA_ALL || a->dra_reading || a->dra_read_done)
        return;
    dra_checkpoint_path(&a->cfg, a->dra_path, sizeof a->dra_path);
    a->dra_reading = true;
    a->dra_read.data = a;
    uv_queue_work(&a->loop, &a->dra_read, agent_dra_read_work, agent_dra_read_done);
}

void agent_dra_start(struct agent *a, const struct config *old)
{
    if (old && agent_dra_same(old, &a->cfg)) {
        dra_on_device(a->dra); /* --dra-evict-on may have changed: the slice follows, if at all */
        return;
    }
    /* DRA restarted keeps the slices (the new one finds them in step); DRA
     * turned off withdraws them: the GPUs move to the device plugins. */
    agent_dra_stop(a, a->cfg.dra == CONFIG_DRA_ALL ? DRA_STOP_KEEP : DRA_STOP_WITHDRAW);
    if (a->cfg.dra != CONFIG_DRA_ALL)
        return;
    a->dra_reload = old != NULL;
    if (old && a->dra_read_done) { /* the claims as the stopped driver left them: read again */
        a->dra_read_done = false;
        dra_loaded_free(&a->dra_loaded);
    }
    agent_dra_read(a); /* where not read, nor being read */
    agent_dra_begin(a);
}

void agent_dra_refresh(struct agent *a)
{
    dra_on_device(a->dra);
}

void agent_dra_stop(struct agent *a, enum dra_stop_mode mode)
{
    if (!a->dra)
        return;
    dra_stop(a->dra, mode);
    a->dra = NULL;
    a->dra_waiting = false; /* a read in flight keeps its claims for the next start */
    metrics_on_claims(a->metrics, NULL, 0);
}
