/* The driver's files for containers: found when the plugins start (and
 * again on a reload), given to the plugins for the driver-mounts strategy,
 * and kept as a CDI spec in --cdi-spec-dir for the cdi-* strategies. */
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

static void agent_cdi_write(struct agent *a)
{
    struct strbuf text = {0};
    struct err e;
    bool written = false;
    if (cdi_spec_text(&a->inv, a->driver_ok ? &a->driver : NULL, &a->cfg, false, &text, &e) < 0 ||
        cdi_spec_write(a->cfg.cdi_spec_dir, CDI_SPEC_FILE, &text, &written, &e) < 0)
        log_error("%s; containers asking for CDI devices will not start", e.msg);
    else if (written)
        log_info("CDI spec written: %s/" CDI_SPEC_FILE " (%u GPU(s), %u driver file mount(s))",
                 a->cfg.cdi_spec_dir, a->inv.count, a->driver_ok ? a->driver.nmounts : 0);
    /* A simulated node keeps its spec in the user's directory: a kubelet's
     * runtime would then fail the pods with "unresolvable CDI devices". */
    if (written && !agent_cdi_runtime_dir(a->cfg.cdi_spec_dir))
        log_warn("CDI specs go to %s, where container runtimes do not look (they read /etc/cdi "
                 "and /var/run/cdi): for a kubelet's pods, the runtime must read there too, or "
                 "set --cdi-spec-dir /var/run/cdi", a->cfg.cdi_spec_dir);
    strbuf_free(&text);
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

void agent_driver_cdi(struct agent *a)
{
    if (config_cdi_wanted(&a->cfg))
        agent_cdi_write(a);
}

void agent_driver_stop(struct agent *a)
{
    if (a->driver_ok)
        driver_free(&a->driver);
    a->driver_ok = false;
}
