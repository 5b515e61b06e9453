/* transport.c: what every transport shares: the transport-neutral receive slots, and the fault injectors' setter. */
#include "transport/transport.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int srpc_rx_init(srpc_rx_t *rx, unsigned burst, size_t data_cap)
{
    memset(rx, 0, sizeof(*rx));
    if (burst == 0 || data_cap == 0)
        return -EINVAL;
    rx->burst = burst;
    rx->data_cap = data_cap;
    rx->hdr = aligned_alloc(64, (size_t)burst * SRPC_HDR_SLOT);
    rx->data = aligned_alloc(4096, ((size_t)burst * data_cap + 4095) & ~(size_t)4095);
    rx->len = calloc(burst, sizeof(*rx->len));
    rx->trunc = calloc(burst, sizeof(*rx->trunc));
    rx->src = calloc(burst, sizeof(*rx->src));
    rx->srclen = calloc(burst, sizeof(*rx->srclen));
    rx->dev = calloc(burst, sizeof(*rx->dev));
    rx->gso = calloc(burst, sizeof(*rx->gso));
    if (!rx->hdr || !rx->data || !rx->len || !rx->trunc || !rx->src || !rx->srclen || !rx->dev || !rx->gso) {
        srpc_rx_free(rx);
        return -ENOMEM;
    }
    return 0;
}

void srpc_rx_unscatter(srpc_rx_t *rx, unsigned i, const struct iovec *place)
{
    if (rx->len[i] <= SRPC_HDR_LEN)
        return;
    const size_t data = rx->len[i] - SRPC_HDR_LEN;
    memcpy(srpc_rx_data(rx, i), place->iov_base, data < place->iov_len ? data : place->iov_len); /* the rest is there */
}

void srpc_rx_unrun(srpc_rx_t *rx, unsigned n, const struct iovec *place, uint32_t tail_len)
{
    if (rx->len[0] <= SRPC_HDR_LEN)
        return;
    size_t left = rx->len[0] - SRPC_HDR_LEN, at = 0; /* bytes after header slot 0, and where they go */
    uint8_t *slot = srpc_rx_data(rx, 0);
    for (unsigned j = 0; j < n && left; j++) {
        const struct iovec piece[3] = {{j ? srpc_rx_hdr(rx, j) : NULL, j ? SRPC_HDR_LEN : 0}, place[j],
                                       {srpc_rx_tail(rx, j), tail_len}};
        for (int k = 0; k < 3 && left; k++) {
            const size_t c = piece[k].iov_len < left ? piece[k].iov_len : left;
            if (c)
                memcpy(slot + at, piece[k].iov_base, c);
            at += c;
            left -= c;
        }
    }
    /* the rest came to the slot at its place already */
}

void srpc_rx_free(srpc_rx_t *rx)
{
    free(rx->hdr);
    free(rx->data);
    free(rx->len);
    free(rx->trunc);
    free(rx->src);
    free(rx->srclen);
    free(rx->dev);
    free(rx->gso);
    memset(rx, 0, sizeof(*rx));
}

int srpc_tp_set_faults(srpc_transport_t *t, const srpc_faults_cfg_t *rx, const srpc_faults_cfg_t *tx, uint64_t seed)
{
    if (!srpc_tp_has_faults(t))
        return -ENOTSUP; /* a build without fault injection, or a transport without injectors (DPDK) */
    return t->ops->set_faults(t, rx, tx, seed);
}

int srpc_tp_fault_counts(const srpc_transport_t *t, srpc_fault_counts_t *rx, srpc_fault_counts_t *tx)
{
    return srpc_tp_has_faults(t) ? t->ops->fault_counts(t, rx, tx) : -ENOTSUP;
}
