/* wait.h: how the server's threads wait for each other: sleeping on a 32-bit word until another thread changes it (Linux futexes, no lock on the path that wakes), and spinning politely. */
#ifndef SRPC_WAIT_H
#define SRPC_WAIT_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Wakes every thread waiting on addr. Any thread. */
static inline void srpc_futex_wake(atomic_uint *addr)
{
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps while *addr == expected, at most timeout_us (-1: no limit). Returns 0 when woken,
 * -EAGAIN when *addr had changed already, -ETIMEDOUT or -EINTR. Any thread. */
static inline int srpc_futex_wait(atomic_uint *addr, unsigned expected, int64_t timeout_us)
{
    struct timespec ts, *tp = NULL;
    if (timeout_us >= 0) {
        ts.tv_sec = timeout_us / 1000000;
        ts.tv_nsec = (timeout_us % 1000000) * 1000;
        tp = &ts;
    }
    long r = syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, expected, tp, NULL, 0);
    return r == 0 ? 0 : -errno;
}

/* One step of a busy-wait loop: lets the sibling hyperthread run and saves power. */
static inline void srpc_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif /* SRPC_WAIT_H */
