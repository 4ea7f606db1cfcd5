/* The control socket: a unix socket on which `gpulet sim` sends one command
 * line and reads one answer line. It runs on its own thread while NVML is
 * initialized, so faults reach a process that has the simulator loaded. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "control.h"
#include "sim.h"

static void control_warn(const char *what)
{
    fprintf(stderr, "gpulet-nvml-sim: control socket %s: %s; fault injection is off\n",
            sim_state.control_path, what);
}

/* Reads one line (up to 1023 bytes) with a short deadline, so a silent
 * client cannot hold the thread. */
static ssize_t control_read_line(int fd, char *buf, size_t cap)
{
    size_t n = 0;
    while (n + 1 < cap) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 2000) <= 0)
            return -1;
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        if (memchr(buf, '\n', n))
            break;
    }
    buf[n] = '\0';
    return (ssize_t)n;
}

static void control_serve(int fd)
{
    char line[1024], reply[1024];
    if (control_read_line(fd, line, sizeof line) <= 0)
        return;
    sim_fault_command(line, reply, sizeof reply);
    size_t len = strlen(reply);
    reply[len++] = '\n';
    (void)!send(fd, reply, len, MSG_NOSIGNAL);
}

static void *control_main(void *arg)
{
    (void)arg;
    for (;;) {
        struct pollfd p[2] = {{sim_state.control_fd, POLLIN, 0},
                              {sim_state.control_wake[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (!(p[0].revents & POLLIN))
            continue;
        int c = accept4(sim_state.control_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        control_serve(c);
        close(c);
    }
    return NULL;
}

/* Binds path, replacing a stale socket but never a live one. */
static int control_bind(int fd, const struct sockaddr_un *addr)
{
    if (bind(fd, (const struct sockaddr *)addr, sizeof *addr) == 0)
        return 0;
    if (errno != EADDRINUSE)
        return -1;
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int live = probe >= 0 && connect(probe, (const struct sockaddr *)addr, sizeof *addr) == 0;
    if (probe >= 0)
        close(probe);
    if (live) {
        errno = EADDRINUSE;
        return -1;
    }
    unlink(addr->sun_path);
    return bind(fd, (const struct sockaddr *)addr, sizeof *addr);
}

void sim_control_start(void)
{
    char path[512];
    bool user_dir = sim_control_path(path, sizeof path);
    if (!strcmp(path, "off"))
        return;
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    struct err e;
    if (user_dir && dirs_user_make(&sim_state.control_dirs, &e) < 0) {
        snprintf(sim_state.control_path, sizeof sim_state.control_path, "%.100s", path);
        control_warn(e.msg);
        return;
    }
    if (strlen(path) >= sizeof addr.sun_path) {
        snprintf(sim_state.control_path, sizeof sim_state.control_path, "%.100s...", path);
        control_warn("path too long");
        return;
    }
    strcpy(addr.sun_path, path);
    strcpy(sim_state.control_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || control_bind(fd, &addr) < 0 || listen(fd, 16) < 0) {
        control_warn(errno == EADDRINUSE ? "in use by another live process" : strerror(errno));
        if (fd >= 0)
            close(fd);
        return;
    }
    if (pipe2(sim_state.control_wake, O_CLOEXEC) < 0) {
        control_warn(strerror(errno));
        close(fd);
        unlink(path);
        return;
    }
    sim_state.control_fd = fd;
    if (pthread_create(&sim_state.control_thread, NULL, control_main, NULL) != 0) {
        control_warn("cannot start thread");
        sim_control_stop();
        return;
    }
    sim_state.control_running = true;
}

void sim_control_stop(void)
{
    if (sim_state.control_running) {
        (void)!write(sim_state.control_wake[1], "x", 1);
        pthread_join(sim_state.control_thread, NULL);
        sim_state.control_running = false;
    }
    if (sim_state.control_fd >= 0) {
        close(sim_state.control_fd);
        unlink(sim_state.control_path);
    }
    if (sim_state.control_dirs.count)
        dirs_user_release(); /* the agent's files in it may have gone after it was made */
    dirs_unmake(&sim_state.control_dirs);
    for (int i = 0; i < 2; i++)
        if (sim_state.control_wake[i] >= 0)
            close(sim_state.control_wake[i]);
    sim_state.control_fd = sim_state.control_wake[0] = sim_state.control_wake[1] = -1;
}
