/* The node agent: NVML, the device model, health, the device plugin,
 * metrics and the status socket on one libuv loop (docs/architecture.md). */
#ifndef GPULET_AGENT_H
#define GPULET_AGENT_H

#include "config/config.h"

/* Runs the agent with these command-line values until SIGINT or SIGTERM;
 * returns the exit code: 0, 1 when it could not start, 2 when the
 * configuration's flags or variables are wrong (logged). */
int agent_run(const struct config_args *args);

/* 1 while the main thread runs the agent's loop (agent.c says who reads it). */
extern _Atomic int agent_loop_serving;

#endif
