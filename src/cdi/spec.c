/* Building and writing the CDI spec. The JSON tree is built once; YAML is
 * libyaml's emitter walking the same tree. */
#include "cdi/cdi.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "util/dirs.h"
#include "util/file.h"
#include "util/jsonx.h"
#include "util/xmalloc.h"

/* Control nodes a container needs, where they exist on the host. */
static const char *const cdi_control_nodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                                "nvidia-modeset"};

/* A device node: path in the container, and the host's where the dev
 * root is not "/". NULL where must_exist and the host has none. */
static json_t *cdi_node(const struct config *cfg, const char *name, bool must_exist)
{
    const char *root = cfg->dev_root[0] ? cfg->dev_root : cfg->driver_root;
    const char *read_root = config_read_root(cfg, root);
    bool slash = !root[0] || !strcmp(root, "/");
    char path[64], host[CONFIG_PATH_MAX + 64], read[CONFIG_PATH_MAX + 64];
    snprintf(path, sizeof path, "/dev/%s", name);
    snprintf(host, sizeof host, "%s/dev/%s", slash ? "" : root, name);
    snprintf(read, sizeof read, "%s/dev/%s", strcmp(read_root, "/") ? read_root : "", name);
    struct stat st;
    if (must_exist && stat(read, &st) != 0)
        return NULL;
    json_t *n = jsonx_ok(json_object());
    jsonx_set(n, "path", jsonx_ok(json_string(path)));
    if (!slash)
        jsonx_set(n, "hostPath", jsonx_ok(json_string(host)));
    return n;
}

static json_t *cdi_gpu_device(const char *name, json_t *nodes)
{
    json_t *d = jsonx_ok(json_object()), *edits = jsonx_ok(json_object());
    jsonx_set(d, "name", jsonx_ok(json_string(name)));
    jsonx_set(edits, "deviceNodes", nodes);
    jsonx_set(d, "containerEdits", edits);
    return d;
}

/* A GPU's node, whether or not it exists yet: a spec names every GPU. */
static json_t *cdi_gpu_node(const struct config *cfg, unsigned minor)
{
    char name[32];
    snprintf(name, sizeof name, "nvidia%u", minor);
    return cdi_node(cfg, name, false);
}

static json_t *cdi_common(const struct driver *drv, const struct config *cfg)
{
    json_t *edits = jsonx_ok(json_object()), *env = jsonx_ok(json_array());
    json_t *nodes = jsonx_ok(json_array()), *mounts = jsonx_ok(json_array());
    /* The toolkit's hook, if a runtime still has one, must add nothing. */
    jsonx_append(env, jsonx_ok(json_string("NVIDIA_VISIBLE_DEVICES=void")));
    for (size_t i = 0; i < sizeof cdi_control_nodes / sizeof *cdi_control_nodes; i++) {
        json_t *n = cdi_node(cfg, cdi_control_nodes[i], true);
        if (n)
            jsonx_append(nodes, n);
    }
    for (unsigned i = 0; drv && i < drv->nmounts; i++) {
        json_t *m = jsonx_ok(json_object()), *opts = jsonx_ok(json_array());
        jsonx_set(m, "hostPath", jsonx_ok(json_string(drv->mounts[i].host)));
        jsonx_set(m, "containerPath", jsonx_ok(json_string(drv->mounts[i].container)));
        for (const char *const *o = (const char *const[]){"ro", "nosuid", "nodev", "bind", NULL}; *o; o++)
            jsonx_append(opts, jsonx_ok(json_string(*o)));
        jsonx_set(m, "options", opts);
        jsonx_append(mounts, m);
    }
    jsonx_set(edits, "env", env);
    if (json_array_size(nodes))
        jsonx_set(edits, "deviceNodes", nodes);
    else
        json_decref(nodes);
    if (json_array_size(mounts))
        jsonx_set(edits, "mounts", mounts);
    else
        json_decref(mounts);
    return edits;
}

/* A GPU's MIG devices, by MIG UUID and by "<GPU>:<MIG index>" (the IDs of
 * the MIG strategies): the GPU's node and the access capabilities of the
 * device's GPU instance and compute instance. */
static void cdi_mig_devices(json_t *devs, const struct gpu_info *g, const struct config *cfg)
{
    for (unsigned k = 0; g->mig_mode == NVML_DEVICE_MIG_ENABLE && k < g->nmig; k++) {
        const struct gpu_mig *m = &g->mig[k];
        json_t *nodes = jsonx_ok(json_array());
        char name[48];
        jsonx_append(nodes, cdi_gpu_node(cfg, g->minor));
        snprintf(name, sizeof name, "nvidia-caps/nvidia-cap%u",
                 gpu_mig_cap_minor(cfg->proc_root, g->minor, m->gi, -1));
        jsonx_append(nodes, cdi_node(cfg, name, false));
        snprintf(name, sizeof name, "nvidia-caps/nvidia-cap%u",
                 gpu_mig_cap_minor(cfg->proc_root, g->minor, m->gi, (int)m->ci));
        jsonx_append(nodes, cdi_node(cfg, name, false));
        snprintf(name, sizeof name, "%u:%u", g->index, k);
        jsonx_append(devs, cdi_gpu_device(name, json_deep_copy(nodes)));
        jsonx_append(devs, cdi_gpu_device(m->uuid, nodes));
    }
}

static json_t *cdi_spec(const struct gpu_inventory *inv, const struct driver *drv,
                        const struct config *cfg)
{
    json_t *spec = jsonx_ok(json_object()), *devs = jsonx_ok(json_array());
    json_t *all = jsonx_ok(json_array());
    jsonx_set(spec, "cdiVersion", jsonx_ok(json_string(CDI_VERSION)));
    jsonx_set(spec, "kind", jsonx_ok(json_string(CDI_KIND)));
    for (unsigned i = 0; i < inv->count; i++) {
        const struct gpu_info *g = &inv->gpus[i];
        char index[16];
        snprintf(index, sizeof index, "%u", g->index);
        /* The names Allocate's cdi-annotations and cdi-cri give: the device
         * ID, a UUID or an index. */
        json_t *one = jsonx_ok(json_array());
        jsonx_append(one, cdi_gpu_node(cfg, g->minor));
        jsonx_append(devs, cdi_gpu_device(index, json_deep_copy(one)));
        jsonx_append(devs, cdi_gpu_device(g->uuid, one));
        jsonx_append(all, cdi_gpu_node(cfg, g->minor));
        cdi_mig_devices(devs, g, cfg);
    }
    jsonx_append(devs, cdi_gpu_device("all", all));
    jsonx_set(spec, "devices", devs);
    jsonx_set(spec, "containerEdits", cdi_common(drv, cfg));
    return spec;
}

/* --- YAML: the same tree through libyaml's emitter -------------------- */

static int cdi_yaml_write(void *ctx, unsigned char *buf, size_t len)
{
    strbuf_append(ctx, (const char *)buf, len);
    return 1;
}

/* A string YAML reads back as a string when written plain. */
static bool cdi_yaml_plain(const char *s)
{
    static const char *const words[] = {"true", "false", "yes", "no", "on", "off", "null", "~"};
    if (!*s)
        return false;
    char *end;
    strtod(s, &end);
    if (!*end)
        return false;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++)
        if (!strcasecmp(s, words[i]))
            return false;
    return true;
}

static bool cdi_yaml_node(yaml_emitter_t *em, const json_t *v)
{
    yaml_event_t ev;
    if (json_is_object(v)) {
        yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_MAPPING_STYLE);
        if (!yaml_emitter_emit(em, &ev))
            return false;
        const char *key;
        const json_t *val;
        json_object_foreach((json_t *)v, key, val) {
            yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)key, -1, 1, 1,
                                         YAML_PLAIN_SCALAR_STYLE);
            if (!yaml_emitter_emit(em, &ev) || !cdi_yaml_node(em, val))
                return false;
        }
        yaml_mapping_end_event_initialize(&ev);
        return yaml_emitter_emit(em, &ev);
    }
    if (json_is_array(v)) {
        yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1, YAML_BLOCK_SEQUENCE_STYLE);
        if (!yaml_emitter_emit(em, &ev))
            return false;
        size_t i;
        const json_t *val;
        json_array_foreach(v, i, val) if (!cdi_yaml_node(em, val)) return false;
        yaml_sequence_end_event_initialize(&ev);
        return yaml_emitter_emit(em, &ev);
    }
    /* Every scalar in a spec is a string: quoted where YAML would read it
     * otherwise ("0" as a number), plain elsewhere. */
    const char *s = json_string_value(v);
    s = s ? s : "";
    yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, -1, 1, 1,
                                 cdi_yaml_plain(s) ? YAML_PLAIN_SCALAR_STYLE
                                                   : YAML_DOUBLE_QUOTED_SCALAR_STYLE);
    return yaml_emitter_emit(em, &ev);
}

static int cdi_yaml(const json_t *spec, struct strbuf *out, struct err *e)
{
    yaml_emitter_t em;
    yaml_event_t ev;
    if (!yaml_emitter_initialize(&em))
        xmalloc_fail(sizeof em);
    yaml_emitter_set_output(&em, cdi_yaml_write, out);
    yaml_emitter_set_unicode(&em, 1);
    yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING);
    bool ok = yaml_emitter_emit(&em, &ev);
    yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, 1);
    ok = ok && yaml_emitter_emit(&em, &ev) && cdi_yaml_node(&em, spec);
    yaml_document_end_event_initialize(&ev, 1);
    ok = ok && yaml_emitter_emit(&em, &ev);
    yaml_stream_end_event_initialize(&ev);
    ok = ok && yaml_emitter_emit(&em, &ev);
    if (!ok)
        err_set(e, "CDI spec: YAML output failed: %s", em.problem ? em.problem : "unknown");
    yaml_emitter_delete(&em);
    return ok ? 0 : -1;
}

int cdi_spec_text(const struct gpu_inventory *inv, const struct driver *drv,
                  const struct config *cfg, bool yaml, struct strbuf *out, struct err *e)
{
    json_t *spec = cdi_spec(inv, drv, cfg);
    int rc = 0;
    if (yaml)
        rc = cdi_yaml(spec, out, e);
    else
        jsonx_dump(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER, out), strbuf_puts(out, "\n");
    json_decref(spec);
    return rc;
}

void cdi_edits_env(struct cdi_edits *e, const char *name, const char *value)
{
    if (e->nenv < CDI_EDITS_MAX)
        snprintf(e->env[e->nenv++], sizeof e->env[0], "%s=%s", name, value);
}

void cdi_edits_mount(struct cdi_edits *e, const char *host, const char *container)
{
    if (e->nmounts == CDI_EDITS_MAX)
        return;
    snprintf(e->mounts[e->nmounts].host, sizeof e->mounts[0].host, "%s", host);
    snprintf(e->mounts[e->nmounts].container, sizeof e->mounts[0].container, "%s", container);
    e->nmounts++;
}

void cdi_edits_spec(const char *kind, const char *name, const struct cdi_edits *e, struct strbuf *out)
{
    json_t *mounts = jsonx_ok(json_array()), *env = jsonx_ok(json_array());
    for (unsigned i = 0; i < e->nmounts; i++) {
        json_t *mt = jsonx_ok(json_object()), *opts = jsonx_ok(json_array());
        jsonx_set(mt, "hostPath", jsonx_ok(json_string(e->mounts[i].host)));
        jsonx_set(mt, "containerPath", jsonx_ok(json_string(e->mounts[i].container)));
        jsonx_append(opts, jsonx_ok(json_string("rbind")));
        jsonx_append(opts, jsonx_ok(json_string("rw")));
        jsonx_set(mt, "options", opts);
        jsonx_append(mounts, mt);
    }
    for (unsigned i = 0; i < e->nenv; i++)
        jsonx_append(env, jsonx_ok(json_string(e->env[i])));
    json_t *edits = jsonx_ok(json_object()), *dev = jsonx_ok(json_object());
    json_t *devs = jsonx_ok(json_array());
    jsonx_set(edits, "env", env);
    jsonx_set(edits, "mounts", mounts);
    jsonx_set(dev, "name", jsonx_ok(json_string(name)));
    jsonx_set(dev, "containerEdits", edits);
    jsonx_append(devs, dev);
    json_t *spec = jsonx_ok(json_object());
    jsonx_set(spec, "cdiVersion", jsonx_ok(json_string(CDI_VERSION)));
    jsonx_set(spec, "kind", jsonx_ok(json_string(kind)));
    jsonx_set(spec, "devices", devs);
    jsonx_dump(spec, JSON_INDENT(2) | JSON_PRESERVE_ORDER, out);
    json_decref(spec);
}

struct writer *cdi_spec_writer(uv_loop_t *loop, const char *dir, const char *name)
{
    char path[CONFIG_PATH_MAX + 128], tmp[CONFIG_PATH_MAX + 160];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    /* they read *.json and *.yaml only; the process's own, as an agent
     * handing over may still write its own */
    snprintf(tmp, sizeof tmp, "%s/.%s.%d.tmp", dir, name, (int)getpid());
    return writer_new(loop, path, tmp, 0644, WRITER_MKDIR | WRITER_KEEP_SAME);
}
