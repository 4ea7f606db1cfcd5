/* LD_PRELOAD shim: says on stderr when the agent's loop thread touches a
 * file (docs/architecture.md, "Executors": the loop never touches a disk,
 * which can hang behind a busy or dying device for seconds). As the NVML
 * simulator does for NVML calls, it reads the agent's exported
 * agent_loop_serving, 1 while the main thread runs the loop; any call
 * below from that thread then is reported with its frames, and the tests
 * fail on the report (conftest.py's SANITIZER_MARKS).
 *
 * What counts: opening, making, listing, renaming and removing files and
 * directories, and reading or writing a regular file. Not: /proc and /sys
 * (the kernel's, never a disk) and sockets, pipes, eventfds and inotify
 * (the loop's own I/O). Loaded into every agent the tests start (sim_env). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <ftw.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static _Thread_local int inside; /* a reported call's own calls are not reported again */

/* Whether the calling thread is the agent's loop thread, serving. */
static int shim_on_loop(void)
{
    static _Atomic(_Atomic int *) serving;
    static atomic_int looked;
    if (inside)
        return 0;
    if (!atomic_load(&looked)) {
        atomic_store(&serving, (_Atomic int *)dlsym(RTLD_DEFAULT, "agent_loop_serving"));
        atomic_store(&looked, 1);
    }
    _Atomic int *s = atomic_load(&serving);
    return s && atomic_load(s) && syscall(SYS_gettid) == getpid();
}

/* The kernel's files, and the tests' stand-in for /proc (--proc-root). */
static int shim_kernel_path(const char *path)
{
    static const char *proc_root;
    static atomic_int looked;
    if (!atomic_load(&looked)) {
        proc_root = getenv("GPULET_PROC_ROOT");
        atomic_store(&looked, 1);
    }
    size_t n = proc_root ? strlen(proc_root) : 0;
    return path && (!strncmp(path, "/proc/", 6) || !strncmp(path, "/sys/", 5) ||
                    !strcmp(path, "/dev/null") || (n && !strncmp(path, proc_root, n)));
}

static void shim_report(const char *call, const char *path)
{
    inside = 1;
    char line[512];
    int n = snprintf(line, sizeof line, "gpulet-shim: a file touched on the agent's loop thread: "
                     "%s(%s); its frames:\n", call, path ? path : "");
    if (write(2, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) >= 0) {
        void *frames[14];
        backtrace_symbols_fd(frames, backtrace(frames, 14), 2);
    }
    inside = 0;
}

static void shim_path(const char *call, const char *path)
{
    if (shim_on_loop() && !shim_kernel_path(path))
        shim_report(call, path);
}

static void shim_fd(const char *call, int fd)
{
    struct stat st;
    if (!shim_on_loop())
        return;
    inside = 1;
    int regular = fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode));
    char link[64], path[256] = "";
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = regular ? readlink(link, path, sizeof path - 1) : -1;
    path[n > 0 ? n : 0] = '\0';
    inside = 0;
    if (regular && !shim_kernel_path(path))
        shim_report(call, path);
}

#define REAL(name) \
    static __typeof__(name) *real; \
    if (!real) \
        real = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

int open(const char *path, int flags, ...)
{
    REAL(open);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    shim_path("open", path);
    return real(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    REAL(open64);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    shim_path("open", path);
    return real(path, flags, mode);
}

int openat(int dir, const char *path, int flags, ...)
{
    REAL(openat);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    shim_path("openat", path);
    return real(dir, path, flags, mode);
}

int openat64(int dir, const char *path, int flags, ...)
{
    REAL(openat64);
    va_list ap;
    va_start(ap, flags);
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
    va_end(ap);
    shim_path("openat", path);
    return real(dir, path, flags, mode);
}

FILE *fopen(const char *path, const char *mode)
{
    REAL(fopen);
    shim_path("fopen", path);
    return real(path, mode);
}

FILE *fopen64(const char *path, const char *mode)
{
    REAL(fopen64);
    shim_path("fopen", path);
    return real(path, mode);
}

int mkdir(const char *path, mode_t mode)
{
    REAL(mkdir);
    shim_path("mkdir", path);
    return real(path, mode);
}

DIR *opendir(const char *path)
{
    REAL(opendir);
    shim_path("opendir", path);
    return real(path);
}

int nftw(const char *path, __nftw_func_t fn, int fds, int flags)
{
    REAL(nftw);
    shim_path("nftw", path);
    return real(path, fn, fds, flags);
}

int unlink(const char *path)
{
    REAL(unlink);
    shim_path("unlink", path);
    return real(path);
}

int rmdir(const char *path)
{
    REAL(rmdir);
    shim_path("rmdir", path);
    return real(path);
}

int rename(const char *from, const char *to)
{
    REAL(rename);
    shim_path("rename", from);
    return real(from, to);
}

ssize_t read(int fd, void *buf, size_t len)
{
    REAL(read);
    shim_fd("read", fd);
    return real(fd, buf, len);
}

ssize_t write(int fd, const void *buf, size_t len)
{
    REAL(write);
    if (fd > 2) /* the log: a pipe in a pod, a file in a test */
        shim_fd("write", fd);
    return real(fd, buf, len);
}
