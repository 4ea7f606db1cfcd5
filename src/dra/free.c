/* The driver's end: it is freed once stopped, its timers closed and
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
