#include "testutil.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static char control_path[108];

/* A failed assertion leaves a test before it shuts the simulator down: the
 * control socket must not outlive the process anyway. */
static void testutil_unlink_control(void)
{
    unlink(control_path);
}

void testutil_sim_start(struct nvml *n, const char *preset)
{
    static bool registered;
    if (!registered)
        registered = atexit(testutil_unlink_control) == 0;
    snprintf(control_path, sizeof control_path, "/tmp/gpulet-test-%d.sock", (int)getpid());
    setenv("GPULET_SIM_CONTROL", control_path, 1);
    setenv("GPULET_SIM_SCENARIO", preset, 1);
    struct err e;
    if (nvml_open(n, GPULET_SIM_LIB, &e) < 0 || nvml_init(n, &e) < 0)
        fail_msg("%s", e.msg);
}

const char *testutil_sim_command(const char *line)
{
    static char reply[1024];
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", control_path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0)
        fail_msg("cannot reach simulator control socket %s", control_path);
    char buf[512];
    int len = snprintf(buf, sizeof buf, "%s\n", line);
    assert_int_equal(write(fd, buf, (size_t)len), len);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof reply && (r = read(fd, reply + n, sizeof reply - 1 - n)) > 0)
        n += (size_t)r;
    reply[n] = '\0';
    close(fd);
    return reply;
}

void testutil_assert_contains(const char *haystack, const char *needle, const char *file, int line)
{
    if (!haystack || !strstr(haystack, needle)) {
        print_error("'%s' does not contain '%s'\n", haystack ? haystack : "(null)", needle);
        _fail(file, line);
    }
}
