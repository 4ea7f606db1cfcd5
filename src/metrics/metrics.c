/* The loop's side of metrics: the HTTP handler, the state the sampler
 * renders (XIDs, health, pods), PodResources refreshes, and the sampler
 * thread's lifetime. */
#include "metrics/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "http/http.h"
#include "metrics/internal.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* A rendered /metrics text that responses in flight share instead of each
 * copying it; freed by the last one done. Touched on the loop thread only. */
struct metrics_body {
    unsigned refs;
    size_t len;
    char data[];
};

static void metrics_body_release(void *ctx)
{
    struct metrics_body *b = ctx;
    if (b && --b->refs == 0)
        free(b);
}

struct metrics {
    uv_loop_t *loop;
    struct nvml *nvml;
    const struct gpu_inventory *inv;
    const struct config *cfg;
    struct collectors collectors;
    struct metrics_sampler sampler;  /* the sampler thread's alone */
    char hostname[256];
    /* shared with the sampler thread */
    uv_mutex_t lock;
    uv_cond_t wake;
    struct metrics_state state;      /* the loop writes it, the sampler copies it */
    struct strbuf *pending;          /* a rendered body the loop has not taken yet */
    bool *lost;                      /* per GPU: the sampler found it lost; the loop tells the owner */
    bool stop;
    uv_thread_t thread;
    bool thread_on;
    uv_async_t body_ready;
    /* loop only */
    struct metrics_body *body;       /* the latest text; responses share it */
    bool ready;
    struct http_server *http;
    struct metrics_hooks hooks;
    struct metrics_holder *claims;   /* DRA's holders (metrics_on_claims) */
    unsigned nclaims;
    int handles;
};

void metrics_state_alloc(struct metrics_state *s, unsigned count)
{
    memset(s, 0, sizeof *s);
    s->count = count;
    s->dev = xcalloc(count, sizeof *s->dev);
    s->owned = xcalloc(count, sizeof *s->owned);
    s->owner = xcalloc(count, sizeof *s->owner);
    s->mig_owned = xcalloc((size_t)count * GPU_MIG_MAX + 1, sizeof *s->mig_owned);
    s->mig_owner = xcalloc((size_t)count * GPU_MIG_MAX + 1, sizeof *s->mig_owner);
}

void metrics_state_free(struct metrics_state *s)
{
    free(s->dev);
    free(s->owned);
    free(s->owner);
    free(s->mig_owned);
    free(s->mig_owner);
    free(s->shares);
    free(s->api);
    memset(s, 0, sizeof *s);
}

void metrics_state_copy(struct metrics_state *d, const struct metrics_state *s)
{
    unsigned n = s->count;
    memcpy(d->dev, s->dev, n * sizeof *s->dev);
    memcpy(d->owned, s->owned, n * sizeof *s->owned);
    memcpy(d->owner, s->owner, n * sizeof *s->owner);
    memcpy(d->mig_owned, s->mig_owned, (size_t)n * GPU_MIG_MAX * sizeof *s->mig_owned);
    memcpy(d->mig_owner, s->mig_owner, (size_t)n * GPU_MIG_MAX * sizeof *s->mig_owner);
    free(d->shares);
    d->shares = NULL;
    d->nshares = 0;
    if (s->nshares) {
        d->shares = xmalloc(s->nshares * sizeof *s->shares);
        memcpy(d->shares, s->shares, s->nshares * sizeof *s->shares);
        d->nshares = s->nshares;
    }
    d->scrapes = s->scrapes;
    d->podres_errors = s->podres_errors;
    d->podres_last_ok = s->podres_last_ok;
    d->config = s->config;
    d->loop_lag = s->loop_lag;
    if (d->napi != s->napi)
        d->api = xrealloc(d->api, (s->napi + 1) * sizeof *s->api);
    if (s->napi)
        memcpy(d->api, s->api, s->napi * sizeof *s->api);
    d->napi = s->napi;
}

/* --- the sampler thread --------------------------------------------------- */

static void metrics_render_sample(struct metrics *m, struct metrics_state *snap, double secs,
                                  struct strbuf *out)
{
    const struct collectors *c = &m->collectors;
    for (unsigned k = 0; k < c->count; k++)
        if (c->items[k].field->src == SRC_XID)
            for (unsigned i = 0; i < m->inv->count; i++)
                m->sampler.shown[i].value[k] = snap->dev[i].last_xid;
    metrics_procs_usage(&m->sampler.procs, snap);
    struct metrics_frame f = {
        c, m->inv, m->hostname, m->sampler.shown_labels, m->sampler.shown, snap,
        secs, m->sampler.nvml_errors, &m->sampler.procs, m->sampler.identity,
    };
    metrics_render(out, &f);
}

static void metrics_thread(void *arg)
{
    struct metrics *m = arg;
    struct metrics_state snap;
    metrics_state_alloc(&snap, m->inv->count);
    uint64_t interval_ns = (uint64_t)m->cfg->metrics_interval_ms * 1000000ULL;
    uv_mutex_lock(&m->lock);
    while (!m->stop) {
        metrics_state_copy(&snap, &m->state); /* the agent's handles, health, XIDs */
        uv_mutex_unlock(&m->lock);
        uint64_t t0 = uv_hrtime();
        double secs = metrics_sample(&m->sampler, snap.dev, t0 + interval_ns);
        struct strbuf *body = xcalloc(1, sizeof *body);
        uv_mutex_lock(&m->lock);
        metrics_state_copy(&snap, &m->state); /* the freshest health and pods to render */
        uv_mutex_unlock(&m->lock);
        metrics_render_sample(m, &snap, secs, body);
        uv_mutex_lock(&m->lock);
        struct strbuf *old = m->pending; /* the loop never took it: a newer one wins */
        m->pending = body;
        for (unsigned i = 0; i < m->inv->count; i++)
            m->lost[i] |= !m->sampler.g[i].posted && m->sampler.g[i].lost; /* a sample out is its lane's */
        uv_mutex_unlock(&m->lock);
        if (old) {
            strbuf_free(old);
            free(old);
        }
        uv_async_send(&m->body_ready);
        uv_mutex_lock(&m->lock);
        /* Wait out the interval, from this sample's start, or until stopped. */
        for (;;) {
            uint64_t spent = uv_hrtime() - t0;
            if (m->stop || spent >= interval_ns)
                break;
            uv_cond_timedwait(&m->wake, &m->lock, interval_ns - spent);
        }
    }
    uv_mutex_unlock(&m->lock);
    metrics_state_free(&snap);
}

/* --- the loop side ----------------------------------------------------------- */

static void metrics_take_body(uv_async_t *a)
{
    struct metrics *m = a->data;
    unsigned count = m->inv->count;
    bool lost[count ? count : 1];
    uv_mutex_lock(&m->lock);
    struct strbuf *b = m->pending;
    m->pending = NULL;
    memcpy(lost, m->lost, count * sizeof *lost);
    memset(m->lost, 0, count * sizeof *m->lost);
    uv_mutex_unlock(&m->lock);
    for (unsigned i = 0; i < count; i++)
        if (lost[i] && m->state.dev[i].health != HEALTH_LOST && m->hooks.on_lost)
            m->hooks.on_lost(m->hooks.ctx, i);
    if (!b)
        return;
    struct metrics_body *body = xmalloc(sizeof *body + b->len);
    body->refs = 1; /* the loop's own */
    body->len = b->len;
    memcpy(body->data, b->data, b->len);
    strbuf_free(b);
    free(b);
    metrics_body_release(m->body);
    m->body = body;
    if (!m->ready)
        log_info("metrics ready on %s/metrics", m->cfg->metrics_listen);
    m->ready = true;
}

static void metrics_http(void *ctx, const char *path, struct http_reply *r)
{
    struct metrics *m = ctx;
    if (!strcmp(path, "/metrics")) {
        if (!m->ready) {
            r->status = 503;
            strbuf_puts(&r->body, "not ready: the first sample is not done yet\n");
            return;
        }
        uv_mutex_lock(&m->lock);
        m->state.scrapes++;
        uv_mutex_unlock(&m->lock);
        r->status = 200;
        r->content_type = "text/plain; version=0.0.4; charset=utf-8";
        m->body->refs++; /* released by libmicrohttpd when this response is sent */
        r->shared = m->body->data;
        r->shared_len = m->body->len;
        r->release = metrics_body_release;
        r->release_ctx = m->body;
    } else if (!strcmp(path, "/healthz")) {
        r->status = 200;
        strbuf_puts(&r->body, "ok\n");
    } else if (!strcmp(path, "/readyz")) {
        r->status = m->ready ? 200 : 503;
        strbuf_puts(&r->body, m->ready ? "ready\n" : "not ready: the first sample is not done yet\n");
    } else if (!strcmp(path, "/")) {
        r->status = 200;
        r->content_type = "text/html; charset=utf-8";
        strbuf_puts(&r->body, "<html><head><title>gpulet</title></head><body><h1>gpulet</h1>"
                              "<p><a href=\"/metrics\">/metrics</a> <a href=\"/healthz\">/healthz</a> "
                              "<a href=\"/readyz\">/readyz</a></p></body></html>\n");
    } else {
        r->status = 404;
        strbuf_printf(&r->body, "not found: %.200s (try /metrics)\n", path);
    }
}

void metrics_on_device(struct metrics *m, unsigned gpu, unsigned what, const struct gpu_device *d)
{
    if (!m || gpu >= m->inv->count)
        return;
    (void)what; /* all of it is small: copy the record whole */
    uv_mutex_lock(&m->lock);
    struct metrics_device *md = &m->state.dev[gpu];
    md->handle = d->handle;
    md->generation = d->generation;
    md->health = d->health.reason;
    md->last_xid = d->last_xid;
    memcpy(md->xids, d->xids, sizeof md->xids);
    memcpy(md->resource, d->share.resource, sizeof md->resource);
    memcpy(md->mig, d->info->mig, sizeof md->mig);
    md->nmig = d->info->mig_mode == NVML_DEVICE_MIG_ENABLE ? d->info->nmig : 0;
    for (unsigned k = 0; k < GPU_MIG_MAX; k++) {
        memcpy(md->mig_resource[k], d->mig_share[k].resource, sizeof md->mig_resource[k]);
        md->mig_health[k] = d->mig_health[k].reason;
    }
    uv_mutex_unlock(&m->lock);
}

void metrics_on_config(struct metrics *m, const struct metrics_config *c)
{
    if (!m)
        return;
    uv_mutex_lock(&m->lock);
    m->state.config = *c;
    uv_mutex_unlock(&m->lock);
}

void metrics_on_api(struct metrics *m, const struct kube_request_row *rows, unsigned n)
{
    if (!m)
        return;
    uv_mutex_lock(&m->lock);
    if (n != m->state.napi)
        m->state.api = xrealloc(m->state.api, (n + 1) * sizeof *rows);
    if (n)
        memcpy(m->state.api, rows, n * sizeof *rows);
    m->state.napi = n;
    uv_mutex_unlock(&m->lock);
}

void metrics_on_loop_lag(struct metrics *m, double seconds)
{
    if (!m)
        return;
    uv_mutex_lock(&m->lock);
    m->state.loop_lag = seconds;
    uv_mutex_unlock(&m->lock);
}

/* --- PodResources ------------------------------------------------------------- */

void metrics_on_pods(struct metrics *m, const struct V1__ListPodResourcesResponse *r)
{
    if (!m)
        return;
    struct metrics_state next;
    metrics_state_alloc(&next, m->inv->count);
    /* Without the List, the claims' holders only: no pod labels beat stale
     * ones, since a pod may have ended. */
    metrics_pods_decode(&next, m->inv, r, m->claims, m->nclaims);
    uv_mutex_lock(&m->lock);
    memcpy(m->state.owned, next.owned, m->inv->count * sizeof *next.owned);
    memcpy(m->state.owner, next.owner, m->inv->count * sizeof *next.owner);
    memcpy(m->state.mig_owned, next.mig_owned,
           (size_t)m->inv->count * GPU_MIG_MAX * sizeof *next.mig_owned);
    memcpy(m->state.mig_owner, next.mig_owner,
           (size_t)m->inv->count * GPU_MIG_MAX * sizeof *next.mig_owner);
    free(m->state.shares);
    m->state.shares = next.shares;
    m->state.nshares = next.nshares;
    next.shares = NULL;
    if (r)
        m->state.podres_last_ok = (double)time(NULL);
    else
        m->state.podres_errors++;
    uv_mutex_unlock(&m->lock);
    metrics_state_free(&next);
}

void metrics_on_claims(struct metrics *m, const struct metrics_holder *h, unsigned n)
{
    if (!m)
        return;
    free(m->claims);
    m->claims = n ? xmalloc(n * sizeof *h) : NULL;
    if (n)
        memcpy(m->claims, h, n * sizeof *h);
    m->nclaims = n;
}

/* --- lifetime ------------------------------------------------------------------- */

int metrics_read_files(const struct config *cfg, struct metrics_files *f, struct err *e)
{
    memset(f, 0, sizeof *f);
    if (cfg->no_metrics)
        return 0;
    f->collectors_given = cfg->collectors[0] != '\0';
    if (f->collectors_given && metrics_collectors_load(&f->collectors, cfg->collectors, e) < 0)
        return -1;
    if (!cfg->web_config_file[0])
        return 0;
    return http_webconfig_load(&f->sec, cfg->web_config_file, e) < 0 ? -1
                                                                     : http_security_load(&f->sec, e);
}

void metrics_files_free(struct metrics_files *f)
{
    http_security_free(&f->sec);
}

int metrics_start(struct metrics **out, uv_loop_t *loop, struct nvml *n, struct gpu_lanes *lanes,
                  const struct gpu_inventory *inv, const struct gpu_device *devs,
                  const struct config *cfg, const struct metrics_files *files,
                  const struct metrics_hooks *hooks, struct err *e)
{
    *out = NULL;
    struct metrics *m = xcalloc(1, sizeof *m);
    m->loop = loop;
    m->nvml = n;
    m->inv = inv;
    m->cfg = cfg;
    if (hooks)
        m->hooks = *hooks;
    uv_mutex_init(&m->lock);
    uv_cond_init(&m->wake);
    if (files->collectors_given)
        m->collectors = files->collectors;
    else
        metrics_collectors_default(&m->collectors);
    const char *node = getenv("NODE_NAME");
    if (cfg->hostname[0])
        snprintf(m->hostname, sizeof m->hostname, "%s", cfg->hostname);
    else if (node && *node)
        snprintf(m->hostname, sizeof m->hostname, "%s", node);
    else if (gethostname(m->hostname, sizeof m->hostname - 1) < 0)
        strcpy(m->hostname, "unknown");
    metrics_state_alloc(&m->state, inv->count);
    m->lost = xcalloc(inv->count, sizeof *m->lost);
    for (unsigned i = 0; i < inv->count; i++)
        metrics_on_device(m, i, 0, &devs[i]);
    metrics_sampler_init(&m->sampler, n, lanes, inv, &m->collectors, cfg->metrics_interval_ms);
    metrics_procs_init(&m->sampler.procs, cfg);
    if (http_start(&m->http, loop, cfg->metrics_listen, &files->sec, metrics_http, m, e) < 0) {
        metrics_sampler_free(&m->sampler);
        metrics_state_free(&m->state);
        free(m->lost);
        free(m);
        return -1;
    }
    uv_async_init(loop, &m->body_ready, metrics_take_body);
    m->body_ready.data = m;
    m->handles = 1;
    if (uv_thread_create(&m->thread, metrics_thread, m) != 0) {
        metrics_stop(m);
        return err_set(e, "cannot start the metrics sampler thread");
    }
    m->thread_on = true;
    log_info("metrics: %u fields%s, sampled every %u ms, served on %s", m->collectors.count,
             cfg->collectors[0] ? " from the collectors file" : " (default counters)",
             cfg->metrics_interval_ms, cfg->metrics_listen);
    *out = m;
    return 0;
}

static void metrics_closed(uv_handle_t *h)
{
    struct metrics *m = h->data;
    if (--m->handles > 0)
        return;
    if (m->pending) {
        strbuf_free(m->pending);
        free(m->pending);
    }
    metrics_body_release(m->body);
    if (!metrics_sampler_free(&m->sampler))
        return; /* a lane stuck in the driver may still write into m: it ends with the process */
    metrics_state_free(&m->state);
    free(m->claims);
    free(m->lost);
    uv_cond_destroy(&m->wake);
    uv_mutex_destroy(&m->lock);
    free(m);
}

void metrics_stop(struct metrics *m)
{
    if (!m)
        return;
    if (m->thread_on) {
        uv_mutex_lock(&m->lock);
        m->stop = true;
        uv_cond_signal(&m->wake);
        uv_mutex_unlock(&m->lock);
        uv_thread_join(&m->thread);
        m->thread_on = false;
    }
    http_stop(m->http);
    uv_close((uv_handle_t *)&m->body_ready, metrics_closed);
}
