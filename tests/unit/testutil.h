/* Helpers shared by the unit tests. */
#ifndef GPULET_TESTUTIL_H
#define GPULET_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "nvml/nvml.h"

/* Opens and initializes the simulator on a preset, with its control socket at a
 * per-process path; fails the test on error. */
void testutil_sim_start(struct nvml *n, const char *preset);

/* Sends one control command to the simulator; returns its answer line. */
const char *testutil_sim_command(const char *line);

/* asserts that haystack contains needle, printing both when it does not. */
#define assert_contains(haystack, needle) testutil_assert_contains((haystack), (needle), __FILE__, __LINE__)
void testutil_assert_contains(const char *haystack, const char *needle, const char *file, int line);

#endif
