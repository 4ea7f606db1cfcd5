/* GPU health: which events make a GPU unhealthy (NVIDIA's XID policy,
 * configured the same way), and when it is healthy again (docs/health.md). */
#ifndef GPULET_HEALTH_H
#define GPULET_HEALTH_H

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"
#include "util/strbuf.h"

#define HEALTH_MAX_XIDS 64

/* Which XIDs count. Built from DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS. */
struct health_policy {
    bool disabled;                          /* "all" or "xids": no health checking */
    bool all_fatal;                         /* DP_ENABLE_HEALTHCHECKS=all */
    unsigned skip[HEALTH_MAX_XIDS];         /* ignored: NVIDIA's defaults plus extra */
    size_t nskip;
    unsigned force[HEALTH_MAX_XIDS];        /* fatal even if skipped */
    size_t nforce;
};

/* Builds the policy from the two variables' values (NULL when unset). */
int gpu_health_policy_init(struct health_policy *p, const char *disable, const char *enable,
                       struct err *e);

/* False when health checking is off altogether (DP_DISABLE_HEALTHCHECKS=all
 * with nothing enabled): then nothing, not even ECC or a lost GPU, counts. */
bool gpu_health_policy_active(const struct health_policy *p);

/* True if this XID makes a GPU unhealthy. */
bool gpu_health_xid_fatal(const struct health_policy *p, unsigned xid);

/* In order of severity: a worse reason replaces a milder one. */
enum health_reason {
    HEALTH_OK,
    HEALTH_XID,      /* a critical XID */
    HEALTH_ECC,      /* a double-bit ECC error (or XID 48) */
    HEALTH_HUNG,     /* an NVML call on the GPU has not returned within the bound */
    HEALTH_LOST,     /* NVML cannot reach the GPU (or XID 79) */
    HEALTH_REASONS
};

/* A list of faults (the ones that taint a Node): XID numbers, and the
 * words lost, hung, ecc (a double-bit error) and xid (any critical XID). */
struct health_faults {
    unsigned xids[HEALTH_MAX_XIDS];
    size_t nxids;
    bool lost, hung, ecc, any_xid;
};

/* Parses "79,74,lost,hung"; the error names what (a flag) and the word. */
int gpu_health_faults_parse(struct health_faults *f, const char *what, const char *spec,
                        struct err *e);

/* One GPU's health and why. */
struct gpu_health {
    enum health_reason reason;
    unsigned xid;                /* the last critical XID, for HEALTH_XID */
    long long since_ms;          /* wall clock (ms) when it became unhealthy */
    double last_event_ms;        /* monotonic time of the last fatal event */
    bool seen_lost;              /* NVML said GPU_IS_LOST since it became unhealthy */
    char detail[160];            /* the cause ("XID 79: fallen off the bus"); gpu_health_describe
                                  * adds the time, each renderer as it needs */
};

/* What a probe of one GPU found (run off the loop). */
struct health_probe {
    bool answered;               /* NVML reached the GPU */
    bool lost;                   /* NVML said GPU_IS_LOST */
    bool dbe_known;              /* the volatile uncorrected ECC count could be read */
    unsigned long long dbe;      /* that count */
};

/* Whether h's fault is on the list. */
bool gpu_health_faults_match(const struct health_faults *f, const struct gpu_health *h);

/* ms (wall clock) as RFC 3339 to the second, as Kubernetes' times are
 * written ("2026-11-27T09:00:00Z"); "" for 0 or less. Every time a fault
 * is said at goes through it, so the same fault reads the same everywhere. */
void gpu_health_time(long long ms, char *out, size_t len);

/* The cause and since when, for logs, `gpulet list` and `gpulet health`:
 * "XID 79: fallen off the bus since 2026-11-27T09:00:00Z"; "" when healthy. */
void gpu_health_describe(const struct gpu_health *h, char *out, size_t len);

/* "Healthy" or "Unhealthy", as the kubelet API spells them. */
const char *gpu_health_name(const struct gpu_health *h);

/* Records a critical XID; returns true if the GPU's state changed. */
bool gpu_health_on_xid(struct gpu_health *h, unsigned xid, double now_ms);

/* Records a double-bit ECC error; returns true if the state changed. */
bool gpu_health_on_ecc(struct gpu_health *h, double now_ms);

/* Records that NVML cannot reach the GPU; returns true if the state changed. */
bool gpu_health_on_lost(struct gpu_health *h, double now_ms);

/* Records that an NVML call on the GPU (call, its name) has not returned
 * for seconds; returns true if the state changed. A probe that gets an
 * answer clears it. */
bool gpu_health_on_hung(struct gpu_health *h, const char *call, unsigned seconds, double now_ms);

/* Records that NVML does not give us the GPU at all (it failed to start, or
 * does not list a GPU the driver does), with why; a lost GPU. Returns true
 * if the state changed. */
bool gpu_health_on_missing(struct gpu_health *h, const char *why, double now_ms);

/* Applies a probe: marks a lost GPU, or recovers one whose rule is met.
 * quiet_ms is the XID quiet period (0: XIDs never clear by themselves).
 * Returns true if the state changed. */
bool gpu_health_on_probe(struct gpu_health *h, const struct health_probe *p, double now_ms,
                     double quiet_ms);

/* An operator's clear: healthy now. Returns true if the state changed. */
bool gpu_health_clear(struct gpu_health *h);

/* "ok", "xid", "ecc", "hung", "lost": the reason as metrics and the status
 * socket name it. */
const char *gpu_health_reason_name(enum health_reason r);

/* One GPU's health, or one of its MIG devices' (mig >= 0, the GPU's MIG
 * device mig), as one line of the agent's status socket, written by the
 * agent and read by `gpulet list` and `gpulet health`, so that both sides
 * share this one definition:
 *   gpu INDEX REASON XID SINCE_MS UUID DETAIL...\n
 *   mig INDEX:MIG REASON XID SINCE_MS MIG-UUID DETAIL...\n
 * gpu_health_line_read returns 0 (*mig -1 for a GPU), or -1 for a line that
 * is not one. */
void gpu_health_line_write(struct strbuf *out, unsigned index, int mig, const char *uuid,
                       const struct gpu_health *h);
int gpu_health_line_read(const char *line, unsigned *index, int *mig, char *uuid, size_t uuid_len,
                     struct gpu_health *h);

#endif
