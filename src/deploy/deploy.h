/* What gpulet knows of the workloads it replaces: the JSON patch that keeps
 * one of NVIDIA's DaemonSets off the nodes gpulet has taken over. */
#ifndef GPULET_DEPLOY_H
#define GPULET_DEPLOY_H

#include <stddef.h>

#include "util/err.h"
#include "util/strbuf.h"

/* The label on the nodes gpulet serves in NVIDIA's place. */
#define DEPLOY_LABEL_KEY "gpulet.io/replaces-nvidia"
#define DEPLOY_LABEL_VALUE "true"

/* From a workload's JSON (kubectl get daemonset NAME -o json), the JSON
 * patch (RFC 6902, `kubectl patch --type json`) that adds the requirement
 * "key NotIn [value]" to every node selector term of its pod template's
 * required node affinity, or gives it that one term where it has none.
 * Terms are ORed: a strategic merge patch would replace the whole list.
 * The patch first tests that the terms are still the ones read, so it
 * applies to exactly the DaemonSet it was made from. A workload that has
 * the requirement in every term already gets "[]" and *already true. */
int deploy_replace_patch(const char *json, size_t len, const char *key, const char *value,
                         struct strbuf *out, int *already, struct err *e);

#endif
