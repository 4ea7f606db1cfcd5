/* The running agent's view of its GPUs (its status socket's "health"), so
 * that doctor says what the agent says: a GPU the agent marked unhealthy
 * fails gpu-health, and on a simulated node, whose GPUs live inside the
 * agent's process, the agent's view is the only one (doctor opens no
 * simulator of its own there). */
#include "doctor/internal.h"

#include <stdlib.h>
#include <string.h>

#include "migparted/migparted.h"
#include "util/unixsock.h"
#include "util/xmalloc.h"

#define AGENT_REPLY_MAX 65536

bool doctor_agent_view(struct doctor *d)
{
    if (d->agent_asked)
        return d->agent_ngpus > 0;
    d->agent_asked = true;
    doctor_step(d, "asking the agent at %s for its GPUs' health", d->agent_socket);
    char *reply = xmalloc(AGENT_REPLY_MAX);
    struct err e;
    if (unixsock_request(d->agent_socket, "health\n", reply, AGENT_REPLY_MAX, &e) < 0) {
        free(reply);
        return false;
    }
    unsigned cap = 0;
    char *save = NULL;
    for (char *line = strtok_r(reply, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        struct doctor_agent_gpu g;
        if (gpu_health_line_read(line, &g.index, &g.mig, g.uuid, sizeof g.uuid, &g.health) < 0)
            continue;
        if (d->agent_n == cap)
            d->agent_gpus = xrealloc(d->agent_gpus, (cap = cap ? 2 * cap : 16) * sizeof g);
        d->agent_gpus[d->agent_n++] = g;
        d->agent_ngpus += g.mig < 0;
    }
    free(reply);
    return d->agent_ngpus > 0;
}

void doctor_agent_unhealthy(struct doctor *d, struct strbuf *out)
{
    for (unsigned i = 0; i < d->agent_n; i++) {
        const struct doctor_agent_gpu *g = &d->agent_gpus[i];
        if (g->health.reason == HEALTH_OK)
            continue;
        char why[256];
        gpu_health_describe(&g->health, why, sizeof why);
        if (g->mig < 0)
            strbuf_printf(out, "%sGPU %u: %s", out->len ? "; " : "", g->index, why);
        else
            strbuf_printf(out, "%sGPU %u MIG %d: %s", out->len ? "; " : "", g->index, g->mig, why);
    }
}

/* The MIG manager (docs/mig.md, "Layouts by node label"): the layout the
 * Node's label names, as the agent's "mig-config" answers it. */
void doctor_mig_config(struct doctor *d, struct doctor_result *r)
{
    char reply[1024], *state, *config, *why;
    struct err e;
    doctor_step(d, "asking the agent at %s for its MIG layout", d->agent_socket);
    if (unixsock_request(d->agent_socket, "mig-config\n", reply, sizeof reply, &e) < 0) {
        doctor_set(r, DOCTOR_SKIP, NULL, "gpulet does not answer (see registration): %s", e.msg);
        return;
    }
    migparted_state_split(reply, &state, &config, &why);
    if (!strcmp(state, "off") || !strncmp(state, "error", 5))
        doctor_set(r, DOCTOR_SKIP, NULL, "no --mig-parted-config: gpulet leaves MIG layouts as they are");
    else if (!strcmp(state, "none"))
        doctor_set(r, DOCTOR_SKIP, NULL, "the Node has no nvidia.com/mig.config label: the layout "
                   "stays as it is");
    else if (!strcmp(state, "success"))
        doctor_set(r, DOCTOR_PASS, NULL, "MIG config '%s' applied", config);
    else if (!strcmp(state, "failed"))
        doctor_set(r, DOCTOR_FAIL, "fix the config or the label; kubectl get events names it too",
                   "MIG config '%s' failed: %s", config, why);
    else
        doctor_set(r, DOCTOR_WARN, NULL, "MIG config '%s' %s%s%s", config, state, why[0] ? ": " : "",
                   why);
}
