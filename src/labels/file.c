/* NFD's local feature file: key=value lines, replaced atomically. */
#include "labels/publish.h"

#include <stdio.h>
#include <string.h>

struct writer *labels_file_writer(uv_loop_t *loop, const char *path)
{
    /* The temporary file lives in a hidden directory beside the target, as
     * GFD's does: NFD reads every plain file in features.d. Like GFD, the
     * writer makes features.d itself where NFD has not yet. */
    char dir[CONFIG_PATH_MAX + 32], tmp[CONFIG_PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    snprintf(slash ? slash + 1 : dir, sizeof dir - (size_t)(slash ? slash + 1 - dir : 0),
             ".gpulet-tmp");
    snprintf(tmp, sizeof tmp, "%s/labels", dir);
    return writer_new(loop, path, tmp, 0644, WRITER_MKDIR | WRITER_TMP_DIR);
}
