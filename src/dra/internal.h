/* The DRA driver's state: one struct dra of parts, one per owner, touched
 * on the agent's loop only, except the fields a job's thread writes (said
 * where so). */
#ifndef GPULET_DRA_INTERNAL_H
#define GPULET_DRA_INTERNAL_H

#include "dra/dra.h"
#include "gpu/lane.h"
#include "grpc/client.h"
#include "grpc/server.h"
#include "kube/kube.h"
#include "util/writer.h"

#define DRA_MAX_CONSUMERS 16           /* containers named per claim, for metrics */
#define DRA_REFRESH_MS 30000           /* the claims' containers are read again this often */
#define DRA_REFRESH_SOON_MS 2000       /* and this long after a prepare */
#define DRA_CLAIM_CDI_KIND DRA_DRIVER "/claim"
#define DRA_HEALTH_RESEND_MS 20000     /* the health stream's devices, sent again this often */

/* A claim this node prepared: its devices, by GPU, how they are shared,
 * and the containers that use them. Kept on disk (checkpoint.c) so that a
 * restarted gpulet answers the kubelet the same and restarts its MPS
 * daemon. devs (count of them) is the record's own, allocated to size: a
 * node may hold hundreds of claims (shares of its GPUs), and so is
 * consumers. Whoever holds the record frees it with dra_prepared_free; a
 * copy by value moves it. */
struct dra_prepared {
    char uid[64];
    char ns[256], name[256];
    unsigned count;
    unsigned thread_percentage;   /* MPS: the daemon's default; 0: 100 */
    struct dra_prepared_device {
        char request[64];
        char device[64];          /* gpu-<minor> */
        char uuid[96];            /* the GPU's: its CDI device is nvidia.com/gpu=<uuid> */
        unsigned strategy;        /* enum gpu_sharing */
        unsigned timeslice;       /* TimeSlicing's interval, set for the claim's life; 0: Default */
        unsigned long long pinned_mib; /* MPS: the daemon's limit (a share: its client's);
                                        * 0: the GPU's memory */
        char share_id[64];        /* a share of the GPU (its GPU's daemon, claim_mps.c); "" none */
        unsigned share_compute;   /* a share's active thread percentage; 0: not capped */
        /* a placement (--dra-mig): the MIG device made for the claim, or adopted */
        bool placement;
        unsigned gpu;             /* its GPU's index in the inventory */
        unsigned mig_profile, mig_start; /* the GPU instance profile ID, first memory slice */
        unsigned gi, ci;          /* once made: its GPU and compute instance IDs */
        bool mig_made;            /* made for the claim: destroyed at unprepare */
    } *devs;
    unsigned nconsumers;
    struct dra_consumer *consumers; /* nconsumers of them (at most DRA_MAX_CONSUMERS), the
                                     * record's own like devs: a record stays small (a few
                                     * hundred bytes), as a restart reads them all */
};

/* The claims' containers from the kubelet's PodResources List (refresh.c),
 * once it has reported a claim of this driver; the API refresh stops. */
struct V1__ListPodResourcesResponse;
void dra_consumers_from_pods(struct dra *d, const struct V1__ListPodResourcesResponse *r);

/* Frees p's devices (p itself is its holder's). */
void dra_prepared_free(struct dra_prepared *p);

/* A new record at the end of c's table, zeroed (c's storage may move). */
struct dra_claims;
struct dra_prepared *dra_claims_add(struct dra_claims *c);

/* Whether p has a device shared through MPS (its daemon: claim_mps.c):
 * the claim's own (GpuConfig) or, for a share, its GPU's. */
bool dra_prepared_mps(const struct dra_prepared *p);

/* p's share, if it is one: the device whose GPU's daemon its containers
 * use (a claim takes shares of one GPU); NULL for none. */
const struct dra_prepared_device *dra_prepared_share(const struct dra_prepared *p);

/* One slice of the pool on the API server (publish.c). */
struct dra_slice_obj {
    struct dra *d;
    unsigned index;                       /* its place in the pool (dra_slice_json's s) */
    char name[320];
    struct kube_watch *watch;
    struct kube_sync *sync;
    struct strbuf applied;                /* as last applied, at d->pool.generation */
};

/* struct dra's parts, one per owner (libuv's rule: the file named may
 * write a part's fields; the others read them, on the loop). The driver's
 * own fields (struct dra below) are set by dra.c at start and only read
 * after, but for stopping, handles and jobs.n. */

/* The resource.k8s.io version the API server serves (api.c). */
struct dra_api_state {
    enum dra_api version;                 /* 0 until found */
    char error[512];                      /* why it is not known: set once a search failed */
    uv_timer_t retry;                     /* searched again */
    unsigned backoff_ms;
};

/* The gRPC services: registration and the DRA plugin API (service.c). */
struct dra_service {
    char registry_socket[CONFIG_PATH_MAX + 64];
    char plugin_dir[CONFIG_PATH_MAX + 64];
    char plugin_socket[CONFIG_PATH_MAX + 96];
    struct grpc_server *registration, *plugin;
    struct unixsock_binding *binding;     /* a socket being bound on the worker pool */
    struct grpc_method registration_methods[2], plugin_methods[5]; /* v1 and v1beta1, health */
    char plugin_paths[4][80];
    bool registered;                      /* the kubelet said so */
    /* prepares and unprepares that came before the checkpoint's claims
     * were in (d->claims.loading): answered in order once they are */
    struct dra_parked *parked, **parked_tail;
};

/* The service parks a call while the claims load, and lets them all go
 * (dra_service_unpark) once they are in, or ends them at a stop. */
void dra_service_unpark(struct dra *d);

/* The pool's slices on the API server (publish.c), each kept in step by
 * kube/sync.c from its watch; and the devices a device plugin's pod holds
 * (held.c), left out of them. */
struct dra_pool {
    struct dra_slice_obj **slices;        /* each its own: the syncs hold them */
    unsigned nslices;
    unsigned long long generation;        /* the pool's, as the server holds it or last applied */
    unsigned published;                   /* devices in it */
    bool taints_dropped;                  /* the server took a slice without its taints */
    bool counters_dropped;                /* ... or its counters: no placements then */
    bool *held;                           /* held.c's: per device (DRA_AT); NULL until the
                                           * first List answered: the slices wait for it */
    unsigned nheld;                       /* held.c's: how many are held */
};

/* The claims this node prepared, and what each holds: the record and
 * its checkpoint (prepare.c settles and unprepares, refresh.c sets their
 * containers, checkpoint.c writes them), the MPS daemons (claim_mps.c)
 * and the MIG devices made (claim_mig.c). */
struct dra_claims {
    bool loading;                         /* the checkpoint's claims are not in yet (dra_claims_in) */
    struct dra_prepared *prepared;        /* n of them, room for cap (dra_claims_add) */
    unsigned n, cap;
    char checkpoint[CONFIG_PATH_MAX + 96];
    struct writer *writer;                /* checkpoint.c's: on the worker pool */
    unsigned saves;                       /* checkpoint writes not yet logged: d outlives them */
    bool failing;                         /* the last write failed (logged once until it works) */
    uv_timer_t refresh;                   /* refresh.c's: the claims' containers, read again */
    bool refreshing;                      /* refresh.c's: one is in flight */
    bool from_pods;                       /* refresh.c's: PodResources reports claims: no refresh */
    bool said_api;                        /* refresh.c's: the API fallback logged */
    struct dra_mps **mps;                 /* claim_mps.c's: a daemon per claim shared through MPS */
    unsigned nmps;
    struct dra_spec *specs;               /* claim_mps.c's: one writer per claim's CDI spec, kept
                                           * while the claim is prepared or a write of it runs, so
                                           * that its writes and its removal stay in order */
    unsigned nspecs;
    uv_async_t lane_done;                 /* lane.c's: a lane is done with an op */
    struct dra_lane_op *lane_ops;         /* lane.c's: those in flight */
};

/* The jobs in flight: prepares (read.c, prepare.c), refreshes, an
 * unprepare's answer, a time slice's reset. */
struct dra_jobs {
    struct dra_job *api;                  /* read.c's: prepares waiting for the first search */
    struct dra_job *daemons;              /* prepare.c's: those answered once their daemons are up */
    struct dra_job *active;               /* prepare.c's: every prepare not yet freed, oldest first
                                           * (by active_next): one claim's state is found here while
                                           * it is in flight, and in d->claims once prepared */
    unsigned n;                           /* not yet freed: d is freed after the last */
};

/* The kubelet's NodeWatchResources streams (health.c). */
struct dra_health {
    struct dra_health_watch *watches;
    uv_timer_t timer;                     /* sends them again */
};

struct dra {
    uv_loop_t *loop;
    const struct config *cfg;
    const struct gpu_inventory *inv;
    const struct gpu_device *devs;        /* the agent's records: health */
    struct kube_client *kc;               /* the agent's */
    struct kube_watch *node_watch;        /* the agent's: the Node's UID, the slice's owner */
    char node[256];
    char (*pcie_roots)[32];               /* per GPU, from sysfs; NULL when simulated */
    struct dra_hooks hooks;
    struct dra_gpus gpus;                 /* the agent's NVML and lanes: MIG devices made */
    struct dra_api_state api;
    struct dra_service service;
    struct dra_pool pool;
    struct dra_claims claims;
    struct dra_jobs jobs;
    struct dra_health health;
    unsigned handles;                     /* timers not yet closed */
    bool stopping;
};

/* Finds the newest version of resource.k8s.io the API server serves
 * slices in (api.c, on the agent's client), trying again with backoff;
 * then the slice is published (dra_publish_start) and the prepares waiting
 * are read (dra_job_api). */
void dra_api_search(struct dra *d);

/* The gRPC services (service.c): registration and the DRA plugin API. */
void dra_service_start(struct dra *d); /* served once bound (hooks.on_failed: not) */
void dra_service_stop(struct dra *d);

/* Whether the slice keeps faulty devices, tainted: the API's version has
 * device taints (v1, v1beta2) and the server keeps them (publish.c). */
bool dra_tainted(const struct dra *d);

/* What d's slice is made of now (publish.c); evict, where given (the
 * slice's JSON needs it, counting does not), is filled from the
 * configuration. */
void dra_slice_of(const struct dra *d, const char *uid, unsigned long long generation,
                  struct health_faults *evict, struct dra_slice_in *in);
/* Frees what dra_slice_of allocated in in (the made MIG devices' list). */
void dra_slice_in_free(struct dra_slice_in *in);

/* The health stream (health.c): a NodeWatchResources call of the kubelet,
 * answered now and on every change (dra_health_send); the message, every
 * device DRA serves with its health at now (Unix seconds). */
void dra_health_watch(struct dra *d, struct grpc_call *call);
void dra_health_send(struct dra *d);
uint8_t *dra_health_message(const struct dra *d, long long now, size_t *len);

/* Answers call with one message and OK (prepare.c; the services too). */
struct ProtobufCMessage;
void dra_reply(struct grpc_call *call, const struct ProtobufCMessage *m);

/* A prepare's work: its claims, read through the agent's client (read.c),
 * then mapped, settled and answered on the loop (prepare.c). */
struct dra_job_claim {
    struct dra_job *job;
    char ns[256], name[256], uid[64];
    bool known;                       /* prepared before: the checkpoint answers */
    struct dra_allocation *alloc;     /* read (57 KB) */
    char error[1024];
    struct dra_prepared p;            /* mapped to the node's devices (on the loop) */
    bool timeslice_set;               /* the second pass set p's intervals */
    bool cancelled;                   /* unprepared before it settled: what it made is undone */
};

/* A prepare's stages, in the order dra_job_next (prepare.c) runs them; a
 * stage that waits for work elsewhere returns, and that work's end calls
 * dra_job_next again. */
enum dra_stage {
    DRA_READ,      /* the claims' allocations, from the API server (read.c) */
    DRA_MAP,       /* mapped to the node's devices (map.c) */
    DRA_LANES,     /* on their GPUs' lanes (lane.c): MIG devices made for placements
                    * (claim_mig.c), time slices set (timeslice.c) */
    DRA_SETTLE,    /* recorded: MPS daemons started, CDI specs and the checkpoint written */
    DRA_FILES,     /* waiting until those files are on disk (dra_job_wait) */
    DRA_DAEMONS,   /* waiting for the claims' MPS daemons, DRA_MPS_WAIT_MS at most */
    DRA_ANSWER,    /* answered, and freed */
};

struct dra_job {
    uv_timer_t timer;                 /* waiting for MPS daemons */
    bool timer_used;
    struct dra *d;
    struct grpc_call *call;           /* NULL once the kubelet went away */
    unsigned n;
    struct dra_job_claim *claims;
    struct dra_job *next;             /* in d->jobs.daemons, or d->jobs.api */
    struct dra_job *active_next;      /* in d->jobs.active */
    bool blocked;                     /* not begun: an earlier prepare of one of its claims is
                                       * still before its files (it answers from theirs) */
    char write_error[256];            /* a file its answer waited for was not written */
    unsigned pending;                 /* requests in flight */
    uint64_t begun_ns;                /* the kubelet's request came (uv_hrtime) */
    enum dra_stage stage;             /* the next to run (prepare.c) */
    unsigned making;                  /* lane ops it waits for (lane.c) */
    unsigned writes;                  /* files its answer waits for (dra_job_wait) */
    bool freeing;                     /* freed once writes is 0 */
};

/* Reads j's claims (read.c): each claim not prepared before; then
 * dra_job_next. Waits for the API's version where its first search is
 * still on. */
void dra_job_queue(struct dra *d, struct dra_job *j);
/* The API's version is known, or its first search failed: the waiting
 * jobs go on (read.c). */
void dra_job_api(struct dra *d);
/* A job's claims are read (prepare.c): mapped, settled and answered. */
void dra_job_next(struct dra_job *j);
/* j's answer waits until what was put in w so far is on disk (prepare.c):
 * the checkpoint, a claim's CDI spec, the spec naming a MIG device made. */
void dra_job_wait(struct dra_job *j, struct writer *w);

/* Prepares claims (prepare.c): answers call once each claim's allocation
 * is read from the API server; unprepares at once. */
void dra_prepare(struct dra *d, struct grpc_call *call, const uint8_t *msg, size_t len);
/* Reads the prepared claims' containers again (refresh.c; the refresh
 * timer, a job of its own): a pod that joins a shared claim later is not
 * prepared for again. */
void dra_refresh(uv_timer_t *t);
void dra_unprepare(struct dra *d, struct grpc_call *call, const uint8_t *msg, size_t len);

/* The slice (publish.c): watched and kept in step once the API's version
 * is known (start); a device changed (publish); deleted at stop, the
 * request going out after d is stopped (unpublish). */
void dra_publish_start(struct dra *d);
void dra_publish(struct dra *d);
void dra_unpublish(struct dra *d, bool withdraw);

/* MPS daemons of claims (claim_mps.c): one per claim with an MPS device, its
 * CDI spec (DRA_CLAIM_CDI_KIND=<uid>: the pipe directory and /dev/shm)
 * beside it. dra_mps_ready: the claim needs no daemon or its daemon is up;
 * a change of that wakes the prepares waiting (dra_prepare_wake). */
int dra_mps_start(struct dra *d, const struct dra_prepared *p, struct dra_job *j, struct err *e);
bool dra_mps_ready(const struct dra *d, const char *uid);
void dra_mps_stop(struct dra *d, const char *uid);
/* Ends the daemons of claims that were unprepared while no gpulet ran
 * (the checkpoint's claims have theirs, started or adopted). */
void dra_mps_sweep(struct dra *d);
void dra_mps_stop_all(struct dra *d);
void dra_prepare_wake(struct dra *d);
/* Ends the prepares still waiting (at stop). */
void dra_prepare_stop(struct dra *d);

/* Maps a claim's allocation to this node's devices (map.c): true with p
 * filled, or false with why a result cannot be given (another pool, the
 * device plugin's GPU, unhealthy, unknown; a configuration that cannot
 * apply to it). */
bool dra_map(const struct dra *d, const char *uid, const char *ns, const char *name,
             const struct dra_allocation *al, struct dra_prepared *p, char *why, size_t len);

/* Work on a GPU's lane (lane.c): the loop's, but between dra_lane_post
 * and its done. An op with j counts in j->making; its done goes on with j
 * once the last is back. */
enum dra_lane_kind { DRA_LANE_MAKE, DRA_LANE_DESTROY, DRA_LANE_SLICE };
struct dra_lane_op {
    struct gpu_lane_job job;      /* first: the lane hands it back */
    enum dra_lane_kind kind;
    struct dra *d;
    struct dra_job *j;            /* the prepare waiting for it; NULL: none waits */
    unsigned claim, dev;          /* its device in j */
    unsigned gpu;
    char uuid[96];                /* destroy: the MIG device; slice: the GPU */
    /* make and destroy (claim_mig.c) */
    unsigned profile, start;      /* make: the placement */
    unsigned gi, ci;              /* destroy: the device, where its UUID is still uuid */
    unsigned made;                /* make: the new device's index in seen */
    struct nvml *nvml;
    struct gpu_info seen;         /* the GPU, its MIG devices read again after */
    /* a time slice (timeslice.c) */
    unsigned interval;            /* 0: Default */
    struct config *cfg;           /* its own copy: a reload replaces d's meanwhile */
    int rc;
    char error[768];
    struct dra_lane_op *next;     /* in d->claims.lane_ops */
};
struct dra_lane_op *dra_lane_op_new(struct dra *d, enum dra_lane_kind kind, unsigned gpu);
/* Hands op to its GPU's lane; false (op freed) where the lanes are gone. */
bool dra_lane_post(struct dra *d, struct dra_lane_op *op);
void dra_lane_start(struct dra *d);
void dra_lane_stop(struct dra *d);
/* The inventory index of the GPU with uuid, or -1. */
int dra_gpu_of(const struct dra *d, const char *uuid);

/* TimeSlicing intervals (timeslice.c): whether p sets one; j's claims'
 * set on their GPUs' lanes (the ops counted in j->making); p's set back to
 * Default (after an unprepare or a failed prepare). The ops' run and done. */
bool dra_timeslice_wanted(const struct dra_prepared *p);
void dra_timeslice_set(struct dra *d, struct dra_job *j);
void dra_timeslice_reset(struct dra *d, const struct dra_prepared *p);
void dra_timeslice_run(struct dra_lane_op *op);
void dra_timeslice_done(struct dra_lane_op *op);

/* MIG devices made per claim (claim_mig.c): j's placements made on their
 * GPUs' lanes (the ops counted in j->making); returns how many were asked
 * for; p's made devices destroyed (unprepare, a failed prepare). The ops'
 * run and done. */
unsigned dra_mig_make(struct dra *d, struct dra_job *j);
void dra_mig_run(struct dra_lane_op *op);
void dra_mig_done(struct dra_lane_op *op);
/* The UUIDs of the MIG devices claims made and hold, or that are being
 * destroyed (the slice's made list); the caller frees them. */
char (*dra_mig_made_list(const struct dra *d, unsigned *n))[96];
void dra_mig_unmake(struct dra *d, const struct dra_prepared *p);

/* Prepared claims on disk (checkpoint.c). */
void dra_claims_adopt(struct dra_claims *c, struct dra_loaded *l);
/* The prepared claims changed (a prepare, an unprepare, their containers):
 * the checkpoint is written on the worker pool (a failure is logged, once
 * until a write works again; dra_job_wait on d->claims.writer waits
 * for it), and the agent told (hooks.on_claims). */
void dra_claims_changed(struct dra *d);
struct dra_prepared *dra_prepared_find(const struct dra *d, const char *uid);

/* Frees d once stopping, its handles closed and no job in flight (dra.c). */
void dra_maybe_free(struct dra *d);
/* The close callback of d's handles (their data is d). */
void dra_closed(uv_handle_t *h);

#endif
