/* Shared pieces of the subcommands: exit codes, the status socket, usage. */
#ifndef GPULET_CLI_H
#define GPULET_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "util/err.h"

#define CLI_OK 0
#define CLI_FAIL 1   /* the command ran and failed */
#define CLI_USAGE 2  /* the command line was wrong */

/* The agent's status socket: --status-socket, $GPULET_STATUS_SOCKET, else
 * the user's own one for a simulated node, else the node's where it exists,
 * else the user's where it exists. buf holds the user's path. */
const char *cli_status_socket(const char *flag, bool simulated, char *buf, size_t len);

/* --status-socket's line of a command's --help, with its defaults. */
void cli_status_socket_help(FILE *out);

/* Why a socket could not be reached, for people: " (is the agent
 * running?)", or that it is another user's; "" otherwise. */
const char *cli_unreachable_hint(int errnum);

struct gpu_inventory;
struct gpu_health;

/* Asks the running agent one status request ("list json"), at
 * --status-socket's socket_flag, else the node's, else the user's
 * (cli_status_socket): 1 with its answer in out (the caller frees it), 0
 * where no agent answers or it does not know the request (an older
 * gpulet: do it locally), -1 with its error said on stderr. */
struct strbuf;
int cli_agent_ask(const char *cmd, const char *socket_flag, const char *request, struct strbuf *out);

/* The same, the answer on standard output: CLI_OK, CLI_FAIL, or -1 where
 * no agent answered (do it locally). */
int cli_agent_print(const char *cmd, const char *socket_flag, const char *request);

/* Opens the GPUs cfg names (--simulate, --nvml, else the driver's NVML)
 * and reads their inventory: CLI_OK, or the exit code after saying why
 * (where no GPU is here, the hint to run `gpulet <cmdline> --simulate`). */
struct config;
struct nvml;
int cli_open(const char *cmd, const char *cmdline, const struct config *cfg, struct nvml *n,
             struct gpu_inventory *inv);

/* The running agent's health (its "health" answer) into the records devs
 * (one per GPU of inv, by UUID; its MIG devices' too); false when no agent
 * answers at socket. */
struct gpu_device;
bool cli_agent_health(const char *socket, const struct gpu_inventory *inv,
                      struct gpu_device *devs, const char *cmd);

/* The next GPU or MIG device (*mig >= 0) of the agent's "health" answer,
 * whose lines it cuts in place from *cursor on: false at its end. Lines
 * that are neither are passed over. */
bool cli_health_next(char **cursor, unsigned *index, int *mig, char *uuid, size_t len,
                     struct gpu_health *h);

/* Prints "gpulet CMD: <e's message><hint>" to stderr and returns the exit
 * code: CLI_USAGE where the command line was wrong, else CLI_FAIL. */
int cli_fail(const char *cmd, const struct err *e, const char *hint);

/* A hint for a command that found no GPU, naming the --simulate that works
 * without one: cmdline is the command to suggest ("list"). "" where the
 * GPUs were simulated or given. */
const char *cli_no_gpu_hint(const char *cmdline, bool real, char *buf, size_t len);

/* For a command that reads the simulated GPUs and exits: its simulator
 * opens no control socket (nothing could reach it in time), so it neither
 * warns about a running agent's nor takes one. GPULET_SIM_CONTROL wins. */
void cli_simulator_quiet(void);

/* GFD's --oneshot (flag, GFD_ONESHOT or flags.gfd.oneshot): the labels
 * the agent would publish, written once to cfg's --output-file, then exit
 * (cmd_labels.c). */
struct config;
int cli_labels_oneshot(struct config *cfg);

/* Prints "gpulet VERSION": `gpulet version`, and --version or -v on the
 * commands that take the agent's options (NVIDIA's binaries take them). */
int cli_version(void);

/* Prints "gpulet <msg>" to stderr and returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One of a command's own options, where the command also takes the
 * agent's (labels, cdi generate): "-o X", "-oX", "--output X" and
 * "--output=X" set *value. short_name may be NULL. */
struct cli_own_opt {
    const char *short_name;
    const char *long_name;
    const char **value;
};

/* Takes the command's own options out of argv, leaving the agent's for
 * config_parse_args: 0, or CLI_USAGE (said) for one without its value. */
int cli_take_own(const char *cmd, int *argc, char **argv, const struct cli_own_opt *opts,
                 size_t nopts);

int cmd_list(int argc, char **argv);
int cmd_agent(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_health(int argc, char **argv);
int cmd_labels(int argc, char **argv);
int cmd_cdi(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_replace(int argc, char **argv);

#endif
