/* Shared between the files of src/plugin; not a public interface. Every
 * field is the plugin's own, touched only on the loop. */
#ifndef GPULET_PLUGIN_INTERNAL_H
#define GPULET_PLUGIN_INTERNAL_H

#include <stdbool.h>
#include <sys/types.h>

#include "grpc/server.h"
#include "plugin/plugin.h"
#include "util/unixsock.h"

struct plugin_watcher;
struct grpc_client_call;

/* One advertised device: its ID and which GPU of the inventory it is (a
 * whole GPU, its MIG device mig - 1, or replica `replica` of either when
 * shared: ID "<ID>::<n>"). */
struct plugin_device {
    char id[NVML_DEVICE_UUID_V2_BUFFER_SIZE + 16];
    unsigned gpu;
    unsigned mig;                        /* 0: the whole GPU */
    unsigned replica;
};

/* --- resources (resources.c), MIG (mig.c), one record (resource.c) ----------- */

#define PLUGIN_MIG_RESOURCES 16          /* mig-<profile> resources a node may have */

/* The resource named name among r[0..n), or NULL. */
struct plugin_resource *plugin_resource_find(struct plugin_resource *r, unsigned n, const char *name);
/* Adds a resource with room for every GPU and MIG device; puts an entry. */
struct plugin_resource *plugin_resources_add(struct plugin_resource *r, unsigned *n,
                                             const char *full_name, unsigned max_gpus);
void plugin_resources_put(struct plugin_resource *x, unsigned gpu, unsigned mig);

/* A GPU advertised as its MIG devices, not whole: MIG enabled, strategy
 * single or mixed, and not one DRA serves. */
bool plugin_mig_skips(const struct config *cfg, const struct gpu_info *g);

/* Adds the MIG devices under the strategy's resources (NVIDIA's rules:
 * single needs MIG on every GPU, each with MIG devices of one profile). */
int plugin_mig_resources(const struct config *cfg, const struct gpu_inventory *inv,
                         struct plugin_resource *r, unsigned *n, struct err *e);

/* True when some GPU of the resource serves more than one device
 * (replicas, or MIG devices): preferred allocation spreads over GPUs. */
bool plugin_many_per_gpu(const struct plugin *p);

struct plugin {
    uv_loop_t *loop;
    const struct config *cfg;
    const struct gpu_inventory *inv;
    const struct gpu_device *records;    /* the agent's record of each GPU: health is read there */
    const struct plugin_resource *res;   /* the resource served, and its GPUs */
    const struct driver *driver;         /* the driver's files (driver-mounts); NULL: not found */
    struct plugin_device *devs;
    unsigned ndevs;
    unsigned *by_id;                     /* positions in devs sorted by ID; in devs' allocation */
    char dir[CONFIG_PATH_MAX + 32];      /* <kubelet-root>/device-plugins */
    char socket[CONFIG_PATH_MAX + 160];
    char kubelet_socket[CONFIG_PATH_MAX + 64];
    struct grpc_server *server;
    struct grpc_method methods[5];       /* the DevicePlugin service; ctx is the plugin */
    struct unixsock_id socket_id;     /* our socket file, to notice it vanish */
    struct unixsock_id registered_id; /* kubelet.sock we registered with; 0: none */
    struct unixsock_id registering_id; /* the one a Register call in flight targets */
    struct grpc_client_call *registering;
    struct unixsock_binding *binding;    /* the socket being bound on the worker pool */
    bool served;                         /* its socket was served once */
    unsigned backoff_ms;
    uv_fs_event_t dir_watch;
    uv_timer_t reconcile_timer;
    bool watching, stopping;
    bool unavailable;                    /* every device reported Unhealthy (MPS daemon down) */
    struct plugin_watcher *watchers;     /* open ListAndWatch streams */
    unsigned long long registrations, allocations;
    struct plugin_hooks hooks;
    unsigned open_handles;               /* libuv handles not yet closed; freed at 0 once stopping */
    double started_ms, registered_ms;    /* monotonic, for the start-up log */
    bool waiting_said;                   /* "waiting for the kubelet" logged since registering */
    bool holding_said;                   /* "registering once its MPS daemon is up" logged */
};

/* Fills devs from the inventory with IDs per the configured ID strategy. */
void plugin_build_devices(struct plugin *p);

/* The device with this ID, or NULL. */
const struct plugin_device *plugin_find(const struct plugin *p, const char *id);

/* Serialized AllocateResponse for a request: GRPC_OK, or a gRPC status with
 * the reason in e. */
int plugin_allocate(const struct plugin *p, const uint8_t *req, size_t len, uint8_t **out,
                    size_t *out_len, struct err *e);

/* Chooses size GPUs (inventory positions) from avail, keeping every one of
 * must, with the best interconnect; out gets them in ascending order. */
int plugin_prefer(const struct gpu_inventory *inv, const unsigned *avail, size_t navail,
                  const unsigned *must, size_t nmust, size_t size, unsigned *out);

/* True when the plugin's devices are replicas of shared GPUs. */
bool plugin_shared(const struct plugin *p);

/* For a shared resource: size replicas from avail, keeping every one of
 * must, on as many distinct GPUs as possible, then by the configured
 * policy (docs/sharing.md); out gets device positions. Fails naming a bad ID. */
int plugin_prefer_replicas(const struct plugin *p, char **avail, size_t navail, char **must,
                           size_t nmust, size_t size, unsigned *out, struct err *e);

/* Serialized PreferredAllocationResponse: GRPC_OK, or a gRPC status with
 * the reason in e. */
int plugin_preferred(const struct plugin *p, const uint8_t *req, size_t len, uint8_t **out,
                     size_t *out_len, struct err *e);

/* Registration and the device-plugins directory watch (lifecycle.c).
 * Stopping frees p once its last handle has closed. */
void plugin_lifecycle_start(struct plugin *p);
void plugin_lifecycle_stop(struct plugin *p);
/* Something that decides registering changed (the plugin's availability):
 * the step runs again at once. */
void plugin_lifecycle_poke(struct plugin *p);

/* (Re)starts the gRPC server on the plugin's socket, fd bound by
 * lifecycle.c on the worker pool (plugin.c). */
int plugin_serve(struct plugin *p, int fd, struct unixsock_id id, struct err *e);

/* Ends the ListAndWatch streams and drains the server (plugin.c). */
bool plugin_service_stop(struct plugin *p, void (*drained)(void *ctx), void *ctx);

/* Why a device of p is unhealthy, or NULL (devices.c): its GPU's or MIG
 * device's fault (gpu_device_unhealthy), or the resource's MPS daemon
 * down. What ListAndWatch reports and Allocate refuses by. */
const char *plugin_device_unhealthy(const struct plugin *p, const struct plugin_device *d);

#endif
