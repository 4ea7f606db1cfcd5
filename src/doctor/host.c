/* The host's side of the driver, read from files under the root (no NVML):
 * the kernel module and its version, the NVML library's version beside it,
 * the device nodes, nvidia-uvm, and XIDs in the kernel log. */
#include "doctor/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "driver/driver.h"
#include "gpu/health.h"
#include "gpu/procfs.h"
#include "util/strbuf.h"
#include "util/xmalloc.h"

#define HOST_KMSG_MAX (8u << 20)
#define HOST_XIDS 64
#define HOST_RECENT_S 3600.0     /* a critical XID this recent fails the check */

/* The first token of the form N.N[.N] on the line: the driver's version. */
static bool host_version_token(const char *line, char *out, size_t len)
{
    const char *p = line;
    while (*p && *p != '\n') {
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, " \t\n");
        bool dotted = n > 2 && n < len && p[0] >= '0' && p[0] <= '9' && memchr(p, '.', n);
        for (size_t i = 0; dotted && i < n; i++)
            dotted = (p[i] >= '0' && p[i] <= '9') || p[i] == '.';
        if (dotted) {
            memcpy(out, p, n);
            out[n] = '\0';
            return true;
        }
        p += n;
    }
    return false;
}

void doctor_kernel_module(struct doctor *d, struct doctor_result *r)
{
    char path[CONFIG_PATH_MAX * 2];
    doctor_path(d, path, sizeof path, "/proc/driver/nvidia/version", NULL);
    char *text = doctor_read(path, 4096, NULL);
    if (!text && errno == ENOENT) {
        doctor_set(r, DOCTOR_FAIL, "load it: modprobe nvidia (install the NVIDIA driver if it "
                   "is missing)", "the NVIDIA kernel module is not loaded (no %s)", path);
        return;
    }
    if (!text) {
        doctor_set(r, DOCTOR_FAIL, "run as root, or give --root the host's filesystem",
                   "cannot read %s: %s", path, strerror(errno));
        return;
    }
    const char *mod = strstr(text, "Kernel Module");
    char version[sizeof d->kernel_version];
    if (!mod || !host_version_token(mod + strlen("Kernel Module"), version, sizeof version)) {
        doctor_set(r, DOCTOR_FAIL, "reinstall the driver", "%s names no driver version: '%.80s'",
                   path, text);
        free(text);
        return;
    }
    snprintf(d->kernel_version, sizeof d->kernel_version, "%s", version);
    doctor_set(r, DOCTOR_PASS, NULL, "NVIDIA %skernel module %s is loaded",
               strstr(text, "Open Kernel Module") ? "open " : "", version);
    free(text);
}

/* The version in the name a library file or its link target has:
 * libnvidia-ml.so.580.159.04. */
static bool host_lib_version(const char *path, char *out, size_t len)
{
    char target[CONFIG_PATH_MAX * 3];
    ssize_t n = readlink(path, target, sizeof target - 1);
    const char *name = path;
    if (n > 0) {
        target[n] = '\0';
        name = target;
    }
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *so = strstr(base, ".so.");
    if (so && host_version_token(so + 4, out, len) && strcmp(out, "1"))
        return true;
    /* Not a link to a versioned file: the versioned file beside it. */
    char dir[CONFIG_PATH_MAX * 3];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return false;
    *slash = '\0';
    DIR *dd = opendir(dir);
    bool found = false;
    for (struct dirent *e; dd && !found && (e = readdir(dd));)
        if (!strncmp(e->d_name, "libnvidia-ml.so.", 16) && strcmp(e->d_name, "libnvidia-ml.so.1"))
            found = host_version_token(e->d_name + 16, out, len);
    if (dd)
        closedir(dd);
    return found;
}

void doctor_library(struct doctor *d, struct doctor_result *r)
{
    const struct config *c = d->o->cfg;
    char read_root[CONFIG_PATH_MAX * 2], lib[CONFIG_PATH_MAX * 3], version[64];
    doctor_path(d, read_root, sizeof read_root, c->driver_root, NULL);
    if (driver_find_library(read_root, "libnvidia-ml.so.1", lib, sizeof lib) < 0) {
        doctor_set(r, DOCTOR_FAIL, "install the driver's user-space libraries, of the kernel "
                   "module's version", "libnvidia-ml.so.1 is not in the linker's directories "
                   "under %s", read_root);
        return;
    }
    if (!host_lib_version(lib, version, sizeof version)) {
        doctor_set(r, DOCTOR_WARN, "reinstall the driver", "cannot tell the version of %s", lib);
        return;
    }
    if (!d->kernel_version[0]) {
        doctor_set(r, DOCTOR_SKIP, NULL, "libnvidia-ml %s at %s; no kernel module to compare",
                   version, lib);
        return;
    }
    if (strcmp(version, d->kernel_version)) {
        doctor_set(r, DOCTOR_FAIL, "reboot the node (or unload and reload the nvidia modules) so "
                   "that the module is the installed driver's",
                   "driver/library version mismatch: kernel module %s, libnvidia-ml %s (%s)",
                   d->kernel_version, version, lib);
        return;
    }
    doctor_set(r, DOCTOR_PASS, NULL, "libnvidia-ml %s, the module's version (%s)", version, lib);
}

/* The majors of /proc/devices' "nvidia-frontend" (or "nvidia") and
 * "nvidia-uvm" character devices. */
static void host_majors(struct doctor *d)
{
    char path[CONFIG_PATH_MAX * 2];
    doctor_path(d, path, sizeof path, "/proc/devices", NULL);
    char *text = doctor_read(path, 65536, NULL);
    if (!text)
        return;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "Block devices", 13))
            break;
        unsigned major;
        char name[64];
        if (sscanf(line, " %u %63s", &major, name) != 2)
            continue;
        if (!strcmp(name, "nvidia-frontend") || (!strcmp(name, "nvidia") && !d->nvidia_major))
            d->nvidia_major = major;
        else if (!strcmp(name, "nvidia-uvm"))
            d->uvm_major = major;
    }
    free(text);
}

struct host_node {
    char name[32];
    unsigned major, minor;
    bool optional;                   /* a missing one warns */
};

/* One node: "" when right, else what is wrong; *mode_only when only its
 * mode is (a warning). */
static void host_node_check(const char *path, const struct host_node *n, char *out, size_t len,
                            bool *mode_only)
{
    struct stat st;
    *mode_only = false;
    out[0] = '\0';
    if (stat(path, &st) < 0)
        snprintf(out, len, "%s: %s", n->name, errno == ENOENT ? "missing" : strerror(errno));
    else if (!S_ISCHR(st.st_mode))
        snprintf(out, len, "%s: not a character device", n->name);
    else if (n->major && (major(st.st_rdev) != n->major || minor(st.st_rdev) != n->minor))
        snprintf(out, len, "%s: c %u:%u, not c %u:%u", n->name, major(st.st_rdev),
                 minor(st.st_rdev), n->major, n->minor);
    else if ((st.st_mode & 0666) != 0666 && !n->optional && (*mode_only = true))
        snprintf(out, len, "%s: mode %03o, not 666", n->name, (unsigned)(st.st_mode & 0777));
}

void doctor_device_nodes(struct doctor *d, struct doctor_result *r)
{
    host_majors(d);
    char proc[CONFIG_PATH_MAX * 2];
    doctor_path(d, proc, sizeof proc, "/proc", NULL);
    struct gpu_inventory inv = {0};
    struct err e;
    if (gpu_procfs_read(proc, &inv, &e) < 0) {
        doctor_set(r, d->kernel_version[0] ? DOCTOR_FAIL : DOCTOR_SKIP,
                   "check the kernel module; run as root", "the driver lists no GPUs: %s", e.msg);
        return;
    }
    struct host_node *nodes = xcalloc(inv.count + 3, sizeof *nodes);
    unsigned count = 0;
    nodes[count++] = (struct host_node){"nvidiactl", d->nvidia_major, 255, false};
    for (unsigned i = 0; i < inv.count; i++) {
        struct host_node *n = &nodes[count++];
        snprintf(n->name, sizeof n->name, "nvidia%u", inv.gpus[i].minor);
        n->major = d->nvidia_major;
        n->minor = inv.gpus[i].minor;
    }
    if (d->uvm_major) {
        nodes[count++] = (struct host_node){"nvidia-uvm", d->uvm_major, 0, false};
        nodes[count++] = (struct host_node){"nvidia-uvm-tools", d->uvm_major, 1, true};
    }
    struct strbuf bad = {0};
    bool fail = false;
    for (unsigned k = 0; k < count; k++) {
        char path[CONFIG_PATH_MAX * 3], rest[48], what[160];
        bool mode_only;
        snprintf(rest, sizeof rest, "/dev/%s", nodes[k].name);
        doctor_path(d, path, sizeof path, d->o->cfg->dev_root, rest);
        host_node_check(path, &nodes[k], what, sizeof what, &mode_only);
        if (what[0]) {
            strbuf_printf(&bad, "%s%s", bad.len ? "; " : "", what);
            fail = fail || (!mode_only && !nodes[k].optional);
        }
    }
    char dev[CONFIG_PATH_MAX * 2];
    doctor_path(d, dev, sizeof dev, d->o->cfg->dev_root, "/dev");
    if (!bad.len)
        doctor_set(r, DOCTOR_PASS, NULL, "%u nodes in %s for %u GPU(s), nvidia major %u, "
                   "nvidia-uvm major %u", count, dev, inv.count, d->nvidia_major, d->uvm_major);
    else if (fail)
        doctor_set(r, DOCTOR_FAIL, "make them: nvidia-modprobe -c0 -u (or mknod -m 666 "
                   "/dev/nvidiaN c 195 N), or check --nvidia-dev-root", "in %s: %s", dev, bad.data);
    else
        doctor_set(r, DOCTOR_WARN, "the driver's default is 666 (NVreg_DeviceFileMode): "
                   "containers of other users cannot open them otherwise", "in %s: %s", dev,
                   bad.data);
    strbuf_free(&bad);
    free(nodes);
    gpu_inventory_free(&inv);
}

void doctor_uvm(struct doctor *d, struct doctor_result *r)
{
    char path[CONFIG_PATH_MAX * 2];
    doctor_path(d, path, sizeof path, "/sys/module/nvidia_uvm", NULL);
    if (d->uvm_major)
        doctor_set(r, DOCTOR_PASS, NULL, "nvidia-uvm is loaded (major %u)", d->uvm_major);
    else if (access(path, F_OK) == 0)
        doctor_set(r, DOCTOR_PASS, NULL, "nvidia-uvm is loaded (%s)", path);
    else
        doctor_set(r, DOCTOR_FAIL, "modprobe nvidia-uvm (nvidia-modprobe -u -c0 also makes its "
                   "device nodes)", "nvidia-uvm is not loaded: CUDA programs cannot run");
}

/* --- the kernel log --------------------------------------------------------------- */

/* All of /dev/kmsg that is buffered (one record a read; a plain file in a
 * test root reads in chunks); NULL with errno when it cannot be opened. */
static char *host_kmsg(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct strbuf buf = {0};
    char rec[8192];
    while (buf.len < HOST_KMSG_MAX) {
        ssize_t n = read(fd, rec, sizeof rec);
        if (n > 0) {
            strbuf_append(&buf, rec, (size_t)n);
            if (rec[n - 1] != '\n')
                strbuf_puts(&buf, "\n");
        } else if (n < 0 && errno == EPIPE) {
            continue; /* records overwritten while reading: go on with the next */
        } else {
            break;    /* EAGAIN: all read; 0: end of a file */
        }
    }
    close(fd);
    if (!buf.data)
        strbuf_append(&buf, "", 0);
    *len = buf.len;
    return buf.data;
}

static double host_uptime(const struct doctor *d)
{
    char path[CONFIG_PATH_MAX * 2];
    doctor_path(d, path, sizeof path, "/proc/uptime", NULL);
    char *text = doctor_read(path, 128, NULL);
    double up = text ? strtod(text, NULL) : -1;
    free(text);
    return up;
}

/* "GPU 3 (0000:18:00)" where NVML knows the bus, else the bus alone. NVRM
 * writes domain:bus:device, NVML 00000000:18:00.0: compared as numbers. */
static void host_gpu_name(const struct doctor *d, const char *pci, char *out, size_t len)
{
    unsigned dom, bus, dev, g_dom, g_bus, g_dev, fn;
    bool ok = sscanf(pci, "%x:%x:%x", &dom, &bus, &dev) == 3;
    for (unsigned i = 0; ok && d->nvml_ok && i < d->inv.count; i++) {
        if (sscanf(d->inv.gpus[i].pci_bus_id, "%x:%x:%x.%x", &g_dom, &g_bus, &g_dev, &fn) == 4 &&
            g_dom == dom && g_bus == bus && g_dev == dev) {
            snprintf(out, len, "GPU %u (%s)", i, pci);
            return;
        }
    }
    snprintf(out, len, "%s", pci);
}

void doctor_kernel_log(struct doctor *d, struct doctor_result *r)
{
    char path[CONFIG_PATH_MAX * 2];
    doctor_path(d, path, sizeof path, "/dev/kmsg", NULL);
    size_t len;
    char *text = host_kmsg(path, &len);
    if (!text) {
        doctor_set(r, DOCTOR_SKIP, NULL, "cannot read the kernel log %s (%s): run as root to see "
                   "XIDs", path, strerror(errno));
        return;
    }
    struct doctor_xid xids[HOST_XIDS];
    unsigned found = doctor_kmsg_xids(text, len, xids, HOST_XIDS);
    free(text);
    if (!found) {
        doctor_set(r, DOCTOR_PASS, NULL, "no XIDs in the kernel log");
        return;
    }
    struct health_policy policy;
    struct err e;
    gpu_health_policy_init(&policy, NULL, NULL, &e);
    double up = host_uptime(d);
    unsigned kept = found < HOST_XIDS ? found : HOST_XIDS;
    enum doctor_status worst = DOCTOR_PASS;
    struct strbuf msg = {0};
    strbuf_printf(&msg, "%u XID(s); the latest:", found);
    for (unsigned k = kept, shown = 0; k-- > 0 && shown < 5; shown++) {
        const struct doctor_xid *x = &xids[k];
        bool fatal = gpu_health_xid_fatal(&policy, x->xid);
        double age = up >= x->seconds ? up - x->seconds : -1;
        enum doctor_status s = !fatal ? DOCTOR_PASS
                               : age >= 0 && age > HOST_RECENT_S ? DOCTOR_WARN : DOCTOR_FAIL;
        if (s > worst)
            worst = s;
        char gpu[64];
        host_gpu_name(d, x->pci, gpu, sizeof gpu);
        strbuf_printf(&msg, "%s XID %u on %s", shown ? ";" : "", x->xid, gpu);
        if (age >= 0)
            strbuf_printf(&msg, " %.0f min ago", age / 60);
        if (!fatal)
            strbuf_puts(&msg, " (an application's fault)");
    }
    doctor_set(r, worst, worst == DOCTOR_PASS ? NULL :
               "XID 79 (off the bus), 48/63/64/94/95 (memory), 74 (NVLink): drain the node, then "
               "reset the GPU (nvidia-smi -r -i N) or reboot; docs/health.md lists them",
               "%s", msg.data);
    strbuf_free(&msg);
}
