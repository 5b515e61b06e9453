/* open.c: opening the transport a spec names: kernel UDP, or DPDK where a port is named. */
#include <errno.h>
#include <stddef.h>

#include "dpdk/transport_dpdk.h"
#include "transport/transport.h"
#include "transport/udp.h"

int srpc_transport_open(const srpc_transport_spec_t *spec, srpc_transport_t **out)
{
    if (!spec || !out || (spec->dpdk_dev && spec->reuse_port)) /* a DPDK port is one process's */
        return -EINVAL;
    *out = NULL;
    return spec->dpdk_dev ? srpc_dpdk_transport_open(spec, out) : srpc_udp_transport_open(spec, out);
}
