/* Retrying after a failure, one way everywhere (backoff.c): a wait from
 * min_ms doubling to max_ms, each one jittered by up to a fifth either way,
 * so that a fleet's agents that failed together do not retry together. */
#ifndef GPULET_BACKOFF_H
#define GPULET_BACKOFF_H

/* The wait before the next try. *step_ms is the caller's state: the last
 * wait before jitter, 0 after a success (set it to 0 then). */
unsigned backoff_next(unsigned *step_ms, unsigned min_ms, unsigned max_ms);

#endif
