/* The label publisher: NFD's feature file, written on change and retried
 * with backoff; or the Node object, kept in step by kube/sync.c from the
 * agent's watch of it. */
#include "labels/publish.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube/kube.h"
#include "util/backoff.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define PUBLISH_BACKOFF_MIN_MS 500
#define PUBLISH_BACKOFF_MAX_MS 30000

struct labels_publisher {
    int mode;                       /* CONFIG_LABELS_FILE or _API */
    char path[CONFIG_PATH_MAX];     /* the feature file */
    bool keep_file;
    char node[128];
    struct kube_sync *sync;         /* the Node's labels (API) */
    struct label_set want;          /* the latest labels */
    struct label_set sent;          /* what the file holds (file) */
    struct label_set writing;       /* what the write under way puts there (file) */
    struct writer *file;            /* the file's, on the worker pool */
    bool closed;                    /* retry closed: p is freed once waits is 0 */
    unsigned waits;                 /* publish_written calls to come (file) */
    bool published;                 /* sent is valid; the Node had them once (API) */
    unsigned changes;               /* in the write in flight (API) */
    uv_timer_t retry;               /* the file's */
    unsigned backoff_ms;
    char last_error[768];           /* logged once until it changes */
    bool stopping;
};

/* --- the Node object, kept in step by kube/sync.c ------------------------------------ */

static int publish_next(void *ctx, const json_t *node, struct kube_write *w, struct err *e)
{
    struct labels_publisher *p = ctx;
    if (!node)
        return err_set(e, "no Node %s (check NODE_NAME)", p->node);
    struct strbuf patch = {0};
    if (labels_node_patch(node, &p->want, &patch, &p->changes, e) < 0)
        return -1;
    if (!patch.len) {
        if (!p->published)
            log_info("labels: %u on Node %s already", p->want.count, p->node);
        p->published = true;
        return 0;
    }
    w->method = "PATCH";
    snprintf(w->path, sizeof w->path, "/api/v1/nodes/%s", p->node);
    w->content_type = "application/merge-patch+json";
    w->body = patch;
    return 0;
}

static void publish_took(void *ctx, const json_t *now)
{
    (void)now;
    struct labels_publisher *p = ctx;
    if (!p->published)
        log_info("labels: %u published to Node %s (%u changed)", p->want.count, p->node, p->changes);
    else
        log_debug("labels: %u changed", p->changes);
    p->published = true;
}

/* --- the feature file ------------------------------------------------------------------ */

static void publish_file(struct labels_publisher *p);

static void publish_retry(uv_timer_t *t)
{
    publish_file(t->data);
}

static void publish_free(struct labels_publisher *p)
{
    writer_close(p->file);
    label_set_free(&p->want);
    label_set_free(&p->sent);
    label_set_free(&p->writing);
    free(p);
}

static void publish_closed(uv_handle_t *h)
{
    struct labels_publisher *p = h->data;
    p->closed = true;
    if (!p->waits)
        publish_free(p);
}

/* The write's end, on the loop: logged (a failure once until it changes)
 * and retried with backoff; labels changed meanwhile are written next. */
static void publish_written(void *ctx, const struct err *e, bool written)
{
    (void)written;
    struct labels_publisher *p = ctx;
    p->waits--;
    if (p->closed) {
        if (!p->waits)
            publish_free(p);
        return;
    }
    if (p->stopping)
        return;
    if (!e) {
        unsigned changes = p->published ? 0 : p->writing.count;
        for (unsigned i = 0; p->published && i < p->writing.count; i++) {
            const char *had = label_set_get(&p->sent, p->writing.items[i].key);
            changes += !had || strcmp(had, p->writing.items[i].value);
        }
        if (p->last_error[0] || !p->published)
            log_info("labels: %u published to %s (%u changed)", p->writing.count, p->path, changes);
        else if (changes)
            log_debug("labels: %u changed", changes);
        p->last_error[0] = '\0';
        p->backoff_ms = 0;
        label_set_copy(&p->sent, &p->writing);
        p->published = true;
        if (!label_set_equal(&p->writing, &p->want))
            publish_file(p);
        return;
    }
    if (strcmp(e->msg, p->last_error))
        log_error("labels not published: labels file: %s; retrying with backoff", e->msg);
    snprintf(p->last_error, sizeof p->last_error, "%s", e->msg);
    uv_timer_start(&p->retry, publish_retry,
                   backoff_next(&p->backoff_ms, PUBLISH_BACKOFF_MIN_MS, PUBLISH_BACKOFF_MAX_MS), 0);
}

/* Writes the newest labels on the worker pool, one write at a time. */
static void publish_file(struct labels_publisher *p)
{
    if (writer_busy(p->file))
        return; /* its end writes the newest labels */
    struct strbuf text = {0};
    label_set_text(&p->want, &text);
    label_set_copy(&p->writing, &p->want);
    writer_put(p->file, &text);
    p->waits++;
    writer_then(p->file, publish_written, p);
}

/* --- the publisher ------------------------------------------------------------------ */

static int publish_mode(const struct config *cfg)
{
    if (cfg->labels_output != CONFIG_LABELS_AUTO)
        return cfg->labels_output;
    if ((cfg->kubeconfig[0] || kube_in_cluster()) && cfg->node_name[0])
        return CONFIG_LABELS_API;
    return CONFIG_LABELS_NONE;
}

int labels_publisher_start(struct labels_publisher **out, uv_loop_t *loop,
                           const struct config *cfg, struct kube_client *kc,
                           struct kube_watch *node, struct err *e)
{
    *out = NULL;
    int mode = publish_mode(cfg);
    if (mode == CONFIG_LABELS_NONE) {
        if (cfg->labels_output == CONFIG_LABELS_AUTO)
            log_info("labels: not published (no API server credentials or NODE_NAME; "
                     "--labels api or file to choose)");
        return 0;
    }
    if (mode == CONFIG_LABELS_API && (!cfg->node_name[0] || !kc))
        return err_set(e, "labels: --labels api needs NODE_NAME (or --node-name) and the API "
                       "server's credentials");
    struct labels_publisher *p = xcalloc(1, sizeof *p);
    p->mode = mode;
    uv_timer_init(loop, &p->retry);
    p->retry.data = p;
    if (mode == CONFIG_LABELS_API) {
        snprintf(p->node, sizeof p->node, "%s", cfg->node_name);
        char what[200];
        snprintf(what, sizeof what, "labels on Node %s", p->node);
        const struct kube_sync_spec spec = {.what = what, .rbac = "get, list, watch and patch on nodes",
                                            .watch = node, .next = publish_next,
                                            .took = publish_took, .ctx = p};
        kube_sync_start(&p->sync, kc, &spec, e);
        log_info("labels: publishing to Node %s at %s (credentials: %s)", p->node,
                 kube_client_creds(kc)->server, kube_client_creds(kc)->source);
    } else {
        snprintf(p->path, sizeof p->path, "%s", cfg->output_file);
        p->keep_file = cfg->keep_labels_file;
        p->file = labels_file_writer(loop, p->path);
    }
    *out = p;
    return 0;
}

void labels_publisher_update(struct labels_publisher *p, const struct label_set *want)
{
    if (!p || p->stopping)
        return;
    if (p->published && label_set_equal(&p->want, want))
        return; /* on its way, or there */
    label_set_copy(&p->want, want);
    if (p->mode == CONFIG_LABELS_API)
        kube_sync_poke(p->sync);
    else if (!uv_is_active((uv_handle_t *)&p->retry)) /* a retry takes the newest labels */
        publish_file(p);
}

void labels_publisher_stop(struct labels_publisher *p)
{
    if (!p)
        return;
    p->stopping = true;
    if (p->mode == CONFIG_LABELS_FILE && (p->published || writer_busy(p->file)) && !p->keep_file) {
        writer_remove(p->file); /* after the write under way, if any: it may have put the file there */
        p->waits++;
        writer_then(p->file, publish_written, p);
    }
    kube_sync_stop(p->sync);
    uv_close((uv_handle_t *)&p->retry, publish_closed);
}
