/* The Prometheus exporter-toolkit web config (web-config.yml), the format
 * node_exporter and dcgm-exporter take: TLS certificate and key, and basic
 * auth users with bcrypt hashes. The parts gpulet does not implement
 * (client certificates, cipher and version choices) are refused by name
 * rather than silently ignored: a config that asks for them asks for
 * security gpulet would not give. */
#include <stdio.h>
#include <string.h>

#include "http/http.h"
#include "util/xmalloc.h"
#include "util/ydoc.h"

static int webconfig_file(struct ydoc *d, yaml_node_t *tls, const char *key, char *out, size_t len,
                          const char *dir, struct err *e)
{
    yaml_node_t *n = ydoc_get(d, tls, key);
    const char *v;
    if (!n)
        return ydoc_error(d, tls, e, "tls_server_config needs %s", key);
    if (ydoc_scalar(d, n, key, &v, e) < 0)
        return -1;
    /* Relative paths are taken from the config file's directory, as the toolkit does. */
    int w = v[0] == '/' ? snprintf(out, len, "%s", v) : snprintf(out, len, "%s/%s", dir, v);
    if (w < 0 || (size_t)w >= len)
        return ydoc_error(d, n, e, "%s: path too long", key);
    return 0;
}

static int webconfig_tls(struct ydoc *d, yaml_node_t *tls, struct http_security *s, const char *dir,
                         struct err *e)
{
    static const char *const known[] = {"cert_file", "key_file", "client_auth_type", NULL};
    if (ydoc_check_keys(d, tls, "tls_server_config (gpulet supports cert_file, key_file)", known, e) < 0)
        return -1;
    yaml_node_t *auth = ydoc_get(d, tls, "client_auth_type");
    const char *v;
    if (auth) {
        if (ydoc_scalar(d, auth, "client_auth_type", &v, e) < 0)
            return -1;
        if (strcmp(v, "NoClientCert"))
            return ydoc_error(d, auth, e, "client_auth_type %s: only NoClientCert is supported", v);
    }
    s->tls = true;
    return webconfig_file(d, tls, "cert_file", s->cert_file, sizeof s->cert_file, dir, e) < 0 ||
                   webconfig_file(d, tls, "key_file", s->key_file, sizeof s->key_file, dir, e) < 0
               ? -1
               : 0;
}

static int webconfig_users(struct ydoc *d, yaml_node_t *users, struct http_security *s,
                           struct err *e)
{
    if (users->type != YAML_MAPPING_NODE)
        return ydoc_error(d, users, e, "basic_auth_users must map user names to bcrypt hashes");
    for (yaml_node_pair_t *p = users->data.mapping.pairs.start; p < users->data.mapping.pairs.top; p++) {
        yaml_node_t *k = ydoc_node(d, p->key), *v = ydoc_node(d, p->value);
        const char *name, *hash;
        if (ydoc_scalar(d, k, "user name", &name, e) < 0 || ydoc_scalar(d, v, name, &hash, e) < 0)
            return -1;
        if (strncmp(hash, "$2", 2) || strlen(hash) != 60)
            return ydoc_error(d, v, e, "basic_auth_users: %s: not a bcrypt hash ($2a$/$2b$/$2y$, "
                                       "60 characters)", name);
        if (s->nusers == HTTP_MAX_USERS)
            return ydoc_error(d, k, e, "basic_auth_users: more than %d users", HTTP_MAX_USERS);
        snprintf(s->users[s->nusers].name, sizeof s->users[0].name, "%s", name);
        snprintf(s->users[s->nusers].hash, sizeof s->users[0].hash, "%s", hash);
        s->nusers++;
    }
    return 0;
}

/* The whole file's settings from a loaded document. */
static int webconfig_doc(struct ydoc *d, struct http_security *s, const char *dir, struct err *e)
{
    static const char *const known[] = {"tls_server_config", "basic_auth_users", NULL};
    yaml_node_t *root = ydoc_root(d), *n;
    if (!root)
        return 0;
    if (ydoc_check_keys(d, root, "web config (tls_server_config, basic_auth_users)", known, e) < 0)
        return -1;
    if ((n = ydoc_get(d, root, "tls_server_config")) && webconfig_tls(d, n, s, dir, e) < 0)
        return -1;
    if ((n = ydoc_get(d, root, "basic_auth_users")) && webconfig_users(d, n, s, e) < 0)
        return -1;
    return 0;
}

int http_webconfig_parse(struct http_security *s, const char *source, const char *dir,
                         const char *text, size_t len, struct err *e)
{
    memset(s, 0, sizeof *s);
    struct ydoc d;
    if (ydoc_load(&d, source, text, len, e) < 0)
        return -1;
    int rc = webconfig_doc(&d, s, dir, e);
    ydoc_free(&d);
    return rc;
}

int http_webconfig_load(struct http_security *s, const char *path, struct err *e)
{
    memset(s, 0, sizeof *s);
    /* Relative files are taken from the config file's directory. */
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    struct ydoc d;
    if (ydoc_load_file(&d, path, e) < 0)
        return -1;
    int rc = webconfig_doc(&d, s, dir, e);
    ydoc_free(&d);
    return rc;
}
