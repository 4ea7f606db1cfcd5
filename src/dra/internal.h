/* The DRA driver's state: one struct dra, touched on the agent's loop
 * only, except the fields a job's thread writes (said where so). */
#ifndef GPULET_DRA_INTERNAL_H
#define GPULET_DRA_INTERNAL_H

#include "dra/dra.h"
#include "grpc/server.h"
#include "kube/kube.h"

/* A claim this node prepared: its devices, by GPU. Kept on disk
 * (checkpoint.c) so that a restarted gpulet answers the kubelet the same. */
struct dra_prepared {
    char uid[64];
    unsigned count;
    struct dra_prepared_device {
        char request[64];
        char device[64];          /* gpu-<minor> */
        char uuid[96];            /* the GPU's: its CDI device is nvidia.com/gpu=<uuid> */
    } devs[DRA_MAX_RESULTS];
};

struct dra {
    uv_loop_t *loop;
    const struct config *cfg;
    const struct gpu_inventory *inv;
    const struct gpu_device *devs;        /* the agent's records: health */
    struct kube_creds creds;
    char node[256];
    char node_uid[64];                    /* written by a publish job, read after it */
    char registry_socket[CONFIG_PATH_MAX + 64];
    char plugin_dir[CONFIG_PATH_MAX + 64];
    char plugin_socket[CONFIG_PATH_MAX + 96];
    char checkpoint[CONFIG_PATH_MAX + 96];
    struct grpc_server *registration, *service;
    struct grpc_method registration_methods[2], service_methods[2];
    bool registered;
    /* publishing the slice (publish.c): one request at a time */
    bool publishing, dirty;
    unsigned long long generation;
    uv_timer_t retry;
    unsigned backoff_ms;
    /* prepared claims */
    struct dra_prepared *prepared;
    unsigned nprepared;
    unsigned jobs;                        /* worker jobs in flight: d is freed after the last */
    bool stopping;
};

/* The gRPC services (service.c): registration and the DRA plugin API. */
int dra_service_start(struct dra *d, struct err *e);
void dra_service_stop(struct dra *d);

/* Answers call with one message and OK (prepare.c; the services too). */
struct ProtobufCMessage;
void dra_reply(struct grpc_call *call, const struct ProtobufCMessage *m);

/* Prepares claims (prepare.c): answers call once each claim's allocation
 * is read from the API server; unprepares at once. */
void dra_prepare(struct dra *d, struct grpc_call *call, const uint8_t *msg, size_t len);
void dra_unprepare(struct dra *d, struct grpc_call *call, const uint8_t *msg, size_t len);

/* The slice (publish.c): a round now, or as soon as the one in flight ends. */
void dra_publish(struct dra *d);
/* Deletes the slice on the worker pool, after a round in flight (at stop,
 * with d->stopping set; d stays until it is done). */
void dra_unpublish(struct dra *d);

/* Prepared claims on disk (checkpoint.c). */
int dra_checkpoint_load(struct dra *d, struct err *e);
int dra_checkpoint_save(const struct dra *d, struct err *e);
struct dra_prepared *dra_prepared_find(struct dra *d, const char *uid);

/* Frees d once stopping, its timer closed and no job in flight (free.c). */
void dra_maybe_free(struct dra *d);

#endif
