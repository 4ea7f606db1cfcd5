/* XIDs in the kernel log. /dev/kmsg gives one record a read, as
 * "prio,seq,usec,flags;message"; continuation lines start with a space.
 * The driver logs an XID as
 *   NVRM: Xid (PCI:0000:18:00): 79, pid=..., name=..., GPU has fallen off the bus.
 * Pure: fuzzed (fuzz/fuzz_kmsg.c). */
#include "doctor/doctor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KMSG_XID "NVRM: Xid (PCI:"

/* One record's line: its time and message; false when it is not one. */
static bool kmsg_record(const char *line, size_t len, double *seconds, const char **msg,
                        size_t *msg_len)
{
    const char *semi = memchr(line, ';', len);
    if (!semi)
        return false;
    /* prio,seq,usec,flags: the third field. */
    const char *p = line;
    for (int field = 0; field < 2; field++) {
        p = memchr(p, ',', (size_t)(semi - p));
        if (!p)
            return false;
        p++;
    }
    char num[24];
    size_t n = 0;
    while (p < semi && *p >= '0' && *p <= '9' && n < sizeof num - 1)
        num[n++] = *p++;
    if (!n)
        return false;
    num[n] = '\0';
    *seconds = strtod(num, NULL) / 1e6;
    *msg = semi + 1;
    *msg_len = len - (size_t)(semi + 1 - line);
    return true;
}

/* "0000:18:00): 79, ..." after KMSG_XID. */
static bool kmsg_xid(const char *msg, size_t len, struct doctor_xid *x)
{
    const char *at = NULL;
    size_t k = strlen(KMSG_XID);
    for (size_t i = 0; i + k <= len && !at; i++)
        if (!memcmp(msg + i, KMSG_XID, k))
            at = msg + i + k;
    if (!at)
        return false;
    const char *end = msg + len;
    const char *close = memchr(at, ')', (size_t)(end - at));
    if (!close || close - at >= (long)sizeof x->pci || close + 2 >= end || close[1] != ':')
        return false;
    memcpy(x->pci, at, (size_t)(close - at));
    x->pci[close - at] = '\0';
    const char *p = close + 2;
    while (p < end && *p == ' ')
        p++;
    unsigned v = 0, digits = 0;
    while (p < end && *p >= '0' && *p <= '9' && digits < 6) {
        v = v * 10 + (unsigned)(*p++ - '0');
        digits++;
    }
    if (!digits)
        return false;
    x->xid = v;
    return true;
}

unsigned doctor_kmsg_xids(const char *text, size_t len, struct doctor_xid *out, unsigned max)
{
    unsigned found = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        double t;
        const char *msg;
        size_t mlen;
        struct doctor_xid x;
        if (n && p[0] != ' ' && kmsg_record(p, n, &t, &msg, &mlen) && kmsg_xid(msg, mlen, &x)) {
            x.seconds = t;
            if (max) {
                /* Keep the newest: a full buffer shifts the oldest out. */
                if (found >= max)
                    memmove(out, out + 1, (max - 1) * sizeof *out);
                out[found < max ? found : max - 1] = x;
            }
            found++;
        }
        p += n + 1;
    }
    return found;
}
