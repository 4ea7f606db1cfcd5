/* A plugin's start and stop, the module's entry points (plugin.h): its
 * devices built, its socket served and registered (lifecycle.c), and taken
 * down again. */
#include "plugin/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "util/xmalloc.h"

int plugin_start(struct plugin **out, uv_loop_t *loop, const struct config *cfg,
                 const struct gpu_inventory *inv, const struct gpu_device *devs,
                 const struct plugin_resource *res, const struct driver *drv,
                 const struct plugin_hooks *hooks, struct err *e)
{
    struct plugin *p = xcalloc(1, sizeof *p);
    p->driver = drv;
    p->loop = loop;
    p->cfg = cfg;
    p->inv = inv;
    p->records = devs;
    p->res = res;
    if (hooks)
        p->hooks = *hooks;
    /* An MPS resource is unavailable until the agent says its daemon is up
     * (or adopted); it registers once it is (lifecycle.c). */
    p->unavailable = cfg->sharing == GPU_SHARING_MPS && res->sharing == GPU_SHARING_MPS;
    plugin_build_devices(p);
    snprintf(p->dir, sizeof p->dir, "%s/device-plugins", cfg->kubelet_root);
    snprintf(p->socket, sizeof p->socket, "%s/%s", p->dir, res->socket);
    snprintf(p->kubelet_socket, sizeof p->kubelet_socket, "%s/kubelet.sock", p->dir);
    *out = NULL;
    /* A unix socket path has 107 bytes at most: a kubelet root too long for
     * it can never work, so it fails now rather than retrying forever. */
    if (strlen(p->socket) >= sizeof ((struct sockaddr_un *)0)->sun_path) {
        err_set(e, "--kubelet-root %s is too long: the plugin's socket %s would be %zu bytes, "
                   "and unix sockets take at most %zu", cfg->kubelet_root, p->socket,
                strlen(p->socket), sizeof ((struct sockaddr_un *)0)->sun_path - 1);
        free(p->devs);
        free(p);
        return -1;
    }
    plugin_lifecycle_start(p); /* its socket is bound off the loop, then served */
    *out = p;
    return 0;
}

bool plugin_stop(struct plugin *p, void (*drained)(void *ctx), void *ctx)
{
    if (!p)
        return false;
    bool draining = plugin_service_stop(p, drained, ctx);
    plugin_lifecycle_stop(p); /* p is freed once its last handle has closed */
    return draining;
}
