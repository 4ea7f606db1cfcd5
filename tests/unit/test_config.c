/* Configuration: NVIDIA's flags, variables and v1 file, their precedence,
 * and one clear error (naming flag, variable, or file:line:column) each. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "util/dirs.h"
#include "testutil.h"

static char path[64];

static int clear_env(void **state)
{
    (void)state;
    static const char *const vars[] = {"MIG_STRATEGY", "DEVICE_ID_STRATEGY", "PASS_DEVICE_SPECS",
                                       "DEVICE_LIST_STRATEGY", "CONFIG_FILE", "FAIL_ON_INIT_ERROR"};
    for (size_t i = 0; i < 6; i++)
        unsetenv(vars[i]);
    return 0;
}

static void write_file(const char *text)
{
    snprintf(path, sizeof path, "/tmp/gpulet-config-%d.yaml", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int load(struct config *c, struct err *e, int argc, const char **argv)
{
    struct config_args a;
    if (config_parse_args(&a, argc, (char **)argv, e) < 0)
        return -1;
    return config_load(c, &a, NULL, e);
}

static void test_defaults(void **state)
{
    (void)state;
    struct config c;
    struct err e;
    const char *argv[] = {"agent"};
    assert_int_equal(load(&c, &e, 1, argv), 0);
    assert_int_equal(c.mig_strategy, CONFIG_MIG_NONE);
    assert_true(c.fail_on_init_error);
    assert_int_equal(c.list_strategy, CONFIG_LIST_ENVVAR);
    assert_int_equal(c.id_strategy, CONFIG_ID_UUID);
    assert_false(c.pass_device_specs);
    assert_string_equal(c.driver_root, "/");
    assert_string_equal(c.dev_root, "/");
    assert_string_equal(c.kubelet_root, "/var/lib/kubelet");
    assert_string_equal(c.cdi_prefix, "cdi.k8s.io/");
}

static void test_file_env_flags_precedence(void **state)
{
    (void)state;
    write_file("version: v1\n"
               "flags:\n"
               "  migStrategy: none\n"
               "  failOnInitError: false\n"
               "  nvidiaDriverRoot: /run/nvidia/driver\n"
               "  useNodeFeatureAPI: false\n"
               "  plugin:\n"
               "    passDeviceSpecs: true\n"
               "    deviceListStrategy: [envvar, cdi-cri]\n"
               "    deviceIDStrategy: index\n"
               "  gfd:\n"
               "    oneshot: true\n");
    struct config c;
    struct err e;
    const char *argv[] = {"agent", "--config-file", path};
    assert_int_equal(load(&c, &e, 3, argv), 0);
    assert_false(c.fail_on_init_error);
    assert_int_equal(c.labels_output, CONFIG_LABELS_FILE); /* GFD's: NFD's file */
    assert_true(c.pass_device_specs);
    assert_int_equal(c.list_strategy, CONFIG_LIST_ENVVAR | CONFIG_LIST_CDI_CRI);
    assert_int_equal(c.id_strategy, CONFIG_ID_INDEX);
    assert_string_equal(c.dev_root, "/run/nvidia/driver"); /* follows the driver root */
    setenv("DEVICE_ID_STRATEGY", "uuid", 1);                /* env beats the file */
    setenv("PASS_DEVICE_SPECS", "false", 1);
    assert_int_equal(load(&c, &e, 3, argv), 0);
    assert_int_equal(c.id_strategy, CONFIG_ID_UUID);
    assert_false(c.pass_device_specs);
    const char *argv2[] = {"agent", "--config-file", path, "--device-id-strategy", "index"};
    assert_int_equal(load(&c, &e, 5, argv2), 0);             /* flags beat the env */
    assert_int_equal(c.id_strategy, CONFIG_ID_INDEX);
    unsetenv("DEVICE_ID_STRATEGY");
    unsetenv("PASS_DEVICE_SPECS");
    setenv("CONFIG_FILE", path, 1);                          /* the file from the env */
    const char *argv3[] = {"agent"};
    assert_int_equal(load(&c, &e, 1, argv3), 0);
    assert_string_equal(c.config_file, path);
    unlink(path);
}

static void expect_file_error(const char *text, const char *where, const char *what)
{
    write_file(text);
    struct config c;
    struct err e;
    const char *argv[] = {"agent", "--config-file", path};
    if (load(&c, &e, 3, argv) == 0)
        fail_msg("accepted:\n%s", text);
    char full[128];
    snprintf(full, sizeof full, "%s:%s", path, where);
    assert_contains(e.msg, full);
    assert_contains(e.msg, what);
    unlink(path);
}

static void test_file_errors(void **state)
{
    (void)state;
    expect_file_error("version: v2\n", "1:10", "version must be v1");
    expect_file_error("version: v1\nflags:\n  migStrategy: all\n", "3:16",
                      "flags.migStrategy must be one of none, single, mixed, not 'all'");
    expect_file_error("flags:\n  plugin:\n    deviceIDStrategy: serial\n", "3:23",
                      "flags.plugin.deviceIDStrategy must be one of uuid, index");
    expect_file_error("flags:\n  plugin:\n    passDeviceSpec: true\n", "3:5",
                      "unknown key 'flags.plugin.passDeviceSpec'");
    expect_file_error("flags:\n  plugin:\n    deviceListStrategy: [envvar, nope]\n", "3:25",
                      "each must be one of envvar, volume-mounts, cdi-annotations, cdi-cri, driver-mounts, not 'nope'");
    expect_file_error("flags:\n  failOnInitError: maybe\n", "2:20", "must be true or false");
    expect_file_error("imex:\n  channelIDs: [0]\n", "2:3",
                      "IMEX channels are not supported yet");
    expect_file_error("sharing:\n  timeSlicing:\n    resources: []\n", "3:16",
                      "sharing.timeSlicing.resources must be a non-empty list");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 1}\n",
                      "4:29", "sharing.timeSlicing.resources[0].replicas must be from 2 to 1024, not '1'");
    expect_file_error("sharing:\n  mps:\n    resources:\n    - {name: gpu, replicas: x}\n",
                      "4:29", "sharing.mps.resources[0].replicas must be from 2 to 1024, not 'x'");
    expect_file_error("sharing:\n  mps:\n    resources:\n    - {name: gpu}\n", "4:7",
                      "sharing.mps.resources[0] needs name and replicas");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n"
                      "    - {name: gpu, replicas: 2, devices: some}\n", "4:41",
                      "devices must be all, a count, or a list");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n"
                      "    - {name: gpu, replicas: 2, devices: []}\n", "4:41",
                      "a non-empty list");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n"
                      "    - {name: GPU, replicas: 2}\n", "4:14", "resource name 'GPU' is not valid");
    expect_file_error("sharing:\n  timeSlicing:\n    resources: [{name: gpu, replicas: 2}]\n"
                      "  mps:\n    resources: [{name: gpu, replicas: 2}]\n", "5:5",
                      "time-slicing and MPS cannot both be configured");
    expect_file_error("sharing:\n  timeSlicing:\n    renameByDefault: maybe\n"
                      "    resources: [{name: gpu, replicas: 2}]\n", "3:22", "renameByDefault");
    expect_file_error("flagz: {}\n", "1:1", "unknown key 'flagz'");
    expect_file_error("flags: [1]\n", "1:8", "flags must be a mapping");
    expect_file_error("flags:\n  migStrategy: [none]\n", "2:16", "must be a single value");
    expect_file_error("flags: {migStrategy: none\n", "", "");
    expect_file_error("resources:\n  gpus:\n  - {pattern: '*', name: H100}\n", "3:26",
                      "resource name 'H100' is not valid");
    expect_file_error("resources:\n  gpus:\n  - {pattern: '*'}\n", "3:5",
                      "needs pattern and name");
    expect_file_error("resources:\n  mig:\n  - {pattern: '1g.10gb', name: small}\n", "3:3",
                      "MIG resources are not supported yet");
    expect_file_error("resources:\n  gpus: {pattern: x}\n", "2:9", "must be a list");
    expect_file_error("resources:\n  gpu: []\n", "2:3", "unknown key");
    /* A repeated key is refused, not the last one taken. */
    expect_file_error("flags:\n  migStrategy: none\n  migStrategy: mixed\n", "3:3",
                      "duplicate key 'migStrategy' (first at line 2)");
    expect_file_error("sharing: {}\nflags: {}\nsharing: {}\n", "3:1", "duplicate key 'sharing'");
    /* Of several errors, the first in the file. */
    expect_file_error("flags:\n  migStrategy: all\nsharing:\n  timeSlicing:\n    resources: []\n",
                      "2:16", "flags.migStrategy");
    expect_file_error("sharing:\n  timeSlicing:\n    resources: []\nflags:\n  migStrategy: all\n",
                      "3:16", "sharing.timeSlicing.resources");
    expect_file_error("sharing:\n  timeSlicing:\n    failRequestsGreaterThanOne: maybe\n"
                      "    renameByDefault: maybe\n    resources: [{name: gpu, replicas: 2}]\n",
                      "3:33", "failRequestsGreaterThanOne must be true or false");
    expect_file_error("sharing:\n  timeSlicing:\n    resources:\n    - {name: gpu, replicas: 1}\n"
                      "    bogus: 1\n", "4:29", "replicas must be from 2 to 1024");
    expect_file_error("resources:\n  gpus:\n  - {name: H100, pattern: x, nope: 1}\n", "3:12",
                      "resource name 'H100' is not valid");
    /* Booleans as NVIDIA's YAML parser reads them: a quoted one is a string. */
    expect_file_error("flags:\n  failOnInitError: \"true\"\n", "2:20",
                      "must be true or false, not the string 'true'");
    expect_file_error("flags:\n  failOnInitError: yEs\n", "2:20", "not 'yEs'");
}

/* The file's booleans are YAML 1.1's; the flags' and variables' Go's
 * strconv.ParseBool's: each as NVIDIA's parsers take them. */
static void test_bool_words(void **state)
{
    (void)state;
    static const struct {
        const char *word;
        bool value;
    } file[] = {{"yes", true}, {"Y", true}, {"ON", true}, {"True", true},
                {"no", false}, {"n", false}, {"Off", false}, {"FALSE", false}};
    struct config c;
    struct err e;
    const char *argv[] = {"agent", "--config-file", path};
    for (size_t i = 0; i < sizeof file / sizeof *file; i++) {
        char text[64];
        snprintf(text, sizeof text, "flags:\n  failOnInitError: %s\n", file[i].word);
        write_file(text);
        assert_int_equal(load(&c, &e, 3, argv), 0);
        assert_int_equal(c.fail_on_init_error, file[i].value);
        unlink(path);
    }
    const char *plain[] = {"agent"};
    setenv("FAIL_ON_INIT_ERROR", "F", 1);
    assert_int_equal(load(&c, &e, 1, plain), 0);
    assert_false(c.fail_on_init_error);
    setenv("FAIL_ON_INIT_ERROR", "yes", 1);
    assert_int_equal(load(&c, &e, 1, plain), -1);
    assert_contains(e.msg, "environment variable FAIL_ON_INIT_ERROR must be true or false, not 'yes'");
    unsetenv("FAIL_ON_INIT_ERROR");
}

static void test_flag_and_env_errors(void **state)
{
    (void)state;
    struct config c;
    struct err e;
    const char *bad_flag[] = {"agent", "--device-list-strategy", "envvar,oops"};
    assert_int_equal(load(&c, &e, 3, bad_flag), -1);
    assert_contains(e.msg, "--device-list-strategy: each must be one of envvar, volume-mounts, cdi-annotations, cdi-cri, driver-mounts, not 'oops'");
    const char *unknown[] = {"agent", "--resource-name", "x"};
    assert_int_equal(load(&c, &e, 3, unknown), -1);
    assert_contains(e.msg, "unknown option '--resource-name'");
    const char *prefix[] = {"agent", "--mig-strat", "none"}; /* getopt alone would take it */
    assert_int_equal(load(&c, &e, 3, prefix), -1);
    assert_contains(e.msg, "unknown option '--mig-strat'");
    const char *value[] = {"agent", "--config-file", "--not-an-option"}; /* a value, not checked */
    assert_int_equal(load(&c, &e, 3, value), -1);
    assert_contains(e.msg, "--not-an-option");
    const char *bad_uint[] = {"agent", "--xid-recovery-seconds", "-5"};
    assert_int_equal(load(&c, &e, 3, bad_uint), -1);
    assert_contains(e.msg, "--xid-recovery-seconds must be a whole number");
    /* A bound broken is out of range, and named by what gave it. */
    const char *big[] = {"agent", "--hang-seconds", "3601"};
    assert_int_equal(load(&c, &e, 3, big), -1);
    assert_contains(e.msg, "--hang-seconds is out of range: from 1 to 3600, not '3601'");
    setenv("GPULET_HANG_SECONDS", "0", 1);
    assert_int_equal(load(&c, &e, 1, (const char *[]){"agent"}), -1);
    assert_contains(e.msg, "environment variable GPULET_HANG_SECONDS is out of range");
    unsetenv("GPULET_HANG_SECONDS");
    setenv("DCGM_EXPORTER_INTERVAL", "50", 1);
    assert_int_equal(load(&c, &e, 1, (const char *[]){"agent"}), -1);
    assert_contains(e.msg, "environment variable DCGM_EXPORTER_INTERVAL is out of range: from 100");
    unsetenv("DCGM_EXPORTER_INTERVAL");
    setenv("MIG_STRATEGY", "weird", 1);
    const char *plain[] = {"agent"};
    assert_int_equal(load(&c, &e, 1, plain), -1);
    assert_contains(e.msg, "environment variable MIG_STRATEGY must be one of none, single, mixed");
    unsetenv("MIG_STRATEGY");
    const char *missing[] = {"agent", "--config-file", "/nonexistent.yaml"};
    assert_int_equal(load(&c, &e, 3, missing), -1);
    assert_contains(e.msg, "/nonexistent.yaml: No such file");
}

/* Boolean flags take their value bare, after '=', or as the next word. */
static void test_bool_flag_forms(void **state)
{
    (void)state;
    struct config c;
    struct err e;
    const char *bare[] = {"agent", "--pass-device-specs", "--fail-on-init-error=false"};
    assert_int_equal(load(&c, &e, 3, bare), 0);
    assert_true(c.pass_device_specs);
    assert_false(c.fail_on_init_error);
    const char *spaced[] = {"agent", "--fail-on-init-error", "FALSE", "--pass-device-specs", "1"};
    assert_int_equal(load(&c, &e, 5, spaced), 0);
    assert_false(c.fail_on_init_error);
    assert_true(c.pass_device_specs);
    const char *bad[] = {"agent", "--pass-device-specs=maybe"};
    assert_int_equal(load(&c, &e, 2, bad), -1);
    assert_contains(e.msg, "--pass-device-specs must be true or false, not 'maybe'");
    const char *stray[] = {"agent", "--pass-device-specs", "maybe"};
    assert_int_equal(load(&c, &e, 3, stray), -1);
    assert_contains(e.msg, "unexpected argument 'maybe'");
}

/* The API's answers as the watch hands them: parsed once. */
static int named_parse(struct config_named_set *s, const char *text, struct err *e)
{
    json_t *cm = json_loads(text, 0, NULL);
    int rc = config_named_parse(s, cm, e);
    json_decref(cm);
    return rc;
}

static int node_label(const char *text, const char *key, char *out, size_t len, struct err *e)
{
    json_t *node = json_loads(text, 0, NULL);
    int rc = config_node_label(node, key, out, len, e);
    json_decref(node);
    return rc;
}

/* Per-node configuration: a ConfigMap's data, the Node's label, and
 * NVIDIA's config-manager's choice. */
static void test_named_configs(void **state)
{
    (void)state;
    struct config_named_set s;
    struct err e;
    const char *cm = "{\"kind\":\"ConfigMap\",\"data\":{\"ts4\":\"version: v1\\n\","
                     "\"default\":\"version: v1\\n\",\"a100\":\"\"}}";
    assert_int_equal(named_parse(&s, cm, &e), 0);
    assert_int_equal(s.count, 3);
    assert_string_equal(s.items[0].name, "a100"); /* sorted */
    assert_string_equal(s.items[2].text, "version: v1\n");
    const struct config_named *n;
    const char *why;
    assert_int_equal(config_named_choose(&s, "ts4", "", &n, &why, &e), 0);
    assert_string_equal(n->name, "ts4");
    assert_string_equal(why, "the node label");
    assert_int_equal(config_named_choose(&s, "", "a100", &n, &why, &e), 0);
    assert_string_equal(n->name, "a100");
    assert_int_equal(config_named_choose(&s, NULL, NULL, &n, &why, &e), 0);
    assert_string_equal(n->name, "default");
    assert_int_equal(config_named_choose(&s, "nope", "a100", &n, &why, &e), -1);
    assert_null(n);
    assert_string_equal(e.msg, "the node label names config 'nope', which the ConfigMap does not "
                               "have (it has: a100, default, ts4)");
    config_named_free(&s);

    /* The only one; several without a default; none. */
    const char *one = "{\"data\":{\"x\":\"version: v1\"}}";
    assert_int_equal(named_parse(&s, one, &e), 0);
    assert_int_equal(config_named_choose(&s, "", "", &n, &why, &e), 0);
    assert_string_equal(n->name, "x");
    config_named_free(&s);
    const char *two = "{\"data\":{\"x\":\"\",\"y\":\"\"}}";
    assert_int_equal(named_parse(&s, two, &e), 0);
    assert_int_equal(config_named_choose(&s, "", "", &n, &why, &e), 0);
    assert_null(n);
    assert_string_equal(why, "several configs and none named default");
    config_named_free(&s);
    assert_int_equal(named_parse(&s, "{}", &e), 0);
    assert_int_equal(s.count, 0);
    assert_int_equal(config_named_choose(&s, "", "d", &n, &why, &e), -1);
    assert_string_equal(e.msg, "--default-config names config 'd', which the ConfigMap does not "
                               "have (it has: none)");

    /* Bad answers: one error each. */
    assert_int_equal(named_parse(&s, "{", &e), -1);
    assert_string_equal(e.msg, "the ConfigMap is not an object");
    const char *bad = "{\"data\":{\"x\":3}}";
    assert_int_equal(named_parse(&s, bad, &e), -1);
    assert_string_equal(e.msg, "the ConfigMap's data.x is not text");
    assert_int_equal(named_parse(&s, "{\"data\":[]}", &e), -1);
    assert_string_equal(e.msg, "the ConfigMap's data is not a map");

    char label[64];
    const char *node = "{\"metadata\":{\"labels\":{\"nvidia.com/device-plugin.config\":\"ts4\"}}}";
    assert_int_equal(node_label(node, "nvidia.com/device-plugin.config", label,
                                       sizeof label, &e), 0);
    assert_string_equal(label, "ts4");
    assert_int_equal(node_label(node, "other", label, sizeof label, &e), 0);
    assert_string_equal(label, "");
    assert_int_equal(node_label("[", "x", label, sizeof label, &e), -1);
}

/* A named config replaces the file; the environment and flags still win. */
static void test_named_config_load(void **state)
{
    (void)state;
    struct config_args a;
    struct err e;
    const char *argv[] = {"agent", "--device-id-strategy", "index"};
    assert_int_equal(config_parse_args(&a, 3, (char **)argv, &e), 0);
    const char *text = "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n"
                       "    deviceIDStrategy: uuid\n";
    const struct config_text named = {"x", "ConfigMap ns/m key x", text, strlen(text)};
    struct config c;
    assert_int_equal(config_load(&c, &a, &named, &e), 0);
    assert_int_equal(c.mig_strategy, CONFIG_MIG_MIXED);
    assert_int_equal(c.id_strategy, CONFIG_ID_INDEX);
    const char *bad = "version: v1\nflags:\n  migStrategy: some\n";
    const struct config_text named_bad = {"x", "ConfigMap ns/m key x", bad, strlen(bad)};
    assert_int_equal(config_load(&c, &a, &named_bad, &e), -1);
    assert_true(strstr(e.msg, "ConfigMap ns/m key x:3:16: flags.migStrategy must be one of") != NULL);
}

/* A memory limit is a Kubernetes quantity, with the meaning a DRA claim's
 * has too: 8G is 8 x 10^9 bytes (7629 MiB), 8Gi 8192 MiB. */
static void test_memory_limit_is_a_quantity(void **state)
{
    (void)state;
    struct config_args a;
    struct err e;
    const char *argv[] = {"agent"};
    assert_int_equal(config_parse_args(&a, 1, (char **)argv, &e), 0);
    static const struct {
        const char *limit;
        unsigned long long mib;
    } cases[] = {{"8G", 7629}, {"8Gi", 8192}, {"1.5Gi", 1536}, {"8589934592", 8192}, {"1Ti", 1048576}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char text[256];
        snprintf(text, sizeof text, "version: v1\nsharing:\n  mps:\n    resources:\n"
                 "    - {name: nvidia.com/gpu, replicas: 2, memoryLimit: %s}\n", cases[i].limit);
        const struct config_text named = {"x", "test", text, strlen(text)};
        struct config c;
        assert_int_equal(config_load(&c, &a, &named, &e), 0);
        assert_int_equal(c.shared[0].memory_limit_mib, cases[i].mib);
    }
    const char *bad = "version: v1\nsharing:\n  mps:\n    resources:\n"
                      "    - {name: nvidia.com/gpu, replicas: 2, memoryLimit: 1Ki}\n";
    const struct config_text named_bad = {"x", "test", bad, strlen(bad)};
    struct config c;
    assert_int_equal(config_load(&c, &a, &named_bad, &e), -1);
    assert_non_null(strstr(e.msg, "memoryLimit must be a size of at least 1Mi"));
}

/* A simulated agent keeps its paths in the user's directory, except the
 * CDI specs of one pointed at a kubelet: its runtime must find them. And
 * a configuration printed as flags (the agent's answer to doctor) loads
 * back as the same configuration. */
static void test_user_paths_and_args_text(void **state)
{
    (void)state;
    unsetenv("KUBERNETES_SERVICE_HOST");
    char cdi[256], kubelet[256], status[256];
    dirs_user_file("cdi", cdi, sizeof cdi);
    dirs_user_file("kubelet", kubelet, sizeof kubelet);
    dirs_user_file("status.sock", status, sizeof status);
    struct config c;
    struct err e;
    const char *demo[] = {"agent", "--simulate", "t4"};
    assert_int_equal(load(&c, &e, 3, demo), 0);
    config_user_paths(&c);
    assert_string_equal(c.cdi_spec_dir, cdi);
    assert_string_equal(c.kubelet_root, kubelet);
    const char *served[] = {"agent", "--simulate", "t4", "--kubelet-root", "/var/lib/kubelet",
                            "--mig-strategy", "mixed", "--device-list-strategy", "cdi-cri,envvar"};
    assert_int_equal(load(&c, &e, 9, served), 0);
    config_user_paths(&c);
    assert_string_equal(c.cdi_spec_dir, "/var/run/cdi");
    assert_string_equal(c.status_socket, status);
    struct strbuf text = {0};
    config_args_text(&c, &text);
    assert_non_null(strstr(text.data, "--mig-strategy=mixed\n"));
    assert_non_null(strstr(text.data, "--device-list-strategy=envvar,cdi-cri\n"));
    char *argv[80] = {"agent"};
    int argc = 1;
    for (char *line = strtok(text.data, "\n"); line && argc < 80; line = strtok(NULL, "\n"))
        argv[argc++] = line;
    struct config back;
    assert_int_equal(load(&back, &e, argc, (const char **)argv), 0);
    assert_int_equal(back.mig_strategy, c.mig_strategy);
    assert_int_equal(back.list_strategy, c.list_strategy);
    assert_string_equal(back.cdi_spec_dir, c.cdi_spec_dir);
    assert_string_equal(back.status_socket, c.status_socket);
    assert_string_equal(back.metrics_listen, c.metrics_listen);
    strbuf_free(&text);
}

/* A driver program is looked for under the driver root as gpulet sees it
 * (in its container, the container driver root, whatever the host calls
 * the driver root), and runs there, on the driver root's own files. */
static void test_driver_tools(void **state)
{
    (void)state;
    char dir[64], bin[128], path[256], root[256], inside[256];
    snprintf(dir, sizeof dir, "/tmp/gpulet-ctr-root-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(bin, sizeof bin, "%s/usr/local/nvidia/bin", dir);
    struct err e;
    assert_int_equal(dirs_make(NULL, bin, 0755, &e), 0);
    strcat(bin, "/nvidia-cuda-mps-control");
    FILE *f = fopen(bin, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(chmod(bin, 0755), 0);
    const char *roots[] = {"/", "/run/nvidia/driver"};
    for (size_t i = 0; i < 2; i++) {
        setenv("NVIDIA_DRIVER_ROOT", roots[i], 1);
        setenv("CONTAINER_DRIVER_ROOT", dir, 1);
        struct config c;
        const char *argv[] = {"agent"};
        assert_int_equal(load(&c, &e, 1, argv), 0);
        assert_int_equal(config_find_tool(&c, "nvidia-cuda-mps-control", path, sizeof path, &e), 0);
        assert_string_equal(path, bin);
        config_tool_place(&c, path, root, sizeof root, inside, sizeof inside);
        assert_string_equal(root, dir);
        assert_string_equal(inside, "/usr/local/nvidia/bin/nvidia-cuda-mps-control");
        /* one given outside the driver root runs as it is */
        config_tool_place(&c, "/opt/mps/control", root, sizeof root, inside, sizeof inside);
        assert_string_equal(root, "");
        assert_string_equal(inside, "/opt/mps/control");
        /* a missing one names where it was looked for, as gpulet sees it */
        assert_int_equal(config_find_tool(&c, "nvidia-smi", path, sizeof path, &e), -1);
        assert_contains(e.msg, dir);
    }
    /* not in a container: the driver root itself, run directly */
    unsetenv("CONTAINER_DRIVER_ROOT");
    setenv("NVIDIA_DRIVER_ROOT", dir, 1);
    struct config c;
    const char *argv[] = {"agent"};
    assert_int_equal(load(&c, &e, 1, argv), 0);
    assert_int_equal(config_find_tool(&c, "nvidia-cuda-mps-control", path, sizeof path, &e), 0);
    assert_string_equal(path, bin);
    config_tool_place(&c, path, root, sizeof root, inside, sizeof inside);
    assert_string_equal(root, "");
    assert_string_equal(inside, bin);
    unsetenv("NVIDIA_DRIVER_ROOT");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_defaults, clear_env),
        cmocka_unit_test_setup(test_named_configs, clear_env),
        cmocka_unit_test_setup(test_named_config_load, clear_env),
        cmocka_unit_test_setup(test_file_env_flags_precedence, clear_env),
        cmocka_unit_test_setup(test_file_errors, clear_env),
        cmocka_unit_test_setup(test_flag_and_env_errors, clear_env),
        cmocka_unit_test_setup(test_bool_flag_forms, clear_env),
        cmocka_unit_test_setup(test_bool_words, clear_env),
        cmocka_unit_test_setup(test_user_paths_and_args_text, clear_env),
        cmocka_unit_test_setup(test_memory_limit_is_a_quantity, clear_env),
        cmocka_unit_test_setup(test_driver_tools, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
