/* The MPS module's own: one daemon's record and what its files call of
 * each other (daemon.c: its life; control.c: the commands through the
 * control program; found.c: daemons that run already, and what a
 * daemon's files say, read on the worker pool). Nothing outside
 * src/mps/ includes it. */
#ifndef GPULET_MPS_INTERNAL_H
#define GPULET_MPS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "mps/mps.h"
#include "util/strbuf.h"

#define MPS_CONTROL "nvidia-cuda-mps-control"
#define MPS_READY_TRIES 50            /* limits retried while the daemon starts: 10 s */
#define MPS_READY_RETRY_MS 200
#define MPS_BACKOFF_MIN_MS 1000
#define MPS_BACKOFF_MAX_MS 30000
#define MPS_KILL_AFTER_MS 2000        /* SIGTERM not obeyed: SIGKILL */
#define MPS_QUIT_RETRY_MS 1000        /* quit again while draining */
#define MPS_CHECK_MS 500              /* without a pidfd, how often the daemon is looked at */
#define MPS_TOUCH_MS 60000            /* the lease touched */
#define MPS_LEASE_S 600               /* gpulet away this long: the keeper ends an idle daemon */
#define MPS_PID_FILE "nvidia-cuda-mps-control.pid" /* the daemon's own, in its pipe directory */

/* STARTING: spawned or adopted, until it takes the limits. REPLACING: an
 * adopted daemon of other GPUs, ending before this one starts. */
enum mps_state { MPS_STARTING, MPS_UP, MPS_WAITING, MPS_REPLACING, MPS_STOPPING };

struct mps_daemon {
    uv_loop_t *loop;
    const struct config *cfg;
    struct mps_spec spec;
    struct mps_hooks hooks;
    char control[CONFIG_PATH_MAX];
    char self[CONFIG_PATH_MAX];       /* gpulet, for mps-exec */
    char host[CONFIG_PATH_MAX];       /* mps-exec --host: the host's /, where gpulet is in a container */
    char host_control[CONFIG_PATH_MAX]; /* control as the host names it */
    char out[CONFIG_PATH_MAX + 160];  /* the daemon's stdout and stderr */
    char started[CONFIG_PATH_MAX + 160]; /* where mps-exec puts the pid of the daemon it started */
    char lease[CONFIG_PATH_MAX + 160]; /* touched while this gpulet runs: the keeper's sign */
    uv_timer_t touch;                 /* the lease's */
    uv_work_t touch_work;             /* a touch on the worker pool */
    bool touching;
    struct config_mps_dirs dirs;
    char **env;                       /* the daemon's and the commands' environment */
    uv_process_t helper;              /* gpulet mps-exec, until the daemon runs */
    bool helper_alive;
    pid_t pid;                        /* the daemon, once known (0: not) */
    int pidfd;
    uv_poll_t watch;                  /* its pidfd: readable once it has exited */
    uv_timer_t check;                 /* or, without pidfds (valgrind, old kernels), a look */
    bool watching;
    bool checking;
    bool adopted;                     /* found running, not started by this gpulet */
    uv_process_t cmd;                 /* a command being sent, with its stdin */
    uv_pipe_t cmd_in;
    bool cmd_alive;
    uv_write_t cmd_write;
    struct strbuf cmd_text;
    unsigned tries;
    uv_timer_t timer;
    enum mps_state state;
    unsigned backoff_ms;
    unsigned kills;                   /* signals sent after quit was not obeyed */
    bool failing;                     /* an outage was logged: the restarts are quiet till up */
    bool remove_dir;                  /* dir goes once stopped */
    uint64_t drain_end;               /* uv_now when an ended daemon's clients lose it */
    int handles;                      /* open libuv handles */
};

/* daemon.c */
struct mps_daemon *mps_new(uv_loop_t *loop, const struct config *cfg, const struct mps_spec *spec,
                           const char *control);
char **mps_environment(struct mps_daemon *m);
void mps_closed(uv_handle_t *h);
void mps_close(struct mps_daemon *m);     /* its last handles */
void mps_maybe_free(struct mps_daemon *m);
void mps_watch(struct mps_daemon *m, pid_t pid);
void mps_up(struct mps_daemon *m);        /* it took the limits */
void mps_failed(struct mps_daemon *m, const char *how, int code);

/* What mps_look does on the worker pool, then calls back with on the loop:
 * the directories made (a failure is e), the pid of the daemon serving the
 * pipe directory, or the pid mps-exec wrote of the one it started (0: none). */
enum { MPS_LOOK_DIRS = 1, MPS_LOOK_PID = 2, MPS_LOOK_STARTED = 4 };
typedef void (*mps_look_cb)(struct mps_daemon *m, pid_t pid, const struct err *e);
void mps_look(struct mps_daemon *m, unsigned what, mps_look_cb then);
void mps_end_found(struct mps_daemon *m, pid_t pid, const struct err *e); /* MPS_END's rest */

/* control.c */
void mps_send_limits(struct mps_daemon *m);
void mps_on_limits_timer(uv_timer_t *t);
void mps_quit(struct mps_daemon *m);      /* the drain: quit, and SIGTERM at its end */

/* found.c */
bool mps_alive(pid_t pid);
int mps_environ(pid_t pid, const char *key, char *out, size_t len);
pid_t mps_read_pid(const struct mps_daemon *m);

#endif
