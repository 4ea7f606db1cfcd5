/* Driver discovery: the files of one driver version under a driver root,
 * found the way the dynamic linker would (its usual directories and those
 * ld.so.conf.d adds), each library by its capability table row, and the
 * mounts a container gets for them. Adding a library is one row. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/driver.h"
#include "util/arch.h"
#include "util/log.h"
#include "util/xmalloc.h"

/* NVIDIA's libraries by capability (the container toolkit's grouping). */
static const struct {
    const char *name;
    unsigned caps;
} driver_libs[] = {
    {"libnvidia-ml", DRIVER_CAP_UTILITY},
    {"libnvidia-cfg", DRIVER_CAP_UTILITY},
    {"libcuda", DRIVER_CAP_COMPUTE},
    {"libcudadebugger", DRIVER_CAP_COMPUTE},
    {"libnvidia-opencl", DRIVER_CAP_COMPUTE},
    {"libnvidia-gpucomp", DRIVER_CAP_COMPUTE | DRIVER_CAP_GRAPHICS},
    {"libnvidia-ptxjitcompiler", DRIVER_CAP_COMPUTE},
    {"libnvidia-fatbinaryloader", DRIVER_CAP_COMPUTE},
    {"libnvidia-allocator", DRIVER_CAP_COMPUTE},
    {"libnvidia-compiler", DRIVER_CAP_COMPUTE},
    {"libnvidia-nvvm", DRIVER_CAP_COMPUTE},
    {"libnvidia-pkcs11", DRIVER_CAP_COMPUTE},
    {"libnvidia-pkcs11-openssl3", DRIVER_CAP_COMPUTE},
    {"libvdpau_nvidia", DRIVER_CAP_VIDEO},
    {"libnvidia-encode", DRIVER_CAP_VIDEO},
    {"libnvidia-opticalflow", DRIVER_CAP_VIDEO},
    {"libnvcuvid", DRIVER_CAP_VIDEO},
    {"libnvidia-eglcore", DRIVER_CAP_GRAPHICS},
    {"libnvidia-glcore", DRIVER_CAP_GRAPHICS},
    {"libnvidia-tls", DRIVER_CAP_GRAPHICS},
    {"libnvidia-glsi", DRIVER_CAP_GRAPHICS},
    {"libnvidia-fbc", DRIVER_CAP_GRAPHICS},
    {"libnvidia-rtcore", DRIVER_CAP_GRAPHICS},
    {"libnvoptix", DRIVER_CAP_GRAPHICS},
    {"libGLX_nvidia", DRIVER_CAP_GRAPHICS},
    {"libEGL_nvidia", DRIVER_CAP_GRAPHICS},
    {"libGLESv2_nvidia", DRIVER_CAP_GRAPHICS},
    {"libGLESv1_CM_nvidia", DRIVER_CAP_GRAPHICS},
    {"libnvidia-glvkspirv", DRIVER_CAP_GRAPHICS},
};
#define DRIVER_NLIBS (sizeof driver_libs / sizeof *driver_libs)

static const struct {
    const char *name;
    unsigned caps;
} driver_bins[] = {
    {"nvidia-smi", DRIVER_CAP_UTILITY},
    {"nvidia-debugdump", DRIVER_CAP_UTILITY},
    {"nvidia-persistenced", DRIVER_CAP_COMPUTE},
    {"nvidia-cuda-mps-control", DRIVER_CAP_COMPUTE},
    {"nvidia-cuda-mps-server", DRIVER_CAP_COMPUTE},
};

/* Where the dynamic linker and distributions put them, before ld.so.conf.d's. */
static const char *const lib_dirs[] = {
    "/usr/lib/" ARCH_TRIPLET, "/usr/lib/" ARCH_TRIPLET "/nvidia/current", "/usr/lib64",
    "/usr/local/nvidia/lib64", "/lib/" ARCH_TRIPLET, "/lib64", "/usr/lib", "/lib",
};
static const char *const bin_dirs[] = {"/usr/bin", "/usr/sbin", "/usr/local/nvidia/bin",
                                       "/usr/local/bin", "/bin", "/sbin"};
static const char *const firmware_dirs[] = {"/lib/firmware/nvidia", "/usr/lib/firmware/nvidia"};
static const char *const sockets[] = {"/run/nvidia-persistenced/socket",
                                      "/run/nvidia-fabricmanager/socket"};

/* Where a container gets them. The first of each is the nvidia layout's
 * only one. The system layout adds the directories glibc searches when
 * an image's ld.so.cache does not name a library (Debian's and Ubuntu's
 * multiarch one, the Red Hat family's lib64) and the directory on every
 * image's PATH: any glibc image finds the driver with no hook, variable
 * or ldconfig, and a copy an image ships there is hidden by the host's. */
static const char *const container_lib_dirs[] = {DRIVER_CONTAINER_LIB, ("/usr/lib/" ARCH_TRIPLET),
                                                  "/usr/lib64"};
static const char *const container_bin_dirs[] = {DRIVER_CONTAINER_BIN, "/usr/bin"};

#define DRIVER_MAX_DIRS 48

struct discovery {
    struct driver *d;
    char dirs[DRIVER_MAX_DIRS][DRIVER_PATH_MAX]; /* library directories, root-relative */
    unsigned ndirs;
    bool found[DRIVER_NLIBS];
    char other[32];                  /* another version seen beside ours */
};

int driver_parse_caps(const char *text, unsigned *caps, struct err *e)
{
    static const char *const names[] = {"compute", "utility", "video", "graphics"};
    *caps = 0;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ",");
        bool known = false;
        if (n == 3 && !strncmp(p, "all", 3))
            *caps |= DRIVER_CAP_ALL, known = true;
        for (unsigned i = 0; i < 4 && !known; i++)
            if (strlen(names[i]) == n && !strncmp(p, names[i], n))
                *caps |= 1u << i, known = true;
        if (!known)
            return err_set(e, "unknown driver capability '%.*s' (compute, utility, video, "
                              "graphics or all)", (int)n, p);
        p += n + (p[n] == ',');
    }
    return *caps ? 0 : err_set(e, "no driver capability given");
}

static void driver_add_mount(struct driver *d, const char *host, const char *container)
{
    if (d->nmounts % 32 == 0)
        d->mounts = xrealloc(d->mounts, (d->nmounts + 32) * sizeof *d->mounts);
    struct driver_mount *m = &d->mounts[d->nmounts++];
    size_t h = strnlen(host, sizeof m->host - 1), c = strnlen(container, sizeof m->container - 1);
    memcpy(m->host, host, h); /* paths past DRIVER_PATH_MAX do not occur under a root */
    m->host[h] = '\0';
    memcpy(m->container, container, c);
    m->container[c] = '\0';
}

/* host at name in each container directory the layout has. */
static void driver_add_placed(struct driver *d, const char *host, const char *const *dirs,
                              size_t ndirs, const char *name)
{
    size_t n = d->layout == DRIVER_LAYOUT_SYSTEM ? ndirs : 1;
    for (size_t i = 0; i < n; i++) {
        char where[2 * DRIVER_PATH_MAX];
        snprintf(where, sizeof where, "%s/%s", dirs[i], name);
        driver_add_mount(d, host, where);
    }
}

static void driver_add_lib(struct driver *d, const char *host, const char *name)
{
    driver_add_placed(d, host, container_lib_dirs,
                      sizeof container_lib_dirs / sizeof *container_lib_dirs, name);
}

/* root + path, without a doubled slash for root "/". */
static void driver_join(const char *root, char *out, size_t len, const char *path)
{
    snprintf(out, len, "%s%s", strcmp(root, "/") ? root : "", path);
}

/* Where gpulet reads path, and the host's name for it. */
static void driver_path(const struct driver *d, char *out, size_t len, const char *path)
{
    driver_join(d->read_root, out, len, path);
}

static void driver_host_path(const struct driver *d, char *out, size_t len, const char *path)
{
    driver_join(d->root, out, len, path);
}

static void discovery_add_dir(struct discovery *s, const char *dir)
{
    for (unsigned i = 0; i < s->ndirs; i++)
        if (!strcmp(s->dirs[i], dir))
            return;
    if (s->ndirs < DRIVER_MAX_DIRS && dir[0] == '/')
        snprintf(s->dirs[s->ndirs++], DRIVER_PATH_MAX, "%s", dir);
}

/* The directories ld.so.conf.d adds: one per line ('#' comments). */
static void discovery_conf_dirs(struct discovery *s)
{
    char conf[DRIVER_PATH_MAX + 32];
    driver_path(s->d, conf, sizeof conf, "/etc/ld.so.conf.d");
    DIR *dir = opendir(conf);
    if (!dir)
        return;
    struct dirent *e;
    while ((e = readdir(dir))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".conf"))
            continue;
        char path[2 * DRIVER_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", conf, e->d_name);
        FILE *f = fopen(path, "r");
        char line[DRIVER_PATH_MAX];
        while (f && fgets(line, sizeof line, f)) {
            line[strcspn(line, "#\r\n")] = '\0';
            char *t = line + strspn(line, " \t");
            t[strcspn(t, " \t")] = '\0';
            discovery_add_dir(s, t);
        }
        if (f)
            fclose(f);
    }
    closedir(dir);
}

/* A driver version: digits and dots. */
static bool driver_is_version(const char *v)
{
    if (!isdigit((unsigned char)*v))
        return false;
    for (; *v; v++)
        if (!isdigit((unsigned char)*v) && *v != '.')
            return false;
    return true;
}

/* One directory entry: a library of ours, of another version, or neither. */
static void discovery_entry(struct discovery *s, const char *dir, const char *read_dir,
                            const char *name)
{
    struct driver *d = s->d;
    for (unsigned k = 0; k < DRIVER_NLIBS; k++) {
        size_t bn = strlen(driver_libs[k].name);
        if (strncmp(name, driver_libs[k].name, bn) || strncmp(name + bn, ".so.", 4))
            continue;
        const char *ver = name + bn + 4;
        if (strcmp(ver, d->version)) {
            if (driver_is_version(ver) && strchr(ver, '.') && !s->other[0])
                snprintf(s->other, sizeof s->other, "%s", ver);
            continue;
        }
        if (s->found[k] || !(driver_libs[k].caps & d->caps))
            return;
        char read[2 * DRIVER_PATH_MAX], rel[2 * DRIVER_PATH_MAX], host[3 * DRIVER_PATH_MAX];
        char soname[128];
        snprintf(read, sizeof read, "%s/%s", read_dir, name);
        snprintf(rel, sizeof rel, "%s/%s", dir, name);
        driver_host_path(d, host, sizeof host, rel);
        struct stat st;
        if (lstat(read, &st) != 0 || !S_ISREG(st.st_mode))
            return; /* a link to the file: the file itself is found too */
        s->found[k] = true;
        d->nlibs++;
        driver_add_lib(d, host, name);
        if (driver_file_soname(read, soname, sizeof soname) == 0 && strcmp(soname, name)) {
            driver_add_lib(d, host, soname);
        } else if (strcmp(soname, name)) {
            log_warn("driver: %s%s/%s has no soname: mounted under its own name only",
                     strcmp(d->root, "/") ? d->root : "", dir, name);
        }
        if (!strcmp(driver_libs[k].name, "libcuda")) /* what programs that link -lcuda open */
            driver_add_lib(d, host, "libcuda.so");
        return;
    }
}

static void discovery_libs(struct discovery *s)
{
    for (unsigned i = 0; i < s->ndirs; i++) {
        char read_dir[DRIVER_PATH_MAX + 32];
        driver_path(s->d, read_dir, sizeof read_dir, s->dirs[i]);
        DIR *dir = opendir(read_dir);
        if (!dir)
            continue;
        struct dirent *e;
        while ((e = readdir(dir)))
            if (!strncmp(e->d_name, "lib", 3))
                discovery_entry(s, s->dirs[i], read_dir, e->d_name);
        closedir(dir);
    }
}

/* Whether path is an ELF executable (not a wrapper script, which would
 * need the host's shell in the container). */
static bool driver_is_elf(const char *path)
{
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    bool elf = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "\177ELF", 4);
    if (f)
        fclose(f);
    return elf;
}

/* Each binary from the first directory that has it as an ELF file, else
 * the first that has it at all. */
static void discovery_bins(struct driver *d)
{
    for (size_t k = 0; k < sizeof driver_bins / sizeof *driver_bins; k++) {
        if (!(driver_bins[k].caps & d->caps))
            continue;
        char best[DRIVER_PATH_MAX] = "";
        for (size_t i = 0; i < sizeof bin_dirs / sizeof *bin_dirs; i++) {
            char rel[DRIVER_PATH_MAX], read[2 * DRIVER_PATH_MAX];
            snprintf(rel, sizeof rel, "%s/%s", bin_dirs[i], driver_bins[k].name);
            driver_path(d, read, sizeof read, rel);
            struct stat st;
            if (stat(read, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            bool elf = driver_is_elf(read);
            if (!best[0] || elf)
                memcpy(best, rel, sizeof best);
            if (elf)
                break;
        }
        if (!best[0])
            continue;
        char host[2 * DRIVER_PATH_MAX];
        driver_host_path(d, host, sizeof host, best);
        driver_add_placed(d, host, container_bin_dirs,
                          sizeof container_bin_dirs / sizeof *container_bin_dirs, driver_bins[k].name);
        d->nbins++;
    }
}

/* GSP firmware of this version, and the daemons' sockets, at their own paths. */
static void discovery_firmware_sockets(struct driver *d)
{
    for (size_t i = 0; i < sizeof firmware_dirs / sizeof *firmware_dirs; i++) {
        char rel[DRIVER_PATH_MAX], read_dir[2 * DRIVER_PATH_MAX], host_dir[2 * DRIVER_PATH_MAX];
        snprintf(rel, sizeof rel, "%s/%s", firmware_dirs[i], d->version);
        driver_path(d, read_dir, sizeof read_dir, rel);
        driver_host_path(d, host_dir, sizeof host_dir, rel);
        DIR *dir = opendir(read_dir);
        if (!dir)
            continue;
        struct dirent *e;
        while ((e = readdir(dir))) {
            size_t n = strlen(e->d_name);
            if (n < 5 || strncmp(e->d_name, "gsp", 3) || strcmp(e->d_name + n - 4, ".bin"))
                continue;
            char host[3 * DRIVER_PATH_MAX], where[2 * DRIVER_PATH_MAX];
            snprintf(host, sizeof host, "%s/%s", host_dir, e->d_name);
            snprintf(where, sizeof where, "%s/%s", rel, e->d_name);
            driver_add_mount(d, host, where);
        }
        closedir(dir);
        break;
    }
    for (size_t i = 0; i < sizeof sockets / sizeof *sockets; i++) {
        char read[2 * DRIVER_PATH_MAX], host[2 * DRIVER_PATH_MAX];
        driver_path(d, read, sizeof read, sockets[i]);
        driver_host_path(d, host, sizeof host, sockets[i]);
        struct stat st;
        if (stat(read, &st) == 0 && S_ISSOCK(st.st_mode))
            driver_add_mount(d, host, sockets[i]);
    }
}

static int driver_mount_cmp(const void *a, const void *b)
{
    return strcmp(((const struct driver_mount *)a)->container,
                  ((const struct driver_mount *)b)->container);
}

int driver_discover(struct driver *d, const char *root, const char *read_root,
                    const char *version, unsigned caps, enum driver_layout layout,
                    struct err *e)
{
    memset(d, 0, sizeof *d);
    snprintf(d->root, sizeof d->root, "%s", root && root[0] ? root : "/");
    snprintf(d->read_root, sizeof d->read_root, "%s", read_root && read_root[0] ? read_root : d->root);
    if (!version || !driver_is_version(version))
        return err_set(e, "driver root %s: no driver version to look for (got '%s')", d->root,
                       version ? version : "");
    snprintf(d->version, sizeof d->version, "%s", version);
    d->caps = caps;
    d->layout = layout;
    struct discovery *s = xcalloc(1, sizeof *s);
    s->d = d;
    for (size_t i = 0; i < sizeof lib_dirs / sizeof *lib_dirs; i++)
        discovery_add_dir(s, lib_dirs[i]);
    discovery_conf_dirs(s);
    discovery_libs(s);
    if (d->nlibs == 0) {
        err_set(e, "driver root %s: no NVIDIA driver %s libraries (looked for libcuda.so.%s "
                   "and the rest in /usr/lib/" ARCH_TRIPLET ", /usr/lib64 and %u more directories)%s%s",
                d->root, d->version, d->version, s->ndirs - 2, s->other[0] ? "; found version " : "",
                s->other);
        free(s);
        driver_free(d);
        return -1;
    }
    if (s->other[0])
        log_warn("driver root %s: libraries of driver %s beside %s's: only %s's are given to "
                 "containers", d->root, s->other, d->version, d->version);
    for (unsigned k = 0; k < DRIVER_NLIBS; k++)
        if (!s->found[k] && (!strcmp(driver_libs[k].name, "libcuda") ||
                             !strcmp(driver_libs[k].name, "libnvidia-ml")) &&
            (driver_libs[k].caps & caps))
            log_warn("driver root %s: %s.so.%s is missing: containers will lack it", d->root,
                     driver_libs[k].name, d->version);
    free(s);
    discovery_bins(d);
    discovery_firmware_sockets(d);
    /* Directory order is the file system's: sorted, the same tree gives the
     * same list, and a spec is rewritten only when something changed. */
    qsort(d->mounts, d->nmounts, sizeof *d->mounts, driver_mount_cmp);
    return 0;
}

int driver_find_library(const char *read_root, const char *name, char *out, size_t len)
{
    struct driver d;
    memset(&d, 0, sizeof d);
    snprintf(d.read_root, sizeof d.read_root, "%s", read_root);
    struct discovery *s = xcalloc(1, sizeof *s);
    s->d = &d;
    for (size_t i = 0; i < sizeof lib_dirs / sizeof *lib_dirs; i++)
        discovery_add_dir(s, lib_dirs[i]);
    discovery_conf_dirs(s);
    int rc = -1;
    for (unsigned i = 0; i < s->ndirs && rc < 0; i++) {
        char rel[2 * DRIVER_PATH_MAX], path[3 * DRIVER_PATH_MAX];
        snprintf(rel, sizeof rel, "%s/%s", s->dirs[i], name);
        driver_path(&d, path, sizeof path, rel);
        if (access(path, R_OK) == 0 && strlen(path) < len) {
            memcpy(out, path, strlen(path) + 1);
            rc = 0;
        }
    }
    free(s);
    return rc;
}

void driver_free(struct driver *d)
{
    free(d->mounts);
    d->mounts = NULL;
    d->nmounts = 0;
}

int driver_find_tool(const char *root, const char *name, char *out, size_t len, struct err *e)
{
    static const char *const dirs[] = {"/usr/bin", "/usr/local/nvidia/bin", "/usr/local/bin", "/bin"};
    const char *prefix = root && strcmp(root, "/") ? root : "";
    char tried[1024] = "";
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        snprintf(out, len, "%s%s/%s", prefix, dirs[i], name);
        if (access(out, X_OK) == 0)
            return 0;
        size_t used = strlen(tried);
        snprintf(tried + used, sizeof tried - used, "%s%s", used ? ", " : "", out);
    }
    return err_set(e, "%s not found (looked in %s)", name, tried);
}
