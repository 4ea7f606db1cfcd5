/* One GET of an object from the API server, any failure (the request, a
 * status other than 200) as one message: what the worker jobs of
 * prepare.c and publish.c read. */
#include "dra/internal.h"

#include <stdio.h>

int dra_get(const struct dra *d, const char *path, struct kube_response *r, char *error,
            size_t len)
{
    struct err e;
    if (kube_request(&d->creds, "GET", path, NULL, NULL, r, NULL, &e) < 0)
        snprintf(error, len, "%s", e.msg);
    else if (r->status != 200)
        snprintf(error, len, "GET %.400s: HTTP %ld", path, r->status);
    else
        return 0;
    return -1;
}
