/* Command-line checks that getopt_long does not make. */
#ifndef GPULET_OPTS_H
#define GPULET_OPTS_H

#include <getopt.h>

#include "util/err.h"

/* getopt_long takes any unambiguous prefix of a long option (--sim for
 * --simulate): a typo or an abbreviation in a DaemonSet would then mean
 * something by accident. Fails, naming the first long option in argv that
 * is not spelled out exactly. shortopts is getopt's, to skip the values of
 * short options. */
int opts_check_exact(int argc, char **argv, const char *shortopts,
                     const struct option *longopts, struct err *e);

#endif
