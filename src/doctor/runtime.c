/* The container runtime's setup for the device list strategy, and the CDI
 * spec gpulet writes for it. */
#include "doctor/internal.h"

#include "metrics/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cdi/cdi.h"
#include "driver/driver.h"
#include "util/strbuf.h"
#include "util/xmalloc.h"

/* --- the container runtime -------------------------------------------------------- */

/* The value of key in TOML text, the last one set (quotes taken off); a
 * line scan, which is enough for the few flat keys asked for here. */
static bool runtime_toml(const char *text, const char *key, char *out, size_t len)
{
    bool found = false;
    size_t k = strlen(key);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, key, k) || (p[k] != ' ' && p[k] != '='))
            continue;
        const char *v = p + k;
        while (*v == ' ' || *v == '\t')
            v++;
        if (*v++ != '=')
            continue;
        while (*v == ' ' || *v == '\t' || *v == '"' || *v == '\'')
            v++;
        size_t n = strcspn(v, "\"'\n #");
        snprintf(out, len, "%.*s", (int)n, v);
        found = true;
    }
    return found;
}

/* A runtime's configuration: the main file and its drop-in directory,
 * read as one text (later files win, as their imports do). */
static char *runtime_config(struct doctor *d, const char *file, const char *dropins,
                                 char *where, size_t wlen)
{
    char path[CONFIG_PATH_MAX * 2];
    struct strbuf all = {0};
    doctor_path(d, path, sizeof path, file, NULL);
    char *text = doctor_read(path, 1 << 20, NULL);
    if (text) {
        strbuf_printf(&all, "%s\n", text);
        snprintf(where, wlen, "%s", path);
        free(text);
    }
    doctor_path(d, path, sizeof path, dropins, NULL);
    struct dirent **names;
    int n = scandir(path, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        char f[CONFIG_PATH_MAX * 3];
        snprintf(f, sizeof f, "%s/%s", path, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && (text = doctor_read(f, 1 << 20, NULL))) {
            strbuf_printf(&all, "%s\n", text);
            if (!where[0])
                snprintf(where, wlen, "%s", f);
            free(text);
        }
        free(names[i]);
    }
    if (n >= 0)
        free(names);
    return all.data;
}

void doctor_runtime(struct doctor *d, struct doctor_result *r)
{
    unsigned s = d->o->cfg->list_strategy;
    bool need_runtime = s & (CONFIG_LIST_ENVVAR | CONFIG_LIST_VOLUME_MOUNTS);
    bool need_cdi = s & (CONFIG_LIST_CDI_ANNOTATIONS | CONFIG_LIST_CDI_CRI);
    if (!need_runtime && !need_cdi) {
        doctor_set(r, DOCTOR_PASS, NULL, "driver-mounts: the runtime needs no NVIDIA setup");
        return;
    }
    char cwhere[CONFIG_PATH_MAX * 3] = "", owhere[CONFIG_PATH_MAX * 3] = "";
    char *containerd = runtime_config(d, "/etc/containerd/config.toml",
                                           "/etc/containerd/conf.d", cwhere, sizeof cwhere);
    char *crio = runtime_config(d, "/etc/crio/crio.conf", "/etc/crio/crio.conf.d", owhere,
                                     sizeof owhere);
    char v[64];
    const char *fix_runtime = "make the NVIDIA runtime the default (nvidia-ctk runtime configure "
                              "--set-as-default, then restart the runtime), or use "
                              "--device-list-strategy cdi-cri or driver-mounts, which need none";
    if (!containerd && !crio) {
        doctor_set(r, DOCTOR_WARN, "check --root; gpulet reads /etc/containerd and /etc/crio",
                   "no containerd or CRI-O configuration found under %s", d->o->root);
    } else if (containerd) {
        bool nvidia = runtime_toml(containerd, "default_runtime_name", v, sizeof v) && !strcmp(v, "nvidia");
        char def[64];
        snprintf(def, sizeof def, "%s", runtime_toml(containerd, "default_runtime_name", v, sizeof v) ? v : "runc");
        /* containerd 2 (config version 3) has CDI on unless turned off. */
        bool v3 = runtime_toml(containerd, "version", v, sizeof v) && atoi(v) >= 3;
        bool cdi = runtime_toml(containerd, "enable_cdi", v, sizeof v) ? !strcmp(v, "true") : v3;
        if (need_runtime && !nvidia)
            doctor_set(r, DOCTOR_FAIL, fix_runtime, "containerd's default runtime is %s, not "
                       "nvidia: containers get no GPU with the %s strategy (%s)", def,
                       s & CONFIG_LIST_ENVVAR ? "envvar" : "volume-mounts", cwhere);
        else if (need_cdi && !cdi)
            doctor_set(r, DOCTOR_FAIL, "set enable_cdi = true in the CRI plugin's section of "
                       "/etc/containerd/config.toml (containerd 1.7 or later) and restart it",
                       "containerd has CDI off: the cdi-* strategies give containers no GPU (%s)",
                       cwhere);
        else
            doctor_set(r, DOCTOR_PASS, NULL, "containerd: %s (%s)",
                       need_runtime ? "the NVIDIA runtime is the default" : "CDI is on", cwhere);
    } else {
        bool nvidia = runtime_toml(crio, "default_runtime", v, sizeof v) && !strcmp(v, "nvidia");
        if (need_runtime && !nvidia)
            doctor_set(r, DOCTOR_FAIL, fix_runtime, "CRI-O's default runtime is not nvidia: "
                       "containers get no GPU with this strategy (%s)", owhere);
        else
            doctor_set(r, DOCTOR_PASS, NULL, "CRI-O: %s (%s)",
                       need_runtime ? "the NVIDIA runtime is the default" : "CDI is on by default",
                       owhere);
    }
    free(containerd);
    free(crio);
}

void doctor_cdi(struct doctor *d, struct doctor_result *r)
{
    const struct config *c = d->o->cfg;
    if (!config_cdi_wanted(c)) {
        doctor_set(r, DOCTOR_SKIP, NULL, "the device list strategy uses no CDI spec");
        return;
    }
    char path[CONFIG_PATH_MAX * 2];
    doctor_path(d, path, sizeof path, c->cdi_spec_dir, "/" CDI_SPEC_FILE);
    size_t len;
    char *have = doctor_read(path, 4 << 20, &len);
    if (!have) {
        doctor_set(r, DOCTOR_FAIL, "gpulet writes it when it starts with a cdi-* strategy; or: "
                   "gpulet cdi generate -o /var/run/cdi/" CDI_SPEC_FILE, "no CDI spec: %s: %s",
                   path, strerror(errno));
        return;
    }
    if (!d->nvml_ok || d->nvml_stuck || !d->inv.count) {
        doctor_set(r, DOCTOR_PASS, NULL, "%s exists (not compared: NVML gave no GPUs)", path);
        free(have);
        return;
    }
    char read_root[CONFIG_PATH_MAX * 2];
    doctor_path(d, read_root, sizeof read_root, c->driver_root, NULL);
    struct driver drv;
    struct strbuf want = {0};
    struct err e;
    doctor_step(d, "generating the CDI spec to compare");
    if (config_driver(c, read_root, d->inv.driver_version, &drv, &e) < 0) {
        doctor_set(r, DOCTOR_WARN, "see the driver library check", "%s exists; cannot tell if "
                   "it is current: %s", path, e.msg);
    } else {
        /* Generated as gpulet in its pod does: host names, read under the root. */
        struct config *in_pod = xmalloc(sizeof *in_pod);
        *in_pod = *c;
        snprintf(in_pod->container_driver_root, sizeof in_pod->container_driver_root, "%.*s",
                 (int)sizeof in_pod->container_driver_root - 1, read_root);
        int rc = cdi_spec_text(&d->inv, &drv, in_pod, false, &want, &e);
        free(in_pod);
        if (rc < 0)
            doctor_set(r, DOCTOR_WARN, NULL, "%s exists; cannot tell if it is current: %s", path,
                       e.msg);
        else if (want.len != len || memcmp(want.data, have, len))
            doctor_set(r, DOCTOR_WARN, "restart gpulet, which writes it at start, or run gpulet "
                       "cdi generate -o " "/var/run/cdi/" CDI_SPEC_FILE, "%s is stale: it differs "
                       "from what this node's GPUs and driver give (a driver upgrade, or a GPU "
                       "change)", path);
        else
            doctor_set(r, DOCTOR_PASS, NULL, "%s is current (%u GPUs, driver %s)", path,
                       d->inv.count, d->inv.driver_version);
        driver_free(&drv);
    }
    strbuf_free(&want);
    free(have);
}

/* libmicrohttpd is linked in; TLS (a web config's tls_server_config) needs
 * the host's GnuTLS at run time, the one library /metrics may lack. */
void doctor_metrics(struct doctor *d, struct doctor_result *r)
{
    struct err e;
    struct metrics_files files;
    const struct config *c = d->o->cfg;
    if (c->no_metrics)
        doctor_set(r, DOCTOR_SKIP, NULL, "--no-metrics: gpulet serves no /metrics");
    else if (metrics_read_files(c, &files, &e) < 0) /* what the agent checks before it serves */
        doctor_set(r, DOCTOR_FAIL, "fix the web config or the collectors file, or install GnuTLS "
                   "(libgnutls30) for TLS", "gpulet would not start with /metrics on %s: %s",
                   c->metrics_listen, e.msg);
    else
        doctor_set(r, DOCTOR_PASS, NULL, "/metrics on %s%s%s", c->metrics_listen,
                   c->web_config_file[0] ? " with the web config " : "", c->web_config_file);
    if (!c->no_metrics)
        metrics_files_free(&files); /* zeroed where the read failed */
}
