/* The NVIDIA driver's user-space files under a driver root: what a
 * container needs besides its device nodes to use a GPU (libraries by
 * capability, binaries, GSP firmware, IPC sockets), found without the
 * container toolkit. CDI specs and direct injection read the same list
 * (docs/containers.md). */
#ifndef GPULET_DRIVER_H
#define GPULET_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define DRIVER_PATH_MAX 512

/* Capabilities, as NVIDIA_DRIVER_CAPABILITIES names them. */
#define DRIVER_CAP_COMPUTE 1u
#define DRIVER_CAP_UTILITY 2u
#define DRIVER_CAP_VIDEO 4u
#define DRIVER_CAP_GRAPHICS 8u
#define DRIVER_CAP_ALL 15u

/* Where a container gets the files. The CUDA images' LD_LIBRARY_PATH and
 * PATH hold these directories; any other image finds them only in the
 * directories of the system layout (docs/containers.md). */
#define DRIVER_CONTAINER_LIB "/usr/local/nvidia/lib64"
#define DRIVER_CONTAINER_BIN "/usr/local/nvidia/bin"

/* The order of --driver-layout's choices. */
enum driver_layout {
    DRIVER_LAYOUT_SYSTEM, /* also where glibc and PATH look by themselves: any image */
    DRIVER_LAYOUT_NVIDIA, /* /usr/local/nvidia only: CUDA images, the old layout */
};

/* One bind mount a container gets, read-only. */
struct driver_mount {
    char host[DRIVER_PATH_MAX];      /* with the driver root */
    char container[DRIVER_PATH_MAX];
};

/* What discovery found. Owned by whoever called driver_discover. */
struct driver {
    char root[DRIVER_PATH_MAX];      /* the host's name for the driver root */
    char read_root[DRIVER_PATH_MAX]; /* where gpulet reads it (its container's mount) */
    char version[32];
    unsigned caps;                   /* the capabilities the mounts cover */
    enum driver_layout layout;       /* where in the container they go */
    struct driver_mount *mounts;     /* libraries (at their names and sonames), binaries,
                                        firmware, sockets */
    unsigned nmounts;
    unsigned nlibs, nbins;           /* how many libraries and binaries were found */
};

/* Finds the files of driver `version` under root ("/" for the host) for
 * caps, reading them under read_root (where gpulet's container mounts the
 * host's root; NULL or empty: root itself), naming them by the host's
 * paths and placing them in the container by layout. Fails with a message naming the root when no library of that
 * version is there; warnings (another version beside it, a library with
 * no soname) are logged. */
int driver_discover(struct driver *d, const char *root, const char *read_root,
                    const char *version, unsigned caps, enum driver_layout layout,
                    struct err *e);

void driver_free(struct driver *d);

/* The path of library `name` (a soname such as libnvidia-ml.so.1) under
 * read_root, in the directories discovery searches; -1 where none is. */
int driver_find_library(const char *read_root, const char *name, char *out, size_t len);

/* The path of the driver's program `name` (nvidia-smi,
 * nvidia-cuda-mps-control) under root ("/" for the host), in the
 * directories a driver installs its utilities in; -1 naming where it
 * looked. */
int driver_find_tool(const char *root, const char *name, char *out, size_t len, struct err *e);

/* Parses a comma list of capabilities ("compute,utility", "all"). */
int driver_parse_caps(const char *text, unsigned *caps, struct err *e);

/* Reads an ELF shared object's DT_SONAME through read_at(ctx, offset, buf,
 * len), which returns the bytes it read. Returns 0 with the soname in out,
 * or -1 when the file is not a 64-bit little-endian ELF object with one. */
typedef size_t (*driver_read_fn)(void *ctx, uint64_t offset, void *buf, size_t len);
int driver_elf_soname(driver_read_fn read_at, void *ctx, char *out, size_t len);

/* The soname of the file at path, or -1. */
int driver_file_soname(const char *path, char *out, size_t len);

/* Writes a minimal ELF shared object whose DT_SONAME is soname and whose
 * DT_NEEDED entries are needed (NULL-terminated, at most
 * DRIVER_STUB_NEEDED_MAX; NULL for none): the simulator's stand-in driver
 * libraries. */
#define DRIVER_STUB_NEEDED_MAX 8
int driver_write_stub_elf(const char *path, const char *soname, const char *const *needed,
                          struct err *e);

/* Writes a stand-in driver tree of `version` under root, as the loader
 * sees a real one: the libraries where an installer puts them (stub ELF
 * objects with real sonames, NVIDIA's DT_NEEDED entries and their links;
 * libnvidia-ml a copy of nvml_lib, the simulator, when given), binaries
 * (shell scripts) and firmware. */
int driver_write_stub_tree(const char *root, const char *version, const char *nvml_lib,
                           struct err *e);

#endif
