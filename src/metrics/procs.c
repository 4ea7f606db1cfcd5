/* Per-container numbers on a GPU: NVML's running compute processes (memory)
 * and their utilization samples (SM), each process placed in its pod's
 * container through /proc/<pid>/cgroup, and the container named through the
 * kubelet's /var/log/containers links. No API server, no RBAC: everything
 * comes from the node (docs/metrics.md, "Per-container usage").
 *
 * Costs are kept off the steady state: a process's cgroup is read once,
 * when it first shows up; the log directory is read only when a container
 * ID is not known, at most every PROCS_NAMES_GAP_S. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "metrics/internal.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define PROCS_NAMES_GAP_S 5.0   /* between reads of the log directory on a miss */
#define PROCS_CGROUP_MAX 8192   /* v1 lists ~15 hierarchies, well under this */

struct procs_pid {
    unsigned pid;
    bool in_pod;
    struct metrics_cgroup cg;
};

struct procs_name {
    char id[sizeof(((struct metrics_cgroup *)0)->container_id)];
    struct metrics_owner owner;
};

static double procs_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int procs_pid_cmp(const void *a, const void *b)
{
    unsigned x = ((const struct procs_pid *)a)->pid, y = ((const struct procs_pid *)b)->pid;
    return x < y ? -1 : x > y;
}

static int procs_name_cmp(const void *a, const void *b)
{
    return strcmp(((const struct procs_name *)a)->id, ((const struct procs_name *)b)->id);
}

/* Reads where pid runs. A process that is gone, or that this /proc does
 * not show (another PID namespace), is simply not in a pod. */
static void procs_read_cgroup(const struct metrics_procs *p, struct procs_pid *out)
{
    char path[CONFIG_PATH_MAX + 32], buf[PROCS_CGROUP_MAX];
    snprintf(path, sizeof path, "%s/%u/cgroup", p->proc_root, out->pid);
    out->in_pod = false;
    memset(&out->cg, 0, sizeof out->cg);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t len = 0;
    ssize_t r;
    while (len < sizeof buf && (r = read(fd, buf + len, sizeof buf - len)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    out->in_pod = metrics_cgroup_parse(buf, len, &out->cg);
}

/* Reads the container names in log_dir afresh. */
static void procs_read_names(struct metrics_procs *p)
{
    p->names_read = procs_now();
    DIR *d = opendir(p->log_dir);
    if (!d) {
        if (!p->names_failing)
            log_warn("metrics: cannot read %s (%s): containers on shared GPUs go unnamed",
                     p->log_dir, strerror(errno));
        p->names_failing = true;
        return;
    }
    p->names_failing = false;
    unsigned n = 0, cap = 64;
    struct procs_name *names = xmalloc(cap * sizeof *names);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (n == cap)
            names = xrealloc(names, (cap *= 2) * sizeof *names);
        if (metrics_logname_parse(e->d_name, &names[n].owner, names[n].id, sizeof names[n].id))
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, procs_name_cmp);
    free(p->names);
    p->names = names;
    p->nnames = n;
}

static const struct procs_name *procs_find_name(const struct metrics_procs *p, const char *id)
{
    struct procs_name key;
    snprintf(key.id, sizeof key.id, "%s", id);
    return p->nnames ? bsearch(&key, p->names, p->nnames, sizeof key, procs_name_cmp) : NULL;
}

/* Names the container of a process in a pod; reads the directory again on
 * a miss, at most once per sample and every PROCS_NAMES_GAP_S. */
static void procs_name(struct metrics_procs *p, struct procs_seen *s, const struct procs_pid *c,
                       bool *reread)
{
    if (!c->cg.container_id[0])
        return;
    const struct procs_name *n = procs_find_name(p, c->cg.container_id);
    if (!n && !*reread && (!p->names_read || procs_now() - p->names_read >= PROCS_NAMES_GAP_S)) {
        *reread = true;
        procs_read_names(p);
        n = procs_find_name(p, c->cg.container_id);
    }
    if (n) {
        s->owner = n->owner;
        s->named = true;
    }
}

/* Grows a buffer NVML fills to hold want entries. */
static void *procs_room(void *buf, unsigned *cap, unsigned want, size_t size)
{
    if (want <= *cap)
        return buf;
    *cap = want + want / 2 + 8; /* processes come and go between the two calls */
    free(buf);
    return xmalloc(*cap * size);
}

/* The compute processes of one GPU: how many, or -1 when NVML failed. A
 * lost GPU is not counted as an error: the cheap reads have found it. */
static int procs_list(struct procs_gpu *pg, struct nvml *n, nvmlDevice_t h,
                      unsigned long long *errors)
{
    for (int tries = 0; tries < 3; tries++) {
        unsigned count = pg->info_cap;
        nvmlReturn_t rc = NVML_CALL(n, DeviceGetComputeRunningProcesses, h, &count, pg->info);
        if (rc == NVML_SUCCESS)
            return (int)count;
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE) {
            if (rc != NVML_ERROR_GPU_IS_LOST && rc != NVML_ERROR_NOT_SUPPORTED)
                errors[FN_PROCS]++;
            return -1;
        }
        pg->info = procs_room(pg->info, &pg->info_cap, count, sizeof *pg->info);
    }
    return -1;
}

/* Utilization samples of one GPU newer than the last seen: how many. */
static unsigned procs_util(struct procs_gpu *pg, struct nvml *n, nvmlDevice_t h,
                           unsigned long long *errors)
{
    if (!n->DeviceGetProcessUtilization)
        return 0;
    for (int tries = 0; tries < 3; tries++) {
        unsigned count = pg->util_cap;
        nvmlReturn_t rc = NVML_CALL(n, DeviceGetProcessUtilization, h,
                                    pg->util_cap ? pg->util : NULL, &count, pg->last_ts);
        if (rc == NVML_SUCCESS) {
            for (unsigned i = 0; i < count; i++)
                if (pg->util[i].timeStamp > pg->last_ts)
                    pg->last_ts = pg->util[i].timeStamp;
            return count;
        }
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE || count == 0) {
            /* NOT_FOUND: no sample since the last one, nothing ran */
            if (rc != NVML_ERROR_NOT_FOUND && rc != NVML_ERROR_NOT_SUPPORTED &&
                rc != NVML_ERROR_INSUFFICIENT_SIZE)
                errors[FN_PROC_UTIL]++;
            return 0;
        }
        pg->util = procs_room(pg->util, &pg->util_cap, count, sizeof *pg->util);
    }
    return 0;
}

void metrics_procs_read(struct procs_gpu *pg, struct nvml *n, nvmlDevice_t h,
                        unsigned long long *errors)
{
    pg->ninfo = procs_list(pg, n, h, errors);
    pg->nutil = pg->ninfo > 0 ? procs_util(pg, n, h, errors) : 0;
}

/* The mean SM utilization of pid over the samples just read. */
static double procs_sm(const struct procs_gpu *pg, unsigned pid)
{
    double sum = 0;
    unsigned k = 0;
    for (unsigned i = 0; i < pg->nutil; i++)
        if (pg->util[i].pid == pid) {
            sum += pg->util[i].smUtil;
            k++;
        }
    return k ? sum / k : 0;
}

static struct procs_seen *procs_add(struct metrics_procs *p)
{
    if (p->nseen == p->seen_cap) {
        p->seen_cap = p->seen_cap ? p->seen_cap * 2 : 32;
        p->seen = xrealloc(p->seen, p->seen_cap * sizeof *p->seen);
    }
    struct procs_seen *s = &p->seen[p->nseen++];
    memset(s, 0, sizeof *s);
    return s;
}

/* Where pid runs: from the last sample's cache, else read now. */
static struct procs_pid procs_where(const struct metrics_procs *p, unsigned pid)
{
    struct procs_pid key = {.pid = pid};
    const struct procs_pid *c =
        p->npids ? bsearch(&key, p->pids, p->npids, sizeof key, procs_pid_cmp) : NULL;
    if (c)
        return *c;
    procs_read_cgroup(p, &key);
    return key;
}

void metrics_procs_init(struct metrics_procs *p, const struct config *cfg)
{
    memset(p, 0, sizeof *p);
    p->on = cfg->process_metrics;
    snprintf(p->proc_root, sizeof p->proc_root, "%s", cfg->proc_root);
    snprintf(p->log_dir, sizeof p->log_dir, "%s", cfg->container_log_dir);
}

void metrics_procs_sample(struct metrics_sampler *s, const bool *fresh)
{
    struct metrics_procs *p = &s->procs;
    if (!p->on || !s->nvml->DeviceGetComputeRunningProcesses)
        return;
    double t0 = procs_now();
    p->nseen = 0;
    unsigned npids = 0, cap = 16;
    struct procs_pid *pids = xmalloc(cap * sizeof *pids);
    bool reread = false;
    for (unsigned i = 0; i < s->inv->count; i++) {
        const struct procs_gpu *pg = &s->g[i].procs;
        if (!fresh[i] || pg->ninfo <= 0)
            continue; /* a GPU whose sample is out has no rows until it is back */
        for (int k = 0; k < pg->ninfo; k++) {
            const nvmlProcessInfo_t *info = &pg->info[k];
            struct procs_pid where = procs_where(p, info->pid);
            if (npids == cap)
                pids = xrealloc(pids, (cap *= 2) * sizeof *pids);
            pids[npids++] = where;
            struct procs_seen *seen = procs_add(p);
            seen->gpu = i;
            seen->pid = info->pid;
            seen->memory = info->usedGpuMemory == NVML_VALUE_NOT_AVAILABLE ? 0 : info->usedGpuMemory;
            seen->sm = procs_sm(pg, info->pid);
            seen->in_pod = where.in_pod;
            if (where.in_pod)
                procs_name(p, seen, &where, &reread);
        }
    }
    /* Only the processes seen now are kept: ended ones are forgotten. */
    qsort(pids, npids, sizeof *pids, procs_pid_cmp);
    free(p->pids);
    p->pids = pids;
    p->npids = npids;
    p->seconds = procs_now() - t0;
}

static bool procs_same(const struct metrics_owner *a, const struct metrics_owner *b)
{
    return !strcmp(a->pod, b->pod) && !strcmp(a->ns, b->ns) && !strcmp(a->container, b->container);
}

/* The one container PodResources says holds gpu, or NULL. */
static const struct metrics_owner *procs_holder(const struct metrics_state *pods, unsigned gpu)
{
    if (gpu < pods->count && pods->owned[gpu])
        return &pods->owner[gpu];
    const struct metrics_owner *one = NULL;
    for (unsigned k = 0; k < pods->nshares; k++) {
        if (pods->shares[k].gpu != gpu)
            continue;
        if (one && !procs_same(one, &pods->shares[k].owner))
            return NULL;
        one = &pods->shares[k].owner;
    }
    return one;
}

void metrics_procs_usage(struct metrics_procs *p, const struct metrics_state *pods)
{
    free(p->usage);
    p->usage = p->nseen ? xcalloc(p->nseen, sizeof *p->usage) : NULL;
    p->nusage = 0;
    for (unsigned k = 0; k < p->nseen; k++) {
        const struct procs_seen *s = &p->seen[k];
        struct metrics_owner none;
        memset(&none, 0, sizeof none);
        const struct metrics_owner *o = s->named ? &s->owner : &none;
        if (!s->named && s->in_pod && (o = procs_holder(pods, s->gpu)) == NULL)
            o = &none;
        struct metrics_usage *u = NULL;
        for (unsigned j = 0; j < p->nusage && !u; j++)
            if (p->usage[j].gpu == s->gpu && procs_same(&p->usage[j].owner, o))
                u = &p->usage[j];
        if (!u) {
            u = &p->usage[p->nusage++];
            u->gpu = s->gpu;
            u->owner = *o;
        }
        u->memory += s->memory;
        u->sm += s->sm;
        u->processes++;
    }
}

void metrics_procs_gpu_free(struct procs_gpu *pg)
{
    free(pg->info);
    free(pg->util);
    memset(pg, 0, sizeof *pg);
}

void metrics_procs_free(struct metrics_procs *p)
{
    free(p->pids);
    free(p->seen);
    free(p->names);
    free(p->usage);
    memset(p, 0, sizeof *p);
}
