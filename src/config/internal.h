/* Shared between the files of src/config; not a public interface. */
#ifndef GPULET_CONFIG_INTERNAL_H
#define GPULET_CONFIG_INTERNAL_H

#include "config/config.h"
#include "util/ydoc.h"

/* An empty value (null, [] or {}): a section left out. */
bool config_empty(const yaml_node_t *n);

/* The resources and sharing sections of a v1 file (resources.c). */
int config_resources_section(struct config *c, struct ydoc *d, yaml_node_t *n, struct err *e);
int config_sharing_section(struct config *c, struct ydoc *d, yaml_node_t *n, struct err *e);

#endif
