/* dpdk_none.c: the DPDK entry points of a build without libdpdk: each says so and returns -ENOTSUP. */
#include <errno.h>

#include "splitrpc_dpdk.h"

static const char WHY[] = "splitrpc was built without DPDK: install libdpdk-dev (pkg-config libdpdk) and rebuild";

int srpc_dpdk_init(const char *const *args, int n)
{
    (void)args;
    (void)n;
    return -ENOTSUP;
}

int srpc_dpdk_ready(void) { return 0; }

int srpc_dpdk_port_count(void) { return -ENOTSUP; }

const char *srpc_dpdk_last_error(void) { return WHY; }
