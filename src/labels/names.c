/* How GFD writes names into label values: product and machine names
 * sanitised, the -SHARED product, the sharing name. build.c (node-wide
 * labels) and mig.c (MIG labels) both name things this way. */
#include "labels/labels.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

void labels_sanitise(const char *in, char *out, size_t len)
{
    size_t n = 0;
    bool space = false;
    for (const char *p = in; *p && n + 1 < len; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == ' ' || c == '\t' || c == '\n') {
            space = n > 0;
            continue;
        }
        if (!isalnum(c) && c != '-' && c != '_' && c != '.')
            continue;
        if (space && n + 2 < len)
            out[n++] = '-';
        space = false;
        out[n++] = (char)c;
    }
    out[n] = '\0';
    /* Kubernetes: at most 63 characters, alphanumeric at both ends. */
    if (n > LABEL_VALUE_MAX - 1)
        n = LABEL_VALUE_MAX - 1;
    while (n > 0 && !isalnum((unsigned char)out[n - 1]))
        n--;
    out[n] = '\0';
    size_t skip = strspn(out, "-_.");
    memmove(out, out + skip, n - skip + 1);
}

void labels_shared_product(const char *name, const struct gpu_share *share, char *out,
                           size_t len)
{
    bool shared = share && share->replicas > 1 && !share->renamed;
    snprintf(out, len, "%.*s%s", shared ? LABEL_VALUE_MAX - 8 : LABEL_VALUE_MAX - 1, name,
             shared ? "-SHARED" : "");
}

const char *labels_sharing_name(const struct gpu_share *share)
{
    return gpu_sharing_names[share && share->replicas > 1 ? share->sharing : GPU_SHARING_NONE];
}
