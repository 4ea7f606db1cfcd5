/* The driver's files for containers: found when the plugins start (and
 * again on a reload), given to the plugins for the driver-mounts strategy,
 * and kept as a CDI spec in --cdi-spec-dir for the cdi-* strategies. */
#include <stdio.h>
#include <string.h>

#include "agent/internal.h"
#include "cdi/cdi.h"
#include "util/log.h"

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

void agent_driver_start(struct agent *a)
{
    agent_driver_stop(a);
    bool cdi = config_cdi_wanted(&a->cfg);
    if (!cdi && !(a->cfg.list_strategy & CONFIG_LIST_DRIVER_MOUNTS))
        return;
    struct err e;
    if (config_driver(&a->cfg, NULL, a->inv.driver_version, &a->driver, &e) < 0) {
        log_error("%s: containers get no driver files from gpulet", e.msg);
    } else {
        a->driver_ok = true;
        log_info("driver %s under %s: %u librar%s, %u binar%s, %u mount(s) for containers",
                 a->driver.version, a->driver.root, a->driver.nlibs, a->driver.nlibs == 1 ? "y" : "ies",
                 a->driver.nbins, a->driver.nbins == 1 ? "y" : "ies", a->driver.nmounts);
    }
    if (cdi)
        agent_cdi_write(a);
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
