/* clock.h: the monotonic clock in nanoseconds, the one time base of the native core (deadlines, timeouts, latencies). */
#ifndef SRPC_CLOCK_H
#define SRPC_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t srpc_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif /* SRPC_CLOCK_H */
