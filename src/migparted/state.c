/* The MIG manager's state as the status socket's "mig-config" answers it
 * (agent/migmgr.c writes it): one reader for gpulet health and doctor. */
#include "migparted/migparted.h"

#include <string.h>

void migparted_state_split(char *line, char **state, char **config, char **reason)
{
    line[strcspn(line, "\n")] = '\0';
    *state = line;
    *config = *reason = line + strlen(line); /* "" */
    char *tab = strchr(line, '\t');
    if (!tab)
        return;
    *tab = '\0';
    *config = tab + 1;
    if ((tab = strchr(*config, '\t'))) {
        *tab = '\0';
        *reason = tab + 1;
    }
}
