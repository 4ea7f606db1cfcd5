/* Credentials for the API server: a kubeconfig's current context, or the
 * pod's service account. */
#include "kube/kube.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/ydoc.h"

bool kube_base64_decode(const char *in, size_t len, struct strbuf *out)
{
    unsigned acc = 0, bits = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = in[i];
        int v;
        if (ch >= 'A' && ch <= 'Z') v = ch - 'A';
        else if (ch >= 'a' && ch <= 'z') v = ch - 'a' + 26;
        else if (ch >= '0' && ch <= '9') v = ch - '0' + 52;
        else if (ch == '+' || ch == '-') v = 62;
        else if (ch == '/' || ch == '_') v = 63;
        else if (ch == '=' || ch == '\n' || ch == '\r' || ch == ' ') continue;
        else return false;
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            char byte = (char)((acc >> bits) & 0xff);
            strbuf_append(out, &byte, 1);
        }
    }
    if (!out->data)
        strbuf_append(out, "", 0);
    return true;
}

void kube_creds_free(struct kube_creds *c)
{
    strbuf_free(&c->ca_pem);
    strbuf_free(&c->cert_pem);
    strbuf_free(&c->key_pem);
    strbuf_free(&c->token);
    strbuf_free(&c->file_token);
}

static const char *kube_sa_dir(void)
{
    const char *d = getenv("GPULET_SERVICEACCOUNT_DIR");
    return d && *d ? d : KUBE_SA_DIR;
}

bool kube_in_cluster(void)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    return host && *host;
}

static int kube_in_cluster_load(struct kube_creds *c, struct err *e)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host)
        return err_set(e, "not in a cluster (KUBERNETES_SERVICE_HOST is not set) and no "
                          "--kubeconfig given");
    if (!port || !*port)
        port = "443";
    bool v6 = strchr(host, ':') != NULL;
    snprintf(c->server, sizeof c->server, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
             port);
    snprintf(c->source, sizeof c->source, "the service account in %s", kube_sa_dir());
    snprintf(c->ca_file, sizeof c->ca_file, "%s/ca.crt", kube_sa_dir());
    snprintf(c->token_file, sizeof c->token_file, "%s/token", kube_sa_dir());
    if (access(c->token_file, R_OK) != 0)
        return err_set(e, "service account token %s: %s", c->token_file, strerror(errno));
    return 0;
}

/* The mapping named name in the kubeconfig's list key ("clusters"), or NULL. */
static yaml_node_t *kube_named(struct ydoc *d, yaml_node_t *root, const char *list,
                               const char *item, const char *name, struct err *e)
{
    yaml_node_t *seq = ydoc_get(d, root, list);
    if (!seq || seq->type != YAML_SEQUENCE_NODE) {
        ydoc_error(d, seq ? seq : root, e, "%s must be a list", list);
        return NULL;
    }
    for (yaml_node_item_t *it = seq->data.sequence.items.start; it < seq->data.sequence.items.top;
         it++) {
        yaml_node_t *entry = ydoc_node(d, *it);
        yaml_node_t *n = entry && entry->type == YAML_MAPPING_NODE ? ydoc_get(d, entry, "name") : NULL;
        const char *s;
        if (n && n->type == YAML_SCALAR_NODE && ydoc_scalar(d, n, "name", &s, e) == 0 &&
            !strcmp(s, name)) {
            yaml_node_t *body = ydoc_get(d, entry, item);
            if (!body || body->type != YAML_MAPPING_NODE) {
                ydoc_error(d, entry, e, "%s '%s' has no %s mapping", item, name, item);
                return NULL;
            }
            return body;
        }
    }
    ydoc_error(d, seq, e, "no %s named '%s'", item, name);
    return NULL;
}

/* An optional string field; "" when absent. */
static int kube_field(struct ydoc *d, yaml_node_t *map, const char *key, const char **out,
                      struct err *e)
{
    yaml_node_t *n = ydoc_get(d, map, key);
    *out = "";
    return n ? ydoc_scalar(d, n, key, out, e) : 0;
}

/* A file field, made absolute against the kubeconfig's directory. */
static int kube_path(struct ydoc *d, yaml_node_t *map, const char *key, const char *dir,
                     char *out, size_t len, struct err *e)
{
    const char *s;
    if (kube_field(d, map, key, &s, e) < 0)
        return -1;
    if (!*s)
        out[0] = '\0';
    else if (s[0] == '/' || !dir || !*dir)
        snprintf(out, len, "%s", s);
    else
        snprintf(out, len, "%s/%s", dir, s);
    return 0;
}

/* A *-data field: base64 of PEM. */
static int kube_data(struct ydoc *d, yaml_node_t *map, const char *key, struct strbuf *out,
                     struct err *e)
{
    const char *s;
    if (kube_field(d, map, key, &s, e) < 0)
        return -1;
    if (*s && !kube_base64_decode(s, strlen(s), out))
        return ydoc_error(d, ydoc_get(d, map, key), e, "%s is not base64", key);
    return 0;
}

static int kube_cluster(struct kube_creds *c, struct ydoc *d, yaml_node_t *cl, const char *dir,
                        struct err *e)
{
    const char *server, *insecure;
    if (kube_field(d, cl, "server", &server, e) < 0 ||
        kube_field(d, cl, "insecure-skip-tls-verify", &insecure, e) < 0)
        return -1;
    if (strncmp(server, "https://", 8) && strncmp(server, "http://", 7))
        return ydoc_error(d, cl, e, "cluster server '%s' is not an http(s) URL", server);
    if (strlen(server) >= sizeof c->server)
        return ydoc_error(d, cl, e, "cluster server URL is too long");
    snprintf(c->server, sizeof c->server, "%s", server);
    size_t n = strlen(c->server);
    while (n > 0 && c->server[n - 1] == '/')
        c->server[--n] = '\0';
    c->insecure = !strcmp(insecure, "true");
    if (kube_path(d, cl, "certificate-authority", dir, c->ca_file, sizeof c->ca_file, e) < 0)
        return -1;
    return kube_data(d, cl, "certificate-authority-data", &c->ca_pem, e);
}

static int kube_user(struct kube_creds *c, struct ydoc *d, yaml_node_t *u, const char *dir,
                     struct err *e)
{
    const char *token;
    if (kube_field(d, u, "token", &token, e) < 0 ||
        kube_path(d, u, "tokenFile", dir, c->token_file, sizeof c->token_file, e) < 0 ||
        kube_path(d, u, "client-certificate", dir, c->cert_file, sizeof c->cert_file, e) < 0 ||
        kube_path(d, u, "client-key", dir, c->key_file, sizeof c->key_file, e) < 0 ||
        kube_data(d, u, "client-certificate-data", &c->cert_pem, e) < 0 ||
        kube_data(d, u, "client-key-data", &c->key_pem, e) < 0)
        return -1;
    if (*token)
        strbuf_puts(&c->token, token);
    if (ydoc_get(d, u, "exec") || ydoc_get(d, u, "auth-provider"))
        return ydoc_error(d, u, e, "exec and auth-provider credentials are not supported: "
                                   "use a token, a token file or a client certificate");
    return 0;
}

int kube_creds_parse(struct kube_creds *c, const char *source, const char *dir,
                     const char *text, size_t len, struct err *e)
{
    memset(c, 0, sizeof *c);
    snprintf(c->source, sizeof c->source, "%s", source);
    struct ydoc d;
    if (ydoc_load(&d, source, text, len, e) < 0)
        return -1;
    int rc = -1;
    yaml_node_t *root = ydoc_root(&d), *n, *ctx, *cl, *u;
    const char *current, *cluster, *user;
    if (!root || root->type != YAML_MAPPING_NODE) {
        ydoc_error(&d, root, e, "a kubeconfig must be a mapping");
        goto out;
    }
    if (!(n = ydoc_get(&d, root, "current-context"))) {
        ydoc_error(&d, root, e, "no current-context");
        goto out;
    }
    if (ydoc_scalar(&d, n, "current-context", &current, e) < 0 ||
        !(ctx = kube_named(&d, root, "contexts", "context", current, e)) ||
        kube_field(&d, ctx, "cluster", &cluster, e) < 0 || kube_field(&d, ctx, "user", &user, e) < 0 ||
        !(cl = kube_named(&d, root, "clusters", "cluster", cluster, e)) ||
        kube_cluster(c, &d, cl, dir, e) < 0)
        goto out;
    if (*user && (!(u = kube_named(&d, root, "users", "user", user, e)) ||
                  kube_user(c, &d, u, dir, e) < 0))
        goto out;
    rc = 0;
out:
    ydoc_free(&d);
    if (rc < 0)
        kube_creds_free(c);
    return rc;
}

int kube_creds_load(struct kube_creds *c, const char *path, struct err *e)
{
    if (!path || !*path) {
        memset(c, 0, sizeof *c);
        return kube_in_cluster_load(c, e);
    }
    FILE *f = fopen(path, "r");
    if (!f)
        return err_set(e, "kubeconfig %s: %s", path, strerror(errno));
    struct strbuf text = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0 && text.len < (1u << 20))
        strbuf_append(&text, buf, n);
    fclose(f);
    char dir[KUBE_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    int rc = kube_creds_parse(c, path, dir, text.data ? text.data : "", text.len, e);
    strbuf_free(&text);
    return rc;
}

void kube_namespace(char *out, size_t len)
{
    const char *env = getenv("POD_NAMESPACE");
    if (env && *env) {
        snprintf(out, len, "%s", env);
        return;
    }
    const char *dir = getenv("GPULET_SERVICEACCOUNT_DIR");
    char path[KUBE_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/namespace", dir && *dir ? dir : KUBE_SA_DIR);
    snprintf(out, len, "default");
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char buf[256];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    if (n)
        snprintf(out, len, "%s", buf);
}
