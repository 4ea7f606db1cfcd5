/* Running the checks: in order, each on a thread of its own under the time
 * limit. A check that runs out of time is reported FAIL with what it was
 * doing and left behind (detached); NVML checks after it are skipped, since
 * a hung driver call usually holds the driver's lock. */
#include "doctor/internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/deadline.h"
#include "util/jsonx.h"
#include "util/xmalloc.h"

#define NEEDS_NVML 1u
#define HOST 2u    /* this host's driver, kernel or runtime: none serves a simulated GPU */

static const struct {
    const char *id, *title;
    void (*fn)(struct doctor *d, struct doctor_result *r);
    unsigned flags;
} doctor_checks[] = {
    {"kernel-module", "NVIDIA kernel module", doctor_kernel_module, HOST},
    {"driver-library", "driver library matches the module", doctor_library, HOST},
    {"device-nodes", "device nodes", doctor_device_nodes, HOST},
    {"nvidia-uvm", "nvidia-uvm module", doctor_uvm, HOST},
    {"nvml", "NVML and every GPU answer", doctor_nvml, NEEDS_NVML},
    {"gpu-health", "retired pages, remapped rows, ECC", doctor_gpu_health, NEEDS_NVML},
    {"kernel-log", "XIDs in the kernel log", doctor_kernel_log, HOST},
    {"persistence", "persistence mode", doctor_persistence, NEEDS_NVML},
    {"fabric", "NVSwitch fabric manager", doctor_fabric, NEEDS_NVML},
    {"mig", "MIG mode", doctor_mig, NEEDS_NVML},
    {"runtime", "container runtime for the strategy", doctor_runtime, HOST},
    {"cdi-spec", "CDI spec present and current", doctor_cdi, 0},
    {"metrics", "the metrics endpoint starts as configured", doctor_metrics, 0},
    {"kubelet", "kubelet device-plugins socket", doctor_kubelet, 0},
    {"registration", "gpulet registered with the kubelet", doctor_registration, 0},
    {"dra", "DRA driver registered and publishing", doctor_dra, 0},
    {"mig-config", "the MIG layout the Node's label names", doctor_mig_config, 0},
    {"pod-resources", "kubelet PodResources socket", doctor_pod_resources, 0},
    {"node", "the Node's labels and allocatable", doctor_node, 0},
    {"api-rights", "gpulet's rights on the API server", doctor_api_rights, 0},
};
#define NCHECKS (sizeof doctor_checks / sizeof *doctor_checks)

const char *doctor_status_name(enum doctor_status s)
{
    static const char *const names[] = {"PASS", "SKIP", "WARN", "FAIL"};
    return names[s];
}

void doctor_step(struct doctor *d, const char *fmt, ...)
{
    pthread_mutex_lock(&d->lock);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->step, sizeof d->step, fmt, ap);
    va_end(ap);
    pthread_mutex_unlock(&d->lock);
}

void doctor_set(struct doctor_result *r, enum doctor_status s, const char *fix, const char *fmt, ...)
{
    r->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->message, sizeof r->message, fmt, ap);
    va_end(ap);
    /* A fix only where something is wrong. */
    snprintf(r->fix, sizeof r->fix, "%s", fix && s >= DOCTOR_WARN ? fix : "");
}

void doctor_path(const struct doctor *d, char *out, size_t len, const char *host_path,
                 const char *rest)
{
    /* Joined without doubled or trailing slashes: "/" + "/dev" is "/dev". */
    int root = (int)strlen(d->o->root), host = (int)strlen(host_path);
    while (root > 0 && d->o->root[root - 1] == '/')
        root--;
    while (host > 0 && host_path[host - 1] == '/')
        host--;
    snprintf(out, len, "%.*s%.*s%s", root, d->o->root, host, host_path, rest ? rest : "");
    if (!out[0])
        snprintf(out, len, "/");
}

char *doctor_read(const char *path, size_t max, size_t *len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = xmalloc(max + 1);
    size_t n = fread(buf, 1, max, f);
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        free(buf);
        errno = err;
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}

static double doctor_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One check on its thread. Whoever of the thread and the waiter is last
 * frees the job: the waiter (after joining) when the check finished in
 * time, else the thread, then detached. */
struct doctor_job {
    struct doctor *d;
    void (*fn)(struct doctor *d, struct doctor_result *r);
    struct doctor_result r;
    pthread_mutex_t lock;
    pthread_cond_t done_cond;
    bool done, abandoned;
};

static void doctor_job_free(struct doctor_job *j)
{
    pthread_cond_destroy(&j->done_cond);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

static void *doctor_job_main(void *arg)
{
    struct doctor_job *j = arg;
    j->fn(j->d, &j->r);
    pthread_mutex_lock(&j->lock);
    j->done = true;
    bool abandoned = j->abandoned;
    pthread_cond_signal(&j->done_cond);
    pthread_mutex_unlock(&j->lock);
    if (abandoned)
        doctor_job_free(j);
    return NULL;
}

/* Runs one check; false when it ran out of time (r says so). */
static bool doctor_one(struct doctor *d, unsigned k, struct doctor_result *r)
{
    struct doctor_job *j = xcalloc(1, sizeof *j);
    j->d = d;
    j->fn = doctor_checks[k].fn;
    j->r = *r;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->done_cond, NULL);
    doctor_step(d, "starting");
    pthread_t t;
    int rc = pthread_create(&t, NULL, doctor_job_main, j);
    if (rc) {
        doctor_set(r, DOCTOR_FAIL, NULL, "cannot start a thread: %s", strerror(rc));
        doctor_job_free(j);
        return true;
    }
    struct timespec until = deadline_in(d->o->timeout_ms);
    pthread_mutex_lock(&j->lock);
    while (!j->done && pthread_cond_timedwait(&j->done_cond, &j->lock, &until) != ETIMEDOUT)
        ;
    bool done = j->done;
    if (!done)
        j->abandoned = true;
    pthread_mutex_unlock(&j->lock);
    if (done) {
        /* Joined, so that its thread-local state (libcurl's TLS library
         * keeps some) is gone before the process ends. */
        pthread_join(t, NULL);
        *r = j->r;
        doctor_job_free(j);
        return true;
    }
    pthread_detach(t);
    pthread_mutex_lock(&d->lock);
    doctor_set(r, DOCTOR_FAIL,
               "a GPU or the driver is hung: drain the node, then reset the GPU "
               "(nvidia-smi -r -i N) or reboot",
               "no answer within %.1f s (%s)", d->o->timeout_ms / 1000.0, d->step);
    pthread_mutex_unlock(&d->lock);
    return false;
}

/* A run whose check was left running: kept, so that a leak checker sees it
 * held, not lost. */
static struct doctor *volatile doctor_kept; /* volatile: a store never read is not elided */

void doctor_run(const struct doctor_options *o, struct doctor_report *rep)
{
    memset(rep, 0, sizeof *rep);
    struct doctor *d = xcalloc(1, sizeof *d);
    d->o = o;
    d->simulated = o->cfg->simulate[0] && !o->root_given;
    doctor_path(d, d->agent_socket, sizeof d->agent_socket, o->cfg->status_socket, NULL);
    pthread_mutex_init(&d->lock, NULL);
    rep->items = xcalloc(NCHECKS, sizeof *rep->items);
    double t0 = doctor_now();
    for (unsigned k = 0; k < NCHECKS; k++) {
        struct doctor_result *r = &rep->items[rep->count++];
        r->id = doctor_checks[k].id;
        r->title = doctor_checks[k].title;
        double t = doctor_now();
        if ((doctor_checks[k].flags & HOST) && d->simulated) {
            doctor_set(r, DOCTOR_SKIP, NULL, "simulated GPUs (--simulate %s, no --root): this "
                       "host's driver, kernel log and container runtime serve none of them",
                       o->cfg->simulate);
        } else if ((doctor_checks[k].flags & NEEDS_NVML) && d->nvml_stuck) {
            doctor_set(r, DOCTOR_SKIP, NULL, "not run: an earlier NVML call did not return");
        } else if (!doctor_one(d, k, r)) {
            rep->abandoned = true;
            if (doctor_checks[k].flags & NEEDS_NVML)
                d->nvml_stuck = true;
        }
        r->seconds = doctor_now() - t;
        enum doctor_status s = r->status == DOCTOR_SKIP ? DOCTOR_PASS : r->status;
        if (s > rep->worst)
            rep->worst = s;
    }
    rep->seconds = doctor_now() - t0;
    if (gpu_lanes_stop(d->lanes, 0))
        rep->abandoned = true; /* a GPU that hangs still holds its thread */
    /* A check left running may still use what d holds: then it stays,
     * reachable (the process ends soon after), else it is freed. */
    if (rep->abandoned)
        doctor_kept = d;
    if (!rep->abandoned) {
        free(d->gpu_jobs);
        free(d->agent_gpus);
        gpu_inventory_free(&d->inv);
        nvml_close(&d->nvml);
        pthread_mutex_destroy(&d->lock);
        free(d);
    }
}

void doctor_report_free(struct doctor_report *r)
{
    free(r->items);
    memset(r, 0, sizeof *r);
}

static void doctor_counts(const struct doctor_report *r, unsigned n[4])
{
    memset(n, 0, 4 * sizeof *n);
    for (unsigned k = 0; k < r->count; k++)
        n[r->items[k].status]++;
}

void doctor_report_text(const struct doctor_report *r, const char *root, FILE *out)
{
    fprintf(out, "gpulet doctor: the node at %s\n", root);
    for (unsigned k = 0; k < r->count; k++) {
        const struct doctor_result *x = &r->items[k];
        fprintf(out, "%-4s  %-14s %s\n", doctor_status_name(x->status), x->id, x->message);
        if (x->fix[0])
            fprintf(out, "      fix: %s\n", x->fix);
    }
    unsigned n[4];
    doctor_counts(r, n);
    fprintf(out, "%u checks in %.2f s: %u passed, %u warnings, %u failed, %u skipped\n", r->count,
            r->seconds, n[DOCTOR_PASS], n[DOCTOR_WARN], n[DOCTOR_FAIL], n[DOCTOR_SKIP]);
}

/* A time as doctor measures it, to the microsecond: JSON says 2e-06, not
 * 2.1449999962896982e-06. */
static double doctor_micro(double seconds)
{
    return (double)(long long)(seconds * 1e6 + 0.5) / 1e6; /* (no libm: glibc alone) */
}

void doctor_report_json(const struct doctor_report *r, const char *root, struct strbuf *out)
{
    json_t *checks = jsonx_ok(json_array());
    for (unsigned k = 0; k < r->count; k++) {
        const struct doctor_result *x = &r->items[k];
        json_t *c = jsonx_ok(json_object());
        jsonx_set(c, "id", json_string(x->id));
        jsonx_set(c, "title", json_string(x->title));
        jsonx_set(c, "status", json_string(doctor_status_name(x->status)));
        jsonx_set(c, "message", json_string(x->message));
        if (x->fix[0])
            jsonx_set(c, "fix", json_string(x->fix));
        jsonx_set(c, "seconds", json_real(doctor_micro(x->seconds)));
        jsonx_append(checks, c);
    }
    unsigned n[4];
    doctor_counts(r, n);
    json_t *summary = jsonx_ok(json_object());
    jsonx_set(summary, "passed", json_integer(n[DOCTOR_PASS]));
    jsonx_set(summary, "warnings", json_integer(n[DOCTOR_WARN]));
    jsonx_set(summary, "failed", json_integer(n[DOCTOR_FAIL]));
    jsonx_set(summary, "skipped", json_integer(n[DOCTOR_SKIP]));
    jsonx_set(summary, "seconds", json_real(doctor_micro(r->seconds)));
    json_t *root_obj = jsonx_ok(json_object());
    jsonx_set(root_obj, "root", json_string(root));
    jsonx_set(root_obj, "checks", checks);
    jsonx_set(root_obj, "summary", summary);
    jsonx_set(root_obj, "worst", json_string(doctor_status_name(r->worst)));
    jsonx_dump(root_obj, JSON_INDENT(2) | JSON_REAL_PRECISION(6), out);
    strbuf_puts(out, "\n");
    json_decref(root_obj);
}
