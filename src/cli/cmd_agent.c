/* gpulet agent: the node daemon (src/agent). */
#include "agent/agent.h"
#include "cli/cli.h"

int cmd_agent(int argc, char **argv)
{
    static struct agent a; /* the agent's one struct: all of its state */
    return agent_run(&a, argc, argv);
}
