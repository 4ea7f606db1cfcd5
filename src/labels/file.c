/* NFD's local feature file: key=value lines, replaced atomically. */
#include "labels/publish.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/dirs.h"
#include "util/file.h"

/* The temporary file lives in a hidden directory beside the target, as
 * GFD's does: NFD reads every plain file in features.d. */
static void labels_file_tmp(const char *path, char *dir, size_t dir_len, char *tmp, size_t tmp_len)
{
    snprintf(dir, dir_len, "%s", path);
    char *slash = strrchr(dir, '/');
    snprintf(slash ? slash + 1 : dir, dir_len - (size_t)(slash ? slash + 1 - dir : 0),
             ".gpulet-tmp");
    snprintf(tmp, tmp_len, "%s/labels", dir);
}

struct writer *labels_file_writer(uv_loop_t *loop, const char *path)
{
    /* Like GFD, the writer makes features.d itself where NFD has not yet. */
    char dir[CONFIG_PATH_MAX + 32], tmp[CONFIG_PATH_MAX + 64];
    labels_file_tmp(path, dir, sizeof dir, tmp, sizeof tmp);
    return writer_new(loop, path, tmp, 0644, WRITER_MKDIR | WRITER_TMP_DIR);
}

int labels_file_write_now(const char *path, const char *text, size_t len, struct err *e)
{
    char dir[CONFIG_PATH_MAX + 32], tmp[CONFIG_PATH_MAX + 64], parent[CONFIG_PATH_MAX];
    labels_file_tmp(path, dir, sizeof dir, tmp, sizeof tmp);
    dirs_parent(path, parent, sizeof parent);
    if (dirs_make(NULL, parent, 0755, e) < 0 || dirs_make(NULL, dir, 0755, e) < 0)
        return -1;
    int rc = file_replace(path, tmp, text, len, 0644, e);
    rmdir(dir);
    return rc;
}
