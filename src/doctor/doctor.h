/* `gpulet doctor`: checks a GPU node in order, from the kernel module to
 * the Node object, and says for each PASS, WARN, FAIL (with a one-line
 * fix) or SKIP (not applicable here). Every check runs under a time limit
 * on a thread of its own, so a hung GPU or driver cannot hang the command
 * (docs/doctor.md). */
#ifndef GPULET_DOCTOR_H
#define GPULET_DOCTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "config/config.h"
#include "util/strbuf.h"

/* Ordered by how bad: the worst of a report is its largest. */
enum doctor_status { DOCTOR_PASS, DOCTOR_SKIP, DOCTOR_WARN, DOCTOR_FAIL };

struct doctor_result {
    const char *id;                  /* "kernel-module": static */
    const char *title;               /* "NVIDIA kernel module": static */
    enum doctor_status status;
    char message[1024];              /* what was found */
    char fix[512];                   /* what to do; empty for PASS and SKIP */
    double seconds;
};

struct doctor_options {
    char root[CONFIG_PATH_MAX];      /* the host's filesystem; "/" on the host */
    bool root_given;                 /* --root given: its host tree is checked, simulated
                                      * GPUs or not */
    const struct config *cfg;        /* the agent's settings: paths, strategy, NVML */
    unsigned timeout_ms;             /* per check */
};

struct doctor_report {
    struct doctor_result *items;
    unsigned count;
    double seconds;
    enum doctor_status worst;        /* SKIP counts as PASS */
    bool abandoned;                  /* a check ran out of time and still runs */
};

/* Runs every check. The report is the caller's to free. */
void doctor_run(const struct doctor_options *o, struct doctor_report *r);
void doctor_report_free(struct doctor_report *r);

/* One line per check, and the fix under each that failed or warned. */
void doctor_report_text(const struct doctor_report *r, const char *root, FILE *out);

/* {"root":..., "checks":[{id,title,status,message,fix,seconds}...],
 *  "summary":{...}, "worst":...}. */
void doctor_report_json(const struct doctor_report *r, const char *root, struct strbuf *out);

/* "PASS", "SKIP", "WARN", "FAIL". */
const char *doctor_status_name(enum doctor_status s);

/* --- the kernel log (kmsg.c): parsed apart, so that it can be fuzzed ------------ */

/* An NVIDIA XID line of the kernel log. */
struct doctor_xid {
    char pci[32];                    /* as NVRM writes it: 0000:18:00 */
    unsigned xid;
    double seconds;                  /* since boot */
};

/* The XIDs in /dev/kmsg records ("prio,seq,usec,flags;message" lines),
 * at most max of them, the newest kept. Returns how many were found. */
unsigned doctor_kmsg_xids(const char *text, size_t len, struct doctor_xid *out, unsigned max);

#endif
