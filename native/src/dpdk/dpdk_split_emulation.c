/* dpdk_split_emulation.c: a NIC's RX buffer split done in software on received whole frames (see dpdk_split_emulation.h). */
#include "dpdk/dpdk_split_emulation.h"

#include <errno.h>
#include <string.h>

#include <rte_mbuf.h>

#include "splitrpc_gpu.h"

int srpc_split_emulate(struct rte_mbuf *m, struct rte_mempool *data_pool, uint16_t ctl, int gpu, uint64_t stream,
                       const srpc_endpoint_t *self)
{
    m->ol_flags &= ~(RTE_MBUF_F_RX_IP_CKSUM_MASK | RTE_MBUF_F_RX_L4_CKSUM_MASK);
    if (m->nb_segs != 1 || m->data_len <= ctl)
        return 0;
    struct iovec whole = {rte_pktmbuf_mtod(m, void *), m->data_len};
    srpc_frame_info_t info;
    if (srpc_frame_parse(&whole, 1, self, 0, &info) != SRPC_FRAME_UDP) /* checksums verified here */
        return 0;
    struct rte_mbuf *d = rte_pktmbuf_alloc(data_pool);
    if (!d)
        return -ENOBUFS;
    const uint16_t rest = (uint16_t)(m->data_len - ctl);
    uint8_t *dst = (uint8_t *)rte_pktmbuf_append(d, rest);
    const uint8_t *src = rte_pktmbuf_mtod_offset(m, const uint8_t *, ctl);
    int rc = !dst ? -EMSGSIZE : gpu ? srpc_gpu_copy_htod((uint64_t)(uintptr_t)dst, src, rest, stream) : 0;
    if (rc == 0 && !gpu)
        memcpy(dst, src, rest);
    if (rc == 0 && (rte_pktmbuf_trim(m, rest) != 0 || rte_pktmbuf_chain(m, d) != 0))
        rc = -EMSGSIZE; /* cannot happen: one segment trimmed, two chained */
    if (rc) {
        rte_pktmbuf_free(d);
        return rc;
    }
    m->ol_flags |= RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_GOOD;
    return 1;
}
