/* dpdk_eal.c: DPDK's EAL initialised once per process, without exiting and without leaving the caller pinned (see splitrpc_dpdk.h). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>

#include "splitrpc_dpdk.h"

#define MAX_ARGS 64

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int state;     /* lock: 0 never tried, 1 ready, < 0 the error of the one attempt */
static char why[256]; /* lock for writers; readers get whatever was last written */

static int fail(int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return rc;
}

/* Options the EAL answers by printing and calling exit(). */
static int exits(const char *a)
{
    return !strcmp(a, "-h") || !strcmp(a, "--help") || !strcmp(a, "-v") || !strcmp(a, "--version");
}

/* Checks the arguments without touching the EAL (a caller may fix them and try again). */
static int check_args(const char *const *args, int n)
{
    if (n < 0 || n > MAX_ARGS - 2 || (n && !args))
        return fail(-EINVAL, "srpc_dpdk_init: %d arguments (at most %d)", n, MAX_ARGS - 2);
    for (int i = 0; i < n; i++)
        if (!args[i] || exits(args[i]))
            return fail(-EINVAL, "srpc_dpdk_init: argument %d (%s) is not allowed here", i,
                        args[i] ? args[i] : "NULL");
    return 0;
}

/* The one call of rte_eal_init. */
static int eal_init(const char *const *args, int n)
{
    /* rte_eal_init permutes and keeps argv: a copy that lives as long as the process. */
    static char *argv[MAX_ARGS];
    argv[0] = "splitrpc";
    for (int i = 0; i < n; i++)
        if (!(argv[i + 1] = strdup(args[i])))
            return fail(-ENOMEM, "srpc_dpdk_init: out of memory");
    argv[n + 1] = NULL;

    cpu_set_t mask;
    int have_mask = sched_getaffinity(0, sizeof(mask), &mask) == 0;
    int used = rte_eal_init(n + 1, argv);
    int err = rte_errno;
    if (have_mask && sched_setaffinity(0, sizeof(mask), &mask) != 0)
        fprintf(stderr, "splitrpc: cannot restore the CPU affinity after rte_eal_init: %s\n", strerror(errno));
    if (used < 0) {
        if (err == EALREADY)
            return fail(-EALREADY, "rte_eal_init: the EAL was already initialised in this process");
        return fail(err > 0 ? -err : -EINVAL, "rte_eal_init failed: %s", rte_strerror(err));
    }
    if (used != n) /* it returns the count of arguments it parsed, not counting argv[0] */
        return fail(-EINVAL, "rte_eal_init took %d of the %d arguments; the rest are not EAL options", used, n);
    return 0;
}

int srpc_dpdk_init(const char *const *args, int n)
{
    pthread_mutex_lock(&lock);
    int rc = state > 0 ? 0 : state;
    if (state == 0 && (rc = check_args(args, n)) == 0) {
        rc = eal_init(args, n);
        state = rc ? rc : 1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int srpc_dpdk_ready(void)
{
    pthread_mutex_lock(&lock);
    int ready = state > 0;
    pthread_mutex_unlock(&lock);
    return ready;
}

int srpc_dpdk_port_count(void)
{
    if (!srpc_dpdk_ready())
        return -ENODEV;
    return (int)rte_eth_dev_count_avail();
}

const char *srpc_dpdk_last_error(void)
{
    return why;
}
