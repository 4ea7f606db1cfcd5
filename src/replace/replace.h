/* What gpulet knows of the workloads it replaces: the JSON patch that keeps
 * one of NVIDIA's DaemonSets off the nodes gpulet has taken over. */
#ifndef GPULET_REPLACE_H
#define GPULET_REPLACE_H

#include <stddef.h>

#include "util/err.h"
#include "util/strbuf.h"

/* The label on the nodes gpulet serves in NVIDIA's place. */
#define REPLACE_LABEL_KEY "gpulet.io/replaces-nvidia"
#define REPLACE_LABEL_VALUE "true"

/* From workloads as kubectl prints them (-o json or -o yaml; one, a List,
 * or several YAML documents), what keeps NVIDIA's off the nodes labelled
 * key=value: the requirement "key NotIn [value]" goes into every node
 * selector term of the pod template's required node affinity (terms are
 * ORed: a strategic merge patch would replace the whole list), or becomes
 * its one term. Each patch (RFC 6902) first tests that the terms are still
 * those read, so it applies to exactly the DaemonSet it was made from.
 * - One workload: its JSON patch, whatever it is ("[]" where it needs none).
 * - Several: a `kubectl -n NS patch daemonset NAME --type json -p '...'`
 *   line for each DaemonSet of NVIDIA's (device plugin, GFD, MPS control
 *   daemon, dcgm-exporter, by image or app.kubernetes.io/name) that needs
 *   one; notes says what was patched and what left alone. */
int replace_nvidia(const char *text, size_t len, const char *key, const char *value,
                   struct strbuf *out, struct strbuf *notes, struct err *e);

#endif
