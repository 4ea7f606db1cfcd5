/* Directories a process makes, and takes away again on exit; and the
 * user's own directory for gpulet's files off a node. */
#ifndef GPULET_DIRS_H
#define GPULET_DIRS_H

#include <stddef.h>
#include <sys/types.h>

#include "util/err.h"

/* The directories one owner made, oldest first. Zeroed is empty. */
struct dirs {
    char **paths;
    unsigned count;
};

/* mkdir -p: makes path and every missing parent with mode. Where made is
 * not NULL, each directory it made is recorded there. An error names the
 * directory, and for a permission error the owner of the one above it. */
int dirs_make(struct dirs *made, const char *path, mode_t mode, struct err *e);

/* Where making path failed with errnum for want of permission: " (DIR
 * belongs to uid N, not to uid M)", naming who owns the directory it goes
 * in; else "". Returns out. */
const char *dirs_why(const char *path, int errnum, char *out, size_t len);

/* Removes the recorded directories, newest first, each only if it is
 * empty (rmdir never takes anything else), and forgets them. */
void dirs_unmake(struct dirs *made);

/* The directory of path ("." for a bare name), into out. */
void dirs_parent(const char *path, char *out, size_t len);

/* The user's own directory for gpulet's files that are not the node's (the
 * simulator's control socket, a simulated agent's sockets):
 * $XDG_RUNTIME_DIR/gpulet where that directory is the user's, else
 * /tmp/gpulet-<uid>. So two users of one machine never share a path. */
void dirs_user(char *out, size_t len);

/* The file name under dirs_user(), into out. */
void dirs_user_file(const char *name, char *out, size_t len);

/* Removes dirs_user() if it is empty: whoever leaves it last takes it
 * away, whichever process of the user made it (it is the user's alone). */
void dirs_user_release(void);

/* Makes dirs_user() (0700) where missing and checks that it is the user's:
 * a directory, not a link, owned by the user, writable by no one else.
 * Recorded in made as dirs_make does. */
int dirs_user_make(struct dirs *made, struct err *e);

#endif
