/* Which pod container a process belongs to, from text the node already
 * has: the process's /proc/<pid>/cgroup (pod UID and container ID), and
 * the kubelet's /var/log/containers links, named
 * <pod>_<namespace>_<container>-<container ID>.log (the names). Both are
 * pure parsers, fuzzed (fuzz/fuzz_cgroup.c). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "metrics/internal.h"

/* A pod UID: 36 characters of hex and dashes (underscores where systemd
 * escaped them), or 32 hex for static pods (a hash of the manifest). */
static bool cgroup_is_uid(const char *s, size_t n)
{
    if (n != 36 && n != 32)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]) && s[i] != '-' && s[i] != '_')
            return false;
    return true;
}

static bool cgroup_is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]))
            return false;
    return n > 0;
}

/* The UID in one path component: "pod<uid>" (cgroupfs driver) or
 * "...-pod<uid with _ for ->.slice" (systemd driver). */
static bool cgroup_pod_component(const char *c, size_t n, char *uid, size_t len)
{
    const char *u = NULL;
    size_t un = 0;
    if (n > 3 && !memcmp(c, "pod", 3)) {
        u = c + 3;
        un = n - 3;
    } else if (n > 6 && !memcmp(c + n - 6, ".slice", 6)) {
        for (size_t i = n - 6; i >= 4 && !u; i--)
            if (!memcmp(c + i - 4, "-pod", 4)) {
                u = c + i;
                un = n - 6 - i;
            }
    }
    if (!u || !cgroup_is_uid(u, un) || un >= len)
        return false;
    for (size_t i = 0; i < un; i++)
        uid[i] = u[i] == '_' ? '-' : (char)tolower((unsigned char)u[i]);
    uid[un] = '\0';
    return true;
}

/* The container ID in the component below the pod's: "<id>" (cgroupfs), or
 * "<runtime>-<id>.scope" (systemd: cri-containerd-, crio-, docker-). */
static bool cgroup_container_component(const char *c, size_t n, char *id, size_t len)
{
    if (n > 6 && !memcmp(c + n - 6, ".scope", 6)) {
        n -= 6;
        const char *dash = memrchr(c, '-', n);
        if (!dash)
            return false;
        n -= (size_t)(dash + 1 - c);
        c = dash + 1;
    }
    if (n < 12 || n >= len || !cgroup_is_hex(c, n))
        return false;
    memcpy(id, c, n);
    id[n] = '\0';
    return true;
}

/* One cgroup path: the pod component, then the container's below it. */
static bool cgroup_path(const char *p, size_t n, struct metrics_cgroup *out)
{
    const char *end = p + n;
    bool pod = false;
    while (p < end) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        size_t cn = slash ? (size_t)(slash - p) : (size_t)(end - p);
        if (pod && cgroup_container_component(p, cn, out->container_id, sizeof out->container_id))
            return true;
        if (!pod && cgroup_pod_component(p, cn, out->pod_uid, sizeof out->pod_uid))
            pod = true;
        p += cn + 1;
    }
    return pod;
}

bool metrics_cgroup_parse(const char *text, size_t len, struct metrics_cgroup *out)
{
    memset(out, 0, sizeof *out);
    const char *p = text, *end = text + len;
    bool found = false;
    /* v2 has one line "0::<path>"; v1 one per hierarchy "N:controllers:<path>",
     * all naming the same pod: the first line with a container ID wins. */
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *c1 = memchr(p, ':', (size_t)(le - p));
        const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(le - c1 - 1)) : NULL;
        struct metrics_cgroup line;
        memset(&line, 0, sizeof line);
        if (c2 && cgroup_path(c2 + 1, (size_t)(le - c2 - 1), &line)) {
            if (line.container_id[0]) {
                *out = line;
                return true;
            }
            if (!found)
                *out = line;
            found = true;
        }
        p = le + 1;
    }
    return found;
}

bool metrics_logname_parse(const char *name, struct metrics_owner *o, char *cid, size_t cidlen)
{
    size_t n = strlen(name);
    if (n < 5 || strcmp(name + n - 4, ".log"))
        return false;
    n -= 4;
    const char *dash = memrchr(name, '-', n);
    if (!dash)
        return false;
    size_t idn = n - (size_t)(dash + 1 - name);
    if (idn < 12 || idn >= cidlen || !cgroup_is_hex(dash + 1, idn))
        return false;
    /* Pod, namespace and container names are DNS names: none holds '_'. */
    const char *u1 = memchr(name, '_', (size_t)(dash - name));
    const char *u2 = u1 ? memchr(u1 + 1, '_', (size_t)(dash - u1 - 1)) : NULL;
    if (!u2 || u1 == name || u2 == u1 + 1 || dash == u2 + 1 ||
        memchr(u2 + 1, '_', (size_t)(dash - u2 - 1)))
        return false;
    size_t pn = (size_t)(u1 - name), nn = (size_t)(u2 - u1 - 1), cn = (size_t)(dash - u2 - 1);
    if (pn >= sizeof o->pod || nn >= sizeof o->ns || cn >= sizeof o->container)
        return false;
    snprintf(o->pod, sizeof o->pod, "%.*s", (int)pn, name);
    snprintf(o->ns, sizeof o->ns, "%.*s", (int)nn, u1 + 1);
    snprintf(o->container, sizeof o->container, "%.*s", (int)cn, u2 + 1);
    memcpy(cid, dash + 1, idn);
    cid[idn] = '\0';
    return true;
}
