/* Exponential backoff with jitter; the jitter needs no strong randomness,
 * only one that differs between processes. */
#include "util/backoff.h"

#include <stdint.h>
#include <time.h>
#include <unistd.h>

static unsigned backoff_random(void)
{
    static _Thread_local uint64_t x;
    if (!x) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)getpid() ^ 0x9e3779b97f4a7c15ull;
    }
    x ^= x << 13; /* xorshift64 */
    x ^= x >> 7;
    x ^= x << 17;
    return (unsigned)(x >> 32);
}

unsigned backoff_next(unsigned *step_ms, unsigned min_ms, unsigned max_ms)
{
    *step_ms = *step_ms ? *step_ms * 2 : min_ms;
    if (*step_ms > max_ms)
        *step_ms = max_ms;
    unsigned spread = *step_ms / 5;
    return *step_ms - spread + (spread ? backoff_random() % (2 * spread + 1) : 0);
}
