/* An absolute time ms from now on CLOCK_REALTIME, the clock
 * pthread_cond_timedwait waits on. */
#ifndef GPULET_DEADLINE_H
#define GPULET_DEADLINE_H

#include <time.h>

struct timespec deadline_in(unsigned ms);

#endif
