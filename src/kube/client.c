/* The agent's one client of the API server: libcurl's multi interface
 * driven by the agent's libuv loop (curl_multi_socket_action with a
 * uv_poll_t per socket and one uv_timer_t: libcurl's event-loop
 * integration), HTTP/2 with multiplexing, so that every request and watch
 * of the agent shares one connection and nothing about the API server
 * waits on a thread. Answers come back on the loop, to the caller's done;
 * a stream's lines to its on_line, after libcurl's callbacks have
 * returned (libcurl refuses a new request from inside them). */
#include "kube/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/log.h"
#include "util/xmalloc.h"

struct kube_call {
    struct kube_client *kc;
    CURL *h;
    struct curl_slist *headers;
    char what[600];                 /* "GET https://host/path", for messages */
    struct strbuf body;             /* the answer, or a stream's unread bytes */
    struct strbuf lines;            /* a stream's whole lines, not yet handed on */
    bool stream, too_big, stopped;  /* stopped: cancelled, or ended by its reader */
    bool busy;                      /* in a callback of its own: a cancel only marks it */
    bool unsent;                    /* no handle: answered with curl_err on the next turn */
    kube_line_fn on_line;
    kube_done_fn done;
    void *ctx;
    const void *owner;
    char curl_err[CURL_ERROR_SIZE];
    struct kube_call *prev, *next;  /* in kc->calls */
    uint64_t begun_ns;              /* for the request's row */
    char method[8], resource[64];
};

struct kube_client {
    uv_loop_t *loop;
    struct kube_creds creds;
    CURLM *multi;
    uv_timer_t timer;               /* libcurl's */
    uv_timer_t unsent;              /* answers the calls that could not be sent */
    struct kube_call *calls;
    struct kube_socket *sockets;
    struct kube_client_stats stats;
    struct kube_request_row *rows;  /* by method, resource and code */
    unsigned nrows;
    unsigned handles;               /* the timers and the sockets' polls, not yet closed; a
                                     * token's reading in flight */
    uv_timer_t token_timer;         /* the token file read again, on the worker pool */
    uv_work_t token_work;
    char token_read[KUBE_TOKEN_MAX];
    int token_rc;
    struct err token_err;
    bool token_failing;             /* its failure logged, once until it reads again */
    bool closing;
};

/* A socket libcurl asked us to watch. */
struct kube_socket {
    uv_poll_t poll;
    curl_socket_t fd;
    struct kube_client *kc;
    struct kube_socket *next;       /* in kc->sockets, until closed */
};

static void kube_maybe_free(struct kube_client *kc);
static void kube_closed(uv_handle_t *h);

static void kube_socket_closed(uv_handle_t *h)
{
    struct kube_socket *s = h->data;
    struct kube_client *kc = s->kc;
    free(s);
    kc->handles--;
    kube_maybe_free(kc);
}

static void kube_socket_close(struct kube_client *kc, struct kube_socket *s)
{
    struct kube_socket **at = &kc->sockets;
    while (*at != s)
        at = &(*at)->next;
    *at = s->next;
    uv_poll_stop(&s->poll);
    uv_close((uv_handle_t *)&s->poll, kube_socket_closed);
}

/* Once closing with no call left: the kept connections closed, then the
 * client freed when libuv has closed the last of its handles. */
static void kube_maybe_free(struct kube_client *kc)
{
    if (!kc->closing || kc->calls)
        return;
    if (kc->multi) {
        CURLM *m = kc->multi;
        kc->multi = NULL;
        kube_curl.multi_cleanup(m);
        while (kc->sockets)
            kube_socket_close(kc, kc->sockets);
        uv_close((uv_handle_t *)&kc->timer, kube_closed);
        uv_close((uv_handle_t *)&kc->unsent, kube_closed);
        uv_close((uv_handle_t *)&kc->token_timer, kube_closed);
    }
    if (kc->handles)
        return;
    kube_creds_free(&kc->creds);
    free(kc->rows);
    free(kc);
}

/* The close callback of the client's two timers. */
static void kube_closed(uv_handle_t *h)
{
    struct kube_client *kc = h->data;
    kc->handles--;
    kube_maybe_free(kc);
}

/* --- a call's end ----------------------------------------------------------------- */

static void kube_unlink(struct kube_call *c)
{
    struct kube_client *kc = c->kc;
    if (!c->unsent)
        kube_curl.multi_remove(kc->multi, c->h);
    if (c->prev)
        c->prev->next = c->next;
    else
        kc->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
}

static void kube_call_free(struct kube_call *c)
{
    struct kube_client *kc = c->kc;
    if (c->h)
        kube_curl.cleanup(c->h);
    kube_curl.slist_free(c->headers);
    strbuf_free(&c->body);
    strbuf_free(&c->lines);
    free(c);
    kube_maybe_free(kc);
}

/* Hands lines (whole, each ending in a newline but maybe the last) to the
 * reader; false when it ended the stream. A cancel of c from inside a
 * callback of its own only marks it (busy). */
static bool kube_deliver(struct kube_call *c, struct strbuf *lines)
{
    bool was_busy = c->busy, go_on = true;
    c->busy = true;
    for (size_t at = 0; go_on && !c->stopped && at < lines->len;) {
        char *nl = memchr(lines->data + at, '\n', lines->len - at);
        size_t len = nl ? (size_t)(nl - (lines->data + at)) : lines->len - at;
        if (len && c->on_line(c->ctx, lines->data + at, len) < 0)
            go_on = false;
        at += len + 1;
    }
    c->busy = was_busy;
    strbuf_free(lines);
    return go_on && !c->stopped;
}

const double kube_latency_bounds[KUBE_LATENCY_BUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1,
                                                          0.25, 0.5, 1, 2.5, 10};

void kube_path_resource(const char *path, char *out, size_t len)
{
    char seg[8][64];
    unsigned n = 0;
    for (const char *p = path; *p && *p != '?' && n < 8;) {
        while (*p == '/')
            p++;
        size_t k = strcspn(p, "/?");
        if (!k)
            break;
        snprintf(seg[n++], sizeof seg[0], "%.*s", (int)k, p);
        p += k;
    }
    /* /api/v1/... or /apis/<group>/<version>/..., then namespaces/<ns>/ */
    unsigned i = n && !strcmp(seg[0], "api") ? 2 : n && !strcmp(seg[0], "apis") ? 3 : n;
    if (i + 2 < n && !strcmp(seg[i], "namespaces"))
        i += 2;
    if (i >= n) { /* /api, /apis/<group>/<version>: what the server serves */
        snprintf(out, len, "discovery");
        return;
    }
    snprintf(out, len, "%s%s%s", seg[i], i + 2 < n ? "/" : "", i + 2 < n ? seg[i + 2] : "");
}

static void kube_count(struct kube_client *kc, const struct kube_call *c, long code)
{
    struct kube_request_row *r = NULL;
    for (unsigned i = 0; i < kc->nrows && !r; i++)
        if (kc->rows[i].code == code && !strcmp(kc->rows[i].method, c->method) &&
            !strcmp(kc->rows[i].resource, c->resource))
            r = &kc->rows[i];
    if (!r) {
        kc->rows = xrealloc(kc->rows, (kc->nrows + 1) * sizeof *kc->rows);
        r = memset(&kc->rows[kc->nrows++], 0, sizeof *r);
        snprintf(r->method, sizeof r->method, "%s", c->method);
        snprintf(r->resource, sizeof r->resource, "%s", c->resource);
        r->code = code;
    }
    r->count++;
    if (c->stream)
        return;
    double s = (double)(uv_hrtime() - c->begun_ns) / 1e9;
    unsigned b = 0;
    while (b < KUBE_LATENCY_BUCKETS - 1 && s > kube_latency_bounds[b])
        b++;
    if (s <= kube_latency_bounds[b])
        r->bucket[b]++;
    r->timed++;
    r->seconds += s;
}

const struct kube_request_row *kube_client_requests(const struct kube_client *kc, unsigned *n)
{
    *n = kc ? kc->nrows : 0;
    return kc ? kc->rows : NULL;
}

static void kube_finish(struct kube_call *c, CURLcode rc)
{
    struct kube_client *kc = c->kc;
    c->busy = true;
    if (c->stream && rc == CURLE_OK && !c->stopped) {
        struct strbuf rest = c->lines;
        c->lines = (struct strbuf){0};
        if (kube_deliver(c, &rest) && c->body.len)
            kube_deliver(c, &c->body);
    }
    struct kube_answer a = {.error = ""};
    long connects = 0;
    if (c->h)
        kube_curl.getinfo(c->h, CURLINFO_NUM_CONNECTS, &connects);
    kc->stats.connections += (unsigned long long)connects;
    char error[sizeof c->what + CURL_ERROR_SIZE + 64];
    if (rc == CURLE_OK && !c->stopped) {
        kube_curl.getinfo(c->h, CURLINFO_RESPONSE_CODE, &a.status);
    } else {
        if (!c->unsent)
            kube_curl_message(rc, c->curl_err);
        if (c->too_big)
            snprintf(error, sizeof error, "%s: the answer is over %u bytes", c->what, KUBE_MAX_BODY);
        else
            snprintf(error, sizeof error, "%s: %s", c->what, c->stopped ? "cancelled" : c->curl_err);
        a.error = error;
        kc->stats.failures += !c->stopped;
    }
    if (!c->stopped)
        kube_count(kc, c, a.status);
    if (!c->body.data)
        strbuf_append(&c->body, "", 0);
    a.body = c->stream ? "" : c->body.data;
    a.len = c->stream ? 0 : c->body.len;
    kube_unlink(c);
    c->done(c->ctx, &a);
    kube_call_free(c);
}

static void kube_hand_lines(struct kube_call *c)
{
    struct strbuf lines = c->lines;
    c->lines = (struct strbuf){0};
    if (!kube_deliver(c, &lines)) {
        c->stopped = true;
        kube_finish(c, CURLE_ABORTED_BY_CALLBACK);
    }
}

/* What libcurl finished, and the streams' lines, after it returned. */
static void kube_check(struct kube_client *kc)
{
    CURLMsg *msg;
    int left;
    while ((msg = kube_curl.multi_info(kc->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct kube_call *c;
        kube_curl.getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&c);
        kube_finish(c, msg->data.result);
    }
    /* From the head again after each: a reader may end other calls. */
    for (bool more = true; more;) {
        more = false;
        for (struct kube_call *c = kc->calls; c; c = c->next)
            if (c->lines.len) {
                kube_hand_lines(c);
                more = true;
                break;
            }
    }
}

/* --- libcurl's event-loop integration -------------------------------------------- */

static void kube_on_poll(uv_poll_t *p, int status, int events)
{
    struct kube_socket *s = p->data;
    struct kube_client *kc = s->kc;
    int flags = status < 0 ? CURL_CSELECT_ERR
                           : (events & UV_READABLE ? CURL_CSELECT_IN : 0) |
                                 (events & UV_WRITABLE ? CURL_CSELECT_OUT : 0);
    int running;
    kube_curl.multi_action(kc->multi, s->fd, flags, &running);
    kube_check(kc);
}

static int kube_on_socket(CURL *h, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)h;
    struct kube_client *kc = userp;
    struct kube_socket *s = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (s) {
            if (kc->multi)
                kube_curl.multi_assign(kc->multi, fd, NULL);
            kube_socket_close(kc, s);
        }
        return 0;
    }
    if (!s) {
        s = xcalloc(1, sizeof *s);
        s->fd = fd;
        s->kc = kc;
        if (uv_poll_init_socket(kc->loop, &s->poll, fd) != 0) {
            free(s);
            return -1;
        }
        s->poll.data = s;
        s->next = kc->sockets;
        kc->sockets = s;
        kc->handles++;
        kube_curl.multi_assign(kc->multi, fd, s);
    }
    int events = (what & CURL_POLL_IN ? UV_READABLE : 0) | (what & CURL_POLL_OUT ? UV_WRITABLE : 0);
    uv_poll_start(&s->poll, events, kube_on_poll);
    return 0;
}

static void kube_on_timeout(uv_timer_t *t)
{
    struct kube_client *kc = t->data;
    int running;
    kube_curl.multi_action(kc->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    kube_check(kc);
}

static int kube_on_timer(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct kube_client *kc = userp;
    if (timeout_ms < 0)
        uv_timer_stop(&kc->timer);
    else /* 0 too: libcurl may not be called back from inside its own callback */
        uv_timer_start(&kc->timer, kube_on_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

/* --- the answer as it comes ------------------------------------------------------- */

static size_t kube_on_data(char *data, size_t size, size_t n, void *arg)
{
    struct kube_call *c = arg;
    size_t len = size * n;
    if (c->body.len + len > KUBE_MAX_BODY) {
        c->too_big = true;
        return 0;
    }
    strbuf_append(&c->body, data, len);
    if (!c->stream)
        return len;
    /* Whole lines move on to be handed over once libcurl returns. */
    char *last = memrchr(c->body.data, '\n', c->body.len);
    if (last) {
        size_t whole = (size_t)(last - c->body.data) + 1;
        strbuf_append(&c->lines, c->body.data, whole);
        memmove(c->body.data, c->body.data + whole, c->body.len - whole + 1);
        c->body.len -= whole;
    }
    return len;
}

static void kube_on_unsent(uv_timer_t *t)
{
    struct kube_client *kc = t->data;
    for (struct kube_call *c = kc->calls; c;) {
        if (!c->unsent) {
            c = c->next;
            continue;
        }
        kube_finish(c, CURLE_FAILED_INIT);
        c = kc->calls;
    }
}

/* --- the token file: kept, and read again every minute off the loop ----------------- */

/* A projected service account token rotates (the kubelet writes a new one
 * well before the old expires): client-go reads its file again each
 * minute, and so does the client, on the worker pool (the loop never
 * touches a file). A read that fails keeps the token it has. */
#define KUBE_TOKEN_REREAD_MS 60000

/* GPULET_TOKEN_REREAD_MS: the tests' knob (a minute is long for a test). */
static uint64_t kube_token_every(void)
{
    const char *v = getenv("GPULET_TOKEN_REREAD_MS");
    long ms = v ? strtol(v, NULL, 10) : 0;
    return ms > 0 && ms < 3600000 ? (uint64_t)ms : KUBE_TOKEN_REREAD_MS;
}

static void kube_token_work(uv_work_t *w)
{
    struct kube_client *kc = w->data;
    kc->token_rc = kube_token_read(kc->creds.token_file, kc->token_read, sizeof kc->token_read,
                                   &kc->token_err);
}

static void kube_token_done(uv_work_t *w, int status)
{
    struct kube_client *kc = w->data;
    kc->handles--;
    if (status == 0 && kc->token_rc == 0 && kc->token_read[0]) {
        if (kc->token_failing)
            log_info("API server credentials: %s read again", kc->creds.token_file);
        kc->token_failing = false;
        strbuf_free(&kc->creds.file_token);
        strbuf_puts(&kc->creds.file_token, kc->token_read);
    } else if (status == 0 && !kc->token_failing) {
        log_error("API server credentials: %s; keeping the token read before",
                  kc->token_rc < 0 ? kc->token_err.msg : "the token file is empty");
        kc->token_failing = true;
    }
    kube_maybe_free(kc);
}

static void kube_token_again(uv_timer_t *t)
{
    struct kube_client *kc = t->data;
    kc->token_work.data = kc;
    if (uv_queue_work(kc->loop, &kc->token_work, kube_token_work, kube_token_done) == 0)
        kc->handles++;
}

/* At the client's start, before the loop serves: the first read, here. */
static int kube_token_start(struct kube_client *kc, struct err *e)
{
    uv_timer_init(kc->loop, &kc->token_timer);
    kc->token_timer.data = kc;
    if (kc->creds.token.len || !kc->creds.token_file[0])
        return 0;
    if (kube_token_read(kc->creds.token_file, kc->token_read, sizeof kc->token_read, e) < 0)
        return -1;
    strbuf_puts(&kc->creds.file_token, kc->token_read);
    uv_timer_start(&kc->token_timer, kube_token_again, kube_token_every(), kube_token_every());
    return 0;
}

/* --- the client ----------------------------------------------------------------------- */

int kube_client_start(struct kube_client **out, uv_loop_t *loop, const char *kubeconfig,
                      struct err *e)
{
    *out = NULL;
    struct kube_client *kc = xcalloc(1, sizeof *kc);
    if (kube_creds_load(&kc->creds, kubeconfig, e) < 0 || kube_client_init(e) < 0 ||
        (!(kc->multi = kube_curl.multi_init()) && err_set(e, "curl_multi_init failed") < 0)) {
        kube_creds_free(&kc->creds);
        free(kc);
        return -1;
    }
    kc->loop = loop;
    kube_curl.multi_setopt(kc->multi, CURLMOPT_SOCKETFUNCTION, kube_on_socket);
    kube_curl.multi_setopt(kc->multi, CURLMOPT_SOCKETDATA, kc);
    kube_curl.multi_setopt(kc->multi, CURLMOPT_TIMERFUNCTION, kube_on_timer);
    kube_curl.multi_setopt(kc->multi, CURLMOPT_TIMERDATA, kc);
    kube_curl.multi_setopt(kc->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
    uv_timer_init(loop, &kc->timer);
    uv_timer_init(loop, &kc->unsent);
    kc->timer.data = kc->unsent.data = kc;
    kc->handles = 3; /* with the token's timer */
    if (kube_token_start(kc, e) < 0) {
        kc->closing = true;
        kube_maybe_free(kc); /* freed once its handles have closed */
        return -1;
    }
    *out = kc;
    return 0;
}

void kube_explain(const char *what, const char *needs, const struct kube_answer *a, char *out,
                  size_t len)
{
    if (!a->status) {
        snprintf(out, len, "%s", a->error);
        return;
    }
    json_t *st = json_loadb(a->body, a->len, 0, NULL);
    const char *why = json_string_value(json_object_get(st, "message"));
    switch (a->status) {
    case 401:
        snprintf(out, len, "%s: 401 Unauthorized: the API server does not accept the credentials "
                 "(expired or wrong token, or a client certificate it does not trust)", what);
        break;
    case 403:
        /* RBAC lacks a right, or an admission policy refused the write
         * (deploy/confine/: one node's gpulet writes only its own node's
         * objects); the policy's message names itself and what it refused. */
        if (kube_policy_refused(why))
            snprintf(out, len, "%s: refused by the cluster's admission policy: %.600s", what, why);
        else
            snprintf(out, len, "%s: 403 Forbidden: the service account needs %s (deploy/base/rbac.yaml)",
                     what, needs);
        break;
    default:
        snprintf(out, len, "%s: HTTP %ld%s%.300s", what, a->status, why ? ": " : "", why ? why : "");
        break;
    }
    json_decref(st);
}

bool kube_policy_refused(const char *text)
{
    /* The API server says "... ValidatingAdmissionPolicy 'P' with binding
     * 'B' denied request: <the policy's message>". */
    return text && strstr(text, "denied request");
}

uv_loop_t *kube_client_loop(const struct kube_client *kc)
{
    return kc->loop;
}

const struct kube_creds *kube_client_creds(const struct kube_client *kc)
{
    return &kc->creds;
}

struct kube_client_stats kube_client_stats(const struct kube_client *kc)
{
    return kc->stats;
}

struct kube_call *kube_call(struct kube_client *kc, const struct kube_call_spec *s)
{
    struct kube_call *c = xcalloc(1, sizeof *c);
    c->kc = kc;
    c->stream = s->on_line != NULL;
    c->on_line = s->on_line;
    c->done = s->done;
    c->ctx = s->ctx;
    c->owner = s->owner;
    snprintf(c->what, sizeof c->what, "%s %.300s%.250s", s->method, kc->creds.server, s->path);
    snprintf(c->method, sizeof c->method, "%s", s->method);
    kube_path_resource(s->path, c->resource, sizeof c->resource);
    c->begun_ns = uv_hrtime();
    struct err e = {.msg = ""};
    c->h = kube_easy(&kc->creds, s->method, s->path, s->content_type, s->body, &c->headers,
                     c->curl_err, &e);
    c->next = kc->calls;
    if (kc->calls)
        kc->calls->prev = c;
    kc->calls = c;
    kc->stats.requests++;
    if (c->h) {
        kube_curl.setopt(c->h, CURLOPT_PRIVATE, (char *)c);
        kube_curl.setopt(c->h, CURLOPT_WRITEFUNCTION, kube_on_data);
        kube_curl.setopt(c->h, CURLOPT_WRITEDATA, c);
        kube_curl.setopt(c->h, CURLOPT_TIMEOUT_MS,
                         c->stream ? 0L : s->timeout_ms ? (long)s->timeout_ms : KUBE_TIMEOUT_MS);
        if (kube_curl.multi_add(kc->multi, c->h) == CURLM_OK)
            return c;
        snprintf(e.msg, sizeof e.msg, "curl_multi_add_handle failed");
    }
    c->unsent = true;
    snprintf(c->curl_err, sizeof c->curl_err, "%.250s", e.msg);
    uv_timer_start(&kc->unsent, kube_on_unsent, 0, 0);
    return c;
}

void kube_call_cancel(struct kube_call *c)
{
    if (!c || c->stopped)
        return;
    c->stopped = true;
    if (!c->busy)
        kube_finish(c, CURLE_ABORTED_BY_CALLBACK);
}

void kube_client_cancel(struct kube_client *kc, const void *owner)
{
    for (struct kube_call *c = kc->calls; c;) {
        if (c->owner != owner || c->stopped) {
            c = c->next;
            continue;
        }
        kube_call_cancel(c);
        c = kc->calls; /* a done may have ended others */
    }
}

void kube_client_close(struct kube_client *kc)
{
    if (!kc)
        return;
    kc->closing = true;
    kube_maybe_free(kc); /* or when the last call ends */
}
