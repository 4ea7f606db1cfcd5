/* A file replaced whole: what must survive a crash (the DRA checkpoint)
 * and what another program reads while gpulet writes it (CDI specs, NFD's
 * feature file). */
#include "util/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/dirs.h"
#include "util/strbuf.h"

/* The rename itself is only durable once its directory is flushed. */
static int file_sync_dir(const char *path)
{
    char dir[4096];
    dirs_parent(path, dir, sizeof dir);
    int fd = open(dir[0] ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

int file_replace(const char *path, const char *tmp, const void *data, size_t len, mode_t mode,
                 struct err *e)
{
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        return err_set(e, "cannot write %s: %s", path, strerror(errno));
    const char *p = data;
    bool ok = fchmod(fd, mode) == 0;
    for (size_t done = 0; ok && done < len;) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        ok = n > 0;
        done += ok ? (size_t)n : 0;
    }
    ok = ok && fsync(fd) == 0;
    int saved = errno;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        saved = ok ? errno : saved;
        unlink(tmp);
        return err_set(e, "cannot write %s: %s", path, strerror(saved));
    }
    if (file_sync_dir(path) != 0)
        return err_set(e, "%s written, but its directory not flushed: %s", path, strerror(errno));
    return 0;
}

int file_read(const char *path, struct strbuf *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
        if (n > 0)
            strbuf_append(out, buf, (size_t)n);
    int saved = errno;
    close(fd);
    errno = saved;
    return n < 0 ? -1 : 0;
}

int file_remove(const char *path, struct err *e)
{
    if (unlink(path) != 0)
        return errno == ENOENT ? 0 : err_set(e, "cannot remove %s: %s", path, strerror(errno));
    if (file_sync_dir(path) != 0)
        return err_set(e, "%s removed, but its directory not flushed: %s", path, strerror(errno));
    return 0;
}

bool file_holds(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char buf[8192];
    const char *want = data;
    size_t at = 0, n;
    bool same = true;
    while (same && (n = fread(buf, 1, sizeof buf, f)) > 0) {
        same = at + n <= len && !memcmp(buf, want + at, n);
        at += n;
    }
    same = same && !ferror(f) && at == len;
    fclose(f);
    return same;
}
