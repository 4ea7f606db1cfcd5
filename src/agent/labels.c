/* The node's labels from the agent's device model: computed again on every
 * change that can move them (health, facts, a reload) and handed to the
 * publisher, which writes only what changed. */
#include "agent/internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/log.h"

/* Computes the labels now and hands them on. */
void agent_labels_refresh(struct agent *a)
{
    if (!a->labels || !a->facts_known)
        return;
    const struct labels_input in = {&a->inv, a->devs, &a->cfg, a->machine, (long long)time(NULL),
                                    agent_migmgr_state(a)};
    labels_build(&in, &a->label_set);
    labels_publisher_update(a->labels, &a->label_set);
}

/* Where the labels go: the settings a reload must compare. */
static bool agent_labels_same_output(const struct config *a, const struct config *b)
{
    return a->labels_output == b->labels_output && !strcmp(a->output_file, b->output_file) &&
           a->keep_labels_file == b->keep_labels_file;
}

/* Starts publishing, or after a reload (old: the configuration before it)
 * goes on with the same publisher where the output is the same, so the
 * feature file is never briefly gone and the Node gets only what changed.
 * Labels are not essential: without them the device plugin and metrics run on. */
void agent_labels_start(struct agent *a, const struct config *old)
{
    struct err e;
    if (!old || !a->labels || !agent_labels_same_output(old, &a->cfg)) {
        labels_publisher_stop(a->labels);
        a->labels = NULL;
        if (labels_publisher_start(&a->labels, &a->loop, &a->cfg, a->kube, a->node, &e) < 0) {
            log_error("%s; node labels are off", e.msg);
            return;
        }
    }
    /* The file is read with the configuration (reload.c), whatever the
     * output: the status socket's labels use it too. */
    if (!a->machine && !a->machine_absent)
        log_warn("%s: nvidia.com/gpu.machine is 'unknown'", a->machine_err.msg);
    else if (!a->machine && a->labels && !a->machine_said) { /* a VM, a container: once */
        log_info("no machine type file %s here: nvidia.com/gpu.machine is 'unknown'",
                 a->cfg.machine_type_file);
        a->machine_said = true;
    }
    agent_labels_refresh(a);
}

void agent_labels_stop(struct agent *a)
{
    labels_publisher_stop(a->labels);
    a->labels = NULL;
    label_set_free(&a->label_set);
}
