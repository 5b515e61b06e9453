/* splitrpc_dpdk.h: the DPDK half of the flat C API: the EAL, initialised once per process (the kernel-bypass transport builds on it). */
#ifndef SPLITRPC_DPDK_H
#define SPLITRPC_DPDK_H

#ifdef __cplusplus
extern "C" {
#endif

/* Built without DPDK (libdpdk not found by pkg-config when the package was built), every
 * function returns -ENOTSUP and srpc_dpdk_last_error() says so. */

/* Initialises DPDK's Environment Abstraction Layer with the EAL arguments args[0..n) (no
 * program name: it is added), e.g. "--no-huge", "--no-shconf", "-l", "0", "--vdev=net_memif0".
 * Once per process: after a success, later calls return 0 and change nothing; after a failure
 * they return the same error (DPDK cannot be initialised twice). Never exits the process: the
 * arguments DPDK would answer by exiting (-h, --help, -v, --version) give -EINVAL. The calling
 * thread's CPU affinity is what it was before (the EAL pins its caller to its main lcore).
 * Returns 0, -EINVAL (bad or unparsed arguments), -ENOMEM, -EALREADY (the EAL was initialised
 * by someone else in this process), -ENOTSUP, or the EAL's -rte_errno. Thread-safe. */
int srpc_dpdk_init(const char *const *args, int n);
/* 1 once srpc_dpdk_init has succeeded, else 0. */
int srpc_dpdk_ready(void);
/* Ethernet ports DPDK has probed (rte_eth_dev_count_avail), or -ENODEV before a successful init. */
int srpc_dpdk_port_count(void);
/* Why the last failing srpc_dpdk_* call of any thread failed ("" if none). */
const char *srpc_dpdk_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* SPLITRPC_DPDK_H */
