/* `gpulet mps-exec`: starts an MPS control daemon that gpulet does not
 * take down with it. The agent runs it (libuv's spawn cannot do this work
 * between fork and exec); it forks the daemon and returns once the daemon
 * runs. The daemon:
 * - is in a session of its own, the child of no gpulet process, so a
 *   SIGTERM, SIGKILL or crash of gpulet never reaches it;
 * - with --host ROOT (gpulet in a container, ROOT the host's / as the
 *   container sees it: CONTAINER_DRIVER_ROOT; --rw the MPS root, at the
 *   same path on the host, writable), runs on the host's files
 *   (its own mount namespace pivoted to ROOT, holding nothing of gpulet's
 *   image) and in a cgroup of its own, outside the pod's, so a container
 *   restart or a rollout to a new image does not stop it either;
 * - has SHM (under --mps-root, also mounted into every MPS container) as its
 *   /dev/shm, in that private mount namespace;
 * - writes its output to OUT (the pod's log would go with the pod);
 * - with --lease, has a keeper that ends it after its last client once
 *   gpulet has been away longer than the lease (an uninstall).
 * Without the privilege for a step it says so once and runs without it. */
#include "mps/mps.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MPS_CGROUP "gpulet-mps"   /* beside kubepods, under each hierarchy's root */

struct mps_exec_args {
    bool quiet;
    bool client;                   /* a command to the daemon: no SHM, not detached */
    const char *host;              /* the host's / as gpulet sees it, or NULL */
    const char *rw;                /* with host: a directory that stays writable there */
    const char *out;               /* the daemon's stdout and stderr, or NULL */
    const char *pid_file;          /* where its pid goes, once it runs, or NULL */
    const char *lease;             /* the file gpulet touches while it runs, or NULL */
    const char *lease_s;           /* how old it may grow before the keeper ends the daemon */
    const char *shm;
    char **program;                /* the program and its arguments */
};

static int mps_exec_usage(void)
{
    fputs("usage: gpulet mps-exec [--quiet] [--host ROOT [--rw DIR]] [--out FILE] [--pid-file FILE] "
          "[--lease FILE SECONDS] SHM PROGRAM [ARGS...]\n"
          "       gpulet mps-exec --client [--host ROOT [--rw DIR]] PROGRAM [ARGS...] "
          "(the agent runs them)\n", stderr);
    return 2;
}

/* Its options, then SHM and the program. 0, or -1 for a bad command line. */
static int mps_exec_parse(int argc, char **argv, struct mps_exec_args *a)
{
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1] == '-'; i++) {
        if (!strcmp(argv[i], "--quiet"))
            a->quiet = true;
        else if (!strcmp(argv[i], "--client"))
            a->client = true;
        else if (!strcmp(argv[i], "--host") && i + 1 < argc)
            a->host = argv[++i];
        else if (!strcmp(argv[i], "--rw") && i + 1 < argc)
            a->rw = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            a->out = argv[++i];
        else if (!strcmp(argv[i], "--pid-file") && i + 1 < argc)
            a->pid_file = argv[++i];
        else if (!strcmp(argv[i], "--lease") && i + 2 < argc)
            a->lease = argv[++i], a->lease_s = argv[++i];
        else
            return -1;
    }
    if (a->client && argc - i >= 1) {
        a->program = argv + i;
        return 0;
    }
    if (argc - i < 2)
        return -1;
    a->shm = argv[i];
    a->program = argv + i + 1;
    return 0;
}

/* The mount namespace of the daemon's own, every mount private to it. */
static int mps_private_mounts(void)
{
    if (unshare(CLONE_NEWNS) < 0)
        return -1;
    return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
}

/* ROOT becomes the daemon's /, and the container's root is let go. ROOT
 * is mounted read-only where gpulet only reads the host's files: rw (the
 * MPS root, the same directory at the same path) is bound over its place
 * there as gpulet has it, writable. */
static int mps_pivot(const char *root, const char *rw)
{
    char there[PATH_MAX];
    if (rw && (snprintf(there, sizeof there, "%s%s", root, rw) >= (int)sizeof there ||
               mount(rw, there, NULL, MS_BIND | MS_REC, NULL) < 0))
        return -1;
    if (chdir(root) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
        return -1;
    if (umount2(".", MNT_DETACH) < 0)
        return -1;
    return chdir("/");
}

/* The mount of the hierarchy named by a line of /proc/self/cgroup
 * ("" for cgroup v2), or NULL where it is not mounted where systemd and
 * the container runtimes mount it. */
static const char *mps_cgroup_mount(const char *controllers, char *out, size_t len)
{
    struct statfs fs;
    if (!*controllers) { /* v2: the whole of /sys/fs/cgroup, or its unified part (hybrid) */
        const char *places[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
        for (size_t i = 0; i < 2; i++)
            if (statfs(places[i], &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC)
                return snprintf(out, len, "%s", places[i]), out;
        return NULL;
    }
    if (!strncmp(controllers, "name=", 5))
        controllers += 5;
    snprintf(out, len, "/sys/fs/cgroup/%s", controllers);
    return statfs(out, &fs) == 0 && fs.f_type == CGROUP_SUPER_MAGIC ? out : NULL;
}

/* cgroup v1's cpuset: a new cgroup has no CPUs and no memory nodes until
 * given some (a move into it fails with ENOSPC): its parent's. */
static int mps_cpuset_inherit(const char *parent, const char *dir)
{
    static const char *const files[] = {"cpuset.cpus", "cpuset.mems"};
    for (size_t i = 0; i < 2; i++) {
        char from[440], to[480], value[4096] = "";
        snprintf(from, sizeof from, "%s/%s", parent, files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        FILE *f = fopen(from, "r");
        if (!f)
            return 0; /* not a cpuset hierarchy */
        size_t n = fread(value, 1, sizeof value - 1, f);
        fclose(f);
        value[n] = '\0';
        int fd = open(to, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        ssize_t w = write(fd, value, strlen(value));
        close(fd);
        if (w < 0)
            return -1;
    }
    return 0;
}

/* Moves the calling process into MPS_CGROUP of every hierarchy it is in,
 * beside the pods' cgroups: a container's stop kills what is in the
 * container's cgroup. */
static int mps_leave_cgroup(void)
{
    /* cgroup v2 with a private cgroup namespace: a move must be made from
     * the host's. Where that cannot be entered, the write below says why. */
    int ns = open("/proc/1/ns/cgroup", O_RDONLY | O_CLOEXEC);
    if (ns >= 0) {
        setns(ns, CLONE_NEWCGROUP);
        close(ns);
    }
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f)
        return -1;
    char line[512];
    int rc = 0, moved = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        char mount_dir[300], dir[400], procs[440];
        if (!b)
            continue;
        *b = '\0';
        if (!mps_cgroup_mount(a + 1, mount_dir, sizeof mount_dir))
            continue; /* a v1 hierarchy nobody kills by (net_cls …), or v2 unmounted */
        snprintf(dir, sizeof dir, "%s/" MPS_CGROUP, mount_dir);
        snprintf(procs, sizeof procs, "%s/cgroup.procs", dir);
        int fd = -1;
        if ((mkdir(dir, 0755) < 0 && errno != EEXIST) || mps_cpuset_inherit(mount_dir, dir) < 0 ||
            (fd = open(procs, O_WRONLY | O_CLOEXEC)) < 0 || write(fd, "0", 1) != 1)
            rc = -1;
        else
            moved++;
        if (fd >= 0)
            close(fd);
    }
    fclose(f);
    return rc == 0 && moved ? 0 : -1;
}

static bool mps_same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* In the child, before exec: what can be done of the above. A step that
 * fails is said (unless quiet) and the daemon runs without it, except a
 * host whose SHM is another directory than gpulet's: the containers could
 * never reach that daemon, so it is not started. */
static int mps_prepare(const struct mps_exec_args *a)
{
    struct stat before, after;
    if (stat(a->shm, &before) < 0) {
        fprintf(stderr, "gpulet mps-exec: %s: %s\n", a->shm, strerror(errno));
        return -1;
    }
    if (mps_private_mounts() < 0) {
        if (!a->quiet)
            fprintf(stderr, "gpulet mps-exec: cannot make %s the MPS daemon's /dev/shm (%s): MPS "
                            "clients in containers reach the daemon only if the agent has "
                            "CAP_SYS_ADMIN\n", a->shm, strerror(errno));
        return 0;
    }
    if (a->host) {
        if (mps_pivot(a->host, a->rw) < 0) {
            fprintf(stderr, "gpulet mps-exec: cannot run the MPS daemon on the host's files "
                            "(%s as /): %s\n", a->host, strerror(errno));
            return -1;
        }
        if (stat(a->shm, &after) < 0 || !mps_same_file(&before, &after)) {
            fprintf(stderr, "gpulet mps-exec: %s is not the same directory on the host: mount "
                            "--mps-root at its own path on the host\n", a->shm);
            return -1;
        }
        if (mps_leave_cgroup() < 0 && !a->quiet)
            fprintf(stderr, "gpulet mps-exec: cannot move the MPS daemon to a cgroup of its own "
                            "(%s): a restart of gpulet's container stops it\n", strerror(errno));
    }
    if (mount(a->shm, "/dev/shm", NULL, MS_BIND, NULL) < 0 && !a->quiet)
        fprintf(stderr, "gpulet mps-exec: cannot make %s the MPS daemon's /dev/shm: %s\n", a->shm,
                strerror(errno));
    return 0;
}

/* The keeper: with gpulet uninstalled nothing would ever end the daemon.
 * While gpulet runs it touches the lease; once the lease is older than
 * its seconds, the keeper says quit to the daemon at each look (which a
 * daemon with clients refuses), so the daemon goes after its last client,
 * and the keeper with it, taking the daemons' cgroup with it where no
 * other daemon is left in it. A shell of the host's (after the pivot): it
 * holds nothing of gpulet's image. $1 control, $2 lease, $3 its seconds,
 * $4 the seconds between looks, $5 the daemon. */
static const char mps_keeper[] =
    "while kill -0 \"$5\" 2>/dev/null; do\n"
    "    sleep \"$4\" & wait $!\n"
    "    age=$(($(date +%s) - $(stat -c %Y \"$2\" 2>/dev/null || echo 0)))\n"
    "    [ \"$age\" -le \"$3\" ] || echo quit | \"$1\" >/dev/null 2>&1\n"
    "done\n"
    "for d in /sys/fs/cgroup/" MPS_CGROUP " /sys/fs/cgroup/*/" MPS_CGROUP "; do\n"
    "    [ -d \"$d\" ] && echo $$ >\"${d%/*}/cgroup.procs\" && rmdir \"$d\"\n"
    "done 2>/dev/null\n";

static void mps_keep(const struct mps_exec_args *a, pid_t daemon)
{
    char pid[24], every[24];
    long lease = strtol(a->lease_s, NULL, 10);
    snprintf(pid, sizeof pid, "%d", (int)daemon);
    snprintf(every, sizeof every, "%ld", lease > 0 && lease < 60 ? lease : 60);
    if (fork() != 0)
        return;
    execl("/bin/sh", "sh", "-c", mps_keeper, "gpulet-mps-keeper", a->program[0], a->lease,
          a->lease_s, every, pid, (char *)NULL);
    _exit(127);
}

/* The daemon-to-be: its own session, its mounts, its output, then exec.
 * Until exec its messages go to gpulet's log; an exec that fails reaches
 * the parent through the close-on-exec pipe. */
static void mps_child(const struct mps_exec_args *a, int report)
{
    setsid();
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    int out = a->out ? open(a->out, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
    int err = -1; /* -1: prepare said why */
    if (mps_prepare(a) == 0) {
        if (null >= 0)
            dup2(null, 0);
        if (out >= 0) {
            dup2(out, 1);
            dup2(out, 2);
        }
        if (a->lease)
            mps_keep(a, getpid());
        execv(a->program[0], a->program);
        err = errno;
    }
    if (write(report, &err, sizeof err) < 0)
        _exit(127);
    _exit(127);
}

/* A command to the daemon, from where the daemon runs: the host's files
 * (the control program, its libraries, its shell). Replaces this process. */
static int mps_exec_client(const struct mps_exec_args *a)
{
    if (a->host && (mps_private_mounts() < 0 || mps_pivot(a->host, a->rw) < 0)) {
        fprintf(stderr, "gpulet mps-exec: cannot reach the host's files (%s as /): %s\n", a->host,
                strerror(errno));
        return 1;
    }
    execv(a->program[0], a->program);
    fprintf(stderr, "gpulet mps-exec: cannot run %s: %s\n", a->program[0], strerror(errno));
    return 127;
}

int mps_exec(int argc, char **argv)
{
    struct mps_exec_args a = {0};
    if (mps_exec_parse(argc, argv, &a) < 0)
        return mps_exec_usage();
    if (a.client)
        return mps_exec_client(&a);
    int sync[2];
    if (pipe2(sync, O_CLOEXEC) < 0) {
        perror("gpulet mps-exec: pipe");
        return 1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("gpulet mps-exec: fork");
        return 1;
    }
    if (pid == 0) {
        close(sync[0]);
        mps_child(&a, sync[1]);
    }
    close(sync[1]);
    int err = 0;
    ssize_t n;
    do
        n = read(sync[0], &err, sizeof err);
    while (n < 0 && errno == EINTR);
    close(sync[0]);
    if (n > 0 && err > 0)
        fprintf(stderr, "gpulet mps-exec: cannot run %s: %s\n", a.program[0], strerror(err));
    if (n > 0)
        return 127;
    /* End of file: the daemon runs (exec closed the pipe). gpulet watches
     * it by its pid; its parent goes now, so it is nobody's child in gpulet. */
    FILE *f = a.pid_file ? fopen(a.pid_file, "w") : NULL;
    if (f) {
        fprintf(f, "%d\n", (int)pid);
        fclose(f);
    }
    return 0;
}
