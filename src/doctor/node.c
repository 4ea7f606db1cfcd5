/* The node around the GPUs: the container runtime's setup for the device
 * list strategy, the CDI spec, the kubelet's sockets, gpulet's own
 * registration (its status socket), and the Node object. */
#include "doctor/internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "cdi/cdi.h"
#include "driver/driver.h"
#include "kube/kube.h"
#include "util/jsonx.h"
#include "util/strbuf.h"
#include "util/unixsock.h"
#include "util/xmalloc.h"

/* --- the container runtime -------------------------------------------------------- */

/* The value of key in TOML text, the last one set (quotes taken off); a
 * line scan, which is enough for the few flat keys asked for here. */
static bool node_toml(const char *text, const char *key, char *out, size_t len)
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
static char *node_runtime_config(struct doctor *d, const char *file, const char *dropins,
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
    char *containerd = node_runtime_config(d, "/etc/containerd/config.toml",
                                           "/etc/containerd/conf.d", cwhere, sizeof cwhere);
    char *crio = node_runtime_config(d, "/etc/crio/crio.conf", "/etc/crio/crio.conf.d", owhere,
                                     sizeof owhere);
    char v[64];
    const char *fix_runtime = "make the NVIDIA runtime the default (nvidia-ctk runtime configure "
                              "--set-as-default, then restart the runtime), or use "
                              "--device-list-strategy cdi-cri or driver-mounts, which need none";
    if (!containerd && !crio) {
        doctor_set(r, DOCTOR_WARN, "check --root; gpulet reads /etc/containerd and /etc/crio",
                   "no containerd or CRI-O configuration found under %s", d->o->root);
    } else if (containerd) {
        bool nvidia = node_toml(containerd, "default_runtime_name", v, sizeof v) && !strcmp(v, "nvidia");
        char def[64];
        snprintf(def, sizeof def, "%s", node_toml(containerd, "default_runtime_name", v, sizeof v) ? v : "runc");
        /* containerd 2 (config version 3) has CDI on unless turned off. */
        bool v3 = node_toml(containerd, "version", v, sizeof v) && atoi(v) >= 3;
        bool cdi = node_toml(containerd, "enable_cdi", v, sizeof v) ? !strcmp(v, "true") : v3;
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
        bool nvidia = node_toml(crio, "default_runtime", v, sizeof v) && !strcmp(v, "nvidia");
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
    unsigned caps;
    struct strbuf want = {0};
    struct err e;
    doctor_step(d, "generating the CDI spec to compare");
    if (driver_parse_caps(c->driver_caps, &caps, &e) < 0 ||
        driver_discover(&drv, c->driver_root, read_root, d->inv.driver_version, caps, &e) < 0) {
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

/* --- the kubelet and gpulet ------------------------------------------------------------ */

/* 0 when something listens on the unix socket at path, else errno. */
static int node_connect(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return ENAMETOOLONG;
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errno;
    int rc = connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0 ? errno : 0;
    close(fd);
    return rc;
}

void doctor_kubelet(struct doctor *d, struct doctor_result *r)
{
    const char *kroot = d->o->cfg->kubelet_root;
    char dir[CONFIG_PATH_MAX * 2], sock[CONFIG_PATH_MAX * 2 + 16];
    doctor_path(d, dir, sizeof dir, kroot, "/device-plugins");
    snprintf(sock, sizeof sock, "%s/kubelet.sock", dir);
    struct stat st;
    int rc;
    doctor_step(d, "connecting to %s", sock);
    if (stat(dir, &st) < 0)
        doctor_set(r, DOCTOR_FAIL, "start the kubelet, or give --kubelet-root its --root-dir",
                   "no %s: the kubelet has not run here with --root-dir %s", dir, kroot);
    else if (stat(sock, &st) < 0 || !S_ISSOCK(st.st_mode))
        doctor_set(r, DOCTOR_FAIL, "start the kubelet (systemctl status kubelet)",
                   "no kubelet.sock in %s: the kubelet is not running", dir);
    else if ((rc = node_connect(sock)) != 0)
        doctor_set(r, DOCTOR_FAIL, "start the kubelet (systemctl status kubelet)",
                   "%s does not accept connections (%s): the kubelet stopped", sock, strerror(rc));
    else
        doctor_set(r, DOCTOR_PASS, NULL, "%s accepts connections", sock);
}

void doctor_registration(struct doctor *d, struct doctor_result *r)
{
    const struct config *c = d->o->cfg;
    char path[CONFIG_PATH_MAX * 2], reply[4096];
    doctor_path(d, path, sizeof path, c->status_socket, NULL);
    struct err e;
    doctor_step(d, "asking the agent at %s", path);
    if (unixsock_request(path, "plugins\n", reply, sizeof reply, &e) < 0) {
        doctor_set(r, DOCTOR_FAIL, "is gpulet running on this node? kubectl -n gpulet get pods "
                   "-o wide, then kubectl -n gpulet logs POD", "gpulet does not answer: %s",
                   e.msg);
        return;
    }
    d->agent_up = true;
    struct strbuf ok = {0}, bad = {0};
    char *save = NULL;
    for (char *line = strtok_r(reply, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[96], sock[128], state[32];
        unsigned n;
        if (sscanf(line, "%95s %127s %31s %u", name, sock, state, &n) != 4)
            continue;
        d->served += n;
        struct strbuf *to = strcmp(state, "registered") ? &bad : &ok;
        strbuf_printf(to, "%s%s (%u device(s))", to->len ? ", " : "", name, n);
    }
    if (bad.len)
        doctor_set(r, DOCTOR_FAIL, "see gpulet's log; is --kubelet-root the kubelet's "
                   "--root-dir?", "not registered with the kubelet: %s", bad.data);
    else if (!ok.len)
        doctor_set(r, DOCTOR_FAIL, "see gpulet's log (NVML or the config)",
                   "gpulet runs but serves no resource");
    else
        doctor_set(r, DOCTOR_PASS, NULL, "registered: %s", ok.data);
    strbuf_free(&ok);
    strbuf_free(&bad);
}

void doctor_pod_resources(struct doctor *d, struct doctor_result *r)
{
    const struct config *c = d->o->cfg;
    char path[CONFIG_PATH_MAX * 2];
    if (c->pod_resources_socket[0])
        doctor_path(d, path, sizeof path, c->pod_resources_socket, NULL);
    else
        doctor_path(d, path, sizeof path, c->kubelet_root, "/pod-resources/kubelet.sock");
    doctor_step(d, "connecting to %s", path);
    int rc = node_connect(path);
    if (rc)
        doctor_set(r, DOCTOR_WARN, "metrics name pods through it: is the kubelet running, and "
                   "is /var/lib/kubelet/pod-resources mounted into gpulet?",
                   "%s: %s", path, strerror(rc));
    else
        doctor_set(r, DOCTOR_PASS, NULL, "%s accepts connections", path);
}

/* --- the Node ------------------------------------------------------------------------------- */

/* Sum of the Node's allocatable nvidia.com resources, listed into out. */
static unsigned node_allocatable(json_t *node, struct strbuf *out)
{
    json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
    unsigned total = 0;
    const char *key;
    json_t *v;
    json_object_foreach(alloc, key, v) {
        if (strncmp(key, "nvidia.com/", 11) || !json_is_string(v))
            continue;
        unsigned n = (unsigned)strtoul(json_string_value(v), NULL, 10);
        total += n;
        strbuf_printf(out, "%s%s=%u", out->len ? ", " : "", key, n);
    }
    return total;
}

static bool node_ready(json_t *node)
{
    json_t *conds = json_object_get(json_object_get(node, "status"), "conditions");
    size_t i;
    json_t *c;
    json_array_foreach(conds, i, c) {
        if (!strcmp(json_string_value(json_object_get(c, "type")) ?: "", "Ready"))
            return !strcmp(json_string_value(json_object_get(c, "status")) ?: "", "True");
    }
    return false;
}

static void node_judge(struct doctor *d, struct doctor_result *r, json_t *node, const char *name)
{
    struct strbuf alloc = {0};
    unsigned total = node_allocatable(node, &alloc);
    json_t *labels = json_object_get(json_object_get(node, "metadata"), "labels");
    const char *product = json_string_value(json_object_get(labels, "nvidia.com/gpu.product"));
    const char *count = json_string_value(json_object_get(labels, "nvidia.com/gpu.count"));
    unsigned gpus = d->nvml_ok ? d->inv.count : 0;
    if (!node_ready(node))
        doctor_set(r, DOCTOR_FAIL, "kubectl describe node: the kubelet's conditions say why",
                   "Node %s is not Ready", name);
    else if (!total && gpus)
        doctor_set(r, DOCTOR_FAIL, "see the registration and GPU checks above; unhealthy devices "
                   "are not allocatable", "Node %s has no allocatable nvidia.com resource, with "
                   "%u GPU(s) here", name, gpus);
    else if (d->agent_up && total != d->served)
        doctor_set(r, DOCTOR_WARN, "gpulet list shows which devices are unhealthy",
                   "Node %s: allocatable %s, but gpulet serves %u device(s): some are unhealthy, "
                   "or the kubelet has not caught up", name, alloc.len ? alloc.data : "none",
                   d->served);
    else if (!product)
        doctor_set(r, DOCTOR_WARN, "run gpulet with --labels api (RBAC: get and patch nodes)",
                   "Node %s has no GPU labels (nvidia.com/gpu.product): node selectors on them "
                   "match nothing; allocatable %s", name, alloc.len ? alloc.data : "none");
    else
        doctor_set(r, DOCTOR_PASS, NULL, "Node %s is Ready; allocatable %s; labelled %s x%s",
                   name, alloc.len ? alloc.data : "none", product, count ? count : "?");
    strbuf_free(&alloc);
}

void doctor_node(struct doctor *d, struct doctor_result *r)
{
    const struct config *c = d->o->cfg;
    if ((!c->kubeconfig[0] && !kube_in_cluster()) || !c->node_name[0]) {
        doctor_set(r, DOCTOR_SKIP, NULL, "no API server to ask: give --kubeconfig (or run in a "
                   "pod) and NODE_NAME (or --node-name)");
        return;
    }
    struct kube_creds creds = {0};
    struct kube_response resp = {0};
    struct err e;
    char path[256];
    snprintf(path, sizeof path, "/api/v1/nodes/%s", c->node_name);
    doctor_step(d, "GET %s from the API server", path);
    if (kube_creds_load(&creds, c->kubeconfig, &e) < 0 ||
        kube_request(&creds, "GET", path, NULL, NULL, &resp, NULL, &e) < 0) {
        doctor_set(r, DOCTOR_WARN, "check the kubeconfig or the pod's service account",
                   "cannot read the Node: %s", e.msg);
    } else if (resp.status != 200) {
        doctor_set(r, DOCTOR_WARN, resp.status == 403 ? "grant get on nodes (deploy/base/rbac.yaml)"
                   : resp.status == 404 ? "check NODE_NAME" : NULL,
                   "GET %s: HTTP %ld", path, resp.status);
    } else {
        json_t *node = json_loadb(resp.body.data, resp.body.len, 0, NULL);
        if (!node)
            doctor_set(r, DOCTOR_WARN, NULL, "GET %s: the answer is not JSON", path);
        else
            node_judge(d, r, node, c->node_name);
        json_decref(node);
    }
    kube_response_free(&resp);
    kube_creds_free(&creds);
}
