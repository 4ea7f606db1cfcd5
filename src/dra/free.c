/* The driver's end: it is freed once stopped, its handles closed and
 * its last worker job (a publish round, a prepare) back. dra.c, publish.c
 * and prepare.c each call this when their part lets go. */
#include "dra/internal.h"

#include <stdlib.h>

void dra_maybe_free(struct dra *d)
{
    if (!d->stopping || d->jobs || d->handles)
        return;
    kube_creds_free(&d->creds);
    free(d->prepared);
    free(d);
}

void dra_closed(uv_handle_t *h)
{
    struct dra *d = h->data;
    d->handles--;
    dra_maybe_free(d);
}
