/* dpdk_names.c: the names of the DPDK port counters (drop reasons, payload pool kinds), in every build: a build without DPDK names them too. */
#include "dpdk/frame.h"
#include "splitrpc_dpdk.h"

const char *srpc_dpdk_drop_name(int r)
{
    return r > 0 && r < SRPC_FRAME_DROP_MAX ? srpc_frame_drop_name(r) : NULL;
}

const char *srpc_dpdk_payload_pool_name(int kind)
{
    static const char *const names[] = {"none", "dpdk", "host", "gpu"};
    return kind >= 0 && kind < (int)(sizeof(names) / sizeof(names[0])) ? names[kind] : NULL;
}
