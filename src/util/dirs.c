/* Directories a process makes and takes away again, and the user's own
 * directory. The records are what let an agent leave a node (or a user's
 * /tmp) as it found it: only directories it made are removed, and only
 * while empty. */
#include "util/dirs.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/xmalloc.h"

void dirs_parent(const char *path, char *out, size_t len)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, len, ".");
    else if (slash == path)
        snprintf(out, len, "/");
    else
        snprintf(out, len, "%.*s", (int)(slash - path), path);
}

static void dirs_record(struct dirs *made, const char *path)
{
    if (!made)
        return;
    made->paths = xrealloc(made->paths, (made->count + 1) * sizeof *made->paths);
    made->paths[made->count++] = xstrdup(path);
}

const char *dirs_why(const char *path, int errnum, char *out, size_t len)
{
    char parent[512];
    struct stat st;
    dirs_parent(path, parent, sizeof parent);
    out[0] = '\0';
    if ((errnum == EACCES || errnum == EPERM) && stat(parent, &st) == 0 && st.st_uid != geteuid())
        snprintf(out, len, " (%s belongs to uid %u, not to uid %u)", parent, (unsigned)st.st_uid,
                 (unsigned)geteuid());
    return out;
}

static int dirs_fail(const char *path, int errnum, struct err *e)
{
    char why[600];
    return err_set(e, "cannot create %s: %s%s", path, strerror(errnum),
                   dirs_why(path, errnum, why, sizeof why));
}

/* One directory: made (and recorded), or already one. */
static int dirs_one(struct dirs *made, const char *path, mode_t mode, struct err *e)
{
    if (mkdir(path, mode) == 0) {
        dirs_record(made, path);
        return 0;
    }
    int errnum = errno;
    struct stat st;
    if (errnum == EEXIST && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    if (errnum == EEXIST)
        return err_set(e, "cannot create %s: a file that is not a directory is there", path);
    return dirs_fail(path, errnum, e);
}

int dirs_make(struct dirs *made, const char *path, mode_t mode, struct err *e)
{
    size_t n = strlen(path);
    if (n == 0)
        return err_set(e, "cannot create a directory with an empty name");
    char *buf = xstrdup(path);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    int rc = 0;
    for (char *s = buf + 1; *s && rc == 0; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        rc = dirs_one(made, buf, mode, e);
        *s = '/';
    }
    if (rc == 0)
        rc = dirs_one(made, buf, mode, e);
    free(buf);
    return rc;
}

void dirs_unmake(struct dirs *made)
{
    for (unsigned i = made->count; i-- > 0;) {
        rmdir(made->paths[i]);
        free(made->paths[i]);
    }
    free(made->paths);
    made->paths = NULL;
    made->count = 0;
}

/* $XDG_RUNTIME_DIR counts only where it is the caller's own: under su or
 * sudo it may still name another user's. */
static bool dirs_xdg_ok(const char *xdg)
{
    struct stat st;
    return xdg && xdg[0] == '/' && strlen(xdg) < 200 && stat(xdg, &st) == 0 &&
           S_ISDIR(st.st_mode) && st.st_uid == geteuid();
}

void dirs_user(char *out, size_t len)
{
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (dirs_xdg_ok(xdg))
        snprintf(out, len, "%s/gpulet", xdg);
    else
        snprintf(out, len, "/tmp/gpulet-%u", (unsigned)geteuid());
}

void dirs_user_file(const char *name, char *out, size_t len)
{
    char dir[256];
    dirs_user(dir, sizeof dir);
    snprintf(out, len, "%s/%s", dir, name);
}

void dirs_user_release(void)
{
    char dir[256];
    dirs_user(dir, sizeof dir);
    rmdir(dir);
}

int dirs_user_make(struct dirs *made, struct err *e)
{
    char dir[256];
    dirs_user(dir, sizeof dir);
    if (mkdir(dir, 0700) == 0)
        dirs_record(made, dir);
    else if (errno != EEXIST)
        return dirs_fail(dir, errno, e);
    struct stat st;
    if (lstat(dir, &st) < 0)
        return err_set(e, "%s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return err_set(e, "%s is not a directory: remove it, or set XDG_RUNTIME_DIR", dir);
    if (st.st_uid != geteuid())
        return err_set(e, "%s belongs to uid %u, not to you (uid %u): remove it, or set "
                          "XDG_RUNTIME_DIR", dir, (unsigned)st.st_uid, (unsigned)geteuid());
    if (st.st_mode & 022)
        return err_set(e, "%s is writable by others (mode %03o): run chmod 700 %s", dir,
                       (unsigned)(st.st_mode & 0777), dir);
    return 0;
}
