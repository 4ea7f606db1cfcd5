/* The `accelerator` label's value: GKE's accelerator names, so that a pod
 * spec written for GKE's nodeSelector works unchanged; other products get
 * a slug of their name in the same style. */
#include "labels/labels.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define GIB (1024ULL * 1024 * 1024)

struct accel_row {
    const char *contains;       /* in NVML's product name */
    unsigned long long min_mem; /* at least this much memory, 0 any */
    const char *name;
};

/* First match wins: the larger memory variant before the smaller. */
static const struct accel_row accel_table[] = {
    {"GB200", 0, "nvidia-gb200"},
    {"B200", 0, "nvidia-b200"},
    /* Grace Hopper: before "H200", which its name contains */
    {"GH200 480GB", 0, "nvidia-gh200-480gb"},
    {"GH200 144G", 0, "nvidia-gh200-144gb"},
    {"GH200", 0, "nvidia-gh200"},
    {"H200", 0, "nvidia-h200-141gb"},
    {"H100 80GB", 0, "nvidia-h100-80gb"},
    {"H100 SXM", 0, "nvidia-h100-80gb"},
    {"H100 PCIe", 0, "nvidia-h100-80gb"},
    {"A100", 70 * GIB, "nvidia-a100-80gb"},
    {"A100", 0, "nvidia-tesla-a100"},
    {"RTX PRO 6000", 0, "nvidia-rtx-pro-6000"},
    {"NVIDIA L4", 0, "nvidia-l4"},
    {"Tesla T4", 0, "nvidia-tesla-t4"},
    {"V100", 0, "nvidia-tesla-v100"},
    {"P100", 0, "nvidia-tesla-p100"},
    {"Tesla P4", 0, "nvidia-tesla-p4"},
    {"Tesla K80", 0, "nvidia-tesla-k80"},
};

/* "NVIDIA L4" must not match "NVIDIA L40S": the match must end the name
 * or be followed by a separator. */
static bool accel_contains(const char *product, const char *word)
{
    for (const char *p = strstr(product, word); p; p = strstr(p + 1, word)) {
        char next = p[strlen(word)];
        if (!isalnum((unsigned char)next))
            return true;
    }
    return false;
}

void labels_accelerator(const char *product, unsigned long long memory_bytes, char *out,
                        size_t len)
{
    for (size_t i = 0; i < sizeof accel_table / sizeof *accel_table; i++) {
        const struct accel_row *r = &accel_table[i];
        if (accel_contains(product, r->contains) && memory_bytes >= r->min_mem) {
            snprintf(out, len, "%s", r->name);
            return;
        }
    }
    /* A slug: lower case, runs of other characters one '-', "nvidia-" first. */
    size_t n = 0;
    const char *prefix = strncasecmp(product, "nvidia", 6) ? "nvidia-" : "";
    n = (size_t)snprintf(out, len, "%s", prefix);
    bool dash = n > 0;
    for (const char *p = product; *p && n + 1 < len; p++) {
        if (isalnum((unsigned char)*p)) {
            out[n++] = (char)tolower((unsigned char)*p);
            dash = false;
        } else if (!dash) {
            out[n++] = '-';
            dash = true;
        }
    }
    while (n > 0 && out[n - 1] == '-')
        n--;
    out[n] = '\0';
}
