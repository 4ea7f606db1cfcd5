/* NFD's local feature file: key=value lines, replaced atomically. */
#include "labels/publish.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/dirs.h"
#include "util/file.h"

int labels_write_file(const char *path, const struct label_set *set, struct err *e)
{
    /* The temporary file lives in a hidden directory beside the target, as
     * GFD's does: NFD reads every plain file in features.d. */
    char dir[CONFIG_PATH_MAX + 32], tmp[CONFIG_PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    snprintf(slash ? slash + 1 : dir, sizeof dir - (size_t)(slash ? slash + 1 - dir : 0),
             ".gpulet-tmp");
    /* Like GFD, create features.d itself where NFD has not yet. */
    struct err made;
    if (dirs_make(NULL, dir, 0755, &made) < 0)
        return err_set(e, "labels file directory %s: %s", dir, made.msg);
    snprintf(tmp, sizeof tmp, "%s/labels", dir);
    struct strbuf text = {0};
    label_set_text(set, &text);
    struct err why;
    int rc = file_replace(path, tmp, text.data ? text.data : "", text.len, 0644, &why);
    strbuf_free(&text);
    rmdir(dir);
    return rc < 0 ? err_set(e, "labels file: %s", why.msg) : 0;
}
