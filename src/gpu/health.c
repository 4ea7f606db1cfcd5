#include "gpu/health.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "nvml/nvml_abi.h"

#define XID_DBE 48
#define XID_OFF_BUS 79

/* XIDs NVIDIA's device plugin treats as application errors, not GPU faults. */
static const unsigned health_default_skip[] = {13, 31, 43, 45, 68, 109};

static int health_parse_list(const char *name, const char *value, unsigned *out, size_t *n,
                             struct err *e)
{
    char buf[512];
    snprintf(buf, sizeof buf, "%s", value);
    char *save = NULL;
    for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        char *end;
        errno = 0;
        unsigned long x = strtoul(t, &end, 10);
        if (errno || *end || x == 0 || x > 65535)
            return err_set(e, "%s=%s: '%s' is not an XID number (or all)", name, value, t);
        if (*n == HEALTH_MAX_XIDS)
            return err_set(e, "%s: more than %d XIDs", name, HEALTH_MAX_XIDS);
        out[(*n)++] = (unsigned)x;
    }
    return 0;
}

int gpu_health_policy_init(struct health_policy *p, const char *disable, const char *enable,
                       struct err *e)
{
    memset(p, 0, sizeof *p);
    memcpy(p->skip, health_default_skip, sizeof health_default_skip);
    p->nskip = sizeof health_default_skip / sizeof *health_default_skip;
    if (disable && *disable) {
        if (!strcasecmp(disable, "all") || !strcasecmp(disable, "xids"))
            p->disabled = true;
        else if (health_parse_list("DP_DISABLE_HEALTHCHECKS", disable, p->skip, &p->nskip, e) < 0)
            return -1;
    }
    if (enable && *enable) {
        if (!strcasecmp(enable, "all"))
            p->all_fatal = true;
        else if (health_parse_list("DP_ENABLE_HEALTHCHECKS", enable, p->force, &p->nforce, e) < 0)
            return -1;
    }
    return 0;
}

int gpu_health_faults_parse(struct health_faults *f, const char *what, const char *spec,
                        struct err *e)
{
    static const struct { const char *word; size_t at; } words[] = {
        {"lost", offsetof(struct health_faults, lost)}, {"hung", offsetof(struct health_faults, hung)},
        {"ecc", offsetof(struct health_faults, ecc)}, {"xid", offsetof(struct health_faults, any_xid)},
    };
    memset(f, 0, sizeof *f);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *t = strtok_r(buf, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
        size_t w = 0;
        while (w < sizeof words / sizeof *words && strcasecmp(t, words[w].word))
            w++;
        if (w < sizeof words / sizeof *words) {
            *(bool *)((char *)f + words[w].at) = true;
            continue;
        }
        size_t n = f->nxids;
        if (health_parse_list(what, t, f->xids, &n, e) < 0)
            return err_usage(e, "%s: '%s' is neither an XID number nor lost, hung, ecc or xid",
                             what, t);
        f->nxids = n;
    }
    return 0;
}

static bool health_in(const unsigned *list, size_t n, unsigned xid)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == xid)
            return true;
    return false;
}

bool gpu_health_xid_fatal(const struct health_policy *p, unsigned xid)
{
    /* Forced XIDs win over every skip, so DISABLE=all with ENABLE=48,79
     * means only those two count, as with NVIDIA's plugin. */
    if (p->all_fatal || health_in(p->force, p->nforce, xid))
        return true;
    return !p->disabled && !health_in(p->skip, p->nskip, xid);
}

bool gpu_health_faults_match(const struct health_faults *f, const struct gpu_health *h)
{
    switch (h->reason) {
    case HEALTH_LOST: return f->lost || (h->xid && health_in(f->xids, f->nxids, h->xid));
    case HEALTH_HUNG: return f->hung;
    case HEALTH_ECC: return f->ecc || (h->xid && health_in(f->xids, f->nxids, h->xid));
    case HEALTH_XID: return f->any_xid || health_in(f->xids, f->nxids, h->xid);
    case HEALTH_OK:
    case HEALTH_REASONS: break;
    }
    return false;
}

bool gpu_health_policy_active(const struct health_policy *p)
{
    return !p->disabled || p->all_fatal || p->nforce;
}

const char *gpu_health_name(const struct gpu_health *h)
{
    return h->reason == HEALTH_OK ? "Healthy" : "Unhealthy";
}

static long long health_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Moves to a reason of at least this severity (LOST > HUNG > ECC > XID). */
static bool health_set(struct gpu_health *h, enum health_reason r, unsigned xid, double now_ms,
                       const char *detail)
{
    h->last_event_ms = now_ms;
    if (h->reason != HEALTH_OK && h->reason > r)
        return false; /* already worse: keep the more severe reason */
    if (h->reason == r && (r != HEALTH_XID || h->xid == xid))
        return false; /* the same again: keep the first cause and its time */
    if (h->reason == HEALTH_OK)
        h->since_ms = health_wall_ms();
    h->reason = r;
    h->xid = xid;
    snprintf(h->detail, sizeof h->detail, "%s", detail);
    return true;
}

void gpu_health_time(long long ms, char *out, size_t len)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || !gmtime_r(&t, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(out, len, "%s", "");
}

void gpu_health_describe(const struct gpu_health *h, char *out, size_t len)
{
    if (h->reason == HEALTH_OK) {
        snprintf(out, len, "%s", "");
        return;
    }
    char when[32];
    gpu_health_time(h->since_ms, when, sizeof when);
    snprintf(out, len, "%s since %s", h->detail, when);
}

bool gpu_health_on_xid(struct gpu_health *h, unsigned xid, double now_ms)
{
    char d[64];
    if (xid == XID_OFF_BUS)
        return health_set(h, HEALTH_LOST, xid, now_ms, "XID 79: fallen off the bus");
    if (xid == XID_DBE)
        return health_set(h, HEALTH_ECC, xid, now_ms, "XID 48: double-bit ECC error");
    snprintf(d, sizeof d, "XID %u", xid);
    return health_set(h, HEALTH_XID, xid, now_ms, d);
}

bool gpu_health_on_ecc(struct gpu_health *h, double now_ms)
{
    return health_set(h, HEALTH_ECC, XID_DBE, now_ms, "double-bit ECC error");
}

bool gpu_health_on_lost(struct gpu_health *h, double now_ms)
{
    bool changed = health_set(h, HEALTH_LOST, 0, now_ms, "GPU is lost (NVML cannot reach it)");
    h->seen_lost = true; /* also under XID 79: now NVML itself says so */
    return changed;
}

bool gpu_health_on_hung(struct gpu_health *h, const char *call, unsigned seconds, double now_ms)
{
    char d[96];
    snprintf(d, sizeof d, "hung: %s has not returned for %u s", call ? call : "an NVML call",
             seconds);
    return health_set(h, HEALTH_HUNG, 0, now_ms, d);
}

bool gpu_health_on_missing(struct gpu_health *h, const char *why, double now_ms)
{
    return health_set(h, HEALTH_LOST, 0, now_ms, why);
}

bool gpu_health_clear(struct gpu_health *h)
{
    bool changed = h->reason != HEALTH_OK;
    memset(h, 0, sizeof *h);
    return changed;
}

bool gpu_health_on_probe(struct gpu_health *h, const struct health_probe *p, double now_ms,
                     double quiet_ms)
{
    if (p->lost)
        return gpu_health_on_lost(h, now_ms);
    if (h->reason == HEALTH_OK || !p->answered)
        return false;
    switch (h->reason) {
    case HEALTH_LOST:
        /* Answering again is a reset or re-attach only if NVML saw it gone
         * first: a GPU that reported XID 79 and never stopped answering
         * has shown no reset, so it waits for one or for an operator. */
        if (!h->seen_lost)
            return false;
        break;
    case HEALTH_ECC:
        /* Only a GPU reset zeroes the volatile count. Where it cannot be
         * read, the quiet period stands in. */
        if (p->dbe_known ? p->dbe != 0 : quiet_ms <= 0 || now_ms - h->last_event_ms < quiet_ms)
            return false;
        break;
    case HEALTH_XID:
        if (quiet_ms <= 0 || now_ms - h->last_event_ms < quiet_ms)
            return false;
        break;
    case HEALTH_HUNG:
        break; /* the probe's calls went through the GPU's lane: it answers again */
    case HEALTH_OK:
    case HEALTH_REASONS:
        return false;
    }
    return gpu_health_clear(h);
}

static const char *const health_reasons[HEALTH_REASONS] = {"ok", "xid", "ecc", "hung", "lost"};

const char *gpu_health_reason_name(enum health_reason r)
{
    return (unsigned)r < HEALTH_REASONS ? health_reasons[r] : "unknown";
}

void gpu_health_line_write(struct strbuf *out, unsigned index, int mig, const char *uuid,
                       const struct gpu_health *h)
{
    if (mig >= 0)
        strbuf_printf(out, "mig %u:%d", index, mig);
    else
        strbuf_printf(out, "gpu %u", index);
    strbuf_printf(out, " %s %u %lld %s %s\n", gpu_health_reason_name(h->reason), h->xid, h->since_ms,
                  uuid, h->reason == HEALTH_OK ? "-" : h->detail);
}

int gpu_health_line_read(const char *line, unsigned *index, int *mig, char *uuid, size_t uuid_len,
                     struct gpu_health *h)
{
    char reason[8], id[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    int used = 0;
    unsigned k = 0;
    memset(h, 0, sizeof *h);
    *mig = -1;
    if (sscanf(line, "gpu %u %7s %u %lld %95s %n", index, reason, &h->xid, &h->since_ms, id,
               &used) != 5 || !used) {
        used = 0;
        if (sscanf(line, "mig %u:%u %7s %u %lld %95s %n", index, &k, reason, &h->xid, &h->since_ms,
                   id, &used) != 6 || !used || k >= 64)
            return -1;
        *mig = (int)k;
    }
    unsigned r = 0;
    while (r < HEALTH_REASONS && strcmp(reason, health_reasons[r]))
        r++;
    if (r == HEALTH_REASONS)
        return -1;
    h->reason = (enum health_reason)r;
    snprintf(uuid, uuid_len, "%s", id);
    snprintf(h->detail, sizeof h->detail, "%.*s", (int)strcspn(line + used, "\n"), line + used);
    return 0;
}
