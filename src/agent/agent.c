/* The agent's life: configuration, the loop, signals (SIGHUP reloads the
 * config, SIGINT and SIGTERM stop it cleanly) and shutdown. Start-up is
 * start.c's. */
#include "agent/internal.h"

#include <dirent.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "metrics/collectors.h"
#include "util/dirs.h"
#include "util/log.h"
#include "util/xmalloc.h"

#define AGENT_RESTART_RETRY_MS 5000

static void agent_restart(uv_timer_t *t);

static void agent_stop(struct agent *a, const char *why)
{
    log_info("%s, stopping", why);
    uv_stop(&a->loop);
}

void agent_plugins_restart(struct agent *a)
{
    a->restart_pending = true;
    agent_plugin_stop(a);
    agent_restart_later(a);
}

int64_t agent_reregister_in(const struct agent *a)
{
    if (a->draining)
        return -1;
    uint64_t now = uv_now((uv_loop_t *)&a->loop);
    uint64_t at = a->drained_at ? a->drained_at + AGENT_REREGISTER_MS : 0;
    return at > now ? (int64_t)(at - now) : 0;
}

/* plugin_stop closes its libuv handles asynchronously; even at once, the
 * timer runs in the next loop iteration, after those closes have let go
 * of the socket's directory watch. A second restart meanwhile only
 * re-arms it; while the kubelet holds a stopped plugin, the last one's
 * drain comes back here (start.c). */
void agent_restart_later(struct agent *a)
{
    int64_t in = agent_reregister_in(a);
    if (a->restart_pending && !a->stopping && in >= 0)
        uv_timer_start(&a->restart_timer, agent_restart, (uint64_t)in, 0);
}

/* Another agent takes this one's place (answer.c's hand-over): all it
 * serves and writes is let go of as at a stop, and the rest of its life
 * is waiting for its own stop. */
void agent_release(struct agent *a, const char *by)
{
    log_info("handing over to the gpulet agent PID %s: the device plugins, DRA, metrics, "
             "labels and reports stop here (MPS daemons and ResourceSlices stay for it)", by);
    a->stopping = true; /* NVML's facts, if still being read, start nothing now */
    uv_timer_stop(&a->restart_timer);
    metrics_stop(a->metrics);
    a->metrics = NULL;
    agent_plugin_stop(a);
    agent_labels_stop(a);
    agent_report_stop(a);
    agent_dra_stop(a, DRA_STOP_KEEP);
    agent_mig_stop(a);
    agent_migmgr_stop(a);
    agent_nodeconfig_stop(a);
    /* the status socket stays until the last write has ended (answer.c) */
}

static void agent_on_signal(uv_signal_t *s, int signum)
{
    struct agent *a = s->data;
    if (signum != SIGHUP) {
        agent_stop(a, signum == SIGINT ? "received SIGINT" : "received SIGTERM");
        return;
    }
    agent_sighup(a);
}

static void agent_restart_found(struct agent *a);

static void agent_restart(uv_timer_t *t)
{
    struct agent *a = t->data;
    if (a->stopping || a->driver_finding)
        return; /* the driver's files being found: then it goes on (agent_restart_found) */
    a->restart_pending = false;
    agent_mig_apply(a); /* the plugins are gone: their devices may change now */
    agent_driver_start_later(a, agent_restart_found);
}

/* The driver's files are found (on the worker pool): the plugins start. */
static void agent_restart_found(struct agent *a)
{
    if (a->restart_pending) { /* a reload came meanwhile: its config may name another driver */
        agent_restart_later(a);
        return;
    }
    struct err e;
    a->plugins_restarted = true;
    if (agent_plugin_start(a, &e) < 0) {
        /* The node served a moment ago: whatever stops it now may pass. */
        log_error("reload: device plugin did not restart: %s; trying again in %d s", e.msg,
                  AGENT_RESTART_RETRY_MS / 1000);
        a->restart_pending = true;
        uv_timer_start(&a->restart_timer, agent_restart, AGENT_RESTART_RETRY_MS, 0);
        return;
    }
    agent_labels_refresh(a); /* replicas and sharing are the restarted plugins' */
}

/* A simulated node's files in the user's directory are the demo's, and go
 * with it: its CDI specs (a node keeps them, for the pods that start while
 * gpulet restarts) and the feature file's directory. The user's directory
 * itself then goes with what the agent made (dirs_unmake). */
static void agent_demo_files_remove(const struct agent *a)
{
    if (!a->cfg.simulate[0])
        return;
    char user[CONFIG_PATH_MAX], labels[CONFIG_PATH_MAX];
    dirs_user(user, sizeof user);
    dirs_parent(a->cfg.output_file, labels, sizeof labels);
    const char *const dirs[] = {a->cfg.cdi_spec_dir, labels};
    size_t n = strlen(user);
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        if (strncmp(dirs[i], user, n) || dirs[i][n] != '/')
            continue; /* a path given: not the demo's to clear */
        DIR *d = opendir(dirs[i]);
        for (struct dirent *f; d && (f = readdir(d));) {
            char path[2 * CONFIG_PATH_MAX];
            snprintf(path, sizeof path, "%s/%s", dirs[i], f->d_name);
            if (f->d_type == DT_REG && strstr(f->d_name, ".json"))
                unlink(path);
        }
        if (d)
            closedir(d);
        rmdir(dirs[i]); /* only if empty: a kept feature file stays */
    }
}

static void agent_close_walk(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

static void agent_shutdown(struct agent *a)
{
    a->stopping = true; /* the facts, if still being read, start nothing now */
    agent_pods_stop(a);       /* its answer goes to metrics and DRA */
    metrics_stop(a->metrics); /* first: its sampler thread posts to the lanes */
    a->metrics = NULL;
    agent_lanes_stop(a);      /* then no lane runs a job of anyone's */
    agent_plugin_stop(a);
    agent_labels_stop(a);
    agent_report_stop(a);
    agent_dra_stop(a, DRA_STOP_KEEP); /* the slices stay for the next gpulet */
    agent_health_stop(a);
    agent_probe_stop(a);
    agent_mig_stop(a);
    agent_migmgr_stop(a);
    agent_status_stop(a, true);
    agent_nodeconfig_stop(a);
    agent_kube_stop(a);       /* after all that use it */
    uv_close((uv_handle_t *)&a->sigint, NULL);
    uv_close((uv_handle_t *)&a->sigterm, NULL);
    uv_close((uv_handle_t *)&a->sighup, NULL);
    uv_close((uv_handle_t *)&a->restart_timer, NULL);
    uv_close((uv_handle_t *)&a->lag_timer, NULL);
    uv_run(&a->loop, UV_RUN_DEFAULT); /* close callbacks, a probe in flight */
    uv_walk(&a->loop, agent_close_walk, NULL);
    uv_run(&a->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&a->loop) != 0)
        log_warn("libuv loop closed with handles still open");
    dra_loaded_free(&a->dra_loaded); /* read, where DRA never started */
    agent_status_free(a);
    agent_nodeconfig_free(a);
    agent_mig_free(a);
    agent_migmgr_free(a);
    migparted_free(&a->migparted);
    agent_mps_modes_free(a);
    agent_probe_free(a);
    agent_driver_stop(a);
    writer_close(a->cdi_writer); /* its writes ended with the loop */
    plugin_resources_free(a->resources, a->nresources);
    free(a->devs);
    free(a->mps_modes);
    free(a->health_said);
    gpu_inventory_free(&a->inv);
    free(a->machine);
    metrics_files_free(&a->metrics_files);
    agent_demo_files_remove(a);
    dirs_unmake(&a->made); /* the sockets in them are gone with the loop's handles */
    if (!a->lanes_stuck)
        nvml_close(&a->nvml); /* else a lane is still in its code: it ends with the process */
    if (a->cfg.simulate[0])
        dirs_user_release(); /* the simulator's socket is gone with NVML */
}

/* The binary exports agent_loop_serving
 (its one dynamic symbol: src/agent/exports.list) for the NVML
 * simulator, which reports an NVML call made on the loop: the rule of
 * docs/architecture.md's "Executors", checked wherever tests run the
 * agent. Nothing else reads it; a real NVML never looks. */
_Atomic int agent_loop_serving;

int agent_run(const struct config_args *args)
{
    struct agent *a = xcalloc(1, sizeof *a);
    a->args = *args;
    int rc = 1;
    struct err e;
    if (config_load(&a->cfg, &a->args, NULL, &e) < 0) {
        log_error("%s", e.msg);
        rc = e.usage ? 2 : 1;
        goto out;
    }
    config_user_paths(&a->cfg);
    log_set_level((enum log_level)a->cfg.log_level);
    if (gpu_health_policy_init(&a->policy, getenv("DP_DISABLE_HEALTHCHECKS"),
                           getenv("DP_ENABLE_HEALTHCHECKS"), &e) < 0) {
        log_error("%s", e.msg);
        rc = 2; /* the environment, as the command line: MIG_STRATEGY=bogus is 2 too */
        goto out;
    }
    /* Bad input is one line and an exit before anything is served or
     * written: 2 for the command line and the environment, 1 for a file. */
    if (agent_kube_check(&a->cfg, &e) < 0 || metrics_read_files(&a->cfg, &a->metrics_files, &e) < 0 ||
        agent_migmgr_read(&a->cfg, &a->migparted, &e) < 0) {
        log_error("%s", e.msg);
        rc = e.usage ? 2 : 1;
        goto out;
    }
    config_log(&a->cfg);
    config_log_idle(&a->cfg, a->cfg.node_name[0] && (a->cfg.kubeconfig[0] || kube_in_cluster()));
    uv_loop_init(&a->loop);
    uv_timer_init(&a->loop, &a->restart_timer);
    a->restart_timer.data = a;
    agent_pods_init(a);
    uv_signal_t *sigs[] = {&a->sigint, &a->sigterm, &a->sighup};
    const int signums[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&a->loop, sigs[i]);
        sigs[i]->data = a;
        uv_signal_start(sigs[i], agent_on_signal, signums[i]);
    }
    agent_lag_start(a);
    agent_config_applied(a, NULL);
    struct agent_machine machine = agent_machine_read(&a->cfg); /* before the loop serves: a file */
    agent_machine_take(a, &machine);
    /* The API server that a setting needs cannot be had: exit 1. */
    if (agent_kube_start(a, &e) < 0) {
        log_error("%s", e.msg);
        rc = 1;
    } else {
        agent_nodeconfig_start(a);
        rc = agent_start(a);
    }
    if (rc == 0) {
        /* jansson seeds its hashes from /dev/urandom at the first object
         * it makes: here, so that the loop never opens a file for it. */
        json_object_seed(0);
        atomic_store(&agent_loop_serving, 1);
        uv_run(&a->loop, UV_RUN_DEFAULT);
        atomic_store(&agent_loop_serving, 0);
    }
    if (rc == 0)
        rc = a->exit_code;
    agent_shutdown(a);
    log_info("agent stopped");
out:
    free(a);
    return rc;
}
