/* What the agent answers on its status socket, one request per line, a
 * table: gpulet's commands ask it rather than opening NVML beside it, so
 * that each shows the running agent's node (its simulated GPUs and MIG
 * layout, its health, labels, CDI spec and configuration). */
#include "agent/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "gpu/render.h"

/* "health": one line per GPU, then one per MIG device of a GPU in MIG
 * mode (gpu_health_line_write's). */
static void answer_health(struct agent *a, const char *arg, struct strbuf *out)
{
    (void)arg;
    if (a->no_gpu[0])
        strbuf_printf(out, "no-gpu %s\n", a->no_gpu);
    for (unsigned i = 0; i < a->inv.count; i++) {
        const struct gpu_info *g = &a->inv.gpus[i];
        gpu_health_line_write(out, i, -1, g->uuid, &a->devs[i].health);
        for (unsigned k = 0; g->mig_mode == NVML_DEVICE_MIG_ENABLE && k < g->nmig; k++)
            gpu_health_line_write(out, i, (int)k, g->mig[k].uuid, &a->devs[i].mig_health[k]);
    }
}

/* The devices advertised under resource, from the device records (replicas
 * counted): what labels and metrics read too. */
static unsigned answer_devices(const struct agent *a, const char *resource)
{
    unsigned n = 0;
    for (unsigned g = 0; g < a->inv.count; g++) {
        const struct gpu_device *d = &a->devs[g];
        if (!strcmp(d->share.resource, resource))
            n += d->share.replicas;
        for (unsigned k = 0; k < GPU_MIG_MAX; k++)
            if (!strcmp(d->mig_share[k].resource, resource))
                n += d->mig_share[k].replicas;
    }
    return n;
}

/* "plugins": one line per resource served: name, socket, registered or
 * unregistered, devices (replicas counted); "none" when none is served. */
static void answer_plugins(struct agent *a, const char *arg, struct strbuf *out)
{
    (void)arg;
    for (unsigned r = 0; r < a->nplugins; r++) {
        const struct plugin_resource *res = &a->resources[r];
        strbuf_printf(out, "%s %s %s %u\n", res->name, res->socket,
                      plugin_registered(a->plugins[r]) ? "registered" : "unregistered",
                      answer_devices(a, res->name));
    }
    if (!a->nplugins)
        strbuf_puts(out, "none\n");
}

static void answer_dra(struct agent *a, const char *arg, struct strbuf *out)
{
    (void)arg;
    if (a->dra)
        dra_status(a->dra, out);
    else
        strbuf_puts(out, "off\n");
}

static void answer_pid(struct agent *a, const char *arg, struct strbuf *out)
{
    (void)a;
    (void)arg;
    strbuf_printf(out, "%d\n", (int)getpid());
}

static void answer_clear(struct agent *a, const char *gpu, struct strbuf *out)
{
    struct err e;
    if (agent_health_clear(a, gpu, &e) == 0)
        strbuf_puts(out, "ok\n");
    else
        strbuf_printf(out, "error: %s\n", e.msg);
}

/* "list table|wide|json|topology": gpulet list of the agent's GPUs, as they
 * are now (a MIG layout changed since start included), with their health. */
static void answer_list(struct agent *a, const char *format, struct strbuf *out)
{
    if (!strcmp(format, "json"))
        gpu_render_json(&a->inv, a->devs, out);
    else if (!strcmp(format, "topology"))
        gpu_render_topology(&a->inv, out);
    else if (!strcmp(format, "table") || !strcmp(format, "wide"))
        gpu_render_table(&a->inv, a->devs, !strcmp(format, "wide"), out);
    else
        strbuf_printf(out, "error: list takes table, wide, json or topology, not '%.32s'\n", format);
}

/* "labels text|json": the labels the agent publishes (or would, with
 * labels off), computed now. */
static void answer_labels(struct agent *a, const char *format, struct strbuf *out)
{
    if (!a->facts_known) {
        strbuf_puts(out, "error: the agent is still reading the GPUs; ask again in a moment\n");
        return;
    }
    struct label_set set = {0};
    const struct labels_input in = {&a->inv, a->devs, &a->cfg, a->machine, (long long)time(NULL),
                                    agent_migmgr_state(a)};
    labels_build(&in, &set);
    if (!strcmp(format, "json"))
        label_set_json(&set, out);
    else
        label_set_text(&set, out);
    label_set_free(&set);
}

/* "cdi yaml|json": the node's CDI spec as the agent writes it. */
static void answer_cdi(struct agent *a, const char *format, struct strbuf *out)
{
    struct err e;
    if (cdi_spec_text(&a->inv, a->driver_ok ? &a->driver : NULL, &a->cfg, strcmp(format, "json"),
                      out, &e) < 0)
        strbuf_printf(out, "error: %s\n", e.msg);
}

/* "api": the API server's client, counted since start: "<server>
 * requests N connections N failures N", or "none". */
static void answer_api(struct agent *a, const char *arg, struct strbuf *out)
{
    (void)arg;
    if (!a->kube) {
        strbuf_puts(out, "none\n");
        return;
    }
    struct kube_client_stats st = kube_client_stats(a->kube);
    strbuf_printf(out, "%s requests %llu connections %llu failures %llu\n",
                  kube_client_creds(a->kube)->server, st.requests, st.connections, st.failures);
}

/* "config": the configuration the agent runs with, as flags, then the
 * named config it applied, if any ("named NAME", then its text). */
static void answer_config(struct agent *a, const char *arg, struct strbuf *out)
{
    (void)arg;
    config_args_text(&a->cfg, out);
    struct config_text buf;
    const struct config_text *named = agent_nodeconfig_text(a, &buf);
    if (named)
        strbuf_printf(out, "named %s\n%.*s", named->name, (int)named->len, named->text);
}

/* "hand-over PID": a new agent (a rolling update's, --take-over) takes
 * this one's place: everything this one serves is let go of, as at its
 * stop (the MPS daemons and the slices stay), and it answers "released"
 * once its last write has ended (the checkpoint, the CDI specs, a socket's
 * removal), no MIG layout is being made on a lane, and the kubelet has let
 * go of its device plugins (agent_reregister_in), else
 * "releasing": the new one asks again, never reads a file this one is
 * still writing, and never registers a resource whose old client the
 * kubelet has yet to drop (it would drop the new one instead). */
static void answer_hand_over(struct agent *a, const char *arg, struct strbuf *out)
{
    if (!a->released)
        agent_release(a, arg);
    a->released = true;
    bool busy = writer_pending() > 0 || unixsock_pending() > 0 || agent_migmgr_busy(a) ||
                agent_reregister_in(a) != 0;
    if (!busy)
        agent_status_stop(a, false); /* this answer still goes */
    strbuf_printf(out, "%s %d\n", busy ? "releasing" : "released", (int)getpid());
}

/* "mig-config": the MIG manager's state (agent_migmgr_answer). */
static void answer_mig_config(struct agent *a, const char *arg, struct strbuf *out)
{
    (void)arg;
    agent_migmgr_answer(a, out);
}

static const struct agent_request {
    const char *name;
    bool arg;                         /* takes one word after its name */
    void (*answer)(struct agent *a, const char *arg, struct strbuf *out);
} agent_requests[] = {
    {"health", false, answer_health},   {"plugins", false, answer_plugins},
    {"dra", false, answer_dra},         {"pid", false, answer_pid},
    {"clear", true, answer_clear},      {"list", true, answer_list},
    {"labels", true, answer_labels},    {"cdi", true, answer_cdi},
    {"config", false, answer_config},   {"api", false, answer_api},
    {"hand-over", true, answer_hand_over},
    {"mig-config", false, answer_mig_config},
};

void agent_answer(struct agent *a, const char *line, struct strbuf *out)
{
    size_t n = strcspn(line, " ");
    const char *arg = line[n] ? line + n + 1 : NULL;
    for (size_t i = 0; i < sizeof agent_requests / sizeof *agent_requests; i++) {
        const struct agent_request *r = &agent_requests[i];
        if (strlen(r->name) != n || strncmp(line, r->name, n) || !arg != !r->arg)
            continue;
        r->answer(a, arg ? arg : "", out);
        return;
    }
    strbuf_printf(out, "error: unknown request '%.64s' (requests: health, plugins, dra, pid, clear "
                       "GPU, list FORMAT, labels FORMAT, cdi FORMAT, config, api, hand-over PID, "
                       "mig-config)\n", line);
}
