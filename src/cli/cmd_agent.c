/* gpulet agent: the node daemon (src/agent). The command line is read
 * here; the agent gets its values. */
#include <stdio.h>

#include "agent/agent.h"
#include "cli/cli.h"
#include "config/config.h"

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
    /* GFD's one-shot labelling: no daemon at all. A config that does not
     * load is the agent's to report, as always. */
    struct config cfg;
    if (config_load(&cfg, &args, NULL, &e) == 0 && cfg.oneshot)
        return cli_labels_oneshot(&cfg);
    return agent_run(&args);
}
