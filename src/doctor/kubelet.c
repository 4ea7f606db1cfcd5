/* What the kubelet and the API server see of gpulet: the kubelet's device
 * plugin socket, gpulet's registrations (asked over its status socket),
 * the PodResources List that names pods in the metrics, and the Node's
 * allocatable, resource by resource. */
#include "doctor/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <uv.h>

#include "grpc/client.h"
#include "kube/kube.h"
#include "util/jsonx.h"
#include "util/strbuf.h"
#include "util/unixsock.h"
#include "podresources.pb-c.h"

/* 0 when something listens on the unix socket at path, else errno. */
static int kubelet_connect(const char *path)
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
    if (d->simulated && (stat(sock, &st) < 0 || !S_ISSOCK(st.st_mode))) {
        d->no_kubelet = true;
        doctor_set(r, DOCTOR_SKIP, NULL, "simulated GPUs and no kubelet at %s: the agent waits "
                   "for one (a demo needs none)", dir);
    } else if (stat(dir, &st) < 0)
        doctor_set(r, DOCTOR_FAIL, "start the kubelet, or give --kubelet-root its --root-dir",
                   "no %s: the kubelet has not run here with --root-dir %s", dir, kroot);
    else if (stat(sock, &st) < 0 || !S_ISSOCK(st.st_mode))
        doctor_set(r, DOCTOR_FAIL, "start the kubelet (systemctl status kubelet)",
                   "no kubelet.sock in %s: the kubelet is not running", dir);
    else if ((rc = kubelet_connect(sock)) != 0)
        doctor_set(r, DOCTOR_FAIL, "start the kubelet (systemctl status kubelet)",
                   "%s does not accept connections (%s): the kubelet stopped", sock, strerror(rc));
    else
        doctor_set(r, DOCTOR_PASS, NULL, "%s accepts connections", sock);
}

/* --- gpulet's registrations --------------------------------------------------------- */

static void kubelet_note_served(struct doctor *d, const char *name, unsigned n)
{
    if (d->nserved == DOCTOR_MAX_RESOURCES)
        return;
    struct doctor_served *s = &d->served[d->nserved++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->devices = n;
}

/* The GPUs gpulet's device plugins serve: those --dra-gpus leaves to them
 * (all with --dra off). Without NVML's names, whether there is any. */
static unsigned kubelet_plugin_gpus(const struct doctor *d)
{
    const struct config *c = d->o->cfg;
    if (!d->nvml_ok)
        return c->dra == CONFIG_DRA_ALL && !strcmp(c->dra_gpus, "*") ? 0 : 1;
    unsigned n = 0;
    for (unsigned i = 0; i < d->inv.count; i++)
        n += !config_dra_takes(c, &d->inv.gpus[i]);
    return n;
}

void doctor_registration(struct doctor *d, struct doctor_result *r)
{
    const char *path = d->agent_socket;
    char reply[4096];
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
        kubelet_note_served(d, name, n);
        struct strbuf *to = strcmp(state, "registered") ? &bad : &ok;
        strbuf_printf(to, "%s%s (%u device(s))", to->len ? ", " : "", name, n);
    }
    if (!ok.len && !bad.len && !kubelet_plugin_gpus(d))
        doctor_set(r, DOCTOR_PASS, NULL, "no device plugin: DRA serves every GPU (check dra)");
    else if (d->no_kubelet)
        doctor_set(r, DOCTOR_SKIP, NULL, "no kubelet to register with: the agent at %s serves %s "
                   "and waits for one", path, bad.len ? bad.data : "no resource");
    else if (bad.len)
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

/* The DRA driver (docs/dra.md): registered with the kubelet, and how much
 * it serves, from the agent's "dra" answer. */
void doctor_dra(struct doctor *d, struct doctor_result *r)
{
    const struct config *c = d->o->cfg;
    if (c->dra == CONFIG_DRA_OFF) {
        doctor_set(r, DOCTOR_SKIP, NULL, "--dra off: the device plugin serves every GPU");
        return;
    }
    const char *path = d->agent_socket;
    char reply[1024], sock[512], state[32], api[64] = "unknown";
    struct err e;
    unsigned devices, claims;
    doctor_step(d, "asking the agent at %s", path);
    if (unixsock_request(path, "dra\n", reply, sizeof reply, &e) < 0) {
        doctor_set(r, DOCTOR_FAIL, "is gpulet running on this node?", "gpulet does not answer: %s",
                   e.msg);
    } else if (sscanf(reply, "gpu.nvidia.com %511s %31s %u %u %63s", sock, state, &devices, &claims,
                      api) < 4) {
        doctor_set(r, DOCTOR_FAIL, "see gpulet's log (--node-name, API server credentials)",
                   "the agent runs no DRA driver: %.200s", reply);
    } else if (!strcmp(api, "unknown")) {
        doctor_set(r, DOCTOR_FAIL, "DRA needs Kubernetes 1.32 or later with resource.k8s.io served; "
                   "gpulet's log says what the API server answered",
                   "gpu.nvidia.com publishes no ResourceSlice: the agent has not "
                   "learned which version of resource.k8s.io the API server serves");
    } else if (strcmp(state, "registered")) {
        doctor_set(r, DOCTOR_FAIL, "is --kubelet-registry-dir the kubelet's <root-dir>/plugins_registry, "
                   "and DynamicResourceAllocation on (Kubernetes 1.32+)?",
                   "gpu.nvidia.com is not registered with the kubelet (its service: %s)", sock);
    } else {
        doctor_set(r, DOCTOR_PASS, NULL, "gpu.nvidia.com registered: %u device(s) in the ResourceSlice "
                   "(%s), %u claim(s) prepared", devices, api, claims);
    }
}

/* --- PodResources ------------------------------------------------------------------- */

/* The outcome of one List call. */
struct kubelet_list {
    const struct doctor *d;
    bool answered;
    enum grpc_status status;
    char message[256];
    unsigned pods, devices;          /* pods holding GPU devices, and how many */
};

/* Whether gpulet registered the resource. */
static bool kubelet_served(const struct doctor *d, const char *name)
{
    for (unsigned i = 0; i < d->nserved; i++)
        if (!strcmp(d->served[i].name, name))
            return true;
    return false;
}

/* A resource that names GPUs: NVIDIA's, or one gpulet registered. */
static bool kubelet_gpu_resource(const struct doctor *d, const char *name)
{
    return !strncmp(name, "nvidia.com/", 11) || kubelet_served(d, name);
}

static void kubelet_count(struct kubelet_list *l, const V1__ListPodResourcesResponse *resp)
{
    for (size_t p = 0; p < resp->n_pod_resources; p++) {
        const V1__PodResources *pod = resp->pod_resources[p];
        unsigned held = 0;
        for (size_t c = 0; c < pod->n_containers; c++)
            for (size_t k = 0; k < pod->containers[c]->n_devices; k++) {
                const V1__ContainerDevices *dev = pod->containers[c]->devices[k];
                if (dev->resource_name && kubelet_gpu_resource(l->d, dev->resource_name))
                    held += (unsigned)dev->n_device_ids;
            }
        l->pods += held > 0;
        l->devices += held;
    }
}

static void kubelet_listed(void *ctx, enum grpc_status status, const char *message,
                           const uint8_t *resp, size_t len)
{
    struct kubelet_list *l = ctx;
    l->answered = true;
    l->status = status;
    snprintf(l->message, sizeof l->message, "%s", message ? message : "");
    if (status != GRPC_OK)
        return;
    V1__ListPodResourcesResponse *r = v1__list_pod_resources_response__unpack(NULL, len, resp);
    if (!r) {
        l->status = GRPC_INTERNAL;
        snprintf(l->message, sizeof l->message, "the answer is not a ListPodResourcesResponse");
        return;
    }
    kubelet_count(l, r);
    v1__list_pod_resources_response__free_unpacked(r, NULL);
}

/* One List call on a loop of this thread's own, within part of the
 * check's time, so that a kubelet that accepts and never answers gives a
 * message of this check's rather than the time limit's. */
static void kubelet_list(const struct doctor *d, const char *path, struct kubelet_list *l)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    unsigned ms = d->o->timeout_ms * 3 / 4;
    grpc_client_unary(&loop, path, "/v1.PodResourcesLister/List", NULL, 0, ms ? ms : 1,
                      kubelet_listed, l);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
}

void doctor_pod_resources(struct doctor *d, struct doctor_result *r)
{
    const struct config *c = d->o->cfg;
    char path[CONFIG_PATH_MAX * 2];
    if (c->pod_resources_socket[0])
        doctor_path(d, path, sizeof path, c->pod_resources_socket, NULL);
    else
        doctor_path(d, path, sizeof path, c->kubelet_root, "/pod-resources/kubelet.sock");
    const char *mount = "metrics name pods through it: is the kubelet running, and is "
                        "/var/lib/kubelet/pod-resources mounted into gpulet?";
    if (d->no_kubelet) {
        doctor_set(r, DOCTOR_SKIP, NULL, "no kubelet: no pod holds a simulated GPU");
        return;
    }
    doctor_step(d, "connecting to %s", path);
    int rc = kubelet_connect(path);
    if (rc) {
        doctor_set(r, DOCTOR_WARN, mount, "%s: %s", path, strerror(rc));
        return;
    }
    struct kubelet_list l = {.d = d};
    doctor_step(d, "PodResources List at %s", path);
    kubelet_list(d, path, &l);
    if (!l.answered)
        doctor_set(r, DOCTOR_WARN, NULL, "%s: List ended with no answer", path);
    else if (l.status != GRPC_OK)
        doctor_set(r, DOCTOR_WARN, "metrics name no pods until it answers: see the kubelet's "
                   "log", "%s: List failed: %s (gRPC %d)", path, l.message, (int)l.status);
    else
        doctor_set(r, DOCTOR_PASS, NULL, "%s answers List: %u pod(s) hold %u GPU device(s)", path,
                   l.pods, l.devices);
}

/* --- the Node ----------------------------------------------------------------------------- */

/* The Node's allocatable count of a resource; 0 when it has none. */
static unsigned kubelet_allocatable(json_t *alloc, const char *name)
{
    const char *v = json_string_value(json_object_get(alloc, name));
    return v ? (unsigned)strtoul(v, NULL, 10) : 0;
}

/* Lists the Node's allocatable nvidia.com resources into all; resources
 * whose allocatable differs from what gpulet serves into differ; those
 * another plugin serves into foreign. Returns the sum allocatable. */
static unsigned kubelet_compare(const struct doctor *d, json_t *alloc, struct strbuf *all,
                                struct strbuf *differ, struct strbuf *foreign)
{
    unsigned total = 0;
    const char *key;
    json_t *v;
    json_object_foreach(alloc, key, v) {
        if (!kubelet_gpu_resource(d, key))
            continue;
        unsigned n = kubelet_allocatable(alloc, key);
        total += n;
        strbuf_printf(all, "%s%s=%u", all->len ? ", " : "", key, n);
        /* The kubelet zeroes a resource whose plugin left: one still
         * allocatable that gpulet does not serve has another plugin. */
        if (d->agent_up && n && !kubelet_served(d, key))
            strbuf_printf(foreign, "%s%s=%u", foreign->len ? ", " : "", key, n);
    }
    for (unsigned i = 0; d->agent_up && i < d->nserved; i++) {
        unsigned n = kubelet_allocatable(alloc, d->served[i].name);
        if (n != d->served[i].devices)
            strbuf_printf(differ, "%s%s: %u allocatable, %u served", differ->len ? "; " : "",
                          d->served[i].name, n, d->served[i].devices);
    }
    return total;
}

static bool kubelet_node_ready(json_t *node)
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

static void kubelet_judge(struct doctor *d, struct doctor_result *r, json_t *node, const char *name)
{
    struct strbuf all = {0}, differ = {0}, foreign = {0};
    json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
    unsigned total = kubelet_compare(d, alloc, &all, &differ, &foreign);
    const char *shown = all.len ? all.data : "none";
    json_t *labels = json_object_get(json_object_get(node, "metadata"), "labels");
    const char *product = json_string_value(json_object_get(labels, "nvidia.com/gpu.product"));
    const char *count = json_string_value(json_object_get(labels, "nvidia.com/gpu.count"));
    unsigned gpus = d->nvml_ok ? kubelet_plugin_gpus(d) : 0; /* DRA's are in its slice */
    if (!kubelet_node_ready(node))
        doctor_set(r, DOCTOR_FAIL, "kubectl describe node: the kubelet's conditions say why",
                   "Node %s is not Ready", name);
    else if (!total && gpus)
        doctor_set(r, DOCTOR_FAIL, "see the registration and GPU checks above; unhealthy devices "
                   "are not allocatable", "Node %s has no allocatable nvidia.com resource, with "
                   "%u GPU(s) here", name, gpus);
    else if (foreign.len)
        doctor_set(r, DOCTOR_WARN, "two device plugins hand out the same GPUs: remove NVIDIA's "
                   "from this node (deploy/replace-nvidia, docs/deploy.md)", "Node %s: %s is "
                   "allocatable, but gpulet does not serve it: another device plugin does",
                   name, foreign.data);
    else if (differ.len)
        doctor_set(r, DOCTOR_WARN, "gpulet list shows which devices are unhealthy",
                   "Node %s: %s; some devices are unhealthy, or the kubelet has not caught up",
                   name, differ.data);
    else if (!product)
        doctor_set(r, DOCTOR_WARN, "run gpulet with --labels api (RBAC: get and patch nodes)",
                   "Node %s has no GPU labels (nvidia.com/gpu.product): node selectors on them "
                   "match nothing; allocatable %s", name, shown);
    else
        doctor_set(r, DOCTOR_PASS, NULL, "Node %s is Ready; allocatable %s; labelled %s x%s",
                   name, shown, product, count ? count : "?");
    strbuf_free(&all);
    strbuf_free(&differ);
    strbuf_free(&foreign);
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
        kube_request(&creds, "GET", path, NULL, NULL, &resp, &e) < 0) {
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
            kubelet_judge(d, r, node, c->node_name);
        json_decref(node);
    }
    kube_response_free(&resp);
    kube_creds_free(&creds);
}
