/* The GPU Operator's MIG manager, built in (docs/mig.md, "Layouts by node
 * label"): with --mig-parted-config, the Node's label nvidia.com/mig.config
 * names a layout of that mig-parted file; each GPU its entries name is
 * made so on its lane, as mig-parted makes it, and
 * nvidia.com/mig.config.state says pending, then success or failed.
 *
 * - Never under a running job: a GPU that a pod holds a device of (the
 *   kubelet's PodResources List says so) or that runs a process (on it or
 *   on one of its MIG devices) is left as it is, and looked at again every
 *   few seconds until neither; the others change meanwhile.
 * - Nothing pauses: the GPUs changed are taken into the agent's record at
 *   once (their mode, profiles and MIG devices), the plugins register
 *   again on them, and labels, metrics, DRA and the CDI spec follow, as
 *   after any MIG change (mig.c).
 * - Idempotent: a GPU already in its layout is not touched.
 * - The file is read again (on the worker pool) at each change of the
 *   label, as mig-parted reads it at each apply: a mounted ConfigMap that
 *   was edited applies with no restart. */
#include "agent/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"
#include "podresources.pb-c.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define MIGMGR_LABEL "nvidia.com/mig.config"
#define MIGMGR_RETRY_MS 5000          /* a GPU in use: looked at again */

/* One GPU's change, on its lane: the loop owns it but between post and done. */
struct agent_migmgr_job {
    struct gpu_lane_job job;          /* first: the lane hands it back */
    struct nvml *nvml;
    struct gpu_info seen;             /* posted: the agent's record; back: as the change left it */
    bool want_mig;
    struct migparted_layout want;
    char held[160];                   /* the pod that holds one of its devices; "" none */
    bool posted, changed, in_use;
    int rc;
    struct err e;
};

/* The file read again, on the worker pool, when the label changes: a
 * mounted ConfigMap changes in place, and mig-parted reads its file at each
 * apply. The loop owns it but between queue and done. */
struct agent_migmgr_read {
    uv_work_t work;
    struct agent *a;                  /* NULL: the MIG manager went meanwhile */
    char path[CONFIG_PATH_MAX];
    struct migparted_file file;
    int rc;
    struct err e;
};

struct agent_migmgr {
    struct migparted_file file;
    struct agent_migmgr_read *reading; /* a read in flight, or NULL */
    bool read_again;                  /* the label changed while it read */
    char file_error[400];             /* the last read's error; "" read */
    char label[128];                  /* the label's value as last seen; "" none */
    char config[128];                 /* the layout being (or last) applied */
    const char *state;                /* NULL (no label), "pending", "success", "failed" */
    char reason[600];
    struct agent_migmgr_job *jobs;    /* per GPU */
    char (*held)[160];                /* per GPU: the first pod holding one of its devices */
    bool pods_known;                  /* PodResources answered (or failed) once */
    unsigned posted;
    bool again;                       /* the label changed while a change ran */
    uv_timer_t retry;
    bool retry_on;
};

/* --- on the GPU's lane ------------------------------------------------------------------ */

/* Whether a process runs on the GPU or on one of its MIG devices. */
static bool migmgr_in_use(struct nvml *n, const struct gpu_info *g, struct err *e)
{
    nvmlProcessInfo_t procs[8];
    for (int k = -1; k < (int)g->nmig; k++) {
        unsigned count = 8;
        nvmlDevice_t h = k < 0 ? g->handle : g->mig[k].handle;
        nvmlReturn_t rc = n->DeviceGetComputeRunningProcesses(h, &count, procs);
        if ((rc == NVML_SUCCESS || rc == NVML_ERROR_INSUFFICIENT_SIZE) && count) {
            err_set(e, "GPU %u%s%s runs process %u%s", g->index, k < 0 ? "" : " MIG device ",
                    k < 0 ? "" : g->mig[k].uuid, procs[0].pid, count > 1 ? " and more" : "");
            return true;
        }
    }
    return false;
}

/* The GPU's MIG devices as mig-parted names them. */
static void migmgr_current(const struct gpu_info *g, struct migparted_layout *out)
{
    out->n = 0;
    struct err e;
    for (unsigned k = 0; k < g->nmig && out->n < MIGPARTED_INSTANCES; k++)
        if (migparted_profile_parse(g->mig[k].profile, &out->items[out->n], &e) == 0)
            out->n++;
}

/* The layout's items as the GPU's GPU instance profiles, or -1 naming the
 * profile it lacks. */
static int migmgr_items(const struct gpu_info *g, const struct migparted_layout *want,
                        struct gpu_mig_item *items, struct err *e)
{
    for (unsigned i = 0; i < want->n; i++) {
        struct migparted_profile gi = want->items[i];
        gi.c = gi.g; /* the GPU instance the compute instance lives in */
        const struct gpu_mig_profile *found = NULL;
        for (unsigned k = 0; k < g->nmig_profiles && !found; k++) {
            struct migparted_profile p;
            if (migparted_profile_parse(g->mig_profiles[k].name, &p, e) == 0 &&
                migparted_profile_same(&p, &gi))
                found = &g->mig_profiles[k];
        }
        if (!found) {
            char name[40], have[GPU_MIG_PROFILES * 36] = "";
            migparted_profile_name(&want->items[i], name, sizeof name);
            for (unsigned k = 0; k < g->nmig_profiles; k++)
                snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", k ? ", " : "",
                         g->mig_profiles[k].name);
            return err_set(e, "GPU %u (%s) has no MIG profile %s (it has %s)", g->index, g->name,
                           name, have[0] ? have : "none");
        }
        items[i] = (struct gpu_mig_item){found->info.id, want->items[i].c};
    }
    return 0;
}

static void migmgr_run(struct gpu_lane_job *job)
{
    struct agent_migmgr_job *j = (struct agent_migmgr_job *)job;
    struct gpu_info *g = &j->seen;
    struct nvml *n = j->nvml;
    j->changed = j->in_use = false;
    j->rc = 0;
    bool on = g->mig_mode == NVML_DEVICE_MIG_ENABLE;
    struct migparted_layout now;
    migmgr_current(g, &now);
    if (on == j->want_mig && (!on || migparted_layout_same(&now, &j->want)))
        return; /* as it should be: untouched */
    if (j->held[0]) {
        j->in_use = true;
        err_set(&j->e, "GPU %u: pod %s holds a device of it", g->index, j->held);
        return;
    }
    struct gpu_mig_item items[GPU_MIG_MAX];
    /* A layout that cannot be made is refused before anything is touched
     * (where MIG is on: the profiles are known). */
    if (on && j->want_mig && (j->rc = migmgr_items(g, &j->want, items, &j->e)) < 0)
        return;
    if (on && j->want_mig && !gpu_mig_fits(g, items, j->want.n)) {
        j->rc = err_set(&j->e, "GPU %u (%s): the layout does not fit: %u MIG device(s) in %s's "
                        "slices and placements", g->index, g->name, j->want.n, g->name);
        return;
    }
    if ((j->in_use = migmgr_in_use(n, g, &j->e)))
        return;
    bool reset;
    j->changed = true;
    if (on && !j->want_mig && (j->rc = gpu_mig_layout(n, g, NULL, 0, &j->e)) < 0)
        return;
    if (on != j->want_mig && (j->rc = gpu_mig_set_mode(n, g, j->want_mig, &reset, &j->e)) < 0)
        return;
    if (!on && j->want_mig) { /* MIG on now: its profiles are known */
        j->rc = migmgr_items(g, &j->want, items, &j->e);
        if (j->rc == 0 && !gpu_mig_fits(g, items, j->want.n))
            j->rc = err_set(&j->e, "GPU %u (%s): the layout does not fit: %u MIG device(s) in its "
                            "slices and placements", g->index, g->name, j->want.n);
        if (j->rc < 0) { /* as it was: MIG off */
            struct err ignored;
            gpu_mig_set_mode(n, g, false, &reset, &ignored);
            return;
        }
    }
    if (j->want_mig)
        j->rc = gpu_mig_layout(n, g, items, j->want.n, &j->e);
}

/* --- on the loop ------------------------------------------------------------------------- */

static void migmgr_apply(struct agent *a);

/* The Event of a state on the Node (with the fault report's rate limit):
 * as an operator watching `kubectl get events` would want each step. */
static void migmgr_event(struct agent *a, const char *state, const char *reason)
{
    static const struct {
        const char *state, *type, *reason, *text;
    } events[] = {
        {"pending", "Normal", "MIGConfigWaiting", "MIG config '%s' waits: %s"},
        {"success", "Normal", "MIGConfigApplied", "MIG config '%s' applied%s"},
        {"failed", "Warning", "MIGConfigFailed", "MIG config '%s' failed: %s"},
    };
    struct agent_migmgr *m = a->migmgr;
    for (size_t i = 0; i < sizeof events / sizeof *events; i++) {
        if (strcmp(state, events[i].state) || (!strcmp(state, "pending") && !reason[0]))
            continue; /* pending without a reason: working, no one to name */
        char text[400];
        snprintf(text, sizeof text, events[i].text, m->config, reason);
        report_note(a->report, events[i].type, events[i].reason, text);
    }
}

static void migmgr_set(struct agent *a, const char *state, const char *reason)
{
    struct agent_migmgr *m = a->migmgr;
    bool same = m->state == state && !strcmp(m->reason, reason);
    m->state = state;
    snprintf(m->reason, sizeof m->reason, "%s", reason);
    if (same)
        return;
    if (state && !strcmp(state, "failed"))
        log_error("MIG config '%s': failed: %s", m->config, reason);
    else if (state)
        log_info("MIG config '%s': %s%s%s", m->config, state, reason[0] ? ": " : "", reason);
    if (state)
        migmgr_event(a, state, reason);
    agent_labels_refresh(a);
}

static void migmgr_on_retry(uv_timer_t *t)
{
    struct agent *a = t->data;
    agent_pods_soon(a, true); /* who holds what, read again */
    migmgr_apply(a);
}

void agent_migmgr_on_pods(struct agent *a, const struct V1__ListPodResourcesResponse *r)
{
    struct agent_migmgr *m = a->migmgr;
    if (!m)
        return;
    bool first = !m->pods_known;
    m->pods_known = true; /* no answer: no pod is known to hold a GPU (as DRA takes it) */
    for (unsigned i = 0; i < a->inv.count; i++)
        m->held[i][0] = '\0';
    for (size_t p = 0; r && p < r->n_pod_resources; p++) {
        const V1__PodResources *pod = r->pod_resources[p];
        for (size_t c = 0; c < pod->n_containers; c++)
            for (size_t k = 0; k < pod->containers[c]->n_devices; k++) {
                const V1__ContainerDevices *dev = pod->containers[c]->devices[k];
                for (size_t x = 0; x < dev->n_device_ids; x++) {
                    const char *id = dev->device_ids[x], *colons = strstr(id, "::");
                    unsigned gpu;
                    int mig;
                    if (gpu_inventory_find_id(&a->inv, id, colons ? (size_t)(colons - id) : strlen(id),
                                              &gpu, &mig) && !m->held[gpu][0])
                        snprintf(m->held[gpu], sizeof m->held[gpu], "%.80s/%.70s", pod->namespace_,
                                 pod->name);
                }
            }
    }
    if (first && m->label[0])
        migmgr_apply(a); /* a label that waited for this */
}

/* Why the named config cannot apply to the node as it is, or "": a GPU
 * without MIG that an entry names by index, a GPU DRA makes MIG devices
 * on, a layout too big. */
static void migmgr_check(const struct agent *a, const struct migparted_config *c, char *why,
                         size_t len)
{
    why[0] = '\0';
    for (unsigned i = 0; i < a->inv.count && !why[0]; i++) {
        const struct gpu_info *g = &a->inv.gpus[i];
        const struct migparted_entry *en = migparted_entry_for(c, g->index, g->pci_device_id);
        struct migparted_layout l;
        struct err e;
        if (!en || (g->mig_mode < 0 && (en->all || !en->mig_enabled)))
            continue; /* mig-parted's rule: a GPU without MIG that `all` names is skipped */
        if (g->mig_mode < 0)
            snprintf(why, len, "GPU %u (%s) cannot run MIG, and entry %u of '%s' names it",
                     g->index, g->name, en->line, c->name);
        else if (config_dra_takes(&a->cfg, g))
            snprintf(why, len, "GPU %u is DRA's (--dra-gpus): its MIG devices are made per claim",
                     g->index);
        else if (migparted_layout_of(en, &l, &e) < 0)
            snprintf(why, len, "%.380s", e.msg);
    }
}

/* Each GPU its entry names, posted to its lane with the layout it wants. */
static void migmgr_apply(struct agent *a)
{
    struct agent_migmgr *m = a->migmgr;
    if (m->posted) {
        m->again = true; /* this change ends first */
        return;
    }
    snprintf(m->config, sizeof m->config, "%s", m->label);
    if (!m->label[0]) { /* no label: the layout stays as it is */
        migmgr_set(a, NULL, "");
        return;
    }
    if (!m->pods_known) { /* which pods hold which GPU: asked at start */
        migmgr_set(a, "pending", "waiting for the kubelet's PodResources List (which pods hold "
                                 "which GPU)");
        agent_pods_soon(a, true);
        return;
    }
    const struct migparted_config *c = migparted_find(&m->file, m->label);
    char why[400];
    if (m->file_error[0])
        snprintf(why, sizeof why, "%s", m->file_error);
    else if (!c)
        snprintf(why, sizeof why, "no MIG config named '%.100s' in %.250s", m->label, m->file.source);
    else
        migmgr_check(a, c, why, sizeof why);
    if (why[0]) {
        migmgr_set(a, "failed", why);
        return;
    }
    for (unsigned i = 0; i < a->inv.count; i++) {
        const struct gpu_info *g = &a->inv.gpus[i];
        const struct migparted_entry *en = migparted_entry_for(c, g->index, g->pci_device_id);
        struct agent_migmgr_job *j = &m->jobs[i];
        struct err e;
        if (!en || g->mig_mode < 0 || a->devs[i].health.reason == HEALTH_LOST || !a->devs[i].handle)
            continue;
        j->seen = *g;
        j->seen.handle = a->devs[i].handle;
        j->want_mig = en->mig_enabled;
        snprintf(j->held, sizeof j->held, "%s", m->held[i]);
        migparted_layout_of(en, &j->want, &e); /* checked above */
        if ((j->posted = gpu_lanes_post(a->lanes, i, &j->job)))
            m->posted++;
    }
    migmgr_set(a, m->posted ? "pending" : "success", "");
}

/* A GPU's change taken into the agent's record: its mode, profiles and
 * MIG devices (new ones healthy; the GPU's own health stays). */
static void migmgr_take(struct agent *a, unsigned i, const struct gpu_info *seen)
{
    struct gpu_info *g = &a->inv.gpus[i];
    g->mig_mode = seen->mig_mode;
    memcpy(g->mig_profiles, seen->mig_profiles, sizeof g->mig_profiles);
    g->nmig_profiles = seen->nmig_profiles;
    memcpy(g->mig, seen->mig, sizeof g->mig);
    g->nmig = seen->nmig;
    memset(a->devs[i].mig_health, 0, sizeof a->devs[i].mig_health);
    a->mig_generation++; /* a MIG check posted before this is stale */
}

void agent_migmgr_collect(struct agent *a)
{
    struct agent_migmgr *m = a->migmgr;
    if (!m || !m->posted)
        return;
    for (unsigned i = 0; i < a->inv.count; i++) {
        struct agent_migmgr_job *j = &m->jobs[i];
        if (!j->posted || gpu_lane_job_busy(&j->job))
            continue;
        j->posted = false;
        m->posted--;
    }
    if (m->posted || a->stopping)
        return;
    bool changed = false, in_use = false;
    char why[600] = "";
    for (unsigned i = 0; i < a->inv.count; i++) {
        struct agent_migmgr_job *j = &m->jobs[i];
        if (j->changed) {
            migmgr_take(a, i, &j->seen);
            agent_device_changed(a, i, GPU_CHANGED_FACTS); /* metrics, labels, DRA */
            changed = true;
            log_info("GPU %u: MIG %s, %u MIG device(s), as MIG config '%s' names", i,
                     j->seen.mig_mode == NVML_DEVICE_MIG_ENABLE ? "on" : "off", j->seen.nmig, m->config);
        }
        if ((j->in_use || j->rc < 0) && !why[0])
            snprintf(why, sizeof why, "%s", j->e.msg);
        in_use |= j->in_use;
        j->changed = j->in_use = false;
        j->rc = 0;
    }
    if (changed) {
        agent_driver_cdi(a);
        agent_plugins_restart(a); /* the resources follow the new devices */
        agent_mig_start(a);       /* the MIG checks, where a GPU is MIG's now */
    }
    if (in_use && a->cfg.mig_config_in_use == CONFIG_MIG_IN_USE_WAIT) {
        migmgr_set(a, "pending", why);
        uv_timer_start(&m->retry, migmgr_on_retry, MIGMGR_RETRY_MS, 0);
    } else { /* --mig-config-in-use fail: a GPU in use fails the layout at once */
        migmgr_set(a, why[0] ? "failed" : "success", why);
    }
    if (m->again) {
        m->again = false;
        migmgr_apply(a);
    }
}

static void migmgr_read_work(uv_work_t *w)
{
    struct agent_migmgr_read *r = w->data;
    r->rc = migparted_load(&r->file, r->path, &r->e);
}

static void migmgr_read_start(struct agent *a);

/* The file as it is now: taken where it parses; where it does not, the
 * label's layout fails with the file's error (as mig-parted's apply would),
 * and the layouts read before stay for the next label. */
static void migmgr_read_done(uv_work_t *w, int status)
{
    (void)status;
    struct agent_migmgr_read *r = w->data;
    struct agent *a = r->a;
    if (!a) { /* the MIG manager went meanwhile */
        migparted_free(&r->file);
        free(r);
        return;
    }
    struct agent_migmgr *m = a->migmgr;
    m->reading = NULL;
    m->file_error[0] = '\0';
    if (r->rc == 0) {
        migparted_free(&m->file);
        m->file = r->file;
    } else {
        snprintf(m->file_error, sizeof m->file_error, "%.380s", r->e.msg);
        migparted_free(&r->file);
    }
    free(r);
    if (m->read_again) {
        m->read_again = false;
        migmgr_read_start(a);
        return;
    }
    migmgr_apply(a);
}

/* Reads the file again, then applies the label's layout from it. */
static void migmgr_read_start(struct agent *a)
{
    struct agent_migmgr *m = a->migmgr;
    if (m->reading) {
        m->read_again = true;
        return;
    }
    struct agent_migmgr_read *r = xcalloc(1, sizeof *r);
    r->a = a;
    r->work.data = r;
    snprintf(r->path, sizeof r->path, "%s", a->cfg.mig_parted_config);
    m->reading = r;
    uv_queue_work(&a->loop, &r->work, migmgr_read_work, migmgr_read_done);
}

static void migmgr_on_node(void *ctx, struct kube_watch *w)
{
    struct agent *a = ctx;
    struct agent_migmgr *m = a->migmgr;
    const json_t *node = kube_watch_object(w);
    char label[sizeof m->label] = "";
    struct err e;
    if (node && config_node_label(node, MIGMGR_LABEL, label, sizeof label, &e) < 0)
        log_warn("MIG config: %s", e.msg);
    if (!strcmp(label, m->label) && (m->state || !label[0]))
        return; /* the Node changed, not its label */
    snprintf(m->label, sizeof m->label, "%s", label);
    uv_timer_stop(&m->retry);
    if (label[0])
        migmgr_read_start(a); /* then applies */
    else
        migmgr_apply(a);
}

int agent_migmgr_read(const struct config *cfg, struct migparted_file *out, struct err *e)
{
    memset(out, 0, sizeof *out);
    return cfg->mig_parted_config[0] ? migparted_load(out, cfg->mig_parted_config, e) : 0;
}

void agent_migmgr_start(struct agent *a, struct migparted_file *file)
{
    if (!a->cfg.mig_parted_config[0]) { /* off, or a reload turned it off */
        migparted_free(file);
        if (a->migmgr && !a->migmgr->posted) {
            agent_migmgr_stop(a);
            agent_migmgr_free(a);
            agent_labels_refresh(a); /* its state label goes */
        }
        return;
    }
    if (!a->node) {
        log_error("MIG config: --mig-parted-config needs the API server's credentials and "
                  "NODE_NAME (the layout is the Node's label %s); MIG layouts are not applied",
                  MIGMGR_LABEL);
        migparted_free(file);
        return;
    }
    struct agent_migmgr *m = a->migmgr;
    if (!m) {
        m = a->migmgr = xcalloc(1, sizeof *m);
        m->jobs = xcalloc(a->inv.count + 1, sizeof *m->jobs);
        m->held = xcalloc(a->inv.count + 1, sizeof *m->held);
        for (unsigned i = 0; i < a->inv.count; i++) {
            m->jobs[i].job.run = migmgr_run;
            m->jobs[i].job.notify = &a->lanes_done;
            m->jobs[i].nvml = &a->nvml;
        }
        uv_timer_init(&a->loop, &m->retry);
        m->retry.data = a;
        m->retry_on = true;
        kube_watch_listen(a->node, migmgr_on_node, a);
        log_info("MIG config: %u layout(s) from %s; the Node's label %s chooses", file->nconfigs,
                 file->source, MIGMGR_LABEL);
    }
    migparted_free(&m->file);
    m->file = *file;
    m->file_error[0] = '\0';
    memset(file, 0, sizeof *file);
    if (kube_watch_known(a->node))
        migmgr_on_node(a, a->node);
    if (m->state) /* a reload: the label's layout from the file as it is now */
        migmgr_apply(a);
}

void agent_migmgr_answer(const struct agent *a, struct strbuf *out)
{
    const struct agent_migmgr *m = a->migmgr;
    if (!m)
        strbuf_puts(out, "off\n");
    else
        strbuf_printf(out, "%s\t%s\t%s\n", m->state ? m->state : "none", m->config, m->reason);
}

bool agent_migmgr_busy(const struct agent *a)
{
    return a->migmgr && a->migmgr->posted;
}

const char *agent_migmgr_state(const struct agent *a)
{
    return a->migmgr ? a->migmgr->state : NULL;
}

void agent_migmgr_stop(struct agent *a)
{
    struct agent_migmgr *m = a->migmgr;
    if (!m || !m->retry_on)
        return;
    kube_watch_unlisten(a->node, migmgr_on_node, a);
    uv_close((uv_handle_t *)&m->retry, NULL);
    m->retry_on = false;
}

void agent_migmgr_free(struct agent *a)
{
    struct agent_migmgr *m = a->migmgr;
    if (!m)
        return;
    bool busy = false; /* a change still in a stuck lane's hands is left to it */
    for (unsigned i = 0; i < a->inv.count; i++)
        busy |= gpu_lane_job_busy(&m->jobs[i].job);
    if (!busy)
        free(m->jobs);
    free(m->held);
    migparted_free(&m->file);
    if (m->reading)
        m->reading->a = NULL; /* its done frees it */
    free(m);
    a->migmgr = NULL;
}
