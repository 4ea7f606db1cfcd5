/* gpulet agent: the node daemon (src/agent). The command line is read
 * here; the agent gets its values. */
#include <stdio.h>

#include "agent/agent.h"
#include "cli/cli.h"

int cmd_agent(int argc, char **argv)
{
    struct config_args args;
    struct err e;
    if (config_parse_args(&args, argc, argv, &e) < 0)
        return cli_usage_error("agent", "%s", e.msg);
    if (args.help) {
        config_usage(stdout);
        return CLI_OK;
    }
    if (args.version)
        return cli_version();
    return agent_run(&args);
}
