/* The agent's configuration put together: flags over environment over the
 * v1 file (or the node's named config) over defaults, then checked, with
 * the paths a user's run gets instead of a node's. */
#include "config/config.h"
#include "driver/driver.h"
#include "gpu/health.h"
#include "gpu/inventory.h"
#include "http/http.h"
#include "sim/scenario.h"
#include "config/internal.h"

#include <ctype.h>
#include <fnmatch.h>
#include <getopt.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/dirs.h"
#include "util/log.h"
#include "util/opts.h"
#include "util/strbuf.h"

/* --- the command line ------------------------------------------------------ */

static size_t config_index(const char *flag)
{
    size_t i = 0;
    while (i < config_noptions && strcmp(config_options[i].flag, flag))
        i++;
    return i;
}

/* The variables option i is read from, in order, into out (NULL where
 * there is none). */
static void config_envs(size_t i, const char *out[2])
{
    out[0] = config_options[i].env;
    out[1] = NULL;
    for (size_t j = 0; j < config_nenv_lists; j++)
        if (!strcmp(config_env_lists[j].flag, config_options[i].flag))
            memcpy(out, config_env_lists[j].envs, sizeof config_env_lists[j].envs);
}

/* Option i's value from the environment (the first of its variables set,
 * and non-empty), its variable's name in *name; NULL when none is. */
static const char *config_env_value(size_t i, const char **name)
{
    const char *envs[2];
    config_envs(i, envs);
    for (size_t k = 0; k < 2 && envs[k]; k++) {
        const char *v = getenv(envs[k]);
        if (v && *v)
            return *name = envs[k], v;
    }
    return NULL;
}

/* A boolean flag given bare means true, as NVIDIA's flags do; "--flag false"
 * (the word as the next argument) still works, so it is taken when it is one. */
static const char *config_bool_word(int argc, char **argv)
{
    if (optind < argc)
        for (size_t i = 0; i < sizeof config_bool_words / sizeof *config_bool_words; i++)
            if (!strcmp(argv[optind], config_bool_words[i]))
                return argv[optind++];
    return "true";
}

int config_parse_args(struct config_args *a, int argc, char **argv, struct err *e)
{
    memset(a, 0, sizeof *a);
    struct option longopts[CONFIG_OPTIONS_MAX + 16];
    size_t n = 0;
    for (size_t i = 0; i < config_noptions; i++) {
        int has_arg = config_options[i].type == T_BOOL ? optional_argument : required_argument;
        longopts[n++] = (struct option){config_options[i].flag, has_arg, NULL, (int)(i + 1000)};
    }
    for (size_t i = 0; i < config_naliases; i++) {
        struct option o = longopts[config_index(config_aliases[i].flag)];
        o.name = config_aliases[i].alias;
        longopts[n++] = o;
    }
    longopts[n++] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[n++] = (struct option){"version", no_argument, NULL, 'v'};
    longopts[n] = (struct option){NULL, 0, NULL, 0};
    if (opts_check_exact(argc, argv, "hvo:", longopts, e) < 0)
        return -1;
    int c;
    opterr = 0;
    optind = 1;
    /* -o: GFD's short name of --output-file. */
    int output = (int)(config_index("output-file") + 1000);
    while ((c = getopt_long(argc, argv, "+hvo:", longopts, NULL)) != -1) {
        if (c == 'h' || c == 'v') {
            a->help = c == 'h';
            a->version = c == 'v';
            return 0;
        }
        if (c == 'o')
            c = output;
        if (c < 1000)
            return err_set(e, "unknown or incomplete option '%s'", argv[optind - 1]);
        a->values[c - 1000] = optarg ? optarg : config_bool_word(argc, argv);
    }
    if (optind < argc)
        return err_set(e, "unexpected argument '%s'", argv[optind]);
    /* Check each flag's value now, so a typo fails before anything starts. */
    struct config scratch;
    memset(&scratch, 0, sizeof scratch);
    char where[64];
    for (size_t i = 0; i < config_noptions; i++) {
        snprintf(where, sizeof where, "--%s", config_options[i].flag);
        if (a->values[i] && config_set(&scratch, &config_options[i], a->values[i], where, e) < 0)
            return -1;
    }
    return 0;
}

/* "--flag VALUE": the value as --help shows it. */
static const char *config_meta(const struct config_opt *o, char *buf, size_t len)
{
    struct strbuf list = {0};
    switch (o->type) {
    case T_BOOL: return "[=BOOL]";
    case T_UINT: return " N";
    case T_STRING: snprintf(buf, len, " %s", o->meta ? o->meta : "VALUE"); return buf;
    case T_LIST: return " NAME[,NAME...]";
    case T_ENUM:
        for (int i = 0; o->choices[i]; i++)
            strbuf_printf(&list, "%s%s", i ? "|" : "", o->choices[i]);
        snprintf(buf, len, " %s", list.data);
        strbuf_free(&list);
        return buf;
    }
    return "";
}

void config_usage(FILE *out)
{
    char user[256];
    dirs_user(user, sizeof user);
    fputs("usage: gpulet agent [OPTIONS]\n", out);
    for (size_t i = 0; i < config_noptions; i++) {
        const struct config_opt *o = &config_options[i];
        char meta[160], flag[200];
        snprintf(flag, sizeof flag, "--%s%s", o->flag, config_meta(o, meta, sizeof meta));
        fprintf(out, "  %s\n      %s", flag, o->help);
        if (o->def[0])
            fprintf(out, " [%s]", o->def);
        if (o->user_name)
            fprintf(out, " [with --simulate: %s/%s]", user, o->user_name);
        for (size_t j = 0; j < config_naliases; j++)
            if (!strcmp(config_aliases[j].flag, o->flag))
                fprintf(out, " [also --%s]", config_aliases[j].alias);
        const char *envs[2];
        config_envs(i, envs);
        if (envs[0] || o->key)
            fprintf(out, " (%s%s%s%s%s%s)", envs[0] ? "env " : "", envs[0] ? envs[0] : "",
                    envs[1] ? " or " : "", envs[1] ? envs[1] : "",
                    envs[0] && o->key ? ", file " : o->key ? "file " : "", o->key ? o->key : "");
        fputc('\n', out);
    }
    fputs("A BOOL is true or false: --no-metrics, --no-metrics=true and --no-metrics true mean\n"
          "the same; --no-metrics=false turns it off. An option may also be set by the\n"
          "environment variable named with it, or under the key named with it in the\n"
          "--config-file (NVIDIA's version: v1 format); a flag wins over the variable, which\n"
          "wins over the file.\n"
          "Also read from the environment: DP_DISABLE_HEALTHCHECKS, DP_ENABLE_HEALTHCHECKS.\n"
          "  -h, --help     this text\n"
          "  -v, --version  gpulet's version\n",
          out);
}

/* --- putting it together ------------------------------------------------------ */

/* A label key as Kubernetes takes it: [prefix/]name, the name at most 63
 * characters of [A-Za-z0-9-_.] with alphanumeric ends. */
static bool config_label_key_ok(const char *key)
{
    const char *slash = strrchr(key, '/');
    const char *name = slash ? slash + 1 : key;
    size_t n = strlen(name);
    if (n == 0 || n > 63 || (slash && (slash == key || slash - key > 253)))
        return false;
    if (!isalnum((unsigned char)name[0]) || !isalnum((unsigned char)name[n - 1]))
        return false;
    for (const char *p = key; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr(p < name ? "-./" : "-_.", *p))
            return false;
    return true;
}

/* A Go duration ("60s", "1m30s", "1.5h"), as GFD's --sleep-interval takes
 * it, or "infinite" as later GFDs do. */
static bool config_duration_ok(const char *s)
{
    /* "ms" before "m" and "s": the longest unit that matches. */
    static const char *const units[] = {"ns", "us", "µs", "μs", "ms", "s", "m", "h"};
    if (!strcmp(s, "infinite") || !strcmp(s, "0"))
        return true;
    s += *s == '-' || *s == '+';
    if (!*s)
        return false;
    while (*s) {
        const char *start = s;
        while (isdigit((unsigned char)*s) || *s == '.')
            s++;
        if (s == start)
            return false;
        size_t i = 0, n = 0;
        for (; i < sizeof units / sizeof *units; i++)
            if (!strncmp(s, units[i], n = strlen(units[i])))
                break;
        if (i == sizeof units / sizeof *units)
            return false;
        s += n;
    }
    return true;
}

static int config_check(const struct config *c, struct err *e)
{
    if (c->imex_channel_ids[0])
        return err_usage(e, "--imex-channel-ids %s: IMEX channels are not supported yet; leave it "
                            "empty", c->imex_channel_ids);
    if (!config_duration_ok(c->sleep_interval))
        return err_usage(e, "--sleep-interval '%s' is not a duration (as 60s, 5m or 1h30m)",
                         c->sleep_interval);
    if (c->sharing == GPU_SHARING_MPS && c->mig_strategy == CONFIG_MIG_MIXED)
        return err_set(e, "sharing.mps cannot be combined with MIG strategy mixed (MPS does not "
                          "run on MIG devices)");
    if (c->accelerator_label[0] && !config_label_key_ok(c->accelerator_label))
        return err_usage(e, "--accelerator-label '%s' is not a valid label key", c->accelerator_label);
    if (c->labels_output == CONFIG_LABELS_FILE && !c->output_file[0])
        return err_usage(e, "--labels file needs --output-file");
    if (c->config_map[0] && !c->node_name[0])
        return err_usage(e, "--config-map needs the Node's name: set NODE_NAME (from the downward "
                          "API, spec.nodeName) or --node-name");
    if (c->config_map[0] && !config_label_key_ok(c->config_label))
        return err_usage(e, "--config-label '%s' is not a valid label key", c->config_label);
    struct health_faults faults;
    if (gpu_health_faults_parse(&faults, "--fault-taint-on", c->fault_taint_on, e) < 0 ||
        gpu_health_faults_parse(&faults, "--dra-evict-on", c->dra_evict_on, e) < 0)
        return -1;
    if (c->labels_output == CONFIG_LABELS_API && !c->node_name[0])
        return err_usage(e, "%s needs the Node's name: set NODE_NAME (from the downward API, "
                          "spec.nodeName) or --node-name",
                         c->given[config_index("labels")] ? "--labels api"
                                                          : "--use-node-feature-api=true");
    if (c->simulate[0] && scenario_check(c->simulate, e) < 0)
        return -1;
    /* The agent would find out only when it listens, and run without metrics. */
    struct sockaddr_storage addr;
    struct err why;
    if (!c->no_metrics && http_parse_addr(c->metrics_listen, &addr, &why) < 0)
        return err_usage(e, "--metrics-listen: %.400s", why.msg);
    return 0;
}

void config_user_paths(struct config *c)
{
    /* In a pod, a simulated node is a cluster's (a DaemonSet trying gpulet
     * without GPUs): it serves the kubelet at the node's paths. */
    const char *pod = getenv("KUBERNETES_SERVICE_HOST");
    if (!c->simulate[0] || (pod && *pod))
        return;
    /* Pointed at a kubelet (its root or registry given), the agent serves
     * a node's pods: its CDI specs go where that node's runtime reads them,
     * not where the runtime would never find them. */
    bool kubelet = c->given[config_index("kubelet-root")] ||
                   c->given[config_index("kubelet-registry-dir")];
    for (size_t i = 0; i < config_noptions; i++) {
        const struct config_opt *o = &config_options[i];
        bool runtime_reads = kubelet && !strcmp(o->flag, "cdi-spec-dir");
        if (o->user_name && !c->given[i] && !runtime_reads)
            dirs_user_file(o->user_name, (char *)c + o->offset, o->size);
    }
}

/* A value set by a flag or an option's variable was wrong: the command
 * line's fault (exit 2), where a file's would be a failure (exit 1). */
static int config_usage_error(struct err *e)
{
    e->usage = true;
    return -1;
}

bool config_args_only(const struct config_args *a, const char *flag)
{
    for (size_t i = 0; i < config_noptions; i++)
        if (a->values[i] && (!flag || strcmp(config_options[i].flag, flag)))
            return false;
    return true;
}

const char *config_arg(const struct config_args *a, const char *flag)
{
    return a->values[config_index(flag)];
}

/* NVIDIA's --kubelet-socket names the kubelet's socket; a device plugin's
 * own sockets go in the same directory (the kubelet looks for them there),
 * so it names the kubelet root gpulet serves under. */
static int config_kubelet_socket(struct config *c, struct err *e)
{
    static const char tail[] = "/device-plugins/kubelet.sock";
    size_t n = strlen(c->kubelet_socket), t = sizeof tail - 1;
    if (n <= t || strcmp(c->kubelet_socket + n - t, tail))
        return err_usage(e, "--kubelet-socket '%s': gpulet registers with the kubelet's socket in "
                            "its device-plugins directory, a path ending in %s (or give "
                            "--kubelet-root)", c->kubelet_socket, tail);
    char root[CONFIG_PATH_MAX];
    snprintf(root, sizeof root, "%.*s", (int)(n - t), c->kubelet_socket);
    size_t k = config_index("kubelet-root");
    if (c->given[k] && strcmp(root, c->kubelet_root))
        return err_usage(e, "--kubelet-socket %s is not under --kubelet-root %s", c->kubelet_socket,
                         c->kubelet_root);
    snprintf(c->kubelet_root, sizeof c->kubelet_root, "%s", root);
    c->given[k] = true;
    return 0;
}

int config_load(struct config *c, const struct config_args *a, const struct config_text *named,
                struct err *e)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < config_noptions; i++)
        if (config_set(c, &config_options[i], config_options[i].def, config_options[i].flag, e) < 0)
            return -1;
    memset(c->given, 0, sizeof c->given);
    const char *name, *file = a->values[config_index("config-file")];
    if (!file)
        file = config_env_value(config_index("config-file"), &name);
    if (named) {
        if (config_apply_yaml(c, named->source, named->text, named->len, e) < 0)
            return -1;
    } else if (file && *file) {
        if (config_file(c, file, e) < 0)
            return -1;
        snprintf(c->config_file, sizeof c->config_file, "%s", file);
    }
    char where[96];
    for (size_t i = 0; i < config_noptions; i++) {
        const char *v = config_env_value(i, &name);
        snprintf(where, sizeof where, "environment variable %s", v ? name : "");
        if (v && config_set(c, &config_options[i], v, where, e) < 0)
            return config_usage_error(e);
    }
    for (size_t i = 0; i < config_noptions; i++) {
        snprintf(where, sizeof where, "--%s", config_options[i].flag);
        if (a->values[i] && config_set(c, &config_options[i], a->values[i], where, e) < 0)
            return config_usage_error(e);
    }
    if (c->given[config_index("kubelet-socket")] && config_kubelet_socket(c, e) < 0)
        return -1;
    if (!c->dev_root[0])
        strcpy(c->dev_root, c->driver_root);
    /* GFD's choice of where labels go, where gpulet's own is not given:
     * NFD's NodeFeature API ends as labels on the Node, which gpulet writes
     * itself; otherwise NFD's feature file. */
    if (c->given[config_index("use-node-feature-api")] && !c->given[config_index("labels")])
        c->labels_output = c->use_node_feature_api ? CONFIG_LABELS_API : CONFIG_LABELS_FILE;
    /* In a container, NVML is the host's, under the mounted driver root. */
    if (!c->nvml_path[0] && !c->simulate[0] && c->container_driver_root[0] &&
        driver_find_library(config_read_root(c, c->driver_root), "libnvidia-ml.so.1",
                            c->nvml_path, sizeof c->nvml_path) < 0)
        c->nvml_path[0] = '\0';
    if (!strcmp(c->accelerator_label, "none"))
        c->accelerator_label[0] = '\0';
    if (config_check(c, e) < 0)
        return -1;
    unsigned caps;
    struct err ce;
    if (driver_parse_caps(c->driver_caps, &caps, &ce) < 0)
        return err_usage(e, "--driver-capabilities: %s", ce.msg);
    return 0;
}

/* Whether item is an index range "A-B" (A <= B) holding index. */
static bool config_index_range(const char *item, unsigned index)
{
    unsigned a, b;
    int n = 0;
    return sscanf(item, "%u-%u%n", &a, &b, &n) == 2 && !item[n] && a <= b && index >= a &&
           index <= b;
}

/* Whether a comma list of product-name globs, indexes, index ranges and
 * UUIDs names g. */
static bool config_gpus_match(const char *spec, const struct gpu_info *g)
{
    char list[256], index[16];
    snprintf(list, sizeof list, "%s", spec);
    snprintf(index, sizeof index, "%u", g->index);
    char *save = NULL;
    for (char *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save))
        if (!strcmp(item, index) || config_index_range(item, g->index) || !strcmp(item, g->uuid) ||
            fnmatch(item, g->name, 0) == 0)
            return true;
    return false;
}

bool config_dra_takes(const struct config *c, const struct gpu_info *g)
{
    return c->dra == CONFIG_DRA_ALL && config_gpus_match(c->dra_gpus, g);
}

bool config_dra_shares(const struct config *c, const struct gpu_info *g)
{
    return config_dra_takes(c, g) && config_gpus_match(c->dra_shares, g);
}

bool config_dra_mig(const struct config *c, const struct gpu_info *g)
{
    return config_dra_takes(c, g) && g->mig_mode == NVML_DEVICE_MIG_ENABLE &&
           config_gpus_match(c->dra_mig, g);
}

bool config_cdi_wanted(const struct config *c)
{
    /* DRA's prepared devices are this spec's, named by UUID. */
    return c->write_cdi_spec == CONFIG_CDI_WRITE_TRUE ||
           (c->write_cdi_spec == CONFIG_CDI_WRITE_AUTO &&
            (c->dra == CONFIG_DRA_ALL ||
             c->list_strategy & (CONFIG_LIST_CDI_ANNOTATIONS | CONFIG_LIST_CDI_CRI)));
}

const char *config_read_root(const struct config *c, const char *host_root)
{
    return c->container_driver_root[0] && !strcmp(host_root, c->driver_root)
               ? c->container_driver_root : host_root;
}

int config_find_tool(const struct config *c, const char *name, char *out, size_t len,
                     struct err *e)
{
    return driver_find_tool(config_read_root(c, c->driver_root), name, out, len, e);
}

void config_tool_place(const struct config *c, const char *path, char *root, size_t root_len,
                       char *inside, size_t inside_len)
{
    const char *croot = c->container_driver_root;
    size_t n = strlen(croot);
    while (n > 1 && croot[n - 1] == '/')
        n--;
    if (n > 1 && !strncmp(path, croot, n) && path[n] == '/') {
        snprintf(root, root_len, "%.*s", (int)n, croot);
        snprintf(inside, inside_len, "%s", path + n);
        return;
    }
    snprintf(root, root_len, "%s", "");
    snprintf(inside, inside_len, "%s", path);
}

int config_driver(const struct config *c, const char *read_root, const char *version,
                  struct driver *d, struct err *e)
{
    unsigned caps;
    if (driver_parse_caps(c->driver_caps, &caps, e) < 0)
        return -1;
    return driver_discover(d, c->driver_root, read_root ? read_root : c->container_driver_root,
                           version, caps, (enum driver_layout)c->driver_layout, e);
}

/* The name of an option's value (T_ENUM) or of its bit i (T_LIST), from
 * the table. */
static const char *config_choice(const char *flag, unsigned i)
{
    return config_options[config_index(flag)].choices[i];
}

/* Options that take no effect without another setting: said once at the
 * agent's start, where one is given without it (config_log_idle). Those
 * that need the API server to do anything at all (--config-map, --labels
 * api, --dra all) are refused without it instead (agent_kube_check). */
enum config_need { NEED_DRA, NEED_REPORT, NEED_MIG_PARTED };
static const struct {
    const char *flag;
    enum config_need need;
} config_idle[] = {
    {"dra-gpus", NEED_DRA},       {"dra-shares", NEED_DRA},   {"dra-mig", NEED_DRA},
    {"dra-evict-on", NEED_DRA},   {"dra-plugin-dir", NEED_DRA},
    {"fault-taint", NEED_REPORT}, {"fault-taint-on", NEED_REPORT},
    {"mig-config-in-use", NEED_MIG_PARTED},
};

void config_log_idle(const struct config *c, bool api)
{
    static const char *const why[] = {
        [NEED_DRA] = "DRA is off (--dra all turns it on)",
        [NEED_REPORT] = "the fault report is off (it needs the API server, and --fault-report auto)",
        [NEED_MIG_PARTED] = "the MIG manager is off (--mig-parted-config turns it on)",
    };
    const bool missing[] = {
        [NEED_DRA] = c->dra != CONFIG_DRA_ALL,
        [NEED_REPORT] = !api || c->fault_report == CONFIG_REPORT_NONE,
        [NEED_MIG_PARTED] = !c->mig_parted_config[0],
    };
    for (size_t i = 0; i < sizeof config_idle / sizeof *config_idle; i++) {
        size_t j = config_index(config_idle[i].flag);
        if (c->given[j] && missing[config_idle[i].need])
            log_warn("--%s (%s) takes no effect: %s", config_idle[i].flag, config_options[j].env,
                     why[config_idle[i].need]);
    }
}

void config_log(const struct config *c)
{
    struct strbuf lists = {0};
    for (unsigned i = 0; config_choice("device-list-strategy", i); i++)
        if (c->list_strategy & (1u << i))
            strbuf_printf(&lists, "%s%s", lists.len ? "," : "", config_choice("device-list-strategy", i));
    log_info("config: migStrategy=%s failOnInitError=%s deviceListStrategy=%s "
             "deviceIDStrategy=%s passDeviceSpecs=%s nvidiaDriverRoot=%s nvidiaDevRoot=%s "
             "kubeletRoot=%s xidRecovery=%us labels=%s resourceRules=%u%s%s",
             config_choice("mig-strategy", (unsigned)c->mig_strategy),
             c->fail_on_init_error ? "true" : "false", lists.data,
             config_choice("device-id-strategy", (unsigned)c->id_strategy),
             c->pass_device_specs ? "true" : "false",
             c->driver_root, c->dev_root, c->kubelet_root, c->xid_recovery_s,
             config_choice("labels", (unsigned)c->labels_output), c->nresources,
             c->config_file[0] ? " file=" : "", c->config_file);
    strbuf_free(&lists);
    config_log_unneeded(c);
}

void config_mps_dirs(const struct config *c, const char *name, struct config_mps_dirs *out)
{
    snprintf(out->dir, sizeof out->dir, "%s/%s", c->mps_root, name);
    snprintf(out->pipe, sizeof out->pipe, "%s/pipe", out->dir);
    snprintf(out->log, sizeof out->log, "%s/log", out->dir);
    snprintf(out->shm, sizeof out->shm, "%s/shm", c->mps_root);
}

void config_pod_resources_socket(const struct config *c, char *out, size_t len)
{
    if (c->pod_resources_socket[0])
        snprintf(out, len, "%s", c->pod_resources_socket);
    else
        snprintf(out, len, "%s/pod-resources/kubelet.sock", c->kubelet_root);
}
