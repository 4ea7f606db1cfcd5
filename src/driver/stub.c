/* A stand-in driver tree for tests (`gpulet sim driver-root DIR`): the
 * shape of a real installation under a driver root, as the loader sees it,
 * with tiny files in place of the driver's. Libraries are minimal ELF
 * objects carrying their real sonames and NVIDIA's DT_NEEDED entries,
 * with the soname links an installer makes; NVML is the simulator itself
 * (which names the same libraries), so an agent pointed at the tree loads
 * it as it would a node's driver; binaries are shell scripts that say what
 * they stand for. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/driver.h"
#include "gpu/inventory.h"
#include "util/arch.h"
#include "util/dirs.h"
#include "util/strbuf.h"

/* The libraries a compute node's driver has, with their sonames. */
static const struct {
    const char *name, *soname;
} stub_libs[] = {
    {"libcuda", "libcuda.so.1"},
    {"libnvidia-ml", "libnvidia-ml.so.1"},
    {"libnvidia-ptxjitcompiler", "libnvidia-ptxjitcompiler.so.1"},
    {"libnvidia-nvvm", "libnvidia-nvvm.so.4"},
    {"libnvidia-gpucomp", "libnvidia-gpucomp.so.1"},
    {"libnvidia-allocator", "libnvidia-allocator.so.1"},
    {"libnvidia-cfg", "libnvidia-cfg.so.1"},
    {"libcudadebugger", "libcudadebugger.so.1"},
    {"libnvidia-opencl", "libnvidia-opencl.so.1"},
    {"libnvidia-encode", "libnvidia-encode.so.1"},
    {"libnvcuvid", "libnvcuvid.so.1"},
};
/* What NVIDIA's libraries name besides libc (DT_NEEDED of driver 580's
 * libcuda.so.1 and libnvidia-ml.so.1): a container or image without them
 * cannot load the driver, and neither can one with this tree. */
static const char *const stub_needed[] = {"libpthread.so.0", "libm.so.6", "libdl.so.2",
                                          "librt.so.1", "libc.so.6", NULL};
static const char *const stub_bins[] = {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced",
                                        "nvidia-cuda-mps-control", "nvidia-cuda-mps-server",
                                        "gpulet-mps-client"};
/* The stand-in nvidia-smi models the one setting gpulet changes through
 * it: `compute-policy -i GPU --set-timeslice N` (a DRA claim's TimeSlicing
 * interval) records N in var/lib/gpulet-sim/timeslice/<GPU> of the root.
 * A test makes it hang as on a GPU that stopped answering: while
 * timeslice/hold-<GPU> exists it waits (saying so in running-<GPU>). */
static const char stub_smi[] =
    "if [ \"$1\" = compute-policy ]; then\n"
    "    gpu= ts=\n"
    "    shift\n"
    "    while [ $# -gt 0 ]; do\n"
    "        case $1 in -i) gpu=$2; shift ;; --set-timeslice) ts=$2; shift ;; esac\n"
    "        shift\n"
    "    done\n"
    "    case $ts in 0|1|2|3) ;; *) echo \"Invalid time slice '$ts' (0-3)\" >&2; exit 2 ;; esac\n"
    "    [ -n \"$gpu\" ] || { echo \"compute-policy needs -i GPU\" >&2; exit 2; }\n"
    "    dir=$(dirname \"$0\")/../../var/lib/gpulet-sim/timeslice\n"
    "    if [ -e \"$dir/hold-$gpu\" ]; then\n"
    "        : >\"$dir/running-$gpu\"\n"
    "        while [ -e \"$dir/hold-$gpu\" ]; do sleep 0.05; done\n"
    "    fi\n"
    "    mkdir -p \"$dir\" && echo \"$ts\" >\"$dir/$gpu\" || exit 1\n"
    "    echo \"Set the time slice of GPU $gpu to $ts\"\n"
    "    exit 0\n"
    "fi\n";

/* The stand-in nvidia-cuda-mps-control keeps the real one's contract as
 * tests/realgpu/mps_contract.py observed it on an H200 (its record,
 * tests/realgpu/data/mps-control-580.json, holds this to it): -f (or -d, in
 * the background) is the control daemon, which writes its pid file in
 * CUDA_MPS_PIPE_DIRECTORY, refuses to start where one runs already (one
 * holds control_lock there: "An instance of this daemon is already
 * running", exit 1) and runs until quit or a signal; without arguments it is
 * the client, which takes commands on stdin (logged in
 * CUDA_MPS_LOG_DIRECTORY/commands.log), keeps the set_default_* limits in
 * the pipe directory, answers get_default_*, and fails as the real one does
 * when no daemon runs. quit, while MPS clients are active, does not return:
 * the daemon says again and again that its "Server ... will not shutdown"
 * and ends, and quit with it, once they have all gone (a client is active
 * while its file in clients/ is under 5 s old: a loaded machine's shells
 * stall for seconds, and a killed client leaves its file).
 *
 * Its clients are gpulet-mps-client (below), which work until their daemon
 * goes and then fail loudly, as a CUDA client does: the daemon's identity
 * (instance) and heartbeat are files of the pipe directory, so a client in
 * a container (another PID namespace) sees them too. */
static const char stub_mps[] =
    "pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}\n"
    "log=${CUDA_MPS_LOG_DIRECTORY:-/var/log/nvidia-mps}\n"
    "pid=$pipe/nvidia-cuda-mps-control.pid\n"
    "case $1 in\n"
    "-d) \"$0\" -f </dev/null >/dev/null 2>&1 & exit 0 ;;\n"
    "-f)\n"
    "    mkdir -p \"$pipe/clients\" \"$log\" || exit 1\n"
    "    exec 9>>\"$pipe/control_lock\"\n"
    "    flock -n 9 || { echo \"An instance of this daemon is already running\"; exit 1; }\n"
    "    echo $$ >\"$pid\" && echo \"$$-$(date +%s%N)\" >\"$pipe/instance\" || exit 1\n"
    "    echo \"start pid=$$ CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\" >>\"$log/control.log\"\n"
    "    trap 'rm -f \"$pid\" \"$pipe/instance\"; echo quit >>\"$log/control.log\"; exit 0' TERM INT\n"
    "    while :; do : >\"$pipe/heartbeat\"; sleep 1 9>&- & wait $!; done ;;\n"
    "esac\n"
    "up() { ! flock -n \"$pipe/control_lock\" true 2>/dev/null; }\n"
    "same() { [ \"$(cat \"$pid\" 2>/dev/null)\" = \"$daemon\" ] && up; } # the daemon asked, not a later one\n"
    "daemon=$(cat \"$pid\" 2>/dev/null) && up ||\n"
    "    { echo \"Cannot find MPS control daemon process\" >&2; exit 1; }\n"
    "while read -r cmd arg1 arg2; do\n"
    "    echo \"$cmd${arg1:+ $arg1}${arg2:+ $arg2}\" >>\"$log/commands.log\"\n"
    "    case $cmd in\n"
    "    set_default_active_thread_percentage) echo \"$arg1\" >\"$pipe/threads\"; echo \"$arg1.0\" ;;\n"
    "    get_default_active_thread_percentage) echo \"$(cat \"$pipe/threads\" 2>/dev/null || echo 100).0\" ;;\n"
    "    set_default_device_pinned_mem_limit) echo \"$arg2\" >\"$pipe/pinned.$arg1\" ;;\n"
    "    get_default_device_pinned_mem_limit) cat \"$pipe/pinned.$arg1\" 2>/dev/null || echo 0 ;;\n"
    "    quit)\n"
    "        while same; do\n"
    "            n=0 now=$(date +%s)\n"
    "            for c in \"$pipe\"/clients/*; do\n"
    "                [ -e \"$c\" ] && [ $((now - $(stat -c %Y \"$c\"))) -le 5 ] && n=$((n + 1))\n"
    "            done\n"
    "            [ $n -eq 0 ] && { kill -TERM \"$daemon\"; sleep 0.1; continue; }\n"
    "            echo \"Server $daemon has $n active worker threads. Server will not shutdown.\" >>\"$log/control.log\"\n"
    "            sleep 0.5\n"
    "        done ;;\n"
    "    *) echo \"Unknown command $cmd\" ;;\n"
    "    esac\n"
    "done\n"
    "exit 0\n";

/* An MPS client stand-in: binds to the daemon of CUDA_MPS_PIPE_DIRECTORY
 * and works (for $1 seconds, or until stopped), showing it is alive in
 * clients/ of the pipe directory; once its daemon is gone (another
 * instance, or no heartbeat for 3 s) it fails at once and for good, as a
 * CUDA client does with CUDA_ERROR_MPS_RPC_FAILURE. Busybox runs it. */
static const char stub_mps_client[] =
    "pipe=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/nvidia-mps}\n"
    "inst=$(cat \"$pipe/instance\" 2>/dev/null) ||\n"
    "    { echo \"CUDA_ERROR_MPS_CONNECTION_FAILED (805): no MPS daemon at $pipe\" >&2; exit 1; }\n"
    "me=\"$pipe/clients/$(hostname)-$$\"\n"
    "trap 'rm -f \"$me\"; exit 0' TERM INT\n"
    ": >\"$me\"  # active from the moment it says it is bound, as a CUDA client is\n"
    "echo \"MPS client $$ bound to daemon $inst\"\n"
    "end=$(($(date +%s) + ${1:-999999999}))\n"
    "while [ \"$(date +%s)\" -lt \"$end\" ]; do\n"
    "    : >\"$me\"\n"
    "    beat=$(stat -c %Y \"$pipe/heartbeat\" 2>/dev/null || echo 0)\n"
    "    if [ \"$(cat \"$pipe/instance\" 2>/dev/null)\" != \"$inst\" ] || [ $(($(date +%s) - beat)) -gt 3 ]; then\n"
    "        echo \"CUDA_ERROR_MPS_RPC_FAILURE (806): the MPS server of daemon $inst went away\" >&2\n"
    "        rm -f \"$me\"\n"
    "        exit 1\n"
    "    fi\n"
    "    sleep 0.2\n"
    "done\n"
    "rm -f \"$me\"\n"
    "exit 0\n";

/* The stand-in programs that do more than say what they stand for. */
static const struct {
    const char *name, *body;
} stub_bodies[] = {
    {"nvidia-smi", stub_smi},
    {"nvidia-cuda-mps-control", stub_mps},
    {"gpulet-mps-client", stub_mps_client},
};

static const char *stub_body(const char *name)
{
    for (size_t i = 0; i < sizeof stub_bodies / sizeof *stub_bodies; i++)
        if (!strcmp(stub_bodies[i].name, name))
            return stub_bodies[i].body;
    return "";
}

static const char *const stub_firmware[] = {"gsp_ga10x.bin", "gsp_tu10x.bin"};

static int stub_mkdirs(const char *root, const char *rel, char *out, size_t len, struct err *e)
{
    snprintf(out, len, "%s/%s", root, rel);
    return dirs_make(NULL, out, 0755, e);
}

static int stub_link(const char *dir, const char *target, const char *name, struct err *e)
{
    char path[DRIVER_PATH_MAX * 2];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
    return symlink(target, path) == 0 ? 0 : err_set(e, "cannot link %s: %m", path);
}

/* path becomes a copy of from (the simulator, as the tree's NVML). */
static int stub_copy(const char *from, const char *path, struct err *e)
{
    FILE *in = fopen(from, "rb");
    if (!in)
        return err_set(e, "cannot read %s: %m", from);
    FILE *out = fopen(path, "wb");
    if (!out) {
        fclose(in);
        return err_set(e, "cannot write %s: %m", path);
    }
    char buf[65536];
    size_t n;
    bool ok = true;
    while (ok && (n = fread(buf, 1, sizeof buf, in)) > 0)
        ok = fwrite(buf, 1, n, out) == n;
    ok = ok && !ferror(in);
    fclose(in);
    if (fclose(out) != 0 || !ok || chmod(path, 0755) != 0)
        return err_set(e, "cannot copy %s to %s: %m", from, path);
    return 0;
}

static int stub_text(const char *path, const char *text, mode_t mode, struct err *e)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return err_set(e, "cannot write %s: %m", path);
    fputs(text, f);
    if (fclose(f) != 0 || chmod(path, mode) != 0)
        return err_set(e, "cannot write %s: %m", path);
    return 0;
}

/* proc/driver/nvidia-caps/mig-minors: the driver's numbering of the MIG
 * capability device minors (gpu_mig_cap_minor reads it), for 8 GPUs. */
static int stub_mig_minors(const char *root, struct err *e)
{
    char dir[DRIVER_PATH_MAX], path[DRIVER_PATH_MAX * 2];
    if (stub_mkdirs(root, "proc/driver/nvidia-caps", dir, sizeof dir, e) < 0)
        return -1;
    struct strbuf text = {0};
    strbuf_puts(&text, "config 1\nmonitor 2\n");
    for (unsigned gpu = 0; gpu < 8; gpu++)
        for (unsigned gi = 0; gi < 15; gi++) {
            unsigned base = gpu_mig_cap_numbering(gpu, gi, -1);
            strbuf_printf(&text, "gpu%u/gi%u/access %u\n", gpu, gi, base);
            for (int ci = 0; ci < 8; ci++)
                strbuf_printf(&text, "gpu%u/gi%u/ci%d/access %u\n", gpu, gi, ci,
                              gpu_mig_cap_numbering(gpu, gi, ci));
        }
    snprintf(path, sizeof path, "%s/mig-minors", dir);
    int rc = stub_text(path, text.data, 0644, e);
    strbuf_free(&text);
    return rc;
}

int driver_write_stub_tree(const char *root, const char *version, const char *nvml_lib,
                           struct err *e)
{
    char dir[DRIVER_PATH_MAX], path[DRIVER_PATH_MAX * 2], file[128];
    if (dirs_make(NULL, root, 0755, e) < 0)
        return -1;
    if (stub_mkdirs(root, "usr/lib/" ARCH_TRIPLET, dir, sizeof dir, e) < 0)
        return -1;
    for (size_t i = 0; i < sizeof stub_libs / sizeof *stub_libs; i++) {
        snprintf(file, sizeof file, "%s.so.%s", stub_libs[i].name, version);
        snprintf(path, sizeof path, "%s/%s", dir, file);
        bool nvml = nvml_lib && !strcmp(stub_libs[i].name, "libnvidia-ml");
        if ((nvml ? stub_copy(nvml_lib, path, e)
                  : driver_write_stub_elf(path, stub_libs[i].soname, stub_needed, e)) < 0 ||
            stub_link(dir, file, stub_libs[i].soname, e) < 0)
            return -1;
    }
    if (stub_link(dir, "libcuda.so.1", "libcuda.so", e) < 0 ||
        stub_mkdirs(root, "usr/bin", dir, sizeof dir, e) < 0)
        return -1;
    for (size_t i = 0; i < sizeof stub_bins / sizeof *stub_bins; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, stub_bins[i]);
        struct strbuf script = {0};
        strbuf_printf(&script, "#!/bin/sh\n%secho \"gpulet stand-in %s %s\"\n",
                      stub_body(stub_bins[i]), stub_bins[i], version);
        int rc = stub_text(path, script.data, 0755, e);
        strbuf_free(&script);
        if (rc < 0)
            return -1;
    }
    snprintf(file, sizeof file, "lib/firmware/nvidia/%s", version);
    if (stub_mkdirs(root, file, dir, sizeof dir, e) < 0)
        return -1;
    for (size_t i = 0; i < sizeof stub_firmware / sizeof *stub_firmware; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, stub_firmware[i]);
        if (stub_text(path, "gpulet stand-in firmware\n", 0644, e) < 0)
            return -1;
    }
    return stub_mig_minors(root, e);
}
