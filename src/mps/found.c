/* Daemons that run already: found by their pipe directory (the daemon's
 * own pid file, a live process whose environment names that directory),
 * for adoption, and swept when nothing needs them any more; and what a
 * daemon's files say, read on the worker pool (mps_look). */
#include "mps/internal.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/dirs.h"
#include "util/log.h"
#include "util/xmalloc.h"


/* A running process (not a zombie whose parent has not reaped it yet). */
bool mps_alive(pid_t pid)
{
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(stat, 1, sizeof stat - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *end = strrchr(stat, ')'); /* the name may hold anything */
    return end && end[1] == ' ' && end[2] != 'Z' && end[2] != 'X';
}


/* key's value in pid's environment: 1, 0 where it has none, -1 where it
 * cannot be read (another user's process). */
int mps_environ(pid_t pid, const char *key, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    struct strbuf env = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        strbuf_append(&env, buf, n);
    fclose(f);
    int found = 0;
    size_t klen = strlen(key);
    for (size_t at = 0; at < env.len && !found; at += strlen(env.data + at) + 1)
        if (!strncmp(env.data + at, key, klen) && env.data[at + klen] == '=') {
            snprintf(out, len, "%s", env.data + at + klen + 1);
            found = 1;
        }
    strbuf_free(&env);
    return found;
}


/* The daemon serving m's pipe directory, from the pid file it writes
 * there: 0 where none runs. A pid that was reused since is someone else's:
 * its environment names no such pipe directory. */
pid_t mps_read_pid(const struct mps_daemon *m)
{
    char path[sizeof m->dirs.pipe + 32], pipe[sizeof m->dirs.pipe];
    snprintf(path, sizeof path, "%s/" MPS_PID_FILE, m->dirs.pipe);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%d", &pid) != 1)
        pid = 0;
    fclose(f);
    if (pid <= 0 || !mps_alive(pid))
        return 0;
    if (mps_environ(pid, "CUDA_MPS_PIPE_DIRECTORY", pipe, sizeof pipe) == 1 &&
        strcmp(pipe, m->dirs.pipe))
        return 0;
    return pid;
}




/* A stray daemon's pid, read on the worker pool: it is ended, if one runs. */
static void mps_stray_found(struct mps_daemon *m, pid_t pid, const struct err *e)
{
    if (pid)
        log_warn("MPS daemon for %s (pid %d): nothing needs it any more (its resource left the "
                 "config, or its claim was unprepared while gpulet was away): it is stopped, and "
                 "its running clients lose it in %d s at most if they have not ended",
                 m->spec.name, (int)pid, MPS_DRAIN_MS / 1000);
    mps_end_found(m, pid, e);
}

/* Ends name's daemon, if one runs: nothing needs it. */
static void mps_end_stray(uv_loop_t *loop, const struct config *cfg, const char *control,
                          const char *name)
{
    struct mps_spec spec = {0};
    snprintf(spec.name, sizeof spec.name, "%s", name);
    struct mps_daemon *m = mps_new(loop, cfg, &spec, control);
    m->env = mps_environment(m);
    m->state = MPS_STOPPING;
    m->remove_dir = true;
    mps_look(m, MPS_LOOK_PID, mps_stray_found);
}


/* Whether dir/name/pipe is a daemon's directory. */
static bool mps_is_dir(const char *dir, const char *name)
{
    char path[CONFIG_PATH_MAX + 700];
    snprintf(path, sizeof path, "%s/%s/pipe", dir, name);
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}


/* The names under dir (at most one level below it: a resource's name has
 * one '/'), each a daemon's directory, into *names. */
static void mps_names(const char *root, const char *prefix, struct strbuf *names, int depth)
{
    char dir[CONFIG_PATH_MAX + 700];
    snprintf(dir, sizeof dir, "%s%s%s", root, prefix[0] ? "/" : "", prefix);
    DIR *dp = opendir(dir);
    if (!dp)
        return;
    struct dirent *de;
    while ((de = readdir(dp))) {
        if (de->d_name[0] == '.' || (!prefix[0] && !strcmp(de->d_name, "shm")))
            continue;
        char name[600];
        snprintf(name, sizeof name, "%s%s%s", prefix, prefix[0] ? "/" : "", de->d_name);
        if (mps_is_dir(root, name))
            strbuf_append(names, name, strlen(name) + 1);
        else if (depth > 0)
            mps_names(root, name, names, depth - 1);
    }
    closedir(dp);
}


/* A sweep: the names listed on the worker pool (--mps-root may be on a
 * disk), the strays ended on the loop. */
struct mps_sweep {
    uv_work_t work;
    const struct config *cfg;         /* read on the loop only */
    char root[CONFIG_PATH_MAX];
    char control[CONFIG_PATH_MAX];
    enum mps_owner owner;
    struct strbuf keep, names;        /* NUL-separated */
};

static void mps_sweep_work(uv_work_t *w)
{
    struct mps_sweep *sw = w->data;
    mps_names(sw->root, "", &sw->names, 1);
}

static bool mps_kept_in(const struct strbuf *keep, const char *name)
{
    for (size_t at = 0; at < keep->len; at += strlen(keep->data + at) + 1)
        if (!strcmp(keep->data + at, name))
            return true;
    return false;
}

static void mps_swept(uv_work_t *w, int status)
{
    struct mps_sweep *sw = w->data;
    for (size_t at = 0; status == 0 && at < sw->names.len; at += strlen(sw->names.data + at) + 1) {
        const char *name = sw->names.data + at;
        bool plugins = strchr(name, '/') != NULL;
        if (plugins == (sw->owner == MPS_OWNER_PLUGIN) && !mps_kept_in(&sw->keep, name))
            mps_end_stray(w->loop, sw->cfg, sw->control, name);
    }
    strbuf_free(&sw->keep);
    strbuf_free(&sw->names);
    free(sw);
}

void mps_sweep(uv_loop_t *loop, const struct config *cfg, const char *control,
               enum mps_owner owner, const char *const *keep, unsigned nkeep)
{
    struct mps_sweep *sw = xcalloc(1, sizeof *sw);
    sw->cfg = cfg;
    snprintf(sw->root, sizeof sw->root, "%s", cfg->mps_root);
    snprintf(sw->control, sizeof sw->control, "%s", control);
    sw->owner = owner;
    for (unsigned i = 0; i < nkeep; i++)
        strbuf_append(&sw->keep, keep[i], strlen(keep[i]) + 1);
    sw->work.data = sw;
    uv_queue_work(loop, &sw->work, mps_sweep_work, mps_swept);
}


static int mps_mkdirs(const char *path, struct err *e)
{
    struct err why;
    if (dirs_make(NULL, path, 0755, &why) < 0)
        return err_set(e, "sharing.mps: directory %s: %s", path, why.msg);
    return 0;
}


/* --- what the daemon's files say, read on the worker pool ------------------------------ */

/* The loop never waits on a disk (--mps-root may be on one): a daemon's
 * directories are made, and its pid read from its files, on the pool; then
 * goes on with the answer on the loop. m stays until it is back (counted
 * as a handle): then sees the state as it is by then. */
struct mps_look {
    uv_work_t work;
    struct mps_daemon *m;
    unsigned what;                    /* MPS_LOOK_* */
    pid_t pid;
    bool failed;
    struct err e;
    mps_look_cb then;
};

/* The pid mps-exec wrote of the daemon it started; 0: none. */
static pid_t mps_read_started(const struct mps_daemon *m)
{
    FILE *f = fopen(m->started, "r");
    int pid = 0;
    if (f && (fscanf(f, "%d", &pid) != 1 || pid < 0))
        pid = 0;
    if (f)
        fclose(f);
    return pid;
}

static void mps_look_work(uv_work_t *w)
{
    struct mps_look *l = w->data;
    const struct mps_daemon *m = l->m;
    if ((l->what & MPS_LOOK_DIRS) &&
        (mps_mkdirs(m->dirs.pipe, &l->e) < 0 || mps_mkdirs(m->dirs.log, &l->e) < 0 ||
         mps_mkdirs(m->dirs.shm, &l->e) < 0)) {
        l->failed = true;
        return;
    }
    if (l->what & MPS_LOOK_PID)
        l->pid = mps_read_pid(m);
    else if (l->what & MPS_LOOK_STARTED)
        l->pid = mps_read_started(m);
}

static void mps_look_done(uv_work_t *w, int status)
{
    struct mps_look *l = w->data;
    struct mps_daemon *m = l->m;
    m->handles--;
    if (status < 0 && !l->failed) {
        l->failed = true;
        err_set(&l->e, "MPS: %s: not looked at (the agent is stopping)", m->spec.name);
    }
    l->then(m, l->pid, l->failed ? &l->e : NULL);
    free(l);
}

void mps_look(struct mps_daemon *m, unsigned what, mps_look_cb then)
{
    struct mps_look *l = xcalloc(1, sizeof *l);
    l->m = m;
    l->what = what;
    l->then = then;
    l->work.data = l;
    m->handles++;
    uv_queue_work(m->loop, &l->work, mps_look_work, mps_look_done);
}
