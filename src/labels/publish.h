/* Publishing the node's labels where the configuration says: the Node
 * object through the agent's API client, or NFD's local feature file. The
 * publisher runs on the agent's loop. It writes only what differs from
 * what the Node (its watch) or the file holds, and retries with backoff
 * until it is there (docs/labels.md). */
#ifndef GPULET_LABELS_PUBLISH_H
#define GPULET_LABELS_PUBLISH_H

#include <uv.h>

#include "config/config.h"
#include "kube/kube.h"
#include "labels/labels.h"
#include "util/strbuf.h"
#include "util/writer.h"

/* Annotation on the Node listing the label keys gpulet set. */
#define LABELS_OWNER_ANNOTATION "gpulet.io/labels"

struct labels_publisher;

/* Chooses the output (--labels; auto is api where credentials are there
 * and NODE_NAME is set, else none). The API output needs the agent's
 * client and its watch of the Node. *out stays NULL for none. Fails on a
 * missing NODE_NAME or client: the caller logs it and runs on without
 * labels. */
int labels_publisher_start(struct labels_publisher **out, uv_loop_t *loop,
                           const struct config *cfg, struct kube_client *kc,
                           struct kube_watch *node, struct err *e);

/* The labels as they should be now: written (or sent) if they differ from
 * what was last published. p may be NULL. */
void labels_publisher_update(struct labels_publisher *p, const struct label_set *want);

/* Removes the feature file (unless kept), ends a request in flight, and
 * frees the publisher once libuv is done with it. p may be NULL. */
void labels_publisher_stop(struct labels_publisher *p);

/* The merge patch (application/merge-patch+json) that takes the Node
 * (parsed: the watch's) to the wanted labels: sets what differs, removes (null) what
 * the owner annotation lists and want lacks, updates the annotation.
 * changes gets how many labels change; 0 with an empty patch when the
 * Node is already right. */
int labels_node_patch(const json_t *node, const struct label_set *want, struct strbuf *patch,
                      unsigned *changes, struct err *e);

/* The feature file's writer (util/writer.h): replaced atomically, through
 * a temporary file in a hidden directory beside it, made and removed. */
struct writer *labels_file_writer(uv_loop_t *loop, const char *path);

/* The same, written at once by the caller's thread (GFD's --oneshot, from
 * the command line; never on the agent's loop). */
int labels_file_write_now(const char *path, const char *text, size_t len, struct err *e);

#endif
