/* The driver's files for containers: found when the plugins start (and
 * again on a reload), given to the plugins for the driver-mounts strategy,
 * and kept as a CDI spec in --cdi-spec-dir for the cdi-* strategies. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/internal.h"
#include "cdi/cdi.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* Where containerd and CRI-O read CDI specs unless told otherwise. */
static bool agent_cdi_runtime_dir(const char *dir)
{
    static const char *const dirs[] = {"/etc/cdi", "/var/run/cdi", "/run/cdi"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++)
        if (!strcmp(dir, dirs[i]))
            return true;
    return false;
}

/* On the loop, once the spec is on disk (or could not be written). */
static void agent_cdi_written(void *ctx, const struct err *e, bool written)
{
    struct agent *a = ctx;
    if (e)
        log_error("CDI spec: %s; containers asking for CDI devices will not start", e->msg);
    else if (written)
        log_info("CDI spec written: %s/" CDI_SPEC_FILE " (%u GPU(s), %u driver file mount(s))",
                 a->cfg.cdi_spec_dir, a->inv.count, a->driver_ok ? a->driver.nmounts : 0);
    /* A simulated node keeps its spec in the user's directory: a kubelet's
     * runtime would then fail the pods with "unresolvable CDI devices". */
    if (written && !agent_cdi_runtime_dir(a->cfg.cdi_spec_dir))
        log_warn("CDI specs go to %s, where container runtimes do not look (they read /etc/cdi "
                 "and /var/run/cdi): for a kubelet's pods, the runtime must read there too, or "
                 "set --cdi-spec-dir /var/run/cdi", a->cfg.cdi_spec_dir);
}

/* The spec, written on the worker pool: the loop goes on meanwhile. */
static void agent_cdi_write(struct agent *a)
{
    struct strbuf text = {0};
    struct err e;
    if (cdi_spec_text(&a->inv, a->driver_ok ? &a->driver : NULL, &a->cfg, false, &text, &e) < 0) {
        log_error("%s; containers asking for CDI devices will not start", e.msg);
        strbuf_free(&text);
        return;
    }
    char path[CONFIG_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/" CDI_SPEC_FILE, a->cfg.cdi_spec_dir);
    if (a->cdi_writer && strcmp(writer_path(a->cdi_writer), path)) { /* a reload moved it */
        writer_close(a->cdi_writer);
        a->cdi_writer = NULL;
    }
    if (!a->cdi_writer)
        a->cdi_writer = cdi_spec_writer(&a->loop, a->cfg.cdi_spec_dir, CDI_SPEC_FILE);
    writer_put(a->cdi_writer, &text);
    writer_then(a->cdi_writer, agent_cdi_written, a);
}

static bool agent_driver_wanted(const struct config *cfg)
{
    return config_cdi_wanted(cfg) || (cfg->list_strategy & CONFIG_LIST_DRIVER_MOUNTS);
}

/* What the walk found becomes the agent's (driver: moved, rc < 0: e says
 * why none), and the CDI spec is written where wanted. */
static void agent_driver_take(struct agent *a, struct driver *found, int rc, const struct err *e)
{
    agent_driver_stop(a);
    if (!agent_driver_wanted(&a->cfg))
        return;
    if (rc < 0) {
        log_error("%s: containers get no driver files from gpulet", e->msg);
    } else {
        a->driver = *found;
        a->driver_ok = true;
        log_info("driver %s under %s: %u librar%s, %u binar%s, %u mount(s) for containers",
                 a->driver.version, a->driver.root, a->driver.nlibs, a->driver.nlibs == 1 ? "y" : "ies",
                 a->driver.nbins, a->driver.nbins == 1 ? "y" : "ies", a->driver.nmounts);
    }
    if (config_cdi_wanted(&a->cfg))
        agent_cdi_write(a);
}

void agent_driver_start(struct agent *a)
{
    struct driver found;
    struct err e;
    int rc = agent_driver_wanted(&a->cfg)
                 ? config_driver(&a->cfg, NULL, a->inv.driver_version, &found, &e) : 0;
    agent_driver_take(a, &found, rc, &e);
}

/* The walk of the driver root's libraries and binaries, on the worker pool
 * (the loop never touches a disk), with a copy of the configuration (a
 * reload may replace the agent's meanwhile). */
struct agent_driver_find {
    uv_work_t work;
    struct agent *a;
    struct config cfg;
    char version[sizeof ((struct gpu_inventory *)0)->driver_version];
    struct driver found;
    int rc;
    struct err e;
    void (*then)(struct agent *a);
};

static void agent_driver_find_work(uv_work_t *w)
{
    struct agent_driver_find *f = w->data;
    f->rc = config_driver(&f->cfg, NULL, f->version, &f->found, &f->e);
}

static void agent_driver_found(uv_work_t *w, int status)
{
    struct agent_driver_find *f = w->data;
    struct agent *a = f->a;
    a->driver_finding = false;
    if (status < 0 || a->stopping) { /* cancelled by the stop: nothing to start */
        if (status == 0 && f->rc == 0)
            driver_free(&f->found);
        free(f);
        return;
    }
    agent_driver_take(a, &f->found, f->rc, &f->e);
    void (*then)(struct agent *) = f->then;
    free(f);
    then(a);
}

void agent_driver_start_later(struct agent *a, void (*then)(struct agent *a))
{
    if (!agent_driver_wanted(&a->cfg)) {
        agent_driver_take(a, NULL, 0, NULL);
        then(a);
        return;
    }
    struct agent_driver_find *f = xcalloc(1, sizeof *f);
    f->a = a;
    f->cfg = a->cfg;
    snprintf(f->version, sizeof f->version, "%s", a->inv.driver_version);
    f->then = then;
    f->work.data = f;
    a->driver_finding = true;
    uv_queue_work(&a->loop, &f->work, agent_driver_find_work, agent_driver_found);
}

struct writer *agent_driver_cdi(struct agent *a)
{
    if (!config_cdi_wanted(&a->cfg))
        return NULL;
    agent_cdi_write(a);
    return a->cdi_writer;
}

void agent_driver_stop(struct agent *a)
{
    if (a->driver_ok)
        driver_free(&a->driver);
    a->driver_ok = false;
}
