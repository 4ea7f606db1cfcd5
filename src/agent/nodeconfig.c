/* Per-node configuration without a sidecar: gpulet reads its own Node (the
 * label that names a config) from the agent's watch of it and watches the
 * ConfigMap of named configs, both on the agent's client, and applies the
 * chosen config by the same path as SIGHUP. A config that fails keeps the
 * running one, with one error in the log and the gpulet_config_* series. */
#include "agent/internal.h"

#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define NODECONFIG_FIRST_WAIT_MS 10000 /* start-up waits this for the API */

/* A named config, owned. */
struct nodeconfig_choice {
    char name[64];                   /* empty: none */
    char source[640];                /* where it is, for errors */
    char *text;
    size_t len;
};

struct agent_nodeconfig {
    struct agent *a;
    char ns[128], map[256], label_key[128];
    char source[512];                /* "ConfigMap ns/name", for messages */
    struct kube_watch *node_watch;   /* the agent's */
    struct kube_watch *map_watch;
    char label[128];                 /* the label's value; empty: none */
    struct config_named_set set;
    bool map_exists;
    char map_error[512];             /* the ConfigMap's data cannot be read */
    struct nodeconfig_choice running; /* the named config in the running configuration */
    struct nodeconfig_choice refused; /* the last one that failed: not tried again */
    struct nodeconfig_choice pending; /* being applied (reload.c reads it off the loop) */
    char pending_why[160];           /* why it was chosen, and whether the ConfigMap exists */
    bool pending_exists;
    char last_error[768];            /* reported once until it changes */
    bool starting;                   /* waiting for both watches' first answers, */
    uv_timer_t deadline;             /* for this long; then: a change applied soon */
    bool deadline_on, late;
};

static bool nodeconfig_same(const struct nodeconfig_choice *c, const struct config_named *n)
{
    if (!n)
        return !c->name[0];
    return !strcmp(c->name, n->name) && c->len == n->len && c->text &&
           !memcmp(c->text, n->text, n->len);
}

static void nodeconfig_set(struct nodeconfig_choice *c, const struct config_named *n)
{
    free(c->text);
    memset(c, 0, sizeof *c);
    if (!n)
        return;
    snprintf(c->name, sizeof c->name, "%s", n->name);
    c->text = xmalloc(n->len + 1);
    memcpy(c->text, n->text, n->len + 1);
    c->len = n->len;
}

/* --- what the watches bring ----------------------------------------------------------- */

static void nodeconfig_apply(struct agent_nodeconfig *nc, bool first);

static void nodeconfig_soon(uv_timer_t *t)
{
    nodeconfig_apply(t->data, false);
}

/* Applied on the loop's next turn, never inside the watch's callback: a
 * reload stops and starts what listens on that same watch. At start it is
 * applied after the first answers (agent_nodeconfig_start). */
static void nodeconfig_changed(struct agent_nodeconfig *nc)
{
    if (!nc->starting && nc->deadline_on)
        uv_timer_start(&nc->deadline, nodeconfig_soon, 0, 0);
}

static void nodeconfig_on_node(void *ctx, struct kube_watch *w)
{
    struct agent_nodeconfig *nc = ctx;
    const json_t *node = kube_watch_object(w);
    char label[sizeof nc->label] = "";
    struct err e;
    if (node && config_node_label(node, nc->label_key, label, sizeof label, &e) < 0)
        log_warn("node config: %s", e.msg);
    if (!strcmp(label, nc->label))
        return; /* the Node changed, not its label */
    snprintf(nc->label, sizeof nc->label, "%s", label);
    nodeconfig_changed(nc);
}

static void nodeconfig_on_map(void *ctx, struct kube_watch *w)
{
    struct agent_nodeconfig *nc = ctx;
    const json_t *cm = kube_watch_object(w);
    struct err e = {.msg = ""};
    config_named_free(&nc->set);
    if (cm)
        config_named_parse(&nc->set, cm, &e);
    nc->map_exists = cm != NULL;
    snprintf(nc->map_error, sizeof nc->map_error, "%s", e.msg);
    nodeconfig_changed(nc);
}

/* --- on the loop ------------------------------------------------------------------- */

static void nodeconfig_report(struct agent_nodeconfig *nc, const char *msg)
{
    struct agent *a = nc->a;
    if (!strcmp(msg, nc->last_error))
        return;
    snprintf(nc->last_error, sizeof nc->last_error, "%s", msg);
    log_error("node config: %s; keeping the running configuration", msg);
    a->config_state.last_ok = false;
    a->config_state.failures++;
    metrics_on_config(a->metrics, &a->config_state);
}

/* The chosen config (nc->pending) was applied, or refused with e. */
static void nodeconfig_applied(void *ctx, const struct err *e)
{
    struct agent_nodeconfig *nc = ctx;
    struct nodeconfig_choice next = nc->pending;
    memset(&nc->pending, 0, sizeof nc->pending);
    if (e) {
        char msg[768];
        snprintf(msg, sizeof msg, "config '%s' not applied: %.600s", next.name, e->msg);
        nodeconfig_report(nc, msg);
        free(nc->refused.text);
        nc->refused = next;
        return;
    }
    nc->last_error[0] = '\0';
    nodeconfig_set(&nc->refused, NULL);
    free(nc->running.text);
    nc->running = next;
    if (next.name[0])
        log_info("node config: applied '%s' from %s (chosen by %s)", next.name, nc->source,
                 nc->pending_why);
    else
        log_info("node config: none applies now (%s); running on flags and --config-file",
                 nc->pending_exists ? nc->pending_why : "the ConfigMap does not exist");
}

/* Chooses the node's config from what the watches last saw and applies it
 * when it differs from the running one. A reload under way (this one's,
 * or a SIGHUP's) is waited for: its end pokes this again. */
static void nodeconfig_apply(struct agent_nodeconfig *nc, bool first)
{
    char msg[768];
    if (nc->a->reloading)
        return;
    if (nc->starting || !kube_watch_known(nc->node_watch) || !kube_watch_known(nc->map_watch))
        /* Choosing on half the facts would apply a config (the ConfigMap's
         * default, with the label still unknown) only to replace it when
         * the other watch answers: two re-registrations instead of one. */
        return;
    struct config_named_set *set = &nc->set;
    const struct config_named *named = NULL;
    const char *why = "";
    struct err e;
    int rc = 0;
    if (nc->map_error[0]) {
        snprintf(msg, sizeof msg, "%.250s: %.500s", nc->source, nc->map_error);
        rc = -1;
    } else if (!nc->map_exists && (nc->label[0] || nc->a->cfg.default_config[0])) {
        snprintf(msg, sizeof msg, "%.250s does not exist, and %s names config '%.63s'", nc->source,
                 nc->label[0] ? "the node label" : "--default-config",
                 nc->label[0] ? nc->label : nc->a->cfg.default_config);
        rc = -1;
    } else if ((rc = config_named_choose(set, nc->label, nc->a->cfg.default_config, &named, &why,
                                         &e)) < 0) {
        snprintf(msg, sizeof msg, "%.100s=%.63s: %.400s (%.180s)", nc->label_key, nc->label,
                 e.msg, nc->source);
    }
    if (rc < 0 || nodeconfig_same(&nc->running, named) ||
        (named && nodeconfig_same(&nc->refused, named))) {
        bool none = rc == 0 && !named, exists = nc->map_exists;
        if (rc < 0)
            nodeconfig_report(nc, msg);
        else if (first && none)
            log_info("node config: none applies (%s); running on flags and --config-file",
                     exists ? why : "the ConfigMap does not exist");
        return;
    }
    nodeconfig_set(&nc->pending, named);
    snprintf(nc->pending.source, sizeof nc->pending.source, "%s key %s", nc->source, nc->pending.name);
    snprintf(nc->pending_why, sizeof nc->pending_why, "%s", why);
    nc->pending_exists = nc->map_exists;
    const struct config_text text = {nc->pending.name, nc->pending.source, nc->pending.text,
                                     nc->pending.len};
    const struct config_text *chosen = nc->pending.name[0] ? &text : NULL;
    if (first) { /* start-up, before the loop serves: read in place */
        int rc = agent_reload(nc->a, chosen, &e);
        nodeconfig_applied(nc, rc < 0 ? &e : NULL);
    } else if (!agent_reload_later(nc->a, chosen, nodeconfig_applied, nc)) {
        nodeconfig_set(&nc->pending, NULL); /* not reached: checked above */
    }
}

const struct config_text *agent_nodeconfig_text(const struct agent *a, struct config_text *buf)
{
    const struct agent_nodeconfig *nc = a->nodeconfig;
    if (!nc || !nc->running.name[0])
        return NULL;
    *buf = (struct config_text){nc->running.name, nc->running.source, nc->running.text,
                                nc->running.len};
    return buf;
}

/* The ConfigMap: "name" in gpulet's namespace, or "namespace/name". */
static void nodeconfig_names(struct agent_nodeconfig *nc, const char *spec)
{
    const char *slash = strchr(spec, '/');
    if (slash) {
        snprintf(nc->ns, sizeof nc->ns, "%.*s", (int)(slash - spec), spec);
        snprintf(nc->map, sizeof nc->map, "%s", slash + 1);
    } else {
        kube_namespace(nc->ns, sizeof nc->ns);
        snprintf(nc->map, sizeof nc->map, "%s", spec);
    }
    snprintf(nc->source, sizeof nc->source, "ConfigMap %s/%s", nc->ns, nc->map);
}

static void nodeconfig_deadline(uv_timer_t *t)
{
    struct agent_nodeconfig *nc = t->data;
    nc->late = true;
}

/* Runs the loop (at start-up only, before anything else is on it) until
 * both watches answered, or the limit; on the limit, names in `missing`
 * what did not answer. */
static bool nodeconfig_wait(struct agent_nodeconfig *nc, char *missing, size_t size)
{
    uv_timer_init(&nc->a->loop, &nc->deadline);
    nc->deadline.data = nc;
    nc->deadline_on = true;
    uv_timer_start(&nc->deadline, nodeconfig_deadline, NODECONFIG_FIRST_WAIT_MS, 0);
    while (!nc->late && !(kube_watch_known(nc->node_watch) && kube_watch_known(nc->map_watch)))
        uv_run(&nc->a->loop, UV_RUN_ONCE);
    uv_timer_stop(&nc->deadline);
    bool node = kube_watch_known(nc->node_watch), map = kube_watch_known(nc->map_watch);
    snprintf(missing, size, "%s%.127s%s%.400s", node ? "" : "Node ",
             node ? "" : nc->a->cfg.node_name, node || map ? "" : " and ", map ? "" : nc->source);
    return node && map;
}

void agent_nodeconfig_start(struct agent *a)
{
    if (!a->cfg.config_map[0])
        return;
    if (!a->kube) {
        log_error("node config is off: --config-map needs the API server's credentials and "
                  "NODE_NAME");
        return;
    }
    struct agent_nodeconfig *nc = xcalloc(1, sizeof *nc);
    nc->a = a;
    snprintf(nc->label_key, sizeof nc->label_key, "%s", a->cfg.config_label);
    nodeconfig_names(nc, a->cfg.config_map);
    a->nodeconfig = nc;
    char maps[KUBE_PATH_MAX];
    snprintf(maps, sizeof maps, "/api/v1/namespaces/%s/configmaps", nc->ns);
    struct err e;
    const struct kube_watch_spec map = {maps, nc->map, nc->source};
    kube_watch_start(&nc->map_watch, a->kube, &map, &e);
    nc->node_watch = a->node;
    nc->starting = true;
    kube_watch_listen(nc->node_watch, nodeconfig_on_node, nc);
    kube_watch_listen(nc->map_watch, nodeconfig_on_map, nc);
    log_info("node config: label %s on Node %s chooses from %s at %s", nc->label_key,
             a->cfg.node_name, nc->source, kube_client_creds(a->kube)->server);
    /* As NVIDIA's config-manager init container does, start on the node's
     * config rather than re-registering moments later with another. */
    char missing[700];
    if (!nodeconfig_wait(nc, missing, sizeof missing))
        log_error("node config: no answer from the API server in %d s for %s; starting on "
                  "flags and --config-file, and applying the node's config when it answers",
                  NODECONFIG_FIRST_WAIT_MS / 1000, missing);
    nc->starting = false;
    nodeconfig_apply(nc, true);
}

void agent_nodeconfig_poke(struct agent *a)
{
    struct agent_nodeconfig *nc = a->nodeconfig;
    if (nc && nc->node_watch)
        nodeconfig_changed(nc);
}

void agent_nodeconfig_stop(struct agent *a)
{
    struct agent_nodeconfig *nc = a->nodeconfig;
    if (!nc)
        return;
    kube_watch_unlisten(nc->node_watch, nodeconfig_on_node, nc);
    kube_watch_stop(nc->map_watch);
    if (nc->deadline_on)
        uv_close((uv_handle_t *)&nc->deadline, NULL); /* nc is freed after the loop */
    nc->deadline_on = false;
    nc->node_watch = nc->map_watch = NULL;
}

void agent_nodeconfig_free(struct agent *a)
{
    struct agent_nodeconfig *nc = a->nodeconfig;
    if (!nc)
        return;
    config_named_free(&nc->set);
    free(nc->running.text);
    free(nc->refused.text);
    free(nc->pending.text);
    free(nc);
    a->nodeconfig = NULL;
}
