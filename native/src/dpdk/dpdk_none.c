/* dpdk_none.c: the DPDK entry points of a build without libdpdk: each says so and returns -ENOTSUP. */
#include <errno.h>
#include <string.h>

#include "splitrpc_dpdk.h"
#include "dpdk/transport_dpdk.h"

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

/* ------------------------------------------------------------------ transport (transport_dpdk.h) */

int srpc_dpdk_port_open(const srpc_dpdk_port_config_t *cfg, srpc_dpdk_port_t **out)
{
    (void)cfg;
    if (out)
        *out = NULL;
    return -ENOTSUP;
}

void srpc_dpdk_port_close(srpc_dpdk_port_t *p) { (void)p; }

void srpc_dpdk_port_mac(const srpc_dpdk_port_t *p, uint8_t mac[6])
{
    (void)p;
    memset(mac, 0, 6);
}

int srpc_dpdk_neighbour_add(srpc_dpdk_port_t *p, uint32_t ip, const uint8_t mac[6])
{
    (void)p, (void)ip, (void)mac;
    return -ENOTSUP;
}

int srpc_dpdk_neighbour_known(srpc_dpdk_port_t *p, uint32_t ip)
{
    (void)p, (void)ip;
    return 0;
}

int srpc_dpdk_rx_burst(srpc_dpdk_port_t *p, srpc_rx_t *rx, unsigned max)
{
    (void)p, (void)rx, (void)max;
    return -ENOTSUP;
}

void srpc_dpdk_rx_release(srpc_dpdk_port_t *p) { (void)p; }

int srpc_dpdk_payload_device(const srpc_dpdk_port_t *p)
{
    (void)p;
    return -1;
}

int srpc_dpdk_send_msg(srpc_dpdk_port_t *p, const struct sockaddr *dst, socklen_t dstlen, const srpc_hdr_t *tmpl,
                       const struct iovec *pieces, int n, uint32_t msg_len, uint32_t seg_size)
{
    (void)p, (void)dst, (void)dstlen, (void)tmpl, (void)pieces, (void)n, (void)msg_len, (void)seg_size;
    return -ENOTSUP;
}

int srpc_dpdk_send_frame(srpc_dpdk_port_t *p, const void *frame, size_t len)
{
    (void)p, (void)frame, (void)len;
    return -ENOTSUP;
}

void srpc_dpdk_port_stats(const srpc_dpdk_port_t *p, srpc_dpdk_port_stats_t *st)
{
    (void)p;
    memset(st, 0, sizeof(*st));
}

int srpc_dpdk_transport_open(const srpc_transport_spec_t *spec, srpc_transport_t **out)
{
    (void)spec;
    if (out)
        *out = NULL;
    return -ENOTSUP;
}

int srpc_dpdk_transport_stats(const srpc_transport_t *t, srpc_dpdk_stats_t *st)
{
    (void)t, (void)st;
    return -EINVAL;
}
