/* Fault injection commands, one line each, as sent by `gpulet sim` over the
 * control socket. Each command does what the real driver would show:
 * events through the NVML event API, counters, lost GPUs, resets. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

#define XID_DBE 48      /* the driver's XID for a double-bit ECC error */
#define XID_OFF_BUS 79  /* "GPU has fallen off the bus" */

static const struct {
    const char *name;
    enum sim_field field;
    double max;
} fault_pinnable[] = {
    {"utilization.gpu", SIM_UTIL_GPU, 100}, {"utilization.memory", SIM_UTIL_MEM, 100},
    {"memory.used", SIM_MEM_USED, 1e7},     {"temperature.gpu", SIM_TEMP, 200},
    {"power.draw", SIM_POWER, 5000},        {"clocks.sm", SIM_CLOCK_SM, 10000},
    {"clocks.mem", SIM_CLOCK_MEM, 20000},
};

static int fault_number(const char *s, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0 || v > max)
        return -1;
    *out = v;
    return 0;
}

/* FIELD=VALUE: pins a live value ("auto" releases it) or sets a counter. */
static int fault_set_one(struct nvmlDevice_st *g, char *assign, char *reply, size_t len)
{
    char *eq = strchr(assign, '=');
    if (!eq)
        return snprintf(reply, len, "error: expected FIELD=VALUE, got '%s'", assign), -1;
    *eq = '\0';
    const char *field = assign, *value = eq + 1;
    double v;
    for (size_t i = 0; i < sizeof fault_pinnable / sizeof *fault_pinnable; i++) {
        if (strcmp(field, fault_pinnable[i].name))
            continue;
        enum sim_field f = fault_pinnable[i].field;
        if (!strcmp(value, "auto")) {
            g->pinned[f] = false;
            return 0;
        }
        if (fault_number(value, fault_pinnable[i].max, &v) < 0)
            return snprintf(reply, len, "error: %s must be a number from 0 to %g or auto, not '%s'",
                            field, fault_pinnable[i].max, value), -1;
        g->pinned[f] = true;
        g->pin[f] = v;
        return 0;
    }
    if (fault_number(value, 1e18, &v) < 0)
        return snprintf(reply, len, "error: %s must be a non-negative number, not '%s'", field,
                        value), -1;
    unsigned long long n = (unsigned long long)v;
    static const struct {
        const char *name;
        size_t offset;
    } flags[] = {
        {"persistence.off", offsetof(struct nvmlDevice_st, persistence_off)},
        {"pages.pending", offsetof(struct nvmlDevice_st, pages_pending)},
        {"rows.pending", offsetof(struct nvmlDevice_st, rows_pending)},
        {"rows.failure", offsetof(struct nvmlDevice_st, rows_failure)},
        {"mig.pending", offsetof(struct nvmlDevice_st, mig_pending)},
        {"fabric.down", offsetof(struct nvmlDevice_st, fabric_down)},
    };
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        if (strcmp(field, flags[i].name))
            continue;
        if (n > 1)
            return snprintf(reply, len, "error: %s must be 0 or 1, not '%s'", field, value), -1;
        *(bool *)((char *)g + flags[i].offset) = n == 1;
        return 0;
    }
    if (!strcmp(field, "ecc.corrected") || !strcmp(field, "ecc.uncorrected")) {
        int k = field[4] == 'u';
        g->ecc_volatile[k] = n;
        if (g->ecc_aggregate[k] < n)
            g->ecc_aggregate[k] = n;
    } else if (!strcmp(field, "pcie.replays")) {
        g->pcie_replays = (unsigned)(n > 0xffffffffULL ? 0xffffffffULL : n);
    } else if (!strcmp(field, "energy")) {
        g->energy_mj = (double)n;
    } else {
        return snprintf(reply, len,
                        "error: unknown field '%s' (fields: utilization.gpu, utilization.memory, "
                        "memory.used, temperature.gpu, power.draw, clocks.sm, clocks.mem, "
                        "ecc.corrected, ecc.uncorrected, pcie.replays, energy, persistence.off, "
                        "pages.pending, rows.pending, rows.failure, mig.pending, fabric.down)", field), -1;
    }
    return 0;
}

static bool fault_has_gi(const struct nvmlDevice_st *g, unsigned gi)
{
    for (unsigned k = 0; k < g->desc.nmig; k++)
        if (g->desc.mig[k].gi == gi)
            return true;
    return false;
}

/* mig GPU PROFILE,PROFILE...|none: a new MIG layout, as mig-parted applies
 * one (the GPU must have MIG enabled); nothing changes on an error. */
static int fault_mig(struct nvmlDevice_st *g, char *list, char *reply, size_t len)
{
    if (!g->desc.mig_enabled)
        return snprintf(reply, len, "error: GPU %u has MIG disabled", g->desc.index), -1;
    const char *names[SIM_MIG_MAX + 1];
    unsigned n = 0;
    char *save = NULL;
    for (char *t = strtok_r(list, ",", &save); t && strcmp(t, "none"); t = strtok_r(NULL, ",", &save)) {
        if (n == SIM_MIG_MAX)
            return snprintf(reply, len, "error: a GPU holds at most %d MIG devices", SIM_MIG_MAX),
                   -1;
        names[n++] = t;
    }
    char why[256];
    if (sim_mig_layout(&g->desc, names, n, why, sizeof why) < 0)
        return snprintf(reply, len, "error: %s", why), -1;
    sim_state.mig_changed = true;
    return 0;
}

/* mig GPU: its GPU instances as the simulator holds them, the ones
 * without a compute instance marked bare. */
static void fault_mig_show(const struct nvmlDevice_st *g, char *reply, size_t len)
{
    size_t n = (size_t)snprintf(reply, len, "ok");
    for (unsigned k = 0; k < g->desc.nmig && n < len; k++) {
        const struct sim_mig_device *m = &g->desc.mig[k];
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        sim_mig_uuid(g->desc.uuid, m->uuid_gen, m->gi, uuid, sizeof uuid);
        n += (size_t)snprintf(reply + n, len - n, "%s %s@%u gi %u %s", k ? "," : "",
                              m->profile->name, m->start, m->gi, m->bare ? "bare" : uuid);
    }
    if (n < len && !g->desc.nmig)
        snprintf(reply + n, len - n, " none");
}

/* The GPU falls off the bus: XID 79, then GPU_IS_LOST on every call. */
static void fault_lose(struct nvmlDevice_st *g)
{
    sim_event_post(g, nvmlEventTypeXidCriticalError, XID_OFF_BUS);
    g->lost = true;
    sim_event_lost(g);
}

/* proc GPU add PID MEM_MIB [SM%] | del PID | clear: the processes NVML lists
 * on the GPU, with their memory and SM utilization. Adding a PID again
 * updates it. */
static int fault_proc(struct nvmlDevice_st *g, char **argv, int argc, char *reply, size_t len)
{
    static const char usage[] = "error: usage: proc GPU add PID MEM_MIB [SM_PERCENT] | "
                                "proc GPU del PID | proc GPU clear";
    double pid = 0, mem = 0, sm = 0;
    if (argc == 1 && !strcmp(argv[0], "clear")) {
        g->nprocs = 0;
        return 0;
    }
    if (argc < 2 || fault_number(argv[1], 4194304, &pid) < 0 || pid < 1 || pid != (unsigned)pid)
        return snprintf(reply, len, "%s", usage), -1;
    unsigned k = 0;
    while (k < g->nprocs && g->procs[k].pid != (unsigned)pid)
        k++;
    if (!strcmp(argv[0], "del") && argc == 2) {
        if (k == g->nprocs)
            return snprintf(reply, len, "error: no process %u on this GPU", (unsigned)pid), -1;
        g->procs[k] = g->procs[--g->nprocs];
        return 0;
    }
    if (strcmp(argv[0], "add") || argc < 3 || argc > 4 ||
        fault_number(argv[2], (double)g->desc.product->memory_mib, &mem) < 0 ||
        (argc == 4 && fault_number(argv[3], 100, &sm) < 0))
        return snprintf(reply, len, "%s (MEM_MIB at most the GPU's %llu, SM_PERCENT 0-100)",
                        usage, g->desc.product->memory_mib), -1;
    if (k == g->nprocs && g->nprocs == SIM_MAX_PROCS)
        return snprintf(reply, len, "error: at most %d processes per GPU", SIM_MAX_PROCS), -1;
    if (k == g->nprocs)
        g->nprocs++;
    g->procs[k] = (struct sim_proc){(unsigned)pid, (unsigned long long)mem, (unsigned)sm};
    return 0;
}

static int fault_apply(char **argv, int argc, char *reply, size_t len)
{
    const char *cmd = argv[0];
    if (!strcmp(cmd, "ping"))
        return snprintf(reply, len, "ok %s %u", sim_state.sc.name, sim_state.sc.count), 0;
    if (argc < 2)
        return snprintf(reply, len, "error: %s needs a GPU (index or UUID)", cmd), -1;
    struct nvmlDevice_st *g = sim_find_gpu(argv[1]);
    if (!g)
        return snprintf(reply, len, "error: no GPU '%s' (this node has GPUs 0-%u)", argv[1],
                        sim_state.sc.count - 1), -1;
    if (!strcmp(cmd, "xid")) {
        double xid, gi = -1;
        if (argc < 3 || argc > 4 || fault_number(argv[2], 65535, &xid) < 0 || xid < 1 ||
            (argc == 4 && fault_number(argv[3], 14, &gi) < 0))
            return snprintf(reply, len, "error: usage: xid GPU XID [GI] (XID from 1 to 65535, "
                            "GPU instance ID from 0 to 14)"), -1;
        if (argc == 4 && !fault_has_gi(g, (unsigned)gi))
            return snprintf(reply, len, "error: GPU %u has no GPU instance %.0f", g->desc.index,
                            gi), -1;
        if (xid == XID_OFF_BUS)
            fault_lose(g); /* a real XID 79 comes with the GPU gone */
        else if (argc == 4)
            sim_event_post_instance(g, nvmlEventTypeXidCriticalError, (unsigned long long)xid,
                                    (unsigned)gi, 0);
        else
            sim_event_post(g, nvmlEventTypeXidCriticalError, (unsigned long long)xid);
    } else if (!strcmp(cmd, "mig") && argc == 3) {
        if (fault_mig(g, argv[2], reply, len) < 0)
            return -1;
    } else if (!strcmp(cmd, "mig") && argc == 2) {
        fault_mig_show(g, reply, len);
        return 0;
    } else if (!strcmp(cmd, "ecc") && argc == 2) {
        g->ecc_volatile[1]++;
        g->ecc_aggregate[1]++;
        sim_event_post(g, nvmlEventTypeDoubleBitEccError, 0);
        sim_event_post(g, nvmlEventTypeXidCriticalError, XID_DBE);
    } else if (!strcmp(cmd, "lose") && argc == 2) {
        fault_lose(g);
    } else if (!strcmp(cmd, "hang") && argc == 2) {
        g->hung = true;
    } else if (!strcmp(cmd, "recover") && argc == 2) {
        sim_live_reset(g, false);
    } else if (!strcmp(cmd, "proc") && argc >= 3) {
        if (fault_proc(g, argv + 2, argc - 2, reply, len) < 0)
            return -1;
    } else if (!strcmp(cmd, "set") && argc >= 3) {
        /* All or nothing: apply to a copy, keep it only if every field was good. */
        struct nvmlDevice_st next = *g;
        for (int i = 2; i < argc; i++)
            if (fault_set_one(&next, argv[i], reply, len) < 0)
                return -1;
        *g = next;
    } else {
        return snprintf(reply, len, "error: unknown command '%s' with %d argument(s) (commands: "
                        "xid GPU XID [GI], ecc GPU, lose GPU, hang GPU, recover GPU, mig GPU [PROFILE,...], "
                        "set GPU FIELD=VALUE..., "
                        "proc GPU add|del|clear ...)",
                        cmd, argc - 1), -1;
    }
    return snprintf(reply, len, "ok"), 0;
}

int sim_fault_command_locked(const char *line, char *reply, size_t len)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", line);
    char *argv[16], *save = NULL;
    int argc = 0;
    for (char *t = strtok_r(buf, " \t\r\n", &save); t && argc < 16; t = strtok_r(NULL, " \t\r\n", &save))
        argv[argc++] = t;
    if (argc == 0)
        return snprintf(reply, len, "error: empty command"), -1;
    return fault_apply(argv, argc, reply, len);
}

int sim_fault_command(const char *line, char *reply, size_t len)
{
    pthread_mutex_lock(&sim_state.lock);
    int rc = sim_state.refcount == 0
                 ? (snprintf(reply, len, "error: NVML is not initialized in this process"), -1)
                 : sim_fault_command_locked(line, reply, len);
    if (sim_state.mig_changed) {
        sim_state.mig_changed = false;
        sim_state_save();
    }
    pthread_mutex_unlock(&sim_state.lock);
    return rc;
}
