/* Shared between the files of src/agent; not a public interface. One
 * struct holds all of the agent's state; every field is the agent's own
 * and is touched on its loop only, except where a comment says otherwise. */
#ifndef GPULET_AGENT_INTERNAL_H
#define GPULET_AGENT_INTERNAL_H

#include <stdbool.h>
#include <uv.h>

#include "agent/agent.h"
#include "dra/dra.h"
#include "driver/driver.h"
#include "gpu/device.h"
#include "gpu/health.h"
#include "gpu/inventory.h"
#include "gpu/lane.h"
#include "gpu/watch.h"
#include "labels/labels.h"
#include "labels/publish.h"
#include "metrics/metrics.h"
#include "mps/mps.h"
#include "nvml/nvml.h"
#include "plugin/plugin.h"
#include "report/report.h"
#include "util/dirs.h"
#include "migparted/migparted.h"
#include "util/unixsock.h"
#include "util/writer.h"

struct agent_status;
struct agent_probe;
struct agent_mig_job;

struct agent {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm, sighup;
    struct config_args args;
    struct config cfg;
    struct nvml nvml;                    /* nvml_work's while !nvml_up */
    struct gpu_inventory inv;            /* IDs at start (procfs or NVML); the rest once read */
    bool early;                          /* the IDs came from procfs, before NVML */
    bool nvml_up;                        /* nvml may be used on the loop */
    uv_work_t nvml_work;                 /* NVML (early) and the inventory's slow half */
    struct gpu_inventory found;          /* what nvml_work read: written by it, then merged */
    int nvml_rc;                         /* nvml_work's outcome, and why it failed */
    struct err nvml_err;
    bool watch_wanted;                   /* health events watched: nvml_work registers them */
    int watch_rc;                        /* nvml_work's registration of them, and why it failed */
    struct err watch_err;
    char no_gpu[sizeof(struct err)];     /* failOnInitError=false and NVML did not start: why */
    double start_ms[3];                  /* start-up phases, for the log */
    bool stopping;
    bool released;                       /* handed over to another agent (answer.c) */
    /* the loop's lag (lag.c) */
    uv_timer_t lag_timer;
    uint64_t lag_due_ns, lag_window_ns;
    double lag_worst, lag_last_window;   /* seconds: this window's worst, the last one's */
    int exit_code;                       /* for a failure after start-up */
    struct gpu_device *devs;             /* the one model of each GPU: written only here */
    struct health_policy policy;
    struct gpu_watch watch;
    struct plugin **plugins;             /* one per resource; nplugins 0 while not serving */
    unsigned nplugins;
    struct plugin_resource *resources;   /* what each plugin serves; kept until its plugin is freed */
    unsigned nresources;
    struct mps_daemon **mps;             /* per resource: its MPS daemon, NULL for others */
    int *mps_modes;                      /* per GPU: its compute mode before MPS set it, or -1 */
    struct agent_mode_job *mode_jobs;    /* per GPU: a compute mode change on its lane (mps.c) */
    enum health_reason *health_said;     /* per GPU: its health as the log last said it (notify.c) */
    struct agent_mps_owner *mps_owners;  /* per resource: its daemon's hooks' ctx (mps.c) */
    uv_timer_t restart_timer;            /* restarts the plugin after a reload */
    bool restart_pending;
    bool driver_finding;                 /* the driver's files being found for a restart */
    bool plugins_restarted;              /* started again since start-up (a reload, MIG) */
    unsigned draining;                   /* stopped plugins the kubelet still holds (start.c) */
    uint64_t drain_begun, drained_at;    /* uv_now: the stop; the last let go (0: none yet) */
    /* the GPUs' lanes (probe.c): every NVML call on a running GPU goes
     * through its lane, so that a hung GPU stalls only itself */
    struct gpu_lanes *lanes;
    bool lanes_stuck;                    /* at stop, a lane was left in a call: NVML stays loaded */
    uv_async_t lanes_done;               /* a lane finished one of the agent's jobs */
    struct agent_probe *probes;          /* per GPU */
    uv_timer_t probe_timer, hang_timer;
    bool probe_timers_on;
    struct agent_status *status;
    struct metrics *metrics;             /* NULL with --no-metrics or when it could not start */
    bool facts_known;                    /* the inventory's slow half is in (names, memory) */
    /* the API server (kube.c): one client, and the Node watched, shared by
     * labels, the report, DRA and the node config; NULL without
     * credentials or NODE_NAME */
    struct kube_client *kube;
    struct kube_watch *node;
    struct labels_publisher *labels;     /* NULL when labels go nowhere */
    struct report *report;               /* NULL without the API server, or --fault-report none */
    struct dra *dra;                     /* NULL unless --dra all */
    /* DRA's checkpoint, read off the loop (dra.c): from the start, beside
     * NVML's; dra starts once both are in (dra_waiting: NVML's are) */
    uv_work_t dra_read;
    char dra_path[CONFIG_PATH_MAX + 96];
    struct dra_loaded dra_loaded;        /* dra_read's, until dra_start takes it */
    bool dra_reading, dra_read_done, dra_waiting, dra_reload;
    char *machine;                       /* the DMI product name, NULL when unreadable */
    bool machine_absent;                 /* no such file (a VM, a container) */
    struct err machine_err;              /* why not, where machine is NULL */
    bool machine_said;                   /* its absence logged (once a process) */
    bool reloading;                      /* a reload's reading on the worker pool (reload.c) */
    struct metrics_files metrics_files;  /* read before the loop serves; metrics start on them */
    struct migparted_file migparted;     /* --mig-parted-config as read, until the MIG manager
                                          * takes it (migmgr.c) */
    struct agent_migmgr *migmgr;         /* NULL without --mig-parted-config */
    bool sighup_again;                   /* a SIGHUP came meanwhile: it reloads after */
    struct label_set label_set;          /* the labels last computed */
    struct driver driver;                /* the driver's files for containers, where driver_ok */
    bool driver_ok;
    struct writer *cdi_writer;           /* the CDI spec's, from its first write to the agent's end */
    /* MIG reconfiguration (mig.c): a periodic read of each MIG GPU's devices */
    uv_timer_t mig_timer;
    bool mig_timer_on;
    struct agent_mig_job *mig_jobs;      /* per GPU, on its lane */
    bool mig_update;                     /* a check found other devices: taken when the plugins restart */
    unsigned mig_generation;             /* +1 when DRA makes or destroys a MIG device: checks
                                          * posted before it are stale */
    struct agent_nodeconfig *nodeconfig; /* NULL without --config-map */
    struct metrics_config config_state;  /* reloads, for metrics */
    struct dirs made;                    /* directories the agent made: removed on exit if empty */
    /* the kubelet's PodResources List (pods.c): one reader for metrics and DRA */
    uv_timer_t pods_timer;
    struct grpc_client_call *pods_call;  /* in flight */
    uint64_t pods_last_ms;               /* the last List went out (uv_now) */
    bool pods_failing;                   /* its failure is logged (once until it answers) */
    char pods_socket[CONFIG_PATH_MAX + 64];
};

/* Applies the configuration again (reload.c; SIGHUP, or nodeconfig.c when
 * the node's config changed): named replaces --config-file where not
 * NULL. A config that fails is refused with e, and the running one kept.
 * agent_reload reads in place: start-up's, before the loop serves.
 * agent_reload_later reads on the worker pool and applies on the loop,
 * then calls done (e: refused; not called where the agent stopped
 * meanwhile); false, doing nothing, while another reload is under way
 * (its end pokes the node's config: agent_nodeconfig_poke). */
int agent_reload(struct agent *a, const struct config_text *named, struct err *e);
typedef void (*agent_reload_cb)(void *ctx, const struct err *e);
bool agent_reload_later(struct agent *a, const struct config_text *named, agent_reload_cb done,
                        void *ctx);
void agent_sighup(struct agent *a);
/* The configuration's name (the node's config, or NULL) for metrics. */
void agent_config_applied(struct agent *a, const char *named);

/* The machine type file (GFD's DMI product name), read with the
 * configuration (blocking) and taken on the loop. */
struct agent_machine {
    char *text;                      /* NULL: unreadable */
    bool absent;
    struct err e;
};
struct agent_machine agent_machine_read(const struct config *cfg);
void agent_machine_take(struct agent *a, struct agent_machine *m);

/* Stops the plugins and starts them again once the kubelet has let go of
 * them (agent.c; a reload, or mig.c on a MIG change). */
void agent_plugins_restart(struct agent *a);
/* The kubelet acts on a plugin's going a moment after it has closed the
 * plugin's last connection (it drops the client and marks the resource
 * unhealthy, whoever holds the name by then): a plugin registers the name
 * again only AGENT_REREGISTER_MS after that (the kubelet's close and its
 * drop are one goroutine's next statements). How long from now, 0 when it
 * may at once; -1 while the kubelet still holds a stopped plugin. */
#define AGENT_REREGISTER_MS 25
int64_t agent_reregister_in(const struct agent *a);
void agent_restart_later(struct agent *a);

/* MIG reconfiguration without a restart (mig.c): with a MIG strategy and a
 * GPU in MIG mode, every 2 s reads each such GPU's MIG devices off the
 * loop; a change restarts the plugins, which take it (agent_mig_apply)
 * before they serve again, and relabels. */
void agent_mig_start(struct agent *a);
void agent_mig_apply(struct agent *a);
void agent_mig_stop(struct agent *a);
void agent_mig_free(struct agent *a);

/* The GPU Operator's MIG manager, built in (migmgr.c): with
 * --mig-parted-config, the Node's label nvidia.com/mig.config names the
 * layout each GPU is made to. read: the file (blocking: before the loop,
 * or a reload's reading on the pool). start takes it (once the facts are
 * in; again after a reload). collect takes the lanes' finished changes
 * (probe.c). state: nvidia.com/mig.config.state's value, or NULL. */
int agent_migmgr_read(const struct config *cfg, struct migparted_file *out, struct err *e);
void agent_migmgr_start(struct agent *a, struct migparted_file *file);
void agent_migmgr_collect(struct agent *a);
const char *agent_migmgr_state(const struct agent *a);
/* The status socket's "mig-config": "off" without --mig-parted-config,
 * else STATE<tab>CONFIG<tab>REASON (STATE "none" while the Node has no
 * label; REASON why it waits or failed, else empty). */
void agent_migmgr_answer(const struct agent *a, struct strbuf *out);
/* A change still on a lane: a hand-over waits for it (two agents never
 * change one GPU's instances at once). */
bool agent_migmgr_busy(const struct agent *a);
/* The kubelet's PodResources List: which GPUs pods hold (pods.c). */
struct V1__ListPodResourcesResponse;
void agent_migmgr_on_pods(struct agent *a, const struct V1__ListPodResourcesResponse *r);
void agent_migmgr_stop(struct agent *a);
void agent_migmgr_free(struct agent *a);

/* Takes the MIG checks the lanes have finished (probe.c calls it). */
void agent_mig_collect(struct agent *a);
/* DRA made or destroyed a MIG device of GPU gpu (--dra-mig): its MIG
 * devices are seen's now (health kept by UUID), and the CDI spec names
 * them: its writer is returned (agent_driver_cdi). */
struct writer *agent_mig_take(struct agent *a, unsigned gpu, const struct gpu_info *seen);

/* The agent's client of the API server and its watch of the Node
 * (kube.c): made at start where there are credentials (a kubeconfig, or
 * in-cluster) and NODE_NAME; stop after the modules that use them. */
int agent_kube_start(struct agent *a, struct err *e);
/* Before anything starts: a setting that needs the API server has
 * credentials for it (a usage error where not: the environment's). */
int agent_kube_check(const struct config *cfg, struct err *e);
void agent_kube_stop(struct agent *a);

/* Per-node configuration (nodeconfig.c): with --config-map, watches the
 * Node's label and the ConfigMap and applies the chosen named config. start
 * waits (up to 10 s) for the API's first answer and applies it before
 * anything is served; stop ends the watches; free after the loop closed. */
void agent_nodeconfig_start(struct agent *a);
void agent_nodeconfig_stop(struct agent *a);
void agent_nodeconfig_free(struct agent *a);
/* The node's config chosen again soon (a reload ended: one chosen while
 * it ran waited for it). */
void agent_nodeconfig_poke(struct agent *a);

/* Answers one status-socket request line (answer.c) into out. */
void agent_answer(struct agent *a, const char *line, struct strbuf *out);

/* The named config in the running configuration (buf filled), or NULL. */
const struct config_text *agent_nodeconfig_text(const struct agent *a, struct config_text *buf);

/* Start-up (start.c): 0, or the code to exit with (1, or 2 for a bad --simulate). */
int agent_start(struct agent *a);

/* Starts a device plugin per resource on the agent's model (at start and
 * after a reload); stops them all. */
int agent_plugin_start(struct agent *a, struct err *e);
void agent_plugin_stop(struct agent *a);

/* The driver's files (driver.c): found again, and the CDI spec written
 * where wanted, each time the plugins start; freed on stop. Found here
 * (start-up, before the loop serves), or on the worker pool, then then. */
void agent_driver_start(struct agent *a);
void agent_driver_start_later(struct agent *a, void (*then)(struct agent *a));
void agent_driver_stop(struct agent *a);
/* Writes the CDI spec of the node's devices, where it is wanted, on the
 * worker pool; its writer, for whoever must wait until it is on disk (a DRA
 * prepare that names a MIG device just made), or NULL. */
struct writer *agent_driver_cdi(struct agent *a);

/* Tells every reader that GPU gpu changed (enum gpu_change bits): the
 * watcher, metrics, the plugin. The one way news of a device travels
 * (notify.c). */
void agent_device_changed(struct agent *a, unsigned gpu, unsigned what);

/* The GPUs' lanes, probes and the hang watchdog (probe.c): init starts the
 * lanes and, with health checking on, the probe and watchdog timers; stop
 * closes the handles; lanes_stop ends the lanes (after metrics stopped
 * posting); free after the loop closed. */
int agent_probe_init(struct agent *a, struct err *e);
void agent_probe_stop(struct agent *a);
void agent_lanes_stop(struct agent *a);
void agent_probe_free(struct agent *a);

/* Starts watching NVML events (1.6 ms on an H200: after registering). */
int agent_health_watch(struct agent *a, struct err *e);

/* Stops watching NVML events. */
void agent_health_stop(struct agent *a);

/* Probes every GPU now, each on its lane (a failed event wait, a GPU the
 * sampler found lost). */
void agent_probe_start(struct agent *a);

/* Operator command: marks a GPU (index or UUID) healthy now. */
int agent_health_clear(struct agent *a, const char *gpu, struct err *e);

/* MPS daemons (mps.c): the control program's check, start with the
 * plugins, stop. */
int agent_mps_check(const struct config *cfg, struct err *e);
int agent_mps_start(struct agent *a, struct err *e);
void agent_mps_stop(struct agent *a);
/* The compute mode changes the lanes are done with (the lanes' news);
 * their memory, once the lanes are stopped. */
void agent_mps_modes_collect(struct agent *a);
void agent_mps_modes_free(struct agent *a);

/* Node labels (labels.c): start publishing (after a reload, old is the
 * configuration before it), recompute after a change, stop. */
void agent_labels_start(struct agent *a, const struct config *old);
void agent_labels_refresh(struct agent *a);
void agent_labels_stop(struct agent *a);

/* GPU faults to the control plane (report.c): start (after a reload, old
 * is the configuration before it), tell it the GPUs now, stop. */
void agent_report_start(struct agent *a, const struct config *old);
void agent_report_refresh(struct agent *a);
void agent_report_stop(struct agent *a);

/* Dynamic Resource Allocation (dra.c): with --dra all, the GPUs are served
 * as the DRA driver gpu.nvidia.com instead of by device plugins; started
 * once the inventory's facts are in, and again after a reload that
 * changes it; told of every health change. */
void agent_dra_start(struct agent *a, const struct config *old);
/* The checkpoint read begun (at start, before NVML is up). */
void agent_dra_read(struct agent *a);
void agent_dra_refresh(struct agent *a);
/* Tells metrics who holds the claims' devices (at a change, and once
 * metrics has started). */
void agent_dra_holders(struct agent *a);
void agent_dra_stop(struct agent *a, enum dra_stop_mode mode);
/* The kubelet's PodResources List (pods.c), read by one reader and handed
 * to metrics and DRA: its timer made with the loop; a read now (a reader
 * started) or soon (an Allocate, the claims changed); stopped at the end. */
void agent_pods_init(struct agent *a);
void agent_pods_soon(struct agent *a, bool now);
void agent_pods_stop(struct agent *a);

/* Another agent takes this one's place (by: its PID): what this one serves
 * is let go of; it waits for its stop. */
void agent_release(struct agent *a, const char *by);

/* The API client's request counts to metrics (kube.c). */
void agent_kube_report(struct agent *a);

/* The loop's lag, measured from start to stop (lag.c; agent_shutdown
 * closes its timer). */
void agent_lag_start(struct agent *a);

/* Starts the status socket, making its directory (recorded in a->made);
 * fails, naming the path and its owner, when it cannot. */
int agent_status_start(struct agent *a, struct err *e);

/* Closes the status socket; remove: its file too (on the worker pool).
 * A hand-over leaves the file to the new agent, whose bind replaces it: a
 * removal still queued here could otherwise take the new one's. */
void agent_status_stop(struct agent *a, bool remove);

/* Frees the status socket's memory once the loop has closed it. */
void agent_status_free(struct agent *a);

#endif
