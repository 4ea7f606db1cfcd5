/* Prepared claims on disk, <plugin-dir>/checkpoint.json, written whole
 * after every change (util/file.c: flushed to disk, then renamed, so that
 * no crash or power cut leaves half of it): a gpulet that restarts answers
 * a repeated prepare the same and unprepares what it prepared. */
#include "dra/internal.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/dirs.h"
#include "util/file.h"
#include "util/jsonx.h"
#include "util/log.h"
#include "util/xmalloc.h"

void dra_prepared_free(struct dra_prepared *p)
{
    free(p->devs);
    p->devs = NULL;
    p->count = 0;
    free(p->consumers);
    p->consumers = NULL;
    p->nconsumers = 0;
}

struct dra_prepared *dra_prepared_find(const struct dra *d, const char *uid)
{
    for (unsigned i = 0; i < d->claims.n; i++)
        if (!strcmp(d->claims.prepared[i].uid, uid))
            return &d->claims.prepared[i];
    return NULL;
}

static struct dra_prepared *dra_claims_grow(struct dra_prepared **prepared, unsigned *n,
                                            unsigned *cap)
{
    /* Room doubles: a record is 6.7 KiB, and a restart reads them all in
     * one go (a realloc a claim copied them all each time: quadratic). */
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        *prepared = xrealloc(*prepared, *cap * sizeof **prepared);
    }
    struct dra_prepared *p = &(*prepared)[(*n)++];
    memset(p, 0, sizeof *p);
    return p;
}

struct dra_prepared *dra_claims_add(struct dra_claims *c)
{
    return dra_claims_grow(&c->prepared, &c->n, &c->cap);
}

/* The table the checkpoint held, taken over (l is left empty). */
void dra_claims_adopt(struct dra_claims *c, struct dra_loaded *l)
{
    c->prepared = l->prepared;
    c->n = l->n;
    c->cap = l->cap;
    l->prepared = NULL;
    l->n = l->cap = 0;
}

static void dra_checkpoint_copy(json_t *o, const char *key, char *out, size_t len)
{
    const char *v = json_string_value(json_object_get(o, key));
    snprintf(out, len, "%s", v ? v : "");
}

static unsigned long long dra_checkpoint_number(json_t *o, const char *key)
{
    json_int_t v = json_integer_value(json_object_get(o, key));
    return v > 0 ? (unsigned long long)v : 0;
}

static void dra_checkpoint_consumers(json_t *list, struct dra_prepared *p)
{
    json_t *x;
    size_t k, n = json_array_size(list);
    if (!n)
        return;
    p->consumers = xcalloc(n < DRA_MAX_CONSUMERS ? n : DRA_MAX_CONSUMERS, sizeof *p->consumers);
    json_array_foreach(list, k, x) {
        if (p->nconsumers == DRA_MAX_CONSUMERS)
            break;
        struct dra_consumer *c = &p->consumers[p->nconsumers++];
        dra_checkpoint_copy(x, "pod", c->pod, sizeof c->pod);
        dra_checkpoint_copy(x, "namespace", c->ns, sizeof c->ns);
        dra_checkpoint_copy(x, "container", c->container, sizeof c->container);
    }
}

static int dra_checkpoint_parse(const char *path, struct dra_loaded *out, struct err *e);

/* The temporary checkpoints (<path>.<pid>.tmp) of gpulets that are gone:
 * one killed while it wrote left its own behind. A live one's is its own
 * (an agent handing over may be writing it). */
static void dra_checkpoint_sweep(const char *path)
{
    char dir[CONFIG_PATH_MAX + 96];
    dirs_parent(path, dir, sizeof dir);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    size_t n = strlen(base);
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    for (struct dirent *de; (de = readdir(dp));) {
        char *end;
        if (strncmp(de->d_name, base, n) || de->d_name[n] != '.')
            continue;
        long pid = strtol(de->d_name + n + 1, &end, 10);
        if (pid <= 0 || strcmp(end, ".tmp") || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char stale[sizeof dir + 256];
        snprintf(stale, sizeof stale, "%s/%s", dir, de->d_name);
        if (unlink(stale) == 0)
            log_info("DRA: removed %s, left by a gpulet that is gone", stale);
    }
    closedir(dp);
}

/* Off the loop (any thread): it touches only the file, its stale
 * temporaries and *out. */
void dra_checkpoint_read(const char *path, struct dra_loaded *out)
{
    memset(out, 0, sizeof *out);
    dra_checkpoint_sweep(path);
    out->rc = dra_checkpoint_parse(path, out, &out->err);
}

void dra_loaded_free(struct dra_loaded *l)
{
    for (unsigned i = 0; i < l->n; i++)
        dra_prepared_free(&l->prepared[i]);
    free(l->prepared);
    memset(l, 0, sizeof *l);
}

static int dra_checkpoint_parse(const char *path, struct dra_loaded *out, struct err *e)
{
    /* Read whole, then parsed: jansson's file reader takes a character a
     * call (three quarters of a 1,000-claim restart's time). */
    struct strbuf text = {0};
    if (file_read(path, &text) < 0) {
        strbuf_free(&text);
        return errno == ENOENT ? 0 /* nothing prepared yet */
                               : err_set(e, "%s: %s", path, strerror(errno));
    }
    json_error_t je;
    json_t *root = json_loadb(text.data ? text.data : "", text.len, 0, &je);
    strbuf_free(&text);
    if (!root)
        return err_set(e, "%s: %s (line %d)", path, je.text, je.line);
    json_t *claims = json_object_get(root, "claims"), *c;
    size_t i;
    json_array_foreach(claims, i, c) {
        struct dra_prepared *p = dra_claims_grow(&out->prepared, &out->n, &out->cap);
        dra_checkpoint_copy(c, "uid", p->uid, sizeof p->uid);
        dra_checkpoint_copy(c, "namespace", p->ns, sizeof p->ns);
        dra_checkpoint_copy(c, "name", p->name, sizeof p->name);
        unsigned long long pct = dra_checkpoint_number(c, "mpsActiveThreadPercentage");
        p->thread_percentage = pct <= 100 ? (unsigned)pct : 0; /* 0: the default, 100 */
        dra_checkpoint_consumers(json_object_get(c, "consumers"), p);
        json_t *devs = json_object_get(c, "devices"), *x;
        size_t k, n = json_array_size(devs);
        p->devs = xcalloc(n < DRA_MAX_RESULTS ? n + 1 : DRA_MAX_RESULTS, sizeof *p->devs);
        json_array_foreach(devs, k, x) {
            if (p->count == DRA_MAX_RESULTS)
                break;
            struct dra_prepared_device *pd = &p->devs[p->count++];
            dra_checkpoint_copy(x, "request", pd->request, sizeof pd->request);
            dra_checkpoint_copy(x, "device", pd->device, sizeof pd->device);
            dra_checkpoint_copy(x, "uuid", pd->uuid, sizeof pd->uuid);
            char strategy[16];
            dra_checkpoint_copy(x, "sharing", strategy, sizeof strategy);
            pd->strategy = !strcmp(strategy, "MPS")           ? GPU_SHARING_MPS
                           : !strcmp(strategy, "TimeSlicing") ? GPU_SHARING_TIME_SLICING
                                                              : GPU_SHARING_NONE;
            pd->pinned_mib = dra_checkpoint_number(x, "mpsPinnedMiB");
            unsigned long long ts = dra_checkpoint_number(x, "timeSlice");
            pd->timeslice = ts <= 3 ? (unsigned)ts : 0;
            dra_checkpoint_copy(x, "shareID", pd->share_id, sizeof pd->share_id);
            unsigned long long compute = dra_checkpoint_number(x, "shareCompute");
            pd->share_compute = compute <= 100 ? (unsigned)compute : 0;
            /* A MIG device the claim made: a restart adopts it (it is
             * destroyed at unprepare), where it is still there. */
            json_t *made = json_object_get(x, "migMade");
            if (json_is_object(made)) {
                pd->mig_made = true;
                pd->gpu = (unsigned)dra_checkpoint_number(made, "gpu");
                pd->gi = (unsigned)dra_checkpoint_number(made, "gi");
                pd->ci = (unsigned)dra_checkpoint_number(made, "ci");
            }
        }
    }
    json_decref(root);
    return 0;
}

/* The write's end, on the loop: said once when it fails, and once when it
 * works again. */
static void dra_checkpoint_written(void *ctx, const struct err *e, bool written)
{
    (void)written;
    struct dra *d = ctx;
    if (e && !d->claims.failing)
        log_error("DRA: %s; a restarted gpulet will not know these claims", e->msg);
    else if (!e && d->claims.failing)
        log_info("DRA: checkpoint %s written again", d->claims.checkpoint);
    d->claims.failing = e != NULL;
    d->claims.saves--;
    dra_maybe_free(d);
}

static void dra_checkpoint_save(struct dra *d)
{
    json_t *claims = jsonx_ok(json_array());
    for (unsigned i = 0; i < d->claims.n; i++) {
        const struct dra_prepared *p = &d->claims.prepared[i];
        json_t *devs = jsonx_ok(json_array());
        for (unsigned k = 0; k < p->count; k++) {
            json_t *x = jsonx_ok(json_object());
            jsonx_set(x, "request", jsonx_ok(json_string(p->devs[k].request)));
            jsonx_set(x, "device", jsonx_ok(json_string(p->devs[k].device)));
            jsonx_set(x, "uuid", jsonx_ok(json_string(p->devs[k].uuid)));
            if (p->devs[k].strategy != GPU_SHARING_NONE)
                jsonx_set(x, "sharing", jsonx_ok(json_string(p->devs[k].strategy == GPU_SHARING_MPS
                                                                 ? "MPS" : "TimeSlicing")));
            if (p->devs[k].pinned_mib)
                jsonx_set(x, "mpsPinnedMiB", jsonx_ok(json_integer((json_int_t)p->devs[k].pinned_mib)));
            if (p->devs[k].timeslice)
                jsonx_set(x, "timeSlice", jsonx_ok(json_integer(p->devs[k].timeslice)));
            if (p->devs[k].share_id[0])
                jsonx_set(x, "shareID", jsonx_ok(json_string(p->devs[k].share_id)));
            if (p->devs[k].share_compute)
                jsonx_set(x, "shareCompute", jsonx_ok(json_integer(p->devs[k].share_compute)));
            if (p->devs[k].mig_made) {
                json_t *made = jsonx_ok(json_object());
                jsonx_set(made, "gpu", jsonx_ok(json_integer(p->devs[k].gpu)));
                jsonx_set(made, "gi", jsonx_ok(json_integer(p->devs[k].gi)));
                jsonx_set(made, "ci", jsonx_ok(json_integer(p->devs[k].ci)));
                jsonx_set(x, "migMade", made);
            }
            jsonx_append(devs, x);
        }
        json_t *consumers = jsonx_ok(json_array());
        for (unsigned k = 0; k < p->nconsumers; k++) {
            json_t *x = jsonx_ok(json_object());
            jsonx_set(x, "pod", jsonx_ok(json_string(p->consumers[k].pod)));
            jsonx_set(x, "namespace", jsonx_ok(json_string(p->consumers[k].ns)));
            jsonx_set(x, "container", jsonx_ok(json_string(p->consumers[k].container)));
            jsonx_append(consumers, x);
        }
        json_t *c = jsonx_ok(json_object());
        jsonx_set(c, "uid", jsonx_ok(json_string(p->uid)));
        jsonx_set(c, "namespace", jsonx_ok(json_string(p->ns)));
        jsonx_set(c, "name", jsonx_ok(json_string(p->name)));
        if (p->thread_percentage)
            jsonx_set(c, "mpsActiveThreadPercentage", jsonx_ok(json_integer(p->thread_percentage)));
        jsonx_set(c, "devices", devs);
        jsonx_set(c, "consumers", consumers);
        jsonx_append(claims, c);
    }
    json_t *root = jsonx_ok(json_object());
    jsonx_set(root, "claims", claims);
    struct strbuf text = {0};
    jsonx_dump(root, JSON_COMPACT, &text);
    json_decref(root);
    if (!d->claims.writer) {
        char tmp[sizeof d->claims.checkpoint + 24];
        /* its own: an agent handing over may still write its own */
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", d->claims.checkpoint, (int)getpid());
        d->claims.writer = writer_new(d->loop, d->claims.checkpoint, tmp, 0600, 0);
    }
    writer_put(d->claims.writer, &text);
    d->claims.saves++;
    writer_then(d->claims.writer, dra_checkpoint_written, d);
}

void dra_claims_changed(struct dra *d)
{
    dra_checkpoint_save(d);
    if (d->hooks.on_claims)
        d->hooks.on_claims(d->hooks.ctx);
}
