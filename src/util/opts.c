#include "util/opts.h"

#include <string.h>

static const struct option *opts_find(const struct option *longopts, const char *name, size_t len)
{
    for (const struct option *o = longopts; o->name; o++)
        if (strlen(o->name) == len && !memcmp(o->name, name, len))
            return o;
    return NULL;
}

int opts_check_exact(int argc, char **argv, const char *shortopts,
                     const struct option *longopts, struct err *e)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--"))
            return 0;
        if (a[0] == '-' && a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            const struct option *o = opts_find(longopts, name, len);
            if (!o)
                return err_set(e, "unknown option '--%.*s'", (int)len, name);
            if (o->has_arg == required_argument && !eq)
                i++; /* its value, which may itself start with "--" */
        } else if (a[0] == '-' && a[1] && !a[2]) {
            const char *s = strchr(shortopts, a[1]);
            if (s && s[1] == ':')
                i++;
        }
    }
    return 0;
}
