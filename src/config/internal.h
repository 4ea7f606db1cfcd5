/* Shared between the files of src/config; not a public interface. */
#ifndef GPULET_CONFIG_INTERNAL_H
#define GPULET_CONFIG_INTERNAL_H

#include "config/config.h"
#include "util/ydoc.h"

/* One option: its flag, variable, file key, type and where it goes in
 * struct config. The table is options.c's. */
enum config_type { T_BOOL, T_STRING, T_ENUM, T_LIST, T_UINT };

struct config_opt {
    const char *flag;           /* without "--" */
    const char *env;            /* NULL: no variable */
    const char *key;            /* path in the v1 file; NULL: not in the file */
    enum config_type type;
    size_t offset;
    size_t size;                /* for T_STRING */
    const char *const *choices; /* T_ENUM values by index; T_LIST names by bit */
    const char *def;
    const char *help;
    const char *meta;           /* T_STRING: what the value is, for --help */
    const char *user_name;      /* with --simulate and not given: this name in the user's
                                 * own directory (dirs_user), never a node's path */
};

extern const struct config_opt config_options[];
extern const size_t config_noptions;

/* Another name of an option's flag, NVIDIA's (options.c). */
struct config_alias {
    const char *alias;
    const char *flag;
};
extern const struct config_alias config_aliases[];
extern const size_t config_naliases;

/* The variables of an option NVIDIA reads from more than one, in its
 * order; options not listed read only their own env. */
struct config_env_list {
    const char *flag;
    const char *envs[2];
};
extern const struct config_env_list config_env_lists[];
extern const size_t config_nenv_lists;

/* A boolean's words, as Go's strconv.ParseBool takes them: the true ones,
 * then the false ones. */
extern const char *const config_bool_words[12];

/* Logs, at info, each of NVIDIA's options given that gpulet takes but needs
 * no value of, and why (config_log: once a load). */
void config_log_unneeded(const struct config *c);

/* Sets option o from value; where names its source in errors. */
int config_set(struct config *c, const struct config_opt *o, const char *value,
               const char *where, struct err *e);

/* Applies a `version: v1` file at path over c (file.c). */
int config_file(struct config *c, const char *path, struct err *e);

/* The resources and sharing sections of a v1 file (resources.c). */
int config_resources_section(void *ctx, struct ydoc *d, yaml_node_t *n, struct err *e);
int config_sharing_section(void *ctx, struct ydoc *d, yaml_node_t *n, struct err *e);

#endif
