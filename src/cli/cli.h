/* Shared pieces of the subcommands: exit codes, the status socket, usage. */
#ifndef GPULET_CLI_H
#define GPULET_CLI_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

#define CLI_OK 0
#define CLI_FAIL 1   /* the command ran and failed */
#define CLI_USAGE 2  /* the command line was wrong */

/* The agent's status socket: --status-socket, $GPULET_STATUS_SOCKET or the default. */
const char *cli_status_socket(const char *flag);

struct gpu_inventory;
struct gpu_health;

/* Fills health[] (one per GPU of inv) from the running agent's answer on
 * the status socket; false when no agent answers. */
bool cli_agent_health(const char *socket, const struct gpu_inventory *inv,
                      struct gpu_health *health);

/* Prints "gpulet: <msg>" to stderr and returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

int cmd_list(int argc, char **argv);
int cmd_agent(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_health(int argc, char **argv);
int cmd_labels(int argc, char **argv);
int cmd_cdi(int argc, char **argv);
int cmd_doctor(int argc, char **argv);

#endif
