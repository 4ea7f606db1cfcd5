/* Reloads: SIGHUP, and the node's config (nodeconfig.c). What a reload
 * reads (the config file, the machine type file, the MPS control program's
 * place, the MIG layouts) is read off the loop, on the worker pool, into a
 * reading, which the loop then applies whole or refuses whole. One reload
 * at a time: one asked for meanwhile runs after it (a SIGHUP), or is
 * chosen again (nodeconfig.c, poked). Start-up, before the loop serves,
 * reads in place (agent_reload). */
#include "agent/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "labels/labels.h"
#include "util/log.h"
#include "util/xmalloc.h"

struct agent_reading {
    uv_work_t work;
    struct agent *a;
    bool named;                      /* the node's config, in place of --config-file */
    char name[64];
    char source[640];
    char *text;
    size_t len;
    struct config cfg;               /* what was read: rc 0 */
    int rc;
    struct err e;
    struct agent_machine machine;
    struct migparted_file migparted; /* --mig-parted-config, read again */
    agent_reload_cb done;
    void *ctx;
};

/* --- the machine type file ------------------------------------------------------------ */

struct agent_machine agent_machine_read(const struct config *cfg)
{
    struct agent_machine m = {0};
    m.text = labels_read_machine(cfg->machine_type_file, &m.absent, &m.e);
    return m;
}

void agent_machine_take(struct agent *a, struct agent_machine *m)
{
    free(a->machine);
    a->machine = m->text;
    a->machine_absent = m->absent;
    a->machine_err = m->e;
    m->text = NULL;
}

/* --- reading, blocking: the pool's, or start-up's ------------------------------------- */

static struct agent_reading *agent_reading_new(struct agent *a, const struct config_text *named)
{
    struct agent_reading *r = xcalloc(1, sizeof *r);
    r->a = a;
    r->work.data = r;
    if (named) {
        r->named = true;
        snprintf(r->name, sizeof r->name, "%s", named->name);
        snprintf(r->source, sizeof r->source, "%s", named->source);
        r->text = xmalloc(named->len + 1);
        memcpy(r->text, named->text, named->len);
        r->text[named->len] = '\0';
        r->len = named->len;
    }
    return r;
}

static void agent_reading_free(struct agent_reading *r)
{
    free(r->machine.text);
    migparted_free(&r->migparted);
    free(r->text);
    free(r);
}

/* a->args is set once, before the loop: read-only for everyone after. */
static void agent_reading_run(struct agent_reading *r)
{
    const struct config_text named = {r->name, r->source, r->text, r->len};
    r->rc = config_load(&r->cfg, &r->a->args, r->named ? &named : NULL, &r->e);
    if (r->rc == 0) {
        config_user_paths(&r->cfg);
        r->rc = agent_mps_check(&r->cfg, &r->e); /* the control program is a file */
    }
    if (r->rc == 0)
        r->rc = agent_migmgr_read(&r->cfg, &r->migparted, &r->e);
    if (r->rc == 0)
        r->machine = agent_machine_read(&r->cfg);
}

static void agent_reading_work(uv_work_t *w)
{
    agent_reading_run(w->data);
}

void agent_config_applied(struct agent *a, const char *named)
{
    snprintf(a->config_state.name, sizeof a->config_state.name, "%s", named ? named : "");
    a->config_state.last_ok = true;
    a->config_state.last_ok_time = (double)time(NULL);
    metrics_on_config(a->metrics, &a->config_state);
}

/* On the loop: what was read replaces the running configuration, or is
 * refused with e (the running one kept). */
static int agent_reload_apply(struct agent *a, struct agent_reading *r, struct err *e)
{
    if (r->rc < 0) {
        *e = r->e;
        return -1;
    }
    struct config *next = &r->cfg;
    if (strcmp(next->kubelet_root, a->cfg.kubelet_root) || strcmp(next->simulate, a->cfg.simulate) ||
        strcmp(next->nvml_path, a->cfg.nvml_path) || strcmp(next->config_map, a->cfg.config_map) ||
        strcmp(next->kubeconfig, a->cfg.kubeconfig) || strcmp(next->node_name, a->cfg.node_name))
        log_warn("reload: kubelet-root, simulate, nvml, config-map, kubeconfig and node-name "
                 "changes take effect at restart");
    if (strcmp(next->metrics_listen, a->cfg.metrics_listen) || strcmp(next->collectors, a->cfg.collectors) ||
        next->metrics_interval_ms != a->cfg.metrics_interval_ms || next->no_metrics != a->cfg.no_metrics)
        log_warn("reload: metrics settings take effect at restart");
    strcpy(next->kubelet_root, a->cfg.kubelet_root);
    strcpy(next->simulate, a->cfg.simulate);
    strcpy(next->nvml_path, a->cfg.nvml_path);
    strcpy(next->config_map, a->cfg.config_map);
    strcpy(next->kubeconfig, a->cfg.kubeconfig); /* the agent's one API client's */
    strcpy(next->node_name, a->cfg.node_name);
    struct config old = a->cfg;
    a->cfg = *next;
    struct plugin_resource *check = NULL;
    unsigned nchecked = 0;
    if (a->facts_known && plugin_resources(&a->cfg, &a->inv, &check, &nchecked, e) < 0) {
        a->cfg = old;
        return -1;
    }
    plugin_resources_free(check, nchecked);
    log_set_level((enum log_level)a->cfg.log_level);
    config_log(&a->cfg);
    agent_config_applied(a, r->named ? r->name : NULL);
    agent_machine_take(a, &r->machine);
    if (a->facts_known) {
        agent_labels_start(a, &old);
        agent_report_start(a, &old);
        agent_dra_start(a, &old);
        agent_mig_start(a); /* a MIG strategy may be new */
        agent_migmgr_start(a, &r->migparted);
    } else { /* the facts' start takes it */
        migparted_free(&a->migparted);
        a->migparted = r->migparted;
        memset(&r->migparted, 0, sizeof r->migparted);
    }
    /* Not serving yet (start-up), or NVML never started; unless DRA just
     * stopped or started serving every GPU, which moves them to or from
     * the device plugins. */
    if (!a->nplugins && !a->restart_pending && (old.dra == a->cfg.dra || !a->nvml_up))
        return 0;
    agent_plugins_restart(a);
    return 0;
}


int agent_reload(struct agent *a, const struct config_text *named, struct err *e)
{
    struct agent_reading *r = agent_reading_new(a, named);
    agent_reading_run(r);
    int rc = agent_reload_apply(a, r, e);
    agent_reading_free(r);
    return rc;
}

static void agent_reading_done(uv_work_t *w, int status)
{
    struct agent_reading *r = w->data;
    struct agent *a = r->a;
    a->reloading = false;
    if (status < 0 && r->rc == 0)
        r->rc = err_set(&r->e, "not read: the agent is stopping");
    struct err e;
    int rc = a->stopping ? -1 : agent_reload_apply(a, r, &e);
    if (!a->stopping)
        r->done(r->ctx, rc < 0 ? &e : NULL);
    agent_reading_free(r);
    if (a->stopping)
        return;
    if (a->sighup_again) {
        a->sighup_again = false;
        agent_sighup(a);
    }
    agent_nodeconfig_poke(a); /* what it chose while this ran */
}

bool agent_reload_later(struct agent *a, const struct config_text *named, agent_reload_cb done,
                        void *ctx)
{
    if (a->reloading)
        return false;
    struct agent_reading *r = agent_reading_new(a, named);
    r->done = done;
    r->ctx = ctx;
    a->reloading = true;
    uv_queue_work(&a->loop, &r->work, agent_reading_work, agent_reading_done);
    return true;
}

/* --- SIGHUP ------------------------------------------------------------------------------ */

static void agent_sighup_done(void *ctx, const struct err *e)
{
    struct agent *a = ctx;
    struct config_text buf;
    const struct config_text *named = agent_nodeconfig_text(a, &buf);
    if (e) {
        log_error("SIGHUP: config not reloaded, keeping the running one: %s", e->msg);
        a->config_state.last_ok = false;
        a->config_state.failures++;
        metrics_on_config(a->metrics, &a->config_state);
        return;
    }
    log_info("SIGHUP: config reloaded%s%s%s", named ? " (the node's config '" : "",
             named ? named->name : "", named ? "')" : "");
}

void agent_sighup(struct agent *a)
{
    if (a->stopping) {
        log_info("SIGHUP: this agent handed over; nothing to reload");
        return;
    }
    struct config_text buf;
    const struct config_text *named = agent_nodeconfig_text(a, &buf);
    if (!agent_reload_later(a, named, agent_sighup_done, a)) {
        log_info("SIGHUP: a reload is under way; this one runs after it");
        a->sighup_again = true;
    }
}
